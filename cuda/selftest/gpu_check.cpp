// kinfer_gpu_check: the CUDA backend's ops against the CPU backend's on realistic Kimi Linear 48B /
// K3 shapes with random data, on a machine with a GPU (tests/gpu/run.sh runs it). Prints one line
// per check (the worst error against its bound) and a speed table; exits 1 on any mismatch, 2
// when there is no GPU. Nothing here runs in CI: the CPU-mode tests (tests/cuda) cover the
// kernels' logic on small shapes everywhere.
#define KINFER_CUDA_NS gpu   // kernels.h's constants (the GEMM threshold), nvcc-built side
#include "backend/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "quant/fp16.h"
#include "quant/types.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

using namespace kinfer;

namespace {

// The matvec target is 80 % of an H200's 4.8 TB/s; the machine lent may be an H100
// (3.35 TB/s), so the table's "% peak" is of this device's own peak, from its memory clock and
// bus width (two transfers a clock), and the H200 figure is printed beside it for the target.
constexpr double kH200PeakGBps = 4800.0;
double peak_gbps = kH200PeakGBps;   // set in main() from cuda0
int failures = 0;

double device_peak_gbps(int dev) {
    int khz = 0, bits = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess || khz <= 0 || bits <= 0)
        return 0;
    return 2.0 * double(khz) * 1e3 * double(bits) / 8.0 / 1e9;
}

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    return x;
}

// Device copy of a host array, freed with the guard.
struct Dev {
    backend::Backend& be;
    backend::Buffer buf;
    Dev(backend::Backend& b, const void* src, size_t bytes, const char* what) : be(b), buf(b.alloc(bytes, what)) {
        if (src) be.upload(buf.ptr, src, bytes);
    }
    ~Dev() { be.free(buf); }
    float* f() const { return reinterpret_cast<float*>(buf.ptr); }
};

// rows x cols weights of type t from randn(seed): the first `uniq` rows (0: all) quantized, the
// rest copies of them in turn (the bytes differ per block of uniq rows; quantizing K3-sized
// matrices row by row would take most of the check's time).
std::vector<uint8_t> random_rows(quant::Type t, int64_t rows, int64_t cols, uint32_t seed, int64_t uniq = 0) {
    const quant::Traits& tr = quant::traits(t);
    const size_t rb = quant::row_size(tr, cols);
    if (uniq <= 0 || uniq > rows) uniq = rows;
    std::vector<uint8_t> W(rb * size_t(rows));
    const std::vector<float> wf = randn(size_t(uniq * cols), seed);
    for (int64_t r = 0; r < uniq; ++r) tr.quantize(wf.data() + r * cols, W.data() + size_t(r) * rb, cols);
    for (int64_t r = uniq; r < rows; ++r) std::memcpy(W.data() + size_t(r) * rb, W.data() + size_t(r % uniq) * rb, rb);
    return W;
}

// n floats of d set to NaN, so that a check of outputs a kernel should have written cannot pass
// on what an earlier run (or an earlier allocation at the same address) left there.
void poison(backend::Backend& be, const Dev& d, size_t n) {
    const std::vector<float> nan(n, std::numeric_limits<float>::quiet_NaN());
    be.upload(d.buf.ptr, nan.data(), n * 4);
}

std::vector<float> down(backend::Backend& be, const Dev& d, size_t n) {
    std::vector<float> h(n);
    be.download(h.data(), d.buf.ptr, n * sizeof(float));
    return h;
}

// |got - want| <= rel |want| + abs everywhere; prints the worst ratio.
void check(const char* what, const std::vector<float>& got, const std::vector<float>& want, double rel, double abs) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double bound = rel * std::fabs(double(want[i])) + abs;
        const double r = std::isfinite(got[i]) ? std::fabs(double(got[i]) - double(want[i])) / bound : 1e30;
        if (r > worst) {
            worst = r;
            at = i;
        }
    }
    const bool ok = worst <= 1.0;
    failures += !ok;
    std::printf("%-4s %-44s worst error / bound %.3g (element %zu)\n", ok ? "ok" : "FAIL", what, worst, at);
}

