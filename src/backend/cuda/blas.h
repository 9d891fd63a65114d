// The one door to cuBLAS: a handle bound to a stream and one GEMM shape, the prefill matmul's
// (gemm.cu). Under nvcc, blas.cu calls cublasGemmEx; in the CPU execution mode (host compiler,
// namespace emu) it runs the same product as plain host loops, so the prefill path is tested by
// test_cuda without a GPU. Every cuBLAS type, enum and status lives in blas.cu only.
// Plain C++ (no CUDA types), like kernels.h.
#pragma once
#include "backend/cuda/kernel_ns.h"

#include <cstdint>

namespace kinfer::cuda::KINFER_CUDA_NS {

// Element type of a GEMM operand: a dequantized weight tile or a converted activation copy.
enum class Elem : int { F32 = 0, F16 = 1, BF16 = 2 };
inline constexpr int elem_bytes(Elem e) { return e == Elem::F32 ? 4 : 2; }

// A cuBLAS handle whose work is queued on `stream` (a cudaStream_t; nullptr the default
// stream). Creating one costs time and a little device memory, so the backend keeps one.
class Blas;
Blas* blas_create(void* stream);
void blas_destroy(Blas* b);

// C[j * ldc + i] = sum over p < k of A[i * lda + p] * B[j * ldb + p], for i < m, j < n:
// A is m rows of k (the weight rows), B n rows of k (the tokens), C n rows of m (one row of
// outputs per token); A and B of element type t, C fp32. Accumulation is fp32 in both builds:
// CUBLAS_COMPUTE_32F, and no TF32 for F32 operands (the default math mode). Asynchronous on the
// handle's stream on a GPU; complete on return in CPU mode. Throws std::runtime_error naming the
// cuBLAS status, std::invalid_argument for a shape cuBLAS's int arguments cannot hold.
void gemm(Blas* b, Elem t, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B, int64_t ldb,
          float* C, int64_t ldc);

// gemm()'s product of fp32 operands on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32): each
// operand element rounded to TF32 (11 significant bits) inside the product, fp32 accumulation,
// several times the rate of fp32 FMAs. Operands whose values are TF32 already (the halves of a
// 3xTF32 split, mla_mha.cu) lose nothing; the CPU mode rounds to nearest, ties away from zero
// (mma_tf32.cuh's tf32_round), where cuBLAS does not document its rounding.
void gemm_tf32(Blas* b, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
               float* C, int64_t ldc);

// Many GEMMs of gemm()'s form and element type t, each its own shape and pointers (the routed
// experts of a MoE layer in prefill): one cublasGemmGroupedBatchedEx call (each problem a group of
// one) where cuBLAS has it; where it does not (a cuBLAS before 12.5, or a type combination it
// refuses) each problem goes through gemm(). The pointer arrays cuBLAS reads on the device are
// uploaded on the handle's stream into a buffer the handle keeps. In CPU mode, gemm()'s loops
// per problem: the same bits as calling gemm() on each.
struct GemmProblem {
    int64_t m = 0, n = 0, k = 0;
    const void* A = nullptr;
    int64_t lda = 0;
    const void* B = nullptr;
    int64_t ldb = 0;
    float* C = nullptr;
    int64_t ldc = 0;
};
void gemm_grouped(Blas* b, Elem t, const GemmProblem* problems, int64_t count);

}  // namespace kinfer::cuda::KINFER_CUDA_NS
