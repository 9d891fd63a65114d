// KINFER_HD marks a function of the format headers (blocks.h, fp16.h, type_facts.h) as callable
// from both host and device code: nvcc compiles those headers into the CUDA kernels too, so the
// GPU decodes a block with the same definition of the format as the CPU (cuda/ keeps no copy).
// Every other compiler, including the host compiler building the kernels in CPU mode, sees
// plain inline functions.
#pragma once

#if defined(__CUDACC__)
#define KINFER_HD __host__ __device__
#else
#define KINFER_HD
#endif
