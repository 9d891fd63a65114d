// The chunked KDA kernels (kda_chunked.cu, kda_chunked_mma.cu) in CPU execution mode, apart from
// kernels_emu.cpp: their instantiations (D x C x factored, x split for the second), each holding
// a lane's state rows in fixed-size arrays, take clang minutes to unroll and instrument under
// ASan at -O1 (16 minutes of CI's budget), so the sanitized build compiles this one file at -O0
// (src/backend/cuda/CMakeLists.txt), where it takes seconds.
#include "backend/cuda/kda_chunked.cu"
#include "backend/cuda/kda_chunked_mma.cu"
