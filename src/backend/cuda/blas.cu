// blas.h's GEMM: cublasGemmEx under nvcc, host loops in the CPU execution mode. This is the only
// file that names a cuBLAS type, so a move to cublasLt (epilogues, algorithm choice) or a change
// in cuBLAS's API stays here.
//
// cuBLAS is opened with dlopen on the first blas_create(), not linked: linking it made every
// kinfer run load libcublas and libcublasLt at start-up, 0.03 s -> 0.19 s and 8 MB -> 223 MB of
// resident memory for `kinfer --version` on the build machine (measured), also on CPU-only runs
// and in every test binary. Only the seven entry points below are used, and the grouped GEMM
// where the library has it.
#include "backend/cuda/blas.h"
#include "backend/cuda/compat.h"
#include "backend/cuda/mma_tf32.cuh"   // (tf32_round: the CPU mode's TF32 GEMM rounds as the kernels do)
#include "quant/fp16.h"

#if defined(__CUDACC__)
#include <cublas_v2.h>
#include <dlfcn.h>
#endif

#include <climits>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

// cublasGemmEx takes int sizes and leading dimensions (its _64 twin is newer than some drivers'
// cuBLAS): a prefill chunk is far below that, so a larger shape is a caller's bug.
void blas_check_shape(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    for (const int64_t v : {m, n, k, lda, ldb, ldc})
        if (v < 0 || v > INT_MAX)
            throw std::invalid_argument("cuda gemm: a size or leading dimension (" + std::to_string(v) +
                                        ") outside cuBLAS's int range");
    if (lda < k || ldb < k || ldc < m)
        throw std::invalid_argument("cuda gemm: leading dimensions " + std::to_string(lda) + " / " + std::to_string(ldb) +
                                    " / " + std::to_string(ldc) + " shorter than the rows they step over");
}

}  // namespace

#if defined(__CUDACC__)

namespace {

// The cuBLAS entry points, looked up once in the library's shared object.
struct CublasApi {
    // cublasGemmEx has a C++ overload (cublas_api.h's cudaDataType compute-type shim), so its
    // pointer type is spelled out.
    using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                      const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasDestroy_v2) destroy = nullptr;
    decltype(&cublasSetStream_v2) set_stream = nullptr;
    decltype(&cublasSetMathMode) set_math_mode = nullptr;
    GemmEx gemm_ex = nullptr;
    decltype(&cublasGetStatusName) status_name = nullptr;
    decltype(&cublasGetStatusString) status_string = nullptr;
    // Optional (cuBLAS 12.5 on): null where the library has no grouped GEMM.
    decltype(&cublasGemmGroupedBatchedEx) gemm_grouped = nullptr;
};

template <class F>
void blas_sym(void* lib, const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (!f) throw std::runtime_error(std::string("cuda gemm: cuBLAS has no ") + name);
}

// The soname of the cuBLAS this was compiled against, then the same in the toolkit's library
// folder (for a loader path without it). Kept open for the life of the process.
CublasApi load_cublas() {
    const std::string so = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef KINFER_CUDA_LIB_DIR
    if (!lib) lib = dlopen((std::string(KINFER_CUDA_LIB_DIR) + "/" + so).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (!lib) {
        const char* why = dlerror();
        throw std::runtime_error("cuda gemm: cannot load " + so + " (" + (why ? why : "?") + ")");
    }
    CublasApi a;
    blas_sym(lib, "cublasCreate_v2", a.create);
    blas_sym(lib, "cublasDestroy_v2", a.destroy);
    blas_sym(lib, "cublasSetStream_v2", a.set_stream);
    blas_sym(lib, "cublasSetMathMode", a.set_math_mode);
    blas_sym(lib, "cublasGemmEx", a.gemm_ex);
    blas_sym(lib, "cublasGetStatusName", a.status_name);
    blas_sym(lib, "cublasGetStatusString", a.status_string);
    a.gemm_grouped = reinterpret_cast<decltype(a.gemm_grouped)>(dlsym(lib, "cublasGemmGroupedBatchedEx"));
    return a;
}

// Loaded on first use; a failed load throws and is tried again on the next call.
const CublasApi& cublas() {
    static const CublasApi api = load_cublas();
    return api;
}

void blas_check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("cuda gemm: ") + what + ": " + cublas().status_name(s) + " (" +
                                 cublas().status_string(s) + ")");
}

cudaDataType_t blas_type(Elem t) {
    switch (t) {
        case Elem::F16: return CUDA_R_16F;
        case Elem::BF16: return CUDA_R_16BF;
        case Elem::F32: break;
    }
    return CUDA_R_32F;
}

}  // namespace

class Blas {
public:
    Blas() = default;
    Blas(const Blas&) = delete;
    Blas& operator=(const Blas&) = delete;
    ~Blas() {
        if (ptrs) cudaFree(ptrs);
        if (h) cublas().destroy(h);
    }
    cublasHandle_t h = nullptr;
    cudaStream_t stream = nullptr;
    void** ptrs = nullptr;        // device: the grouped GEMM's A, B and C pointer arrays
    size_t ptr_slots = 0;
    bool grouped_refused[3] = {}; // per Elem: cuBLAS refused the grouped call once, one gemm() each from then on
};

