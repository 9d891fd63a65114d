# kinfer_module(NAME DIR DEPS...): a static library from every .cpp in DIR.
# Files named *_avx2.cpp / *_avx512.cpp get the matching -m flags; callers reach them only
# through run-time dispatch, so the rest of the binary stays portable.
function(kinfer_module name dir)
  file(GLOB srcs CONFIGURE_DEPENDS ${dir}/*.cpp ${dir}/*.c)
  if(NOT srcs)
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${name} INTERFACE ${ARGN})
    return()
  endif()
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARGN})
  foreach(f ${srcs})
    if(f MATCHES "_avx2\\.cpp$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mbmi2" SKIP_UNITY_BUILD_INCLUSION ON)
    elseif(f MATCHES "_avx512\\.cpp$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx2;-mfma;-mf16c;-mbmi2"
        SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
endfunction()

# kinfer_heavy_headers(TARGET [CLI]): precompile the header-only libraries that dominate compile
# time (nlohmann/json, fmt, and CLI11 for the command files: CLI11 alone costs several seconds per
# file that includes it, or per unity batch). CI builds the tree twice on two cores, so this is
# most of its wall time. C++ sources only; kernels are left alone (their per-file -m flags would void the PCH).
option(KINFER_PCH "Precompile the heavy third-party headers" ON)
function(kinfer_heavy_headers target)
  if(NOT KINFER_PCH)
    return()
  endif()
  set(hdrs <string> <vector> <nlohmann/json.hpp> <fmt/format.h>)
  if("CLI" IN_LIST ARGN)
    list(APPEND hdrs <CLI/CLI.hpp>)
  endif()
  list(TRANSFORM hdrs PREPEND "$<$<COMPILE_LANGUAGE:CXX>:")
  list(TRANSFORM hdrs APPEND ">")
  target_precompile_headers(${target} PRIVATE ${hdrs})
endfunction()
