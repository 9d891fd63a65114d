// The CUDA kernels built by the host compiler in CPU execution mode (cpu_mode.h): the same .cu
// sources, in namespace kinfer::cuda::emu. test_cuda runs them against the CPU backend's ops on
// every machine, GPU or not. kda_chunked.cu has a file of its own (kda_chunked_emu.cpp).
#include "backend/cuda/blas.cu"
#include "backend/cuda/elementwise.cu"
#include "backend/cuda/embed.cu"
#include "backend/cuda/gemm.cu"
#include "backend/cuda/gemm_fused.cu"
#include "backend/cuda/kda.cu"
#include "backend/cuda/latent.cu"
#include "backend/cuda/matvec.cu"
#include "backend/cuda/matvec_q8.cu"
#include "backend/cuda/mix.cu"
#include "backend/cuda/mmq.cu"
#include "backend/cuda/mla.cu"
#include "backend/cuda/mla_mha.cu"
#include "backend/cuda/route.cu"
#include "backend/cuda/rows.cu"