// Seconds per call of f (after warm-up), the device synchronised around the timed loop. Both
// the backend's stream and the whole device: several timings launch kernels straight onto the
// legacy default stream (stream nullptr), which the backend's non-blocking streams do not wait for.
void settle(backend::Backend& be) {
    be.synchronize();
    if (cudaDeviceSynchronize() != cudaSuccess) std::printf("FAIL cudaDeviceSynchronize after a timed call\n"), ++failures;
}
double time_it(backend::Backend& be, int reps, const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    settle(be);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    settle(be);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

void matvec_table(backend::Backend& gpu, backend::CpuBackend& cpu) {
    std::printf("\n# decode matvec, K3-shaped rows of 7168 (n = 1 token), weights ~512 MiB (past L2)\n");
    std::printf("%-8s %8s %8s %10s %10s %10s %8s\n", "type", "rows", "cols", "MiB", "us", "GB/s", "% peak");
    const quant::Type types[] = {quant::Type::Q4_K, quant::Type::MXFP4, quant::Type::Q8_0, quant::Type::Q6_K,
                                 quant::Type::Q5_K, quant::Type::Q4_0,  quant::Type::Q5_0, quant::Type::IQ4_NL,
                                 quant::Type::IQ4_XS, quant::Type::F16, quant::Type::BF16, quant::Type::F32};
    const int64_t cols = 7168;
    const std::vector<float> x = randn(size_t(cols), 1);
    for (quant::Type t : types) {
        const quant::Traits& tr = quant::traits(t);
        const size_t rb = quant::row_size(tr, cols);
        const int64_t rows = int64_t((512ull << 20) / rb);
        // Random rows quantized once, then repeated: the bytes differ per row block, not per row.
        const int64_t uniq = 1024;
        const std::vector<uint8_t> W = random_rows(t, rows, cols, 2 + uint32_t(t), uniq);
        Dev dW(gpu, W.data(), W.size(), "weight"), dx(gpu, x.data(), x.size() * 4, "x"), dy(gpu, nullptr, size_t(rows) * 4, "y");
        const backend::Mat Mg{t, cols, rows, dW.buf.ptr, rb, 0, "bench_weight"};
        gpu.matmul(Mg, dx.f(), 1, dy.f(), 0, 0);
        const std::vector<float> y = down(gpu, dy, size_t(uniq));
        std::vector<float> want(static_cast<size_t>(uniq));
        const backend::Mat Mc{t, cols, uniq, W.data(), rb, 0, "bench_weight"};
        cpu.matmul(Mc, x.data(), 1, want.data(), 0, 0);
        // The CPU rounds x to the vec_dot format (Q8_0 / Q8_K / F16 / BF16): a relative 2e-2 of
        // each row's result, or 2e-2 of the row's largest |y| for rows near zero.
        double ymax = 0;
        for (float v : want) ymax = std::max(ymax, double(std::fabs(v)));
        check((std::string("matvec ") + tr.name + " vs cpu matmul").c_str(), y, want, 2e-2, 2e-2 * ymax);
        const double s = time_it(gpu, 20, [&] { gpu.matmul(Mg, dx.f(), 1, dy.f(), 0, 0); });
        const double gbps = double(W.size()) / s / 1e9;
        std::printf("%-8s %8lld %8lld %10.1f %10.1f %10.1f %7.1f%%\n", tr.name, (long long)rows, (long long)cols,
                    double(W.size()) / double(1 << 20), s * 1e6, gbps, 100.0 * gbps / peak_gbps);
        if (cuda::gpu::matvec_q8_supported(t, dW.buf.ptr, rb, cols)) {
            // matmul took the int8-activation form (matvec_q8.cu, the activation quantized in the
            // call); the fp32-activation kernel beside it, on the same weights.
            const double s32 = time_it(gpu, 20, [&] {
                cuda::gpu::matvec(t, dW.buf.ptr, rb, rows, cols, dx.f(), 0, 1, dy.f(), 0, nullptr);
            });
            const double g32 = double(W.size()) / s32 / 1e9;
            std::printf("%-8s %8s %8s %10s %10.1f %10.1f %7.1f%%   (fp32-activation matvec; the line above: int8 activations)\n",
                        tr.name, "", "", "", s32 * 1e6, g32, 100.0 * g32 / peak_gbps);
        }
    }
}

// mma.cuh on the tensor cores: the PTX mma.sync against the plain (shuffle + dp4a) form the CPU
// mode tests and against a host product, both shapes, random and extreme int8 values. The plain
// form's fragment layout is checked on every machine (test_mmq); this is where the hardware's is.
void mma_layout(backend::Backend& gpu) {
    std::printf("\n# int8 mma.sync (m16n8k32, m16n8k16) against the plain form and a host product\n");
    std::mt19937 rng(77);
    std::uniform_int_distribution<int> v(-128, 127);
    int bad = 0;
    for (int trial = 0; trial < 8; ++trial) {
        std::vector<int8_t> A(16 * 32), B(8 * 32);
        for (auto& a : A) a = int8_t(trial == 7 ? -128 : v(rng));
        for (auto& b : B) b = int8_t(trial == 7 ? -128 : v(rng));
        Dev dA(gpu, A.data(), A.size(), "A"), dB(gpu, B.data(), B.size(), "B"), dC(gpu, nullptr, 4 * 128 * 4, "C");
        cuda::gpu::mma_check(reinterpret_cast<const int8_t*>(dA.buf.ptr), reinterpret_cast<const int8_t*>(dB.buf.ptr),
                             reinterpret_cast<int32_t*>(dC.buf.ptr), nullptr);
        settle(gpu);
        std::vector<int32_t> C(4 * 128);
        gpu.download(C.data(), dC.buf.ptr, C.size() * 4);
        for (int f = 0; f < 4; ++f)
            for (int r = 0; r < 16; ++r)
                for (int c = 0; c < 8; ++c) {
                    int32_t want = 0;
                    for (int i = 0; i < (f < 2 ? 32 : 16); ++i) want += int32_t(A[size_t(32 * r + i)]) * int32_t(B[size_t(32 * c + i)]);
                    bad += C[size_t(128 * f + 8 * r + c)] != want;
                }
    }
    failures += bad != 0;
    std::printf("%-4s mma.sync and the plain form equal the host product: %d of %d elements differ\n", bad ? "FAIL" : "ok", bad,
                8 * 4 * 128);

    // fp16 (m16n8k16, mma_f16.cuh): the tensor cores (A by ldmatrix, B's fragments loaded from its
    // columns, from its rows, and by ldmatrix both n tiles from its rows and from its columns, and
    // two k16 steps from its columns) and
    // the plain form against a host product of the fp16-rounded operands (exact products, fp32 sums:
    // 1e-6 of sum |a b|), and the identity as A, which puts B's elements in place one by one (the
    // fragment layout, exactly).
    std::printf("\n# fp16 mma.sync (m16n8k16) against the plain form and a host product\n");
    {
        std::normal_distribution<float> nd16(0.0f, 1.0f);
        int bad16 = 0;
        for (int trial = 0; trial < 9; ++trial) {
            std::vector<float> A(16 * 16), B(8 * 16);
            for (int i = 0; i < 256; ++i) A[size_t(i)] = trial == 8 ? float(i / 16 == i % 16) : nd16(rng);
            for (int i = 0; i < 128; ++i) B[size_t(i)] = trial == 8 ? float(i) : nd16(rng) * 300.0f;
            Dev dA(gpu, A.data(), A.size() * 4, "A"), dB(gpu, B.data(), B.size() * 4, "B"), dC(gpu, nullptr, 9 * 128 * 4, "C");
            cuda::gpu::mma_f16_check(dA.f(), dB.f(), dC.f(), nullptr);
            settle(gpu);
            std::vector<float> C(9 * 128);
            gpu.download(C.data(), dC.buf.ptr, C.size() * 4);
            for (int r = 0; r < 16; ++r)
                for (int c = 0; c < 8; ++c) {
                    double want = 0, mag = 0;
                    for (int k = 0; k < 16; ++k) {
                        const double a = quant::fp16_to_fp32(quant::fp32_to_fp16(A[size_t(16 * r + k)]));
                        const double b = quant::fp16_to_fp32(quant::fp32_to_fp16(B[size_t(16 * c + k)]));
                        want += a * b;
                        mag += std::fabs(a * b);
                    }
                    for (int f = 0; f < 9; ++f) bad16 += !(std::fabs(C[size_t(128 * f + 8 * r + c)] - want) <= 1e-6 * mag);
                }
        }
        failures += bad16 != 0;
        std::printf("%-4s fp16 mma.sync and the plain form against the host product: %d of %d elements off\n",
                    bad16 ? "FAIL" : "ok", bad16, 9 * 9 * 128);
    }

    // TF32 (m16n8k8, mma_tf32.cuh): the tensor cores against the plain form, single and 3xTF32,
    // and the 3xTF32 products against the exact one (fp32 sums in an order the hardware picks, so
    // a tolerance: 1e-6 of sum |a b|, as test_kda_chunked holds the plain form).
    std::printf("\n# tf32 mma.sync (m16n8k8) against the plain form and an exact product\n");
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int bad32 = 0;
    double worst_tc = 0, worst_split = 0;
    for (int trial = 0; trial < 8; ++trial) {
        std::vector<float> A(16 * 8), B(8 * 8);
        for (auto& a : A) a = nd(rng);
        for (auto& b : B) b = nd(rng);
        Dev dA(gpu, A.data(), A.size() * 4, "A"), dB(gpu, B.data(), B.size() * 4, "B"), dC(gpu, nullptr, 4 * 128 * 4, "C");
        cuda::gpu::mma_tf32_check(dA.f(), dB.f(), dC.f(), nullptr);
        settle(gpu);
        std::vector<float> C(4 * 128);
        gpu.download(C.data(), dC.buf.ptr, C.size() * 4);
        for (int r = 0; r < 16; ++r)
            for (int c = 0; c < 8; ++c) {
                double exact = 0, mag = 0;
                for (int k = 0; k < 8; ++k) {
                    exact += double(A[size_t(8 * r + k)]) * B[size_t(8 * c + k)];
                    mag += std::fabs(double(A[size_t(8 * r + k)]) * B[size_t(8 * c + k)]);
                }
                const size_t at = size_t(8 * r + c);
                const double d_single = std::fabs(double(C[at]) - C[128 + at]) / mag;      // tensor cores vs plain
                const double d_split = std::fabs(double(C[256 + at]) - exact) / mag;      // 3xTF32 tensor cores
                worst_tc = std::max(worst_tc, d_single);
                worst_split = std::max(worst_split, d_split);
                bad32 += d_single > 1e-6 || d_split > 1e-6 || std::fabs(double(C[384 + at]) - exact) / mag > 1e-6;
            }
    }
    failures += bad32 != 0;
    std::printf("%-4s tf32 mma.sync: %d of %d elements off (worst, of sum |a b|: tensor cores vs plain %.1e, 3xTF32 vs "
                "exact %.1e)\n", bad32 ? "FAIL" : "ok", bad32, 8 * 128, worst_tc, worst_split);
}

// Puts the backend back on the prefill GEMM it had (fp16, or what KINFER_CUDA_GEMM chose) when
// a part ends, also by an exception.
struct DefaultGemmAfter {
    backend::cuda::CudaBackend* be;
    backend::cuda::CudaBackend::PrefillGemm had = be ? be->prefill_gemm() : backend::cuda::CudaBackend::PrefillGemm::fp16;
    ~DefaultGemmAfter() {
        if (be) be->set_prefill_gemm(had);
    }
};

// The fp16 GEMM's tokens past fp16's range (gemm.cu's convert_rows_f16_scaled / unscale_tokens):
// every third token times 1e5 (|x| up to ~5e5, inf as plain fp16), against the CPU backend (its
// Q8_K scales are fp32); then 50 tasks of 32 of those tokens in one matmul_tasks call (a grouped
// GEMM, its unscaling in two launches of at most 48 tasks) against the single GEMM; then both on
// the fused GEMM against the fp16 one. The large tokens and the others are each held to their own
// largest |y|.
void gemm_range(backend::Backend& gpu, backend::CpuBackend& cpu) {
    auto* cuda_be = dynamic_cast<backend::cuda::CudaBackend*>(&gpu);
    const DefaultGemmAfter reset{cuda_be};
    if (cuda_be) cuda_be->set_prefill_gemm(backend::cuda::CudaBackend::PrefillGemm::fp16);
    std::printf("\n# fp16 GEMM with tokens past fp16's range (scaled per token, multiplied back)\n");
    const int64_t rows = 256, cols = 3584, n = 64, tasks_n = 50, task_tokens = 32;
    const size_t rb = quant::row_size(quant::traits(quant::Type::Q4_K), cols);
    const std::vector<uint8_t> W = random_rows(quant::Type::Q4_K, rows, cols, 90);
    std::vector<float> x = randn(size_t(n * cols), 91);
    auto large = [](int64_t token) { return token % 3 == 1; };
    for (int64_t t = 0; t < n; ++t)
        if (large(t))
            for (int64_t i = 0; i < cols; ++i) x[size_t(t * cols + i)] *= 1e5f;
    Dev dW(gpu, W.data(), W.size(), "weight"), dx(gpu, x.data(), x.size() * 4, "x"), dy(gpu, nullptr, size_t(n * rows) * 4, "y"),
        dyg(gpu, nullptr, size_t(tasks_n * task_tokens * rows) * 4, "y grouped");
    const backend::Mat Mg{quant::Type::Q4_K, cols, rows, dW.buf.ptr, rb, 0, "range_weight"};
    gpu.matmul(Mg, dx.f(), n, dy.f(), 0, 0);
    const std::vector<float> all = down(gpu, dy, size_t(n * rows));
    std::vector<float> want(all.size());
    cpu.matmul(backend::Mat{quant::Type::Q4_K, cols, rows, W.data(), rb, 0, "range_weight"}, x.data(), n, want.data(), 0, 0);
    // got and ref hold outputs of the tokens `tokens` names, rows apart.
    auto by_size = [&](const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                       const std::vector<int64_t>& tokens, double rel, double abs_of_max) {
        for (const bool big : {true, false}) {
            std::vector<float> g, r;
            double ymax = 0;
            for (size_t j = 0; j < tokens.size(); ++j) {
                if (large(tokens[j]) != big) continue;
                g.insert(g.end(), got.begin() + int64_t(j) * rows, got.begin() + int64_t(j + 1) * rows);
                r.insert(r.end(), ref.begin() + int64_t(j) * rows, ref.begin() + int64_t(j + 1) * rows);
            }
            for (float v : r) ymax = std::max(ymax, double(std::fabs(v)));
            check((what + (big ? ", tokens times 1e5" : ", the other tokens")).c_str(), g, r, rel, abs_of_max * ymax);
        }
    };
    std::vector<int64_t> every(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) every[size_t(t)] = t;
    by_size("gemm q4_K vs cpu matmul", all, want, every, 2e-2, 2e-2);

    std::vector<backend::MatTask> tasks;
    std::vector<float> ref;
    std::vector<int64_t> tokens;
    for (int64_t i = 0; i < tasks_n; ++i) {
        const int64_t row0 = (i % 2) * (n - task_tokens);
        tasks.push_back({Mg, 0, row0, task_tokens, dyg.f() + i * task_tokens * rows, 0});
        ref.insert(ref.end(), all.begin() + row0 * rows, all.begin() + (row0 + task_tokens) * rows);
        for (int64_t t = 0; t < task_tokens; ++t) tokens.push_back(row0 + t);
    }
    const backend::MatInput in{dx.f(), n, cols, 0};
    gpu.matmul_tasks({&in, 1}, tasks);
    // The same fp16 operands; cuBLAS's grouped kernel may sum in another order than the single one.
    by_size("grouped gemm, 50 tasks, vs the single gemm", down(gpu, dyg, size_t(tasks_n * task_tokens * rows)), ref, tokens,
            1e-4, 1e-5);
    if (!cuda_be) return;
    // The fused GEMM (KINFER_CUDA_GEMM=fused) multiplies its stores by the scales: the same
    // operands as the fp16 form's, the fp32 sums in another order. Its outputs NaN first: dy and
    // dyg hold the fp16 form's.
    cuda_be->set_prefill_gemm(backend::cuda::CudaBackend::PrefillGemm::fused);
    poison(gpu, dy, size_t(n * rows));
    poison(gpu, dyg, size_t(tasks_n * task_tokens * rows));
    gpu.matmul(Mg, dx.f(), n, dy.f(), 0, 0);
    by_size("fused gemm vs the fp16 gemm", down(gpu, dy, size_t(n * rows)), all, every, 1e-4, 1e-5);
    gpu.matmul_tasks({&in, 1}, tasks);
    by_size("fused grouped gemm, 50 tasks, vs the fp16 single gemm", down(gpu, dyg, size_t(tasks_n * task_tokens * rows)), ref,
            tokens, 1e-4, 1e-5);
}

// The prefill GEMM (from kGemmMinTokens tokens on, CudaBackend::matmul takes dequantized
// fp16 / bf16 tiles and cuBLAS; F32 weights an fp32 GEMM) against the CPU backend on a K3 shape,
// and its speed. Dequantization and GEMM are timed together, as a prefill pays for both.
// The quantized types with an int8 form run a second time on the int8 tensor-core GEMM (mmq.cu,
// KINFER_CUDA_GEMM=int8): the same check against the CPU (closer: the CPU's own integer sums) and
// its time beside the fp16 one ("gemm" column); every quantized type a third time on the fused
// GEMM (gemm_fused.cu, KINFER_CUDA_GEMM=fused: fp16's operands, no dequantized copy), held to the
// fp16 form's results.
void gemm_table(backend::Backend& gpu, backend::CpuBackend& cpu) {
    auto* cuda_be = dynamic_cast<backend::cuda::CudaBackend*>(&gpu);
    const DefaultGemmAfter reset{cuda_be};
    using Gemm = backend::cuda::CudaBackend::PrefillGemm;
    const int64_t rows = 7168, cols = 3584, n = 512;
    std::printf("\n# prefill GEMM, %lld rows x %lld cols, %lld tokens (fp16: dequantize + cuBLAS, fp32 accumulate; "
                "int8: mmq.cu on int8 tensor cores; fused: gemm_fused.cu, weights decoded in the kernel)\n",
                (long long)rows, (long long)cols, (long long)n);
    std::printf("%-8s %8s %8s %8s %10s %10s %6s\n", "type", "rows", "cols", "tokens", "ms", "TFLOP/s", "gemm");
    const quant::Type types[] = {quant::Type::Q4_K, quant::Type::MXFP4, quant::Type::Q8_0, quant::Type::Q6_K,
                                 quant::Type::Q5_K, quant::Type::Q4_0,  quant::Type::Q5_0, quant::Type::IQ4_NL,
                                 quant::Type::IQ4_XS, quant::Type::F16, quant::Type::BF16, quant::Type::F32};
    const std::vector<float> x = randn(size_t(n * cols), 80);
    Dev dx(gpu, x.data(), x.size() * 4, "x"), dy(gpu, nullptr, size_t(n * rows) * 4, "y");
    // 256 random rows quantized once, then repeated; the CPU computes those 256 for every token.
    const int64_t uniq = 256;
    for (quant::Type t : types) {
        const quant::Traits& tr = quant::traits(t);
        const size_t rb = quant::row_size(tr, cols);
        const std::vector<uint8_t> W = random_rows(t, rows, cols, 81 + uint32_t(t), uniq);
        Dev dW(gpu, W.data(), W.size(), "weight");
        const backend::Mat Mg{t, cols, rows, dW.buf.ptr, rb, 0, "bench_weight"};
        std::vector<float> want(size_t(n * uniq));
        const backend::Mat Mc{t, cols, uniq, W.data(), rb, 0, "bench_weight"};
        cpu.matmul(Mc, x.data(), n, want.data(), 0, 0);
        double ymax = 0;
        for (float v : want) ymax = std::max(ymax, double(std::fabs(v)));
        const bool int8 = cuda_be && cuda::gpu::matvec_q8_supported(t, dW.buf.ptr, rb, cols);
        const bool fused = cuda_be && cuda::gpu::fused_gemm_supported(t);
        std::vector<float> fp16_got;   // the fp16 form's outputs, the fused form's reference
        for (const Gemm form : {Gemm::fp16, Gemm::int8, Gemm::fused}) {
            if ((form == Gemm::int8 && !int8) || (form == Gemm::fused && !fused)) continue;
            if (cuda_be) cuda_be->set_prefill_gemm(form);
            gpu.matmul(Mg, dx.f(), n, dy.f(), 0, 0);
            const std::vector<float> all = down(gpu, dy, size_t(n * rows));
            std::vector<float> got(size_t(n * uniq));
            for (int64_t j = 0; j < n; ++j)
                std::memcpy(got.data() + j * uniq, all.data() + j * rows, size_t(uniq) * 4);
            // fp16: fp16 weights and activations (2^-11 each) on the GPU, Q8 / F16 / BF16 activations
            // on the CPU: the CPU's rounding dominates, the matvec check's bound covers it. int8: the
            // CPU's integer sums, the float steps' order only (test_mmq's 1e-5 of sum |w x|; here
            // against the largest |y|, with room for K = 3584).
            // fused: fp16's operands bit for bit, the fp32 sums in another order.
            const bool i8 = form == Gemm::int8, fu = form == Gemm::fused;
            const char* label = i8 ? "int8" : fu ? "fused" : "fp16";
            check((std::string("gemm ") + tr.name + " " + label + " vs cpu matmul, 512 tokens").c_str(), got, want,
                  i8 ? 1e-4 : 2e-2, (i8 ? 1e-4 : 2e-2) * ymax);
            if (form == Gemm::fp16) fp16_got = got;
            if (fu) {
                const std::string what = std::string("gemm ") + tr.name + " fused vs fp16, 512 tokens";
                check(what.c_str(), got, fp16_got, 1e-5, 1e-5 * ymax);
            }
            const double s = time_it(gpu, 10, [&] { gpu.matmul(Mg, dx.f(), n, dy.f(), 0, 0); });
            std::printf("%-8s %8lld %8lld %8lld %10.3f %10.1f %6s\n", tr.name, (long long)rows, (long long)cols, (long long)n,
                        s * 1e3, 2.0 * double(rows) * double(cols) * double(n) / s / 1e12, label);
        }
    }
    if (cuda_be) cuda_be->set_prefill_gemm(Gemm::fp16);
    // Q4_K over token counts: below kGemmMinTokens the matvec runs (4 tokens a block), from there
    // on the GEMM; the rows around the threshold show whether it is placed well.
    const int64_t thr = kinfer::cuda::gpu::kGemmMinTokens;
    std::printf("\n# Q4_K %lld x %lld by token count (n < %lld: matvec, from %lld: GEMM)\n", (long long)rows,
                (long long)cols, (long long)thr, (long long)thr);
    std::printf("%8s %8s %10s %10s %10s %10s %10s %10s\n", "tokens", "path", "ms", "TFLOP/s", "int8 ms", "TFLOP/s", "fused ms",
                "TFLOP/s");
    const quant::Traits& tr = quant::traits(quant::Type::Q4_K);
    const size_t rb = quant::row_size(tr, cols);
    const std::vector<uint8_t> W = random_rows(quant::Type::Q4_K, rows, cols, 90, uniq);
    Dev dW(gpu, W.data(), W.size(), "weight");
    const backend::Mat Mg{quant::Type::Q4_K, cols, rows, dW.buf.ptr, rb, 0, "bench_weight"};
    const int64_t nmax = 2048;
    const std::vector<float> xl = randn(size_t(nmax * cols), 91);
    Dev dxl(gpu, xl.data(), xl.size() * 4, "x"), dyl(gpu, nullptr, size_t(nmax * rows) * 4, "y");
    for (int64_t nt : {thr / 2, thr - 1, thr, 2 * thr, int64_t(128), int64_t(512), nmax}) {
        const double s = time_it(gpu, 10, [&] { gpu.matmul(Mg, dxl.f(), nt, dyl.f(), 0, 0); });
        double s8 = 0, sf = 0;   // the int8 and fused GEMMs at the same count (below the threshold: the matvecs again)
        if (cuda_be) {
            cuda_be->set_prefill_gemm(Gemm::int8);
            s8 = time_it(gpu, 10, [&] { gpu.matmul(Mg, dxl.f(), nt, dyl.f(), 0, 0); });
            cuda_be->set_prefill_gemm(Gemm::fused);
            sf = time_it(gpu, 10, [&] { gpu.matmul(Mg, dxl.f(), nt, dyl.f(), 0, 0); });
            cuda_be->set_prefill_gemm(Gemm::fp16);
        }
        const double flop = 2.0 * double(rows) * double(cols) * double(nt);
        std::printf("%8lld %8s %10.3f %10.1f %10.3f %10.1f %10.3f %10.1f\n", (long long)nt, nt < thr ? "matvec" : "gemm",
                    s * 1e3, flop / s / 1e12, s8 * 1e3, s8 > 0 ? flop / s8 / 1e12 : 0.0, sf * 1e3,
                    sf > 0 ? flop / sf / 1e12 : 0.0);
    }
}

void row_ops(backend::Backend& gpu, backend::CpuBackend& cpu) {
    std::printf("\n# row and element-wise ops (K3 shapes)\n");
    {
        const int64_t rows = 16, d = 7168;
        const std::vector<float> x = randn(size_t(rows * d), 3), w = randn(size_t(d), 4);
        Dev dx(gpu, x.data(), x.size() * 4, "x"), dw(gpu, w.data(), w.size() * 4, "w"), dy(gpu, nullptr, x.size() * 4, "y");
        gpu.rms_norm(dx.f(), dw.f(), dy.f(), rows, d, 1e-6f, 0);
        std::vector<float> want(x.size());
        cpu.rms_norm(x.data(), w.data(), want.data(), rows, d, 1e-6f, 0);
        check("rms_norm 16 x 7168", down(gpu, dy, x.size()), want, 1e-5, 1e-7);
        const double s = time_it(gpu, 50, [&] { gpu.rms_norm(dx.f(), dw.f(), dy.f(), rows, d, 1e-6f, 0); });
        std::printf("     rms_norm 16 x 7168: %.1f us\n", s * 1e6);
    }
    {
        const int64_t rows = 64, n = 4096;
        std::vector<float> x = randn(size_t(rows * n), 5, 3.0f);
        Dev dx(gpu, x.data(), x.size() * 4, "x");
        gpu.softmax_rows(dx.f(), rows, n, 0.1f);
        cpu.softmax_rows(x.data(), rows, n, 0.1f);
        check("softmax 64 x 4096", down(gpu, dx, x.size()), x, 1e-5, 1e-9);
    }
    {
        const int64_t rows = 16, ff = 3072;   // K3: 16 routed experts' gate rows
        std::vector<float> g = randn(size_t(rows * ff), 6, 3.0f);
        const std::vector<float> u = randn(g.size(), 7);
        Dev dg(gpu, g.data(), g.size() * 4, "g"), du(gpu, u.data(), u.size() * 4, "u");
        const backend::Glu act{true, 1.5f, 3.0f};
        gpu.glu(dg.f(), du.f(), rows, ff, act);
        cpu.glu(g.data(), u.data(), rows, ff, act);
        check("situ glu 16 x 3072", down(gpu, dg, g.size()), g, 1e-5, 1e-6);
    }
    for (const auto& [E, K] : {std::pair<int64_t, int64_t>{896, 16}, {256, 8}}) {
        const int64_t n = 4;
        std::vector<float> logits = randn(size_t(n * E), 8, 2.0f);
        const std::vector<float> bias = randn(size_t(E), 9, 0.05f);
        Dev dp(gpu, logits.data(), logits.size() * 4, "probs"), db(gpu, bias.data(), bias.size() * 4, "bias");
        std::vector<int32_t> sel(size_t(n * K)), want_sel(sel.size());
        std::vector<float> w(sel.size()), want_w(sel.size());
        gpu.route(dp.f(), db.f(), n, backend::RouteParams{E, K, true, 2.446f}, sel.data(), w.data(), {});
        cpu.route(logits.data(), bias.data(), n, backend::RouteParams{E, K, true, 2.446f}, want_sel.data(), want_w.data(), {});
        const bool same = sel == want_sel;
        failures += !same;
        std::printf("%-4s route E=%lld K=%lld: %s\n", same ? "ok" : "FAIL", (long long)E, (long long)K,
                    same ? "same experts as the CPU" : "different experts");
        check("route weights", w, want_w, 1e-6, 0);
    }
}

void more_ops(backend::Backend& gpu, backend::CpuBackend& cpu) {
    std::printf("\n# conv, KDA decay gate, MoE sums and scatter, AttnRes (K3 shapes)\n");
    for (int64_t n : {1, 64}) {
        const int64_t ch = 3 * 96 * 128, W = 4;   // q, k and v channels of a K3 KDA layer
        std::vector<float> x = randn(size_t(n * ch), 60), taps = randn(size_t(ch * W), 61), st = randn(size_t(ch * (W - 1)), 62);
        Dev dx(gpu, x.data(), x.size() * 4, "x"), dt(gpu, taps.data(), taps.size() * 4, "taps"), ds(gpu, st.data(), st.size() * 4, "state");
        gpu.conv_silu(dx.f(), n, ch, W, dt.f(), ds.f());
        cpu.conv_silu(x.data(), n, ch, W, taps.data(), st.data());
        check(("conv_silu n=" + std::to_string(n)).c_str(), down(gpu, dx, x.size()), x, 1e-5, 1e-6);
        check(("conv_silu n=" + std::to_string(n) + " state").c_str(), down(gpu, ds, st.size()), st, 0, 0);
    }
    {
        const int64_t n = 64, H = 96, D = 128;
        std::vector<float> g = randn(size_t(n * H * D), 63, 4.0f), dtb = randn(size_t(H * D), 64), a = randn(size_t(H), 65);
        for (float& v : a) v = -std::exp(v);
        Dev dg(gpu, g.data(), g.size() * 4, "g"), db(gpu, dtb.data(), dtb.size() * 4, "dt"), da(gpu, a.data(), a.size() * 4, "a");
        const backend::KdaGate gate{true, -5.0f};
        gpu.kda_decay(dg.f(), db.f(), da.f(), n, H, D, gate);
        cpu.kda_decay(g.data(), dtb.data(), a.data(), n, H, D, gate);
        check("kda_decay 64 x 96 x 128 (K3 gate)", down(gpu, dg, g.size()), g, 1e-6, 1e-7);
    }
    {
        const int64_t n = 4, K = 16, cols = 7168;
        const std::vector<float> ys = randn(size_t(n * K * cols), 66);
        std::vector<float> out(size_t(n * cols));
        Dev dy(gpu, ys.data(), ys.size() * 4, "ys"), dout(gpu, nullptr, out.size() * 4, "out");
        gpu.sum_slots(dy.f(), n, K, cols, dout.f());
        cpu.sum_slots(ys.data(), n, K, cols, out.data());
        check("sum_slots 4 x 16 x 7168", down(gpu, dout, out.size()), out, 0, 0);
        std::vector<int64_t> idx(size_t(n * K));
        for (size_t j = 0; j < idx.size(); ++j) idx[j] = int64_t((j * 37) % idx.size());   // a permutation
        const std::vector<float> w = randn(idx.size(), 67);
        std::vector<float> dst(ys.size(), 0.0f);
        Dev ddst(gpu, dst.data(), dst.size() * 4, "dst");
        gpu.scatter_weighted(dy.f(), cols, idx, w.data(), ddst.f());
        cpu.scatter_weighted(ys.data(), cols, idx, w.data(), dst.data());
        check("scatter_weighted 64 rows x 7168", down(gpu, ddst, dst.size()), dst, 0, 0);
    }
    {
        const int64_t n = 2, d = 7168, m = 8;   // K3: 93 layers in AttnRes blocks of 12
        const std::vector<float> p = randn(size_t(n * d), 68), w = randn(size_t(d), 69, 0.05f);
        std::vector<std::vector<float>> blocks;
        std::vector<std::unique_ptr<Dev>> dblocks;
        std::vector<const float*> hptr, dptr;
        for (int64_t j = 0; j < m; ++j) {
            blocks.push_back(randn(size_t(n * d), 70 + uint32_t(j)));
            dblocks.push_back(std::make_unique<Dev>(gpu, blocks.back().data(), size_t(n * d) * 4, "block"));
            hptr.push_back(blocks.back().data());
            dptr.push_back(dblocks.back()->f());
        }
        Dev dp(gpu, p.data(), p.size() * 4, "p"), dw(gpu, w.data(), w.size() * 4, "w"), dout(gpu, nullptr, p.size() * 4, "out");
        std::vector<float> out(p.size());
        gpu.attn_res_mix(dptr, dp.f(), dw.f(), dout.f(), n, d, 1e-6f);
        cpu.attn_res_mix(hptr, p.data(), w.data(), out.data(), n, d, 1e-6f);
        check("attn_res_mix 8 blocks x 7168", down(gpu, dout, out.size()), out, 1e-5, 1e-6);
    }
}

// Every D-float row of x scaled to unit length.
void l2_normalize_rows(std::vector<float>& x, int64_t D) {
    for (size_t r = 0; r < x.size() / size_t(D); ++r) {
        double s = 0;
        for (int64_t i = 0; i < D; ++i) s += double(x[r * D + i]) * x[r * D + i];
        for (int64_t i = 0; i < D; ++i) x[r * D + i] /= float(std::sqrt(s));
    }
}

void paged_f16_forms(backend::Backend& gpu, const std::vector<uint8_t*>& pages, int64_t page_rows, size_t row_bytes,
                     const Dev& dQ, const backend::MlaShape& ms, int64_t ctx);   // below

void mixers(backend::Backend& gpu, backend::CpuBackend& cpu) {
    std::printf("\n# KDA recurrent (K3: 96 heads x 128) and MLA absorbed decode (64 heads, r 512 + 64)\n");
    for (int64_t n : {1, 64}) {
        const int64_t H = 96, D = 128, di = H * D;
        std::vector<float> q = randn(size_t(n * di), 10), k = randn(size_t(n * di), 11);
        l2_normalize_rows(q, D);   // KDA's q and k are L2-normalized per head
        l2_normalize_rows(k, D);
        const std::vector<float> v = randn(size_t(n * di), 12);
        std::vector<float> g = randn(size_t(n * di), 13, 0.5f), beta = randn(size_t(n * H), 14);
        for (float& x : g) x = -std::fabs(x) * 0.3f;
        for (float& b : beta) b = 1.0f / (1.0f + std::exp(-b));
        std::vector<float> state = randn(size_t(H * D * D), 15, 0.2f), o(size_t(n * di));
        Dev dq(gpu, q.data(), q.size() * 4, "q"), dk(gpu, k.data(), k.size() * 4, "k"), dv(gpu, v.data(), v.size() * 4, "v"),
            dg(gpu, g.data(), g.size() * 4, "g"), db(gpu, beta.data(), beta.size() * 4, "beta"),
            ds(gpu, state.data(), state.size() * 4, "state"), dout(gpu, nullptr, o.size() * 4, "o");
        backend::KdaScan sg{dq.f(), dk.f(), dv.f(), dg.f(), db.f(), ds.f(), dout.f(), n, H, D, false};
        gpu.kda_scan(sg);
        backend::KdaScan sc{q.data(), k.data(), v.data(), g.data(), beta.data(), state.data(), o.data(), n, H, D, false};
        cpu.kda_scan(sc);
        check(("kda recurrent n=" + std::to_string(n) + " outputs").c_str(), down(gpu, dout, o.size()), o, 1e-4, 1e-4);
        check(("kda recurrent n=" + std::to_string(n) + " state").c_str(), down(gpu, ds, state.size()), state, 1e-4, 1e-4);
        const double s = time_it(gpu, 20, [&] { gpu.kda_scan(sg); });
        std::printf("     kda recurrent 96 x 128, %lld tokens: %.1f us (%.2f M tokens/s per layer; the chunked form is timed below)\n",
                    (long long)n, s * 1e6, double(n) / s / 1e6);
    }
    for (int64_t ctx : {4096, 65536, 1 << 20}) {
        const int64_t H = 64, r = 512, dr = 64, R = r + dr, n = 1;
        const std::vector<float> cache = randn(size_t(ctx * R), 20), Q = randn(size_t(n * H * R), 21);
        backend::MlaShape ms;
        ms.n = n;
        ms.pos0 = ctx - 1;
        ms.H = H;
        ms.r = r;
        ms.dr = dr;
        ms.scale = 1.0f / std::sqrt(192.0f);
        Dev dc(gpu, cache.data(), cache.size() * 4, "cache"), dQ(gpu, Q.data(), Q.size() * 4, "Q"),
            dl(gpu, nullptr, size_t(n * H * r) * 4, "lat");
        gpu.mla_attend_absorbed(dc.f(), dQ.f(), dl.f(), ms);
        std::vector<float> want(size_t(n * H * r));
        cpu.mla_attend_absorbed(cache.data(), Q.data(), want.data(), ms);
        double wmax = 0;
        for (float x : want) wmax = std::max(wmax, double(std::fabs(x)));
        check(("mla absorbed ctx " + std::to_string(ctx)).c_str(), down(gpu, dl, want.size()), want, 1e-4, 1e-5 * wmax);
        const double s = time_it(gpu, 10, [&] { gpu.mla_attend_absorbed(dc.f(), dQ.f(), dl.f(), ms); });
        // The two pass-1 kernels side by side (mla.cu): one block per head re-reads the cache 64
        // times, the grouped one 4 times. The backend takes the grouped one.
        // And the grouped one's products on TF32 tensor cores (mla_mma.cuh): 3xTF32 at the fp32
        // bound, single TF32 at 1e-2 relative (test_mixers' bounds).
        const char* names[4] = {" per head", " grouped", " grouped 3xTF32", " grouped TF32"};
        double s_kernel[4] = {0, 0, 0, 0};
        for (int k = 0; k < 4; ++k) {
            cuda::gpu::MlaArgs a;
            a.n = n, a.pos0 = ctx - 1, a.H = H, a.r = r, a.dr = dr, a.scale = ms.scale;
            a.kernel = k ? cuda::gpu::MlaKernel::grouped : cuda::gpu::MlaKernel::per_head;
            a.math = k == 2 ? cuda::gpu::F32Math::tf32x3 : k == 3 ? cuda::gpu::F32Math::tf32 : cuda::gpu::F32Math::fp32;
            Dev scratch(gpu, nullptr, cuda::gpu::mla_scratch_floats(a) * 4, "mla scratch");
            cuda::gpu::mla_attend_absorbed(dc.f(), dQ.f(), dl.f(), a, scratch.f(), nullptr);
            settle(gpu);                                            // the download runs on the backend's stream
            check(("mla absorbed ctx " + std::to_string(ctx) + names[k]).c_str(), down(gpu, dl, want.size()), want,
                  k == 3 ? 1e-2 : 1e-4, (k == 3 ? 1e-3 : 1e-5) * wmax);
            s_kernel[k] = time_it(gpu, 10, [&] { cuda::gpu::mla_attend_absorbed(dc.f(), dQ.f(), dl.f(), a, scratch.f(), nullptr); });
        }
        // H (2 R - dr) multiply-adds a cached position: the grouped kernels' TFLOPS beside their times.
        const double flops = 2.0 * double(H) * double(2 * R - dr) * double(ctx);
        std::printf("     mla absorbed decode, %lld cached positions: %.1f us (per-head kernel %.1f us, grouped %.1f us: %.2fx; "
                    "f32 cache read once: %.0f GB/s; %.1f TFLOPS)\n",
                    (long long)ctx, s * 1e6, s_kernel[0] * 1e6, s_kernel[1] * 1e6, s_kernel[0] / s_kernel[1],
                    double(ctx * R * 4) / s_kernel[1] / 1e9, flops / s_kernel[1] / 1e12);
        std::printf("     mla absorbed decode, %lld cached positions, tensor cores: 3xTF32 %.1f us (%.2fx grouped fp32, %.1f "
                    "TFLOPS), TF32 %.1f us (%.2fx, %.1f TFLOPS)\n",
                    (long long)ctx, s_kernel[2] * 1e6, s_kernel[1] / s_kernel[2], flops / s_kernel[2] / 1e12,
                    s_kernel[3] * 1e6, s_kernel[1] / s_kernel[3], flops / s_kernel[3] / 1e12);
        // The same rows as an f16 cache (one page, stored on the device as the CPU stores them), every
        // form of the grouped kernel against its fp32 form: at 1M positions a piece is ~500 tiles, where
        // the tensor cores' own order and alignment of their fp32 sums would show.
        {
            const size_t row_bytes = backend::cache_row_bytes(backend::CacheType::f16, R);
            Dev page(gpu, nullptr, size_t(ctx) * row_bytes, "f16 page");
            std::vector<uint8_t*> pages{reinterpret_cast<uint8_t*>(page.buf.ptr)};
            const backend::LatentPages gc{backend::CacheType::f16, R, ctx, row_bytes, pages.data(), 1};
            gpu.mla_cache_store(gc, 0, ctx, dc.f(), 0);
            paged_f16_forms(gpu, pages, ctx, row_bytes, dQ, ms, ctx);
        }
    }
}

// The chunked KDA kernel (kda_scan takes it from 16 tokens) on a K3 layer, 96 heads x 128, 8K tokens:
// checked against the CPU recurrence on the first 256 tokens, then timed for C = 16 / 32 / 64
// against kda_recurrent on the same 8K tokens (M tokens/s per layer; the state carries over from
// call to call, which the decays keep bounded).
void kda_chunked_speed(backend::Backend& gpu, backend::CpuBackend& cpu) {
    std::printf("\n# KDA chunked prefill (K3: 96 heads x 128), 8192 tokens\n");
    const int64_t H = 96, D = 128, di = H * D, n = 8192, n_check = 256;
    std::vector<float> q = randn(size_t(n * di), 30), k = randn(size_t(n * di), 31);
    l2_normalize_rows(q, D);
    l2_normalize_rows(k, D);
    const std::vector<float> v = randn(size_t(n * di), 32);
    std::vector<float> g = randn(size_t(n * di), 33, 2.0f), beta = randn(size_t(n * H), 34);
    for (float& x : g) x = -5.0f / (1.0f + std::exp(-x - 1.0f));   // the K3 gate, lb = -5
    for (float& b : beta) b = 1.0f / (1.0f + std::exp(-b));
    const std::vector<float> state0 = randn(size_t(H * D * D), 35, 0.3f);
    Dev dq(gpu, q.data(), q.size() * 4, "q"), dk(gpu, k.data(), k.size() * 4, "k"),
        dv(gpu, v.data(), v.size() * 4, "v"),
        dg(gpu, g.data(), g.size() * 4, "g"), db(gpu, beta.data(), beta.size() * 4, "beta"),
        ds(gpu, state0.data(), state0.size() * 4, "state"), dout(gpu, nullptr, size_t(n * di) * 4, "o");
    const size_t state_bytes = state0.size() * 4;
    // Correctness at the realistic shape: n_check tokens, every chunk size, against the CPU recurrence.
    std::vector<float> want_state = state0, want_o(size_t(n_check * di));
    backend::KdaScan sc{q.data(), k.data(), v.data(), g.data(), beta.data(), want_state.data(), want_o.data(),
                        n_check, H, D, false};
    cpu.kda_scan(sc);
    // The five forms: fp32 on the CUDA cores, 3xTF32 and single TF32 on the tensor cores
    // (kda_chunked_mma.cu), f16x3 and single fp16 on them (kda_chunked_mma_f16.cuh). The single
    // forms are held to test_kda_chunked's 1e-3. A form that refuses a chunk size (fp16's C = 64 at
    // D = 128: shared memory) says so and is skipped there.
    using cuda::gpu::F32Math;
    struct Form {
        const char* name;
        F32Math math;
        double tol;
    };
    const Form forms[] = {{"fp32", F32Math::fp32, 1e-4}, {"3xTF32", F32Math::tf32x3, 1e-4}, {"TF32", F32Math::tf32, 1e-3},
                          {"f16x3", F32Math::f16x3, 1e-4}, {"f16", F32Math::f16, 1e-3}};
    auto run_form = [&](const Form& f, int C, int64_t tokens, int slices = 0) {
        cuda::gpu::kda_chunked(dq.f(), dk.f(), dv.f(), dg.f(), db.f(), ds.f(), dout.f(), tokens, H, D, nullptr, C, slices,
                               f.math);
    };
    std::set<std::pair<const Form*, int>> refused;   // the launcher's own refusals, found by asking it
    for (const Form& f : forms)
        for (int C : {16, 32, 64}) {
            gpu.upload(ds.buf.ptr, state0.data(), state_bytes);
            gpu.synchronize();
            try {
                run_form(f, C, n_check);
            } catch (const std::invalid_argument& e) {
                std::printf("     kda chunked %-6s C=%-2d: not run (%s)\n", f.name, C, e.what());
                refused.insert({&f, C});
                continue;
            }
            const cudaError_t err = cudaDeviceSynchronize();
            const std::string tag = std::string("kda chunked ") + f.name + " C=" + std::to_string(C);
            if (err != cudaSuccess) {
                std::printf("FAIL %s: %s\n", tag.c_str(), cudaGetErrorString(err));
                ++failures;
                continue;
            }
            check((tag + " outputs, 256 tokens").c_str(), down(gpu, dout, want_o.size()), want_o, f.tol, f.tol);
            check((tag + " state, 256 tokens").c_str(), down(gpu, ds, want_state.size()), want_state, f.tol, f.tol);
        }
    // Speed: the same 8K tokens through the recurrence and through each chunk size.
    auto timed = [&](const std::function<void()>& f) {
        f();   // warm-up (and the shared-memory opt-in)
        cudaDeviceSynchronize();
        const int reps = 3;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) f();
        cudaDeviceSynchronize();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    };
    const double s_rec = timed(
        [&] { cuda::gpu::kda_recurrent(dq.f(), dk.f(), dv.f(), dg.f(), db.f(), ds.f(), dout.f(), n, H, D, nullptr); });
    std::printf("     kda recurrent 96 x 128, %lld tokens: %.2f ms (%.2f M tokens/s per layer)\n", (long long)n,
                s_rec * 1e3, double(n) / s_rec / 1e6);
    for (const Form& f : forms)
        for (int C : {16, 32, 64}) {
            if (refused.count({&f, C})) continue;
            const double s = timed([&] { run_form(f, C, n); });
            const cudaError_t err = cudaGetLastError();
            std::printf("     kda chunked %-6s C=%-2d 96 x 128, %lld tokens: %.2f ms (%.2f M tokens/s per layer, %.2fx the "
                        "recurrence; target 5)%s\n", f.name, C, (long long)n, s * 1e3, double(n) / s / 1e6, s_rec / s,
                        err == cudaSuccess ? "" : cudaGetErrorString(err));
        }
    // The tensor-core forms at C = 16 (3xTF32 236 registers a thread, f16x3 234: ptxas, D = 128)
    // run one 256-thread block an SM, 96 heads on 132 SMs; value slices give more, smaller blocks
    // (each redoes the chunk's C x C products).
    for (const Form* f : {&forms[1], &forms[3]})
        for (int slices : {2, 4}) {
            const double s = timed([&] { run_form(*f, 16, n, slices); });
            const cudaError_t err = cudaGetLastError();
            std::printf("     kda chunked %-6s C=16 %d slices, %lld tokens: %.2f ms (%.2f M tokens/s per layer)%s\n", f->name,
                        slices, (long long)n, s * 1e3, double(n) / s / 1e6, err == cudaSuccess ? "" : cudaGetErrorString(err));
        }
}

