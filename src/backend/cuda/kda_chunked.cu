// The KDA delta rule in chunks of C tokens (prefill), the WY / UT form of DESIGN.md 3.2: the same
// math as the CPU backend's kda_chunked_head (src/backend/cpu/kda_kernels.cpp). Per chunk, with
// G_t the cumulative log-decay inside the chunk (per key index) and S0 the state before it:
//   A[t][s]   = beta_t k_t.(exp(G_t - G_s) k_s)   (s < t)      Aqk[t][s] = q_t.(exp(G_t - G_s) k_s)  (s <= t)
//   u_t       = beta_t (v_t - S0^T (exp(G_t) k_t)) - sum_{s<t} A[t][s] u_s      (forward substitution)
//   o_t       = (S0^T (exp(G_t) q_t) + sum_{s<=t} Aqk[t][s] u_s) / sqrt(D)
//   S         = diag(exp(G_L)) S0 + sum_s (exp(G_L - G_s) k_s) u_s^T           (L the chunk's last token)
// The C x C products need exp(G_t - G_s). As exp(G_t) * exp(-G_s) they are plain dots of rows
// computed once, but exp(-G_s) overflows fp32 past a decay of 88 (64 tokens at the K3 bound -5
// reach -320); so a chunk whose G spans at most 80 is factored, and one that decays more forms
// each exp(G_t - G_s) <= 1 pairwise (chunk_products).
//
// Mapping. A block owns one head and J = D / slices value columns j (rows M[j] of the stored
// state, M[j][i] = S[i][j]). A value column evolves on its own given the shared k, q, g, so
// slices are independent; each recomputes the chunk's C x C products (cheap next to the state
// work when slices = 1, the default at K3's 96 heads). Four consecutive lanes ("a group") own
// R = 2 columns (1 at D = 256): lane p holds M[j][i] for i = 16a + 4p + b in registers across
// the whole call (D / 4 floats a column), so a dot of M[j] with a shared row is D / 4 FMAs and
// two xor shuffles, each shared value read feeds R columns, and the 4 lanes read distinct banks.
// Everything a column's u_t needs (its right-hand side, the forward substitution, the outputs,
// the state update) stays inside its group, so the only block-wide barriers are the four a chunk
// around its shared rows and products. fp32 throughout. 256 threads a block at D = 128.
//
// Shared memory per block (floats): k, q, G rows 3 C D; v / u C J; A and Aqk 2 C (C + 1) (rows
// padded: lanes of a warp read 4 rows at one column); G_L and exp(-G_L) 2 D; beta C; a flag.
// D = 128, J = 128: C = 16 35 KiB, C = 32 73 KiB, C = 64 162 KiB; past 48 KiB the launcher opts
// in (H100 / H200 allow 227 KiB a block).
#include "backend/cuda/kda_chunk.cuh"
#include "backend/cuda/kernels.h"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

// The per-block shared floats for head dim D, chunk C and J value columns (the layout above).
constexpr size_t kda_chunk_smem_floats(int D, int C, int J) { return chunk_smem_floats(D, C, D, J); }
// What a block may opt in to on sm_90 (H100 / H200).
constexpr size_t kMaxSmemBytes = kDynamicOptInMax;
// At most 128 value columns a block (256 threads at D <= 128, 512 at D = 256): a lane holds D / 4
// state floats a column, and 1024 threads would cap it at 64 registers and spill at D = 256.
constexpr int kMaxColumns = 128;

// Value columns a group owns: each shared k / q / KD value a lane reads then feeds that many FMAs.
// Two at D <= 128 (64 state floats a lane); one at D = 256, whose 64 a column already fill a
// lane's share of the registers.
template <int D>
constexpr int kColsPerGroup = D >= 256 ? 1 : 2;