Blas* blas_create(void* stream) {
    const CublasApi& api = cublas();
    auto b = std::make_unique<Blas>();
    blas_check(api.create(&b->h), "cublasCreate");
    blas_check(api.set_stream(b->h, as_stream(stream)), "cublasSetStream");
    b->stream = as_stream(stream);
    // The default math mode: tensor cores for 16-bit operands, but never TF32 for fp32 ones
    // (that takes CUBLAS_TF32_TENSOR_OP_MATH or a _FAST_TF32 compute type, neither used here).
    blas_check(api.set_math_mode(b->h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return b.release();
}

void blas_destroy(Blas* b) { delete b; }

namespace {

// gemm() and gemm_tf32(): one cublasGemmEx of operands of type dt with fp32 outputs, computed as
// `compute` asks.
void gemm_ex(Blas* b, cudaDataType_t dt, cublasComputeType_t compute, int64_t m, int64_t n, int64_t k, const void* A,
             int64_t lda, const void* B, int64_t ldb, float* C, int64_t ldc, const char* what) {
    blas_check_shape(m, n, k, lda, ldb, ldc);
    if (m == 0 || n == 0) return;
    const float alpha = 1.0f, beta = 0.0f;
    // cuBLAS is column-major: A (m rows of k, row-major) is the k x m matrix A' with leading
    // dimension lda, so C' (m x n, column j = token j's outputs) = A'^T B'.
    blas_check(cublas().gemm_ex(b->h, CUBLAS_OP_T, CUBLAS_OP_N, int(m), int(n), int(k), &alpha, A, dt, int(lda), B, dt,
                                int(ldb), &beta, C, CUDA_R_32F, int(ldc), compute, CUBLAS_GEMM_DEFAULT),
               what);
}

}  // namespace

void gemm(Blas* b, Elem t, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B, int64_t ldb,
          float* C, int64_t ldc) {
    gemm_ex(b, blas_type(t), CUBLAS_COMPUTE_32F, m, n, k, A, lda, B, ldb, C, ldc, "cublasGemmEx");
}

void gemm_tf32(Blas* b, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
               float* C, int64_t ldc) {
    gemm_ex(b, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, m, n, k, A, lda, B, ldb, C, ldc, "cublasGemmEx (TF32)");
}

void gemm_grouped(Blas* b, Elem t, const GemmProblem* problems, int64_t count) {
    std::vector<int> m, n, k, lda, ldb, ldc;
    std::vector<const void*> host_ptrs;   // A..., then B..., then C...
    for (int64_t i = 0; i < count; ++i) {
        const GemmProblem& p = problems[i];
        blas_check_shape(p.m, p.n, p.k, p.lda, p.ldb, p.ldc);
        if (p.m == 0 || p.n == 0) continue;
        m.push_back(int(p.m)), n.push_back(int(p.n)), k.push_back(int(p.k));
        lda.push_back(int(p.lda)), ldb.push_back(int(p.ldb)), ldc.push_back(int(p.ldc));
    }
    const size_t g = m.size();
    if (g == 0) return;
    auto one_by_one = [&] {
        for (int64_t i = 0; i < count; ++i) {
            const GemmProblem& p = problems[i];
            gemm(b, t, p.m, p.n, p.k, p.A, p.lda, p.B, p.ldb, p.C, p.ldc);
        }
    };
    if (!cublas().gemm_grouped || b->grouped_refused[int(t)] || g == 1) return one_by_one();
    host_ptrs.resize(3 * g);
    size_t j = 0;
    for (int64_t i = 0; i < count; ++i) {
        const GemmProblem& p = problems[i];
        if (p.m == 0 || p.n == 0) continue;
        host_ptrs[j] = p.A, host_ptrs[g + j] = p.B, host_ptrs[2 * g + j] = p.C;
        ++j;
    }
    if (b->ptr_slots < 3 * g) {
        // The old array may still be read by a queued grouped call.
        if (b->ptrs && cudaStreamSynchronize(b->stream) != cudaSuccess) throw std::runtime_error("cuda gemm_grouped: stream");
        if (b->ptrs) cudaFree(b->ptrs);
        b->ptrs = nullptr, b->ptr_slots = 0;
        if (cudaMalloc(reinterpret_cast<void**>(&b->ptrs), 3 * g * sizeof(void*)) != cudaSuccess)
            throw std::runtime_error("cuda gemm_grouped: no device memory for " + std::to_string(3 * g) + " pointers");
        b->ptr_slots = 3 * g;
    }
    // From pageable memory: the call returns once the bytes are staged, so host_ptrs may go. The
    // next grouped call's upload is queued behind this call's GEMMs on the same stream.
    if (cudaMemcpyAsync(b->ptrs, host_ptrs.data(), 3 * g * sizeof(void*), cudaMemcpyHostToDevice, b->stream) != cudaSuccess)
        throw std::runtime_error("cuda gemm_grouped: pointer upload");
    std::vector<cublasOperation_t> ta(g, CUBLAS_OP_T), tb(g, CUBLAS_OP_N);
    std::vector<float> alpha(g, 1.0f), beta(g, 0.0f);
    std::vector<int> ones(g, 1);
    const cudaDataType_t dt = blas_type(t);
    const cublasStatus_t s = cublas().gemm_grouped(
        b->h, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(), const_cast<const void* const*>(b->ptrs), dt,
        lda.data(), const_cast<const void* const*>(b->ptrs + g), dt, ldb.data(), beta.data(), b->ptrs + 2 * g, CUDA_R_32F,
        ldc.data(), int(g), ones.data(), CUBLAS_COMPUTE_32F);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE) {
        // This cuBLAS does not take these operand types in a grouped call (fp32 outputs from
        // 16-bit operands are not in every version's table, and a version may call that an
        // invalid value rather than unsupported; unverified, no GPU has run this): the same
        // products one gemm() each, for this element type from now on, said once. (A real
        // invalid value, if any, then shows in the one-by-one GEMMs.)
        b->grouped_refused[int(t)] = true;
        std::fprintf(stderr, "kinfer: cuBLAS refused a grouped GEMM of %s operands with fp32 outputs (status %d): one GEMM per expert\n",
                     t == Elem::F16 ? "fp16" : t == Elem::BF16 ? "bf16" : "fp32", int(s));
        return one_by_one();
    }
    blas_check(s, "cublasGemmGroupedBatchedEx");
}

#else   // the CPU execution mode

// The handle holds the stream its products are queued on (emu/runtime.h: they run in stream
// order, as cuBLAS's kernels do).
class Blas {
public:
    cudaStream_t stream = nullptr;
};

Blas* blas_create(void* stream) {
    auto* b = new Blas;
    b->stream = as_stream(stream);
    return b;
}
void blas_destroy(Blas* b) { delete b; }

namespace {

// rows x k elements of type t, ld apart, as fp32 (the conversions are exact).
std::vector<float> blas_to_f32(Elem t, const void* p, int64_t rows, int64_t k, int64_t ld) {
    std::vector<float> out(size_t(rows * k));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < k; ++i) {
            const int64_t at = r * ld + i;
            float v = 0;
            switch (t) {
                case Elem::F32: v = static_cast<const float*>(p)[at]; break;
                case Elem::F16: v = quant::fp16_to_fp32(static_cast<const quant::fp16_t*>(p)[at]); break;
                case Elem::BF16: v = quant::bf16_to_fp32(static_cast<const quant::bf16_t*>(p)[at]); break;
            }
            out[size_t(r * k + i)] = v;
        }
    return out;
}

}  // namespace