// The grouped absorbed kernel's forms over an f16 cache side by side (mla.cu): fp32 FMAs, TF32
// (mla_mma.cuh) and fp16 tensor cores (mla_mma_f16.cuh: the cache exact, q and the probabilities
// split or rounded once), each against the fp32 form (the first; no CPU reference at 1M positions):
// the splits at the fp32 bound, the single forms at 1e-2 (test_latent's).
void paged_f16_forms(backend::Backend& gpu, const std::vector<uint8_t*>& pages, int64_t page_rows, size_t row_bytes,
                     const Dev& dQ, const backend::MlaShape& ms, int64_t ctx) {
    using cuda::gpu::F32Math;
    Dev table(gpu, pages.data(), pages.size() * sizeof(uint8_t*), "page table");
    cuda::gpu::LatentArgs la;
    la.type = cuda::gpu::kLatentF16, la.R = ms.r + ms.dr, la.page_rows = page_rows, la.row_bytes = row_bytes;
    la.pages = reinterpret_cast<const uint8_t* const*>(table.buf.ptr);
    std::vector<float> want;   // the fp32 form's (paged_cache holds it to the CPU at 4K / 64K)
    double wmax = 0;
    const struct {
        const char* name;
        F32Math math;
    } forms[] = {{"fp32", F32Math::fp32}, {"3xTF32", F32Math::tf32x3}, {"TF32", F32Math::tf32}, {"f16x2", F32Math::f16x2},
                 {"f16", F32Math::f16}};
    const double flops = 2.0 * double(ms.H) * double(2 * (ms.r + ms.dr) - ms.dr) * double(ctx);
    std::printf("     grouped kernel over the f16 pages, %lld cached positions:", (long long)ctx);
    for (const auto& f : forms) {
        cuda::gpu::MlaArgs a;
        a.n = 1, a.pos0 = ctx - 1, a.H = ms.H, a.r = ms.r, a.dr = ms.dr, a.scale = ms.scale;
        a.kernel = cuda::gpu::MlaKernel::grouped;
        a.math = f.math;
        Dev scratch(gpu, nullptr, cuda::gpu::mla_scratch_floats(a) * 4, "mla scratch"),
            dl(gpu, nullptr, size_t(ms.H * ms.r) * 4, "lat");
        cuda::gpu::mla_attend_paged(la, dQ.f(), dl.f(), a, scratch.f(), nullptr);
        settle(gpu);
        const bool single = f.math == F32Math::tf32 || f.math == F32Math::f16;
        if (f.math == F32Math::fp32) {   // first: the reference, not checked against itself
            want = down(gpu, dl, size_t(ms.H * ms.r));
            for (float x : want) wmax = std::max(wmax, double(std::fabs(x)));
        } else {
            check(("mla over f16 pages ctx " + std::to_string(ctx) + " grouped " + f.name).c_str(), down(gpu, dl, want.size()),
                  want, single ? 1e-2 : 1e-4, (single ? 1e-3 : 1e-5) * wmax);
        }
        const double t = time_it(gpu, 10, [&] { cuda::gpu::mla_attend_paged(la, dQ.f(), dl.f(), a, scratch.f(), nullptr); });
        std::printf(" %s %.1f us (%.1f TFLOPS, %.0f GB/s of cache);", f.name, t * 1e6, flops / t / 1e12,
                    double(ctx) * double(row_bytes) / t / 1e9);
    }
    std::printf("\n");
}