template <int D, int C>
__global__ void __launch_bounds__(4 * kMaxColumns / kColsPerGroup<D>)
    kda_chunked_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                       const float* __restrict__ g, const float* __restrict__ beta, float* __restrict__ state,
                       float* __restrict__ o, int64_t n, int64_t H) {
    constexpr int R = kColsPerGroup<D>;
    constexpr int kPer = D / 4;   // state floats a lane and column
    const int nthreads = int(blockDim.x), tid = int(threadIdx.x);
    const int groups = nthreads / 4, J = groups * R;   // value columns of this block
    const int gi = tid / 4, p = tid % 4;               // group and lane in the group
    // Column r of group gi is gi + r * groups: the 8 groups of a warp touch 8 consecutive columns.
    const int64_t h = blockIdx.x, j0 = int64_t(blockIdx.y) * J;
    const int64_t di = H * D;

    // k, q, G rows [C][D] (then exp(G_t) k_t, exp(G_t) q_t, exp(G_L - G_s) k_s), v / u [C][J],
    // A and Aqk, G_L and exp(-G_L), beta, the pairwise flag: kda_chunk.cuh's layout.
    KINFER_DYNAMIC_SHARED(float, smem);
    const ChunkSmem chunk = chunk_smem(smem, D, C, D, J);
    const float *const sK = chunk.K, *const sQ = chunk.Q, *const sG = chunk.G;
    const float *const sA = chunk.A, *const sAqk = chunk.Aqk, *const sGL = chunk.GL, *const sBeta = chunk.Beta;
    float* const sU = chunk.U;

    // Lane p's key indices: i(a, b) = 16a + 4p + b; m[r][4a + b] = M[j0 + gi + r groups][i(a, b)],
    // read here and written back after the last chunk.
    auto state_at = [&](int r, int a, int b) -> float& { return state[(h * D + j0 + gi + r * groups) * D + 16 * a + 4 * p + b]; };
    float m[R][kPer];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int a = 0; a < D / 16; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) m[r][4 * a + b] = state_at(r, a, b);

    const float scale = 1.0f / sqrtf(float(D));
    for (int64_t c0 = 0; c0 < n; c0 += C) {
        const int nc = int(n - c0 < C ? n - c0 : C);

        stage_chunk<D, C, D>(chunk, q, k, v, g, beta, c0, nc, h, H, j0, J);

        // ---- per column, inside its group: S0 products, forward substitution, outputs, state ----
        // inter[r][t / 4] on lane t % 4: (S0^T exp(G_t) q_t) of column r, kept for the outputs.
        float inter[R][C / 4];
#pragma unroll
        for (int t = 0; t < C; ++t) {
            if (t < nc) {
                float dk[R], dq[R];
#pragma unroll
                for (int r = 0; r < R; ++r) dk[r] = dq[r] = 0;
                const float* Kt = sK + t * D + 4 * p;
                const float* Qt = sQ + t * D + 4 * p;
#pragma unroll
                for (int a = 0; a < D / 16; ++a)
#pragma unroll
                    for (int b = 0; b < 4; ++b) {
                        const float kx = Kt[16 * a + b], qx = Qt[16 * a + b];
#pragma unroll
                        for (int r = 0; r < R; ++r) {
                            dk[r] = fmaf(m[r][4 * a + b], kx, dk[r]);
                            dq[r] = fmaf(m[r][4 * a + b], qx, dq[r]);
                        }
                    }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    dk[r] = group4_sum(dk[r]);
                    dq[r] = group4_sum(dq[r]);
                    if ((t & 3) == p) {
                        float& u = sU[t * J + gi + r * groups];
                        inter[r][t >> 2] = dq[r];
                        u = sBeta[t] * (u - dk[r]);
                    }
                }
            }
        }
        __syncwarp();
        // u_t = rhs_t - sum_{s<t} A[t][s] u_s, lane p taking s = p mod 4; lane 0 writes u_t.
        for (int t = 1; t < nc; ++t) {
            float acc[R];
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = 0;
            for (int s = p; s < t; s += 4) {
                const float a = sA[t * (C + 1) + s];
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r] = fmaf(a, sU[s * J + gi + r * groups], acc[r]);
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                acc[r] = group4_sum(acc[r]);
                if (p == 0) sU[t * J + gi + r * groups] -= acc[r];
            }
            __syncwarp();
        }
#pragma unroll
        for (int c = 0; c < C / 4; ++c) {
            const int t = 4 * c + p;
            if (t < nc) {
                float acc[R];
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r] = inter[r][c];
                for (int s = 0; s <= t; ++s) {
                    const float a = sAqk[t * (C + 1) + s];
#pragma unroll
                    for (int r = 0; r < R; ++r) acc[r] = fmaf(a, sU[s * J + gi + r * groups], acc[r]);
                }
#pragma unroll
                for (int r = 0; r < R; ++r) o[(c0 + t) * di + h * D + j0 + gi + r * groups] = acc[r] * scale;
            }
        }
#pragma unroll
        for (int a = 0; a < D / 16; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const float e = expf(sGL[16 * a + 4 * p + b]);
#pragma unroll
                for (int r = 0; r < R; ++r) m[r][4 * a + b] *= e;
            }
        for (int s = 0; s < nc; ++s) {
            float u[R];
#pragma unroll
            for (int r = 0; r < R; ++r) u[r] = sU[s * J + gi + r * groups];
            const float* KD = sG + s * D + 4 * p;
#pragma unroll
            for (int a = 0; a < D / 16; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const float kd = KD[16 * a + b];
#pragma unroll
                    for (int r = 0; r < R; ++r) m[r][4 * a + b] = fmaf(kd, u[r], m[r][4 * a + b]);
                }
        }
        __syncthreads();   // the next chunk's loads overwrite what the other groups still read
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int a = 0; a < D / 16; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) state_at(r, a, b) = m[r][4 * a + b];
}

