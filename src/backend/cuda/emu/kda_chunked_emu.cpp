// The chunked KDA kernel (kda_chunked.cu) in CPU execution mode, apart from kernels_emu.cpp: its
// 24 instantiations (D x C x factored), each holding a lane's state rows in fixed-size arrays,
// take clang minutes to unroll and instrument under ASan at -O1 (16 minutes of CI's budget), so
// the sanitized build compiles this one file at -O0 (src/backend/cuda/CMakeLists.txt), where it
// takes seconds.
#include "backend/cuda/kda_chunked.cu"