// The paged latent cache: a store gives the CPU's bytes, a load the CPU's floats, and the
// absorbed attention through the pages agrees with the CPU's tiled op (K3: 64 heads, r 512 + 64).
void paged_cache(backend::Backend& gpu, backend::CpuBackend& cpu) {
    std::printf("\n# paged latent cache (f32 / f16 / q8_0 pages of 256 rows) and MLA over the pages\n");
    const int64_t H = 64, r = 512, dr = 64, R = r + dr, page_rows = 256;
    for (const auto t : {backend::CacheType::f32, backend::CacheType::f16, backend::CacheType::q8_0}) {
        for (int64_t ctx : {int64_t(4096), int64_t(65536)}) {
            const size_t row_bytes = backend::cache_row_bytes(t, R);
            const int64_t n_pages = (ctx + page_rows - 1) / page_rows;
            std::vector<std::unique_ptr<Dev>> dpages;
            std::vector<uint8_t*> gptr;
            std::vector<std::vector<uint8_t>> hpages(size_t(n_pages), std::vector<uint8_t>(size_t(page_rows) * row_bytes));
            std::vector<uint8_t*> hptr;
            for (int64_t p = 0; p < n_pages; ++p) {
                dpages.push_back(std::make_unique<Dev>(gpu, nullptr, size_t(page_rows) * row_bytes, "page"));
                gptr.push_back(reinterpret_cast<uint8_t*>(dpages.back()->buf.ptr));
                hptr.push_back(hpages[size_t(p)].data());
            }
            backend::LatentPages gc{t, R, page_rows, row_bytes, gptr.data(), n_pages}, hc{t, R, page_rows, row_bytes, hptr.data(), n_pages};
            const std::vector<float> rows = randn(size_t(ctx * R), 40), Q = randn(size_t(H * R), 41);
            Dev drows(gpu, rows.data(), rows.size() * 4, "rows");
            gpu.mla_cache_store(gc, 0, ctx, drows.f(), 0);
            cpu.mla_cache_store(hc, 0, ctx, rows.data(), 0);
            size_t bad = 0;
            for (int64_t p = 0; p < n_pages; ++p) {
                std::vector<uint8_t> got(size_t(page_rows) * row_bytes);
                gpu.download(got.data(), gptr[size_t(p)], got.size());
                const size_t used = size_t(std::min(page_rows, ctx - p * page_rows)) * row_bytes;
                bad += std::memcmp(got.data(), hpages[size_t(p)].data(), used) != 0;
            }
            const std::string name = std::string(backend::cache_type_name(t)) + " ctx " + std::to_string(ctx);
            std::printf("%s cache store %s: %zu of %lld pages differ from the CPU's bytes\n", bad ? "FAIL" : "ok  ", name.c_str(),
                        bad, (long long)n_pages);
            failures += bad != 0;
            std::vector<float> back(rows.size());
            cpu.mla_cache_load(hc, 0, ctx, back.data());
            Dev dback(gpu, nullptr, rows.size() * 4, "loaded");
            gpu.mla_cache_load(gc, 0, ctx, dback.f());
            check(("cache load " + name).c_str(), down(gpu, dback, back.size()), back, 0, 1e-30);   // the same floats
            backend::MlaShape ms;
            ms.n = 1, ms.pos0 = ctx - 1, ms.H = H, ms.r = r, ms.dr = dr, ms.scale = 1.0f / std::sqrt(192.0f);
            Dev dQ(gpu, Q.data(), Q.size() * 4, "Q"), dl(gpu, nullptr, size_t(H * r) * 4, "lat");
            gpu.mla_attend_tiled(gc, dQ.f(), dl.f(), ms);
            std::vector<float> want(size_t(H * r));
            cpu.mla_attend_tiled(hc, Q.data(), want.data(), ms);
            double wmax = 0;
            for (float x : want) wmax = std::max(wmax, double(std::fabs(x)));
            check(("mla over pages " + name).c_str(), down(gpu, dl, want.size()), want, 1e-4, 1e-5 * wmax);
            const double s = time_it(gpu, 10, [&] { gpu.mla_attend_tiled(gc, dQ.f(), dl.f(), ms); });
            std::printf("     mla decode over %s pages, %lld cached positions: %.1f us\n", backend::cache_type_name(t), (long long)ctx,
                        s * 1e6);
        }
    }
}