template <int D, int C>
void launch_kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                        float* state, float* o, int64_t n, int64_t H, int slices, void* stream) {
    const int J = D / slices;
    const size_t bytes = kda_chunk_smem_floats(D, C, J) * sizeof(float);
    if (bytes > kMaxSmemBytes)
        throw std::invalid_argument("cuda kda_chunked: chunk " + std::to_string(C) + " at head dim " +
                                    std::to_string(D) + " needs " + std::to_string(bytes) + " bytes of shared memory");
    auto* kern = &kda_chunked_kernel<D, C>;
    // Past 48 KiB of dynamic shared memory a kernel must opt in, on each device it runs on, so at
    // every launch (a host call, next to a launch that covers a whole chunk of prefill). A failure
    // leaves the error for the launch to report, which the caller checks. (The CPU mode refuses
    // a launch past 48 KiB without it, as a GPU does.)
    if (bytes > kDynamicNoOptIn) (void)cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    const dim3 grid{unsigned(H), unsigned(slices)}, block{unsigned(4 * J / kColsPerGroup<D>)};
    KINFER_LAUNCH(kern, grid, block, bytes, as_stream(stream), q, k, v, g, beta, state, o, n, H);
}

template <int D>
void launch_chunk(int C, const float* q, const float* k, const float* v, const float* g, const float* beta,
                  float* state, float* o, int64_t n, int64_t H, int slices, void* stream) {
    switch (C) {
        case 16: return launch_kda_chunked<D, 16>(q, k, v, g, beta, state, o, n, H, slices, stream);
        case 32: return launch_kda_chunked<D, 32>(q, k, v, g, beta, state, o, n, H, slices, stream);
        case 64:
            if constexpr (kda_chunk_smem_floats(D, 64, D < kMaxColumns ? D : kMaxColumns) * 4 <= kMaxSmemBytes)
                return launch_kda_chunked<D, 64>(q, k, v, g, beta, state, o, n, H, slices, stream);
            break;
        default: break;
    }
    throw std::invalid_argument("cuda kda_chunked: chunk " + std::to_string(C) + " at head dim " + std::to_string(D) +
                                " is not 16, 32 or 64 (64 only up to head dim 128)");
}

}  // namespace

// 16, unmeasured: in this fp32 SIMT form the state work per token does not depend on C, while
// the C x C products cost (C + 1) / 2 * D per token and K3's gate (above -5 a token) guarantees
// the factored products only up to C = 16 (a decay of 80); at D = 128 it fits the default 48 KiB.
// fla / FlashKDA's 64 comes from tensor-core tiles. kinfer_gpu_check times 16 / 32 / 64.
int kda_chunked_default_chunk(int64_t) { return 16; }

void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                 float* o, int64_t n, int64_t H, int64_t D, void* stream, int chunk, int slices, F32Math math) {
    if (n <= 0 || H <= 0) return;
    if (chunk == 0) chunk = kda_chunked_default_chunk(D);
    if (!math_taken(math, true))   // f16x2: none of the KDA's operands is fp16 to begin with
        throw std::invalid_argument(std::string("cuda kda_chunked: not a form of the KDA: ") + math_choices(true));
    if (math != F32Math::fp32) return kda_chunked_mma(q, k, v, g, beta, state, o, n, H, D, stream, math, chunk, slices);
    if (slices == 0) slices = D > kMaxColumns ? int(D / kMaxColumns) : 1;
    if (slices < 1 || D % slices != 0 || (D / slices) % 32 != 0 || D / slices > kMaxColumns)
        throw std::invalid_argument("cuda kda_chunked: " + std::to_string(slices) +
                                    " value slices do not split head dim " + std::to_string(D) +
                                    " into multiples of 32 of at most 128");
    switch (D) {
        case 32: return launch_chunk<32>(chunk, q, k, v, g, beta, state, o, n, H, slices, stream);
        case 64: return launch_chunk<64>(chunk, q, k, v, g, beta, state, o, n, H, slices, stream);
        case 128: return launch_chunk<128>(chunk, q, k, v, g, beta, state, o, n, H, slices, stream);
        case 256: return launch_chunk<256>(chunk, q, k, v, g, beta, state, o, n, H, slices, stream);
        default: break;
    }
    throw std::invalid_argument("cuda kda_chunked: head dim " + std::to_string(D) + " is not 32, 64, 128 or 256");
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