// The same product in fp32, summed in order: cuBLAS's order differs, so the two agree to fp32
// rounding of the sum, not bit for bit (the tests' bounds allow for that). tf32: each operand
// first rounded as the kernels' TF32 operands are (tf32_round).
namespace {

void gemm_now(Elem t, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B, int64_t ldb, float* C,
              int64_t ldc, bool tf32) {
    std::vector<float> a = blas_to_f32(t, A, m, k, lda), bt = blas_to_f32(t, B, n, k, ldb);
    if (tf32)
        for (auto* v : {&a, &bt})
            for (float& x : *v) x = __uint_as_float(tf32_round(x));
    for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) {
            const float* ar = a.data() + i * k;
            const float* br = bt.data() + j * k;
            float s = 0;
            for (int64_t p = 0; p < k; ++p) s += ar[p] * br[p];
            C[j * ldc + i] = s;
        }
}

// gemm_now queued on the handle's stream, as cuBLAS queues its kernels.
void gemm_submit(Blas* b, Elem t, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B,
                 int64_t ldb, float* C, int64_t ldc, bool tf32) {
    blas_check_shape(m, n, k, lda, ldb, ldc);
    if (m == 0 || n == 0) return;
    cpu_mode::submit(b->stream, [=] { gemm_now(t, m, n, k, A, lda, B, ldb, C, ldc, tf32); },
                     cpu_mode::WorkKey{0, cpu_mode::kBlas});
}

}  // namespace

void gemm(Blas* b, Elem t, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B, int64_t ldb,
          float* C, int64_t ldc) {
    gemm_submit(b, t, m, n, k, A, lda, B, ldb, C, ldc, false);
}

void gemm_tf32(Blas* b, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
               float* C, int64_t ldc) {
    gemm_submit(b, Elem::F32, m, n, k, A, lda, B, ldb, C, ldc, true);
}

void gemm_grouped(Blas* b, Elem t, const GemmProblem* problems, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
        const GemmProblem& p = problems[i];
        gemm(b, t, p.m, p.n, p.k, p.A, p.lda, p.B, p.ldb, p.C, p.ldc);
    }
}

#endif

}  // namespace kinfer::cuda::KINFER_CUDA_NS