// The decompressed (MHA) prefill form through the pages (mla_mha.cu), K3's MLA shape (64 heads,
// r 512 + 64, dn 128, dv 128, attn_k_b / attn_v_b at Q8_0), a 512-token chunk at the end of 4K /
// 32K cached positions: checked against the CPU's tiled MHA op at 4K, and timed against the tiled
// absorbed form on the same chunk (the model picks between them by operation count alone). Then a
// 4096-token chunk at 32K, timed alone: there the attention outweighs the keys' expansion (about
// 410 / n of it), so its TFLOPS are mostly the flash kernel's.
void mla_mha_prefill(backend::Backend& gpu, backend::CpuBackend& cpu) {
    std::printf("\n# MLA prefill, 512-token chunks: decompressed (MHA) against absorbed; a 4096-token chunk; f16 pages of 256 rows\n");
    const int64_t H = 64, r = 512, dr = 64, dn = 128, dv = 128, R = r + dr, dk = dn + dr, page_rows = 256;
    const quant::Type wt = quant::Type::Q8_0;
    const quant::Traits& tr = quant::traits(wt);
    const size_t rb_k = quant::row_size(tr, dn), rb_v = quant::row_size(tr, r);
    std::vector<uint8_t> kb(rb_k * size_t(H * r)), vb(rb_v * size_t(H * dv));
    {
        const std::vector<float> wk = randn(size_t(H * r * dn), 60, 0.05f), wv = randn(size_t(H * dv * r), 61, 0.05f);
        for (int64_t i = 0; i < H * r; ++i) tr.quantize(wk.data() + i * dn, kb.data() + size_t(i) * rb_k, dn);
        for (int64_t i = 0; i < H * dv; ++i) tr.quantize(wv.data() + i * r, vb.data() + size_t(i) * rb_v, r);
    }
    Dev dkb(gpu, kb.data(), kb.size(), "attn_k_b"), dvb(gpu, vb.data(), vb.size(), "attn_v_b");
    const backend::Mat gk{wt, dn, H * r, dkb.buf.ptr, rb_k, r, "attn_k_b"}, gv{wt, r, H * dv, dvb.buf.ptr, rb_v, dv, "attn_v_b"};
    const backend::Mat hk{wt, dn, H * r, kb.data(), rb_k, r, "attn_k_b"}, hv{wt, r, H * dv, vb.data(), rb_v, dv, "attn_v_b"};
    const auto t = backend::CacheType::f16;
    const size_t row_bytes = backend::cache_row_bytes(t, R);
    for (int64_t ctx : {int64_t(4096), int64_t(32768)}) {
        const int64_t n_pages = (ctx + page_rows - 1) / page_rows;
        std::vector<std::unique_ptr<Dev>> dpages;
        std::vector<uint8_t*> gptr, hptr;
        std::vector<std::vector<uint8_t>> hpages;
        for (int64_t p = 0; p < n_pages; ++p) {
            dpages.push_back(std::make_unique<Dev>(gpu, nullptr, size_t(page_rows) * row_bytes, "page"));
            gptr.push_back(reinterpret_cast<uint8_t*>(dpages.back()->buf.ptr));
            hpages.emplace_back(size_t(page_rows) * row_bytes);
            hptr.push_back(hpages.back().data());
        }
        backend::LatentPages gc{t, R, page_rows, row_bytes, gptr.data(), n_pages}, hc{t, R, page_rows, row_bytes, hptr.data(), n_pages};
        const std::vector<float> rows = randn(size_t(ctx * R), 62);
        {
            Dev drows(gpu, rows.data(), rows.size() * 4, "rows");
            gpu.mla_cache_store(gc, 0, ctx, drows.f(), 0);
        }
        for (const int64_t n : {int64_t(512), int64_t(4096)}) {
            if (n == 4096 && ctx != 32768) continue;
            const std::vector<float> q = randn(size_t(n * H * dk), 63);
            backend::MlaShape ms;
            ms.n = n, ms.pos0 = ctx - n, ms.H = H, ms.r = r, ms.dr = dr, ms.dn = dn, ms.dv = dv;
            ms.scale = 1.0f / std::sqrt(float(dk));
            Dev dq(gpu, q.data(), q.size() * 4, "q"), dout(gpu, nullptr, size_t(n * H * dv) * 4, "o");
            // The flash kernel on the CUDA cores, then on TF32 tensor cores (mla_mha_mma.cuh) with the
            // keys expanded on TF32 ones: 3xTF32 at the same bound, single TF32 at 1e-2 relative
            // (test_mla_mha's); f16x2 / f16 on fp16 tensor cores, the flash kernel
            // (mla_mha_mma_f16.cuh) and the keys' expansion (the f16 cache exact, the weights split
            // or rounded once). The fp32 form is timed last, so the absorbed comparison below is
            // against the default.
            auto* cuda_be = dynamic_cast<backend::cuda::CudaBackend*>(&gpu);
            using Math = backend::cuda::CudaBackend::Math;
            const Math had = cuda_be ? cuda_be->mla_math() : Math::fp32;
            std::vector<float> want;
            double wmax = 0;
            if (ctx == 4096) {
                cpu.mla_cache_store(hc, 0, ctx, rows.data(), 0);
                want.resize(size_t(n * H * dv));
                cpu.mla_attend_tiled_mha(hk, hv, hc, q.data(), want.data(), ms);
                for (float x : want) wmax = std::max(wmax, double(std::fabs(x)));
            }
            double s_mha = 0;
            auto form_name = [](Math m) {
                return m == Math::fp32 ? "fp32" : m == Math::tf32x3 ? "3xTF32" : m == Math::tf32 ? "TF32" : m == Math::f16x2 ? "f16x2" : "f16";
            };
            for (const Math m : {Math::tf32x3, Math::tf32, Math::f16x2, Math::f16, Math::fp32}) {
                if (!cuda_be && m != Math::fp32) continue;
                if (cuda_be) cuda_be->set_mla_math(m);
                const char* form = form_name(m);
                const bool single = m == Math::tf32 || m == Math::f16;
                gpu.mla_attend_tiled_mha(gk, gv, gc, dq.f(), dout.f(), ms);
                if (ctx == 4096)
                    check((std::string("mla MHA prefill over f16 pages, ctx 4096, ") + form).c_str(), down(gpu, dout, want.size()),
                          want, single ? 1e-2 : 1e-4, (single ? 1e-3 : 1e-5) * wmax);
                s_mha = time_it(gpu, 5, [&] { gpu.mla_attend_tiled_mha(gk, gv, gc, dq.f(), dout.f(), ms); });
                // H n n_kv (dk + dv) multiply-adds, about half of them masked away in the last n keys.
                const double flops = 2.0 * double(H) * double(n) * double(ctx - n / 2) * double(dk + dv);
                std::printf("     mla MHA prefill chunk of %lld at %lld cached positions, flash kernel %-6s: %.2f ms (%.1f TFLOPS "
                            "with the key expansion)\n", (long long)n, (long long)ctx, form, s_mha * 1e3, flops / s_mha / 1e12);
            }
            if (n != 512) {   // the long chunk: the MHA forms' times alone
                if (cuda_be) cuda_be->set_mla_math(had);
                continue;
            }
            // The absorbed form's attention on the same chunk (its q_abs / attn_v_b matmuls not counted),
            // with the default arithmetic and on the fp16 tensor cores (the operation count picks between
            // the forms; these say what the GPU makes of it).
            const std::vector<float> Q = randn(size_t(n * H * R), 64);
            Dev dQ(gpu, Q.data(), Q.size() * 4, "Q"), dl(gpu, nullptr, size_t(n * H * r) * 4, "lat");
            for (const Math m : {had, Math::f16x2}) {
                if (!cuda_be && m != had) continue;
                if (cuda_be) cuda_be->set_mla_math(m);
                const double s_abs = time_it(gpu, 5, [&] { gpu.mla_attend_tiled(gc, dQ.f(), dl.f(), ms); });
                std::printf("     mla prefill chunk of %lld at %lld cached positions: MHA (fp32) %.2f ms, absorbed (%s) %.2f ms (%.2fx)\n",
                            (long long)n, (long long)ctx, s_mha * 1e3, form_name(m), s_abs * 1e3, s_abs / s_mha);
            }
            if (cuda_be) cuda_be->set_mla_math(had);
        }
    }
}

// Grouped expert products (matmul_tasks): 16 routed experts' gate and up (3072 x 3584 at MXFP4),
// against the same 32 matmuls one by one. Decode (1 token) and a few tokens (8) are grouped
// matvecs, one launch for all: every task's result must be the single launch's, bit for bit (the
// same per-block code). 64 tokens each (a prefill chunk's share) is the grouped GEMM (one cuBLAS
// grouped call on dequantized weights) against one GEMM each: the same fp16 operands, cuBLAS's
// summation order may differ (1e-4 relative).
void grouped_experts(backend::Backend& gpu) {
    std::printf("\n# grouped experts (matmul_tasks), 16 experts x gate + up, 3072 x 3584 MXFP4, 1 / 8 / 64 tokens each\n");
    const quant::Type t = quant::Type::MXFP4;
    const quant::Traits& tr = quant::traits(t);
    const int64_t rows = 3072, cols = 3584, experts = 16;
    const size_t rb = quant::row_size(tr, cols);
    std::vector<uint8_t> W(rb * size_t(rows * 2 * experts));
    {
        const std::vector<uint8_t> one = random_rows(t, rows, cols, 70);
        std::memcpy(W.data(), one.data(), one.size());
        for (int64_t m = 1; m < 2 * experts; ++m) std::memcpy(W.data() + size_t(m * rows) * rb, W.data(), size_t(rows) * rb);
    }
    Dev dW(gpu, W.data(), W.size(), "experts");
    {
        // A mixed group: half the tasks decode (1 token), half take 8, in one launch of the
        // 4-token form; each must equal its own launch (the 1-token form for the decode ones).
        const std::vector<float> x = randn(size_t(8 * cols), 72);
        Dev dx(gpu, x.data(), x.size() * 4, "x"), dy(gpu, nullptr, size_t(2 * experts * 8 * rows) * 4, "y"),
            dy1(gpu, nullptr, size_t(2 * experts * 8 * rows) * 4, "y1");
        std::vector<backend::MatTask> tasks;
        for (int64_t m = 0; m < 2 * experts; ++m) {
            const backend::Mat W{t, cols, rows, dW.buf.ptr + size_t(m * rows) * rb, rb, 0, "expert"};
            tasks.push_back({W, 0, 0, m % 2 ? 8 : 1, dy.f() + m * 8 * rows, 0});
        }
        const backend::MatInput in{dx.f(), 8, cols, 0};
        gpu.matmul_tasks({&in, 1}, tasks);
        for (const auto& task : tasks) gpu.matmul(task.W, dx.f(), task.n, dy1.f() + (task.y - dy.f()), 0, 0);
        std::vector<float> got = down(gpu, dy, size_t(2 * experts * 8 * rows)), want = down(gpu, dy1, got.size());
        for (int64_t m = 0; m < 2 * experts; m += 2)   // the decode tasks' unused rows are not written by either
            for (int64_t i = rows; i < 8 * rows; ++i) got[size_t(m * 8 * rows + i)] = want[size_t(m * 8 * rows + i)] = 0;
        check("grouped == one by one, 1 and 8 tokens mixed", got, want, 0, 1e-30);
    }
    // 64 tokens a second time with KINFER_CUDA_GEMM=int8 and a third with fused: one mmq_group
    // (fused_gemm_grouped) launch against one mmq_matmul (fused_gemm_matmul) a task, the same block
    // code, so the same bits.
    auto* cuda_be = dynamic_cast<backend::cuda::CudaBackend*>(&gpu);
    const DefaultGemmAfter reset{cuda_be};
    using Gemm = backend::cuda::CudaBackend::PrefillGemm;
    const std::pair<int64_t, Gemm> runs[] = {{1, Gemm::fp16}, {8, Gemm::fp16}, {64, Gemm::fp16}, {64, Gemm::int8},
                                             {64, Gemm::fused}};
    for (const auto& run : runs) {
        const int64_t n = run.first;   // (not a structured binding: the lambdas below capture it)
        const Gemm form = run.second;
        const bool int8 = form == Gemm::int8, fused = form == Gemm::fused;
        if (form != Gemm::fp16 && !cuda_be) continue;
        if (cuda_be) cuda_be->set_prefill_gemm(form);
        const std::vector<float> x = randn(size_t(n * cols), 71);
        Dev dx(gpu, x.data(), x.size() * 4, "x"), dy(gpu, nullptr, size_t(2 * experts * n * rows) * 4, "y"),
            dy1(gpu, nullptr, size_t(2 * experts * n * rows) * 4, "y1");
        poison(gpu, dy, size_t(2 * experts * n * rows));   // (the last form's outputs may sit at the same address)
        poison(gpu, dy1, size_t(2 * experts * n * rows));
        std::vector<backend::MatTask> tasks;
        std::vector<backend::Mat> mats;
        for (int64_t m = 0; m < 2 * experts; ++m) mats.push_back({t, cols, rows, dW.buf.ptr + size_t(m * rows) * rb, rb, 0, "expert"});
        for (int64_t m = 0; m < 2 * experts; ++m) tasks.push_back({mats[size_t(m)], 0, 0, n, dy.f() + m * n * rows, 0});
        const backend::MatInput in{dx.f(), n, cols, 0};
        gpu.matmul_tasks({&in, 1}, tasks);
        for (int64_t m = 0; m < 2 * experts; ++m) gpu.matmul(mats[size_t(m)], dx.f(), n, dy1.f() + m * n * rows, 0, 0);
        const std::vector<float> one = down(gpu, dy1, size_t(2 * experts * n * rows));
        double ymax = 0;
        for (float v : one) ymax = std::max(ymax, double(std::fabs(v)));
        const bool gemm = n >= 32 && form == Gemm::fp16;   // cuBLAS's grouped kernel may sum in another order
        const char* label = int8 ? " int8 GEMM" : fused ? " fused GEMM" : "";
        check(("grouped == one by one, " + std::to_string(n) + " tokens" + label).c_str(),
              down(gpu, dy, size_t(2 * experts * n * rows)), one, gemm ? 1e-4 : 0, gemm ? 1e-5 * ymax : 1e-30);
        const double s_group = time_it(gpu, 20, [&] { gpu.matmul_tasks({&in, 1}, tasks); });
        const double s_one = time_it(gpu, 20, [&] {
            for (int64_t m = 0; m < 2 * experts; ++m) gpu.matmul(mats[size_t(m)], dx.f(), n, dy1.f() + m * n * rows, 0, 0);
        });
        const double gb = double(rb) * double(rows * 2 * experts) / 1e9, tf = 2.0 * double(rows * cols) * 2 * experts * n / 1e12;
        std::printf("     %lld token(s)%s: grouped %.1f us (%.0f GB/s, %.1f TFLOP/s), one by one %.1f us (%.0f GB/s, %.1f TFLOP/s)\n",
                    (long long)n, label, s_group * 1e6, gb / s_group, tf / s_group, s_one * 1e6, gb / s_one, tf / s_one);
    }
}

// The embedding gather on the device (-ot token_embd=cudaN): a 4096-row table at K3's width in
// the types the golden and real files give token_embd, bit for bit the CPU's embed, and its time
// for one token (decode) and a 512-token chunk.
void embed_check(backend::Backend& gpu, backend::CpuBackend& cpu) {
    std::printf("\n# embedding gather, 4096 rows x 7168 (bit for bit the CPU's embed)\n");
    const int64_t vocab = 4096, cols = 7168;
    std::vector<int32_t> ids(512);
    for (size_t t = 0; t < ids.size(); ++t) ids[t] = int32_t((t * 2654435761u) % uint32_t(vocab));
    for (quant::Type t : {quant::Type::Q8_0, quant::Type::Q4_K, quant::Type::F16}) {
        const quant::Traits& tr = quant::traits(t);
        const size_t rb = quant::row_size(tr, cols);
        const std::vector<uint8_t> E = random_rows(t, vocab, cols, 90 + uint32_t(t));
        Dev dE(gpu, E.data(), E.size(), "token_embd"), dx(gpu, nullptr, ids.size() * size_t(cols) * 4, "x");
        const backend::Mat Mg{t, cols, vocab, dE.buf.ptr, rb, 0, "token_embd.weight"};
        const backend::Mat Mc{t, cols, vocab, E.data(), rb, 0, "token_embd.weight"};
        gpu.embed(Mg, ids.data(), int64_t(ids.size()), dx.f());
        std::vector<float> want(ids.size() * size_t(cols));
        cpu.embed(Mc, ids.data(), int64_t(ids.size()), want.data());
        check((std::string("embed ") + tr.name + " == cpu").c_str(), down(gpu, dx, want.size()), want, 0, 1e-30);
        const double s1 = time_it(gpu, 50, [&] { gpu.embed(Mg, ids.data(), 1, dx.f()); });
        const double s512 = time_it(gpu, 20, [&] { gpu.embed(Mg, ids.data(), 512, dx.f()); });
        std::printf("     embed %s: 1 token %.1f us, 512 tokens %.1f us\n", tr.name, s1 * 1e6, s512 * 1e6);
    }
}

// The routed experts of a decode step by slot (model/moe.cpp routed_slots: route_resident +
// matmul_id, the choices never leave the device) against the grouped path's shape (route, the
// choices downloaded, one task per chosen expert), K3's latent experts (3072 x 3584 gate, Q4_K),
// 16 experts top-8, one token: the gate products bit-equal, and the time of each way, which
// differs by the host round trip.
void moe_slots_check(backend::Backend& gpu) {
    std::printf("\n# MoE decode by slot (choices on the device) vs grouped on the host, K3 gate 3072 x 3584 Q4_K, 16 experts top-8\n");
    const quant::Type t = quant::Type::Q4_K;
    const quant::Traits& tr = quant::traits(t);
    const int64_t rows = 3072, cols = 3584, E = 16, K = 8;
    const size_t rb = quant::row_size(tr, cols);
    std::vector<uint8_t> W(rb * size_t(rows * E));
    {
        // One random matrix, each expert's rows rotated by its id: distinct experts, one quantization.
        const std::vector<uint8_t> one = random_rows(t, rows, cols, 80);
        for (int64_t e = 0; e < E; ++e)
            for (int64_t r = 0; r < rows; ++r)
                std::memcpy(W.data() + size_t(e * rows + r) * rb, one.data() + size_t((r + 97 * e) % rows) * rb, rb);
    }
    const std::vector<float> x = randn(size_t(cols), 81), logits = randn(size_t(E), 82), bias(size_t(E), 0.0f);
    Dev dW(gpu, W.data(), W.size(), "experts"), dx(gpu, x.data(), x.size() * 4, "x"), dp(gpu, logits.data(), logits.size() * 4, "probs"),
        db(gpu, bias.data(), bias.size() * 4, "bias"), dsel(gpu, nullptr, size_t(K) * 8, "sel and w"),
        dy(gpu, nullptr, size_t(K * rows) * 4, "y slots"), dy1(gpu, nullptr, size_t(K * rows) * 4, "y grouped");
    backend::Mat experts{t, cols, rows * E, dW.buf.ptr, rb, rows, "ffn_gate_exps"};
    const backend::RouteParams rp{E, K, true, 1.0f};
    auto* sel_dev = reinterpret_cast<int32_t*>(dsel.buf.ptr);
    float* w_dev = dsel.f() + K;
    std::vector<int32_t> sel(static_cast<size_t>(K));
    std::vector<float> w(static_cast<size_t>(K));
    auto slots = [&] {
        gpu.upload(dp.buf.ptr, logits.data(), logits.size() * 4);
        gpu.route_resident(dp.f(), db.f(), 1, rp, sel_dev, w_dev);
        gpu.matmul_id(experts, E, sel_dev, K, dx.f(), K, dy.f());
    };
    auto grouped = [&] {
        gpu.upload(dp.buf.ptr, logits.data(), logits.size() * 4);
        gpu.route(dp.f(), db.f(), 1, rp, sel.data(), w.data(), {});
        std::vector<backend::MatTask> tasks;
        for (int64_t k = 0; k < K; ++k) tasks.push_back({experts.slice(sel[size_t(k)]), 0, 0, 1, dy1.f() + k * rows, 0});
        const backend::MatInput in{dx.f(), 1, cols, 0};
        gpu.matmul_tasks({&in, 1}, tasks);
    };
    slots();
    grouped();
    check("moe gate by slot == grouped", down(gpu, dy, size_t(K * rows)), down(gpu, dy1, size_t(K * rows)), 0, 1e-30);
    // Both times include the same logits upload (a synchronous copy, as a step's input would be).
    const double s_slots = time_it(gpu, 50, slots), s_grouped = time_it(gpu, 50, grouped);
    std::printf("     one token, 8 experts' gate: by slot %.1f us, grouped (choices read on the host) %.1f us\n", s_slots * 1e6,
                s_grouped * 1e6);
}

// The expert tier's two copy rates, what the store's cost model prices a miss with: from the host
// tier's pinned memory, and from pageable memory (the mapping) through the staging ring.
void expert_copies(backend::Backend& gpu) {
    auto* cu = dynamic_cast<backend::cuda::CudaBackend*>(&gpu);
    if (!cu) throw std::runtime_error("not a CudaBackend");
    runtime::Device& dev = cu->expert_device();
    std::printf("\n# expert tier copies (64 MiB, host -> device on the copy stream)\n");
    std::printf("     from pinned memory: %.1f GB/s; from pageable memory, staged: %.1f GB/s\n", dev.copy_gbps(),
                dev.staged_copy_gbps());
}

}  // namespace

int main() {
    for (const std::string& line : backend::cuda::list_devices()) std::printf("%s\n", line.c_str());
    std::string why;
    std::unique_ptr<backend::Backend> gpu = backend::cuda::open_device("cuda0", &why);
    if (!gpu) {
        std::printf("kinfer_gpu_check: %s; nothing to check\n", why.c_str());
        return 2;
    }
    if (const double p = device_peak_gbps(0); p > 0) {
        peak_gbps = p;
        std::printf("cuda0's memory peak: %.0f GB/s (its clock and bus width); the issue's target: 80 %% of %.0f GB/s (H200)\n",
                    p, kH200PeakGBps);
    } else {
        cudaGetLastError();
        std::printf("cuda0's memory peak unknown (no clock / bus width): %% peak is of %.0f GB/s (H200)\n", kH200PeakGBps);
    }
    backend::CpuBackend cpu(0);
    // Each part on its own: an exception (a launch the GPU refused, a bound the code asserts) is
    // one failure, and the parts after it still run (a lent GPU's minutes are few), unless the
    // context is lost: a sticky error (an illegal address) fails every later call, which would
    // then be blamed on the wrong parts. The device is synchronised first so that a fault of
    // this part's work surfaces here, not in the next part.
    bool lost = false;
    auto part = [&](const char* name, const std::function<void()>& f) {
        if (lost) {
            std::printf("SKIP %s: the CUDA context was lost in an earlier part\n", name);
            return;
        }
        try {
            f();
        } catch (const std::exception& e) {
            std::printf("FAIL %s: %s\n", name, e.what());
            ++failures;
            if (const cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
                std::printf("FAIL %s: the device reports %s; the CUDA context is lost\n", name, cudaGetErrorString(err));
                lost = true;
            }
            cudaGetLastError();   // a non-sticky launch error is cleared for the next part
        }
    };
    part("matvec table", [&] { matvec_table(*gpu, cpu); });
    part("mma layout", [&] { mma_layout(*gpu); });
    part("gemm table", [&] { gemm_table(*gpu, cpu); });
    part("gemm range", [&] { gemm_range(*gpu, cpu); });
    part("row ops", [&] { row_ops(*gpu, cpu); });
    part("more ops", [&] { more_ops(*gpu, cpu); });
    part("mixers", [&] { mixers(*gpu, cpu); });
    part("kda chunked", [&] { kda_chunked_speed(*gpu, cpu); });
    part("paged cache", [&] { paged_cache(*gpu, cpu); });
    part("mla mha prefill", [&] { mla_mha_prefill(*gpu, cpu); });
    part("grouped experts", [&] { grouped_experts(*gpu); });
    part("embed", [&] { embed_check(*gpu, cpu); });
    part("moe slots", [&] { moe_slots_check(*gpu); });
    part("expert copies", [&] { expert_copies(*gpu); });
    std::printf("\nkinfer_gpu_check: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
