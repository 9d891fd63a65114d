// Host entry points of the CUDA kernels (src/backend/cuda/*.cu). Plain C++: the CUDA backend
// (nvcc, namespace kinfer::cuda::gpu) calls them with device pointers on a CUDA stream; the
// CPU-mode tests (host compiler, kinfer::cuda::emu) call the same code with host pointers, the
// kernels then running on host threads (cpu_mode.h). A launch is asynchronous on the GPU and
// complete on return in CPU mode. `stream` is a cudaStream_t (nullptr: the default stream).
// A shape a kernel does not handle throws std::invalid_argument naming the kernel and the shape.
#pragma once
#include "backend/cuda/blas.h"
#include "backend/cuda/kernel_math.h"
#include "backend/cuda/kernel_ns.h"
#include "quant/type_facts.h"

#include <cstddef>
#include <cstdint>

namespace kinfer::cuda::KINFER_CUDA_NS {

// ---- decode matvec ---------------------------------------------------------------------------
// True for the weight types matvec has a kernel for: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL,
// MXFP4, Q4_K, Q5_K, Q6_K, IQ4_XS.
bool matvec_supported(quant::Type t);
// y[t * ldy + r] = W.row(r) . x[t * ldx ..] for r < rows, t < n; W rows row_bytes apart. One
// warp per weight row reads the row once, coalesced; the activations stay fp32 (each weight is
// decoded to fp32 in registers), so there is no activation quantization error.
void matvec(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
            int64_t ldx, int64_t n, float* y, int64_t ldy, void* stream);
// The routed experts by slot, the ids read on the device (MoE decode without a host round trip):
// y[s * rows + r] = W_e.row(r) . x[(s / x_div) * cols ..] for e = sel[s], s < slots, where W_e
// starts e * slice_bytes into W. Each slot is matvec's one-token block code, so its bits are
// what matvec gives for that expert alone. An id outside [0, n_slices) makes the slot's rows
// NaN instead of reading past the tensor.
void matvec_id(quant::Type type, const void* W, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows,
               int64_t cols, const int32_t* sel, int64_t slots, const float* x, int64_t x_div, float* y, void* stream);

// Decode on int8 activations (matvec_q8.cu), the types of matvec_q8_supported: Q4_K, Q5_K, Q6_K
// and IQ4_XS on Q8_K activations, Q8_0 / Q5_0 / Q4_0 / IQ4_NL / MXFP4 on Q8_0 and Q4_1 / Q5_1 on
// Q8_1 activations, as the CPU pairs them. The
// activation rows are quantized once (quantize_act: quant's x86 quantize_row_q8_K / q8_0 / q8_1 values,
// each row q8_act_row_bytes(type, cols) apart), then the weights are dotted with __dp4a: n tokens
// (matvec_q8: y's rows ldy apart, 0 for rows; a block reads its weight rows once for up to 4
// tokens) or one token per slot with the expert ids read on the device (matvec_q8_id, as
// matvec_id). The integer sums are the CPU's; the float steps agree to fp32 rounding, and a
// token's result is the same bits alone, among others or in a slot.
// matvec_q8_supported also checks the alignment the loads need (Q4_K / Q5_K rows 16 bytes, IQ4_XS
// 8, Q6_K and Q8_0 2).
size_t q8_act_row_bytes(quant::Type type, int64_t cols);
// Weight types with the same id get the same quantize_act bytes.
int q8_act_format(quant::Type type);
void quantize_act(quant::Type type, const float* x, int64_t ldx, int64_t rows, int64_t cols, void* out, void* stream);
bool matvec_q8_supported(quant::Type type, const void* W, size_t row_bytes, int64_t cols);
void matvec_q8(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, const void* xq, int64_t n,
               float* y, int64_t ldy, void* stream);
void matvec_q8_id(quant::Type type, const void* W, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows,
                  int64_t cols, const int32_t* sel, int64_t slots, const void* xq, int64_t x_div, float* y, void* stream);

// The embedding gather: x[t] = row ids[t] of E (n_rows rows of cols elements, row_bytes apart,
// any type of matvec_supported()) as fp32, the CPU's dequantized values bit for bit. ids is a
// host array, checked against n_rows (std::invalid_argument naming the id); it travels in the
// kernels' parameters (256 a launch), so nothing is uploaded.
void embed_rows(quant::Type type, const void* E, size_t row_bytes, int64_t n_rows, int64_t cols, const int32_t* ids,
                int64_t n, float* x, void* stream);

// The grouped form (MoE: every routed expert's gate / up / down of a layer; dense projections that
// share an input): many matvecs of one weight type, width and row size in one launch, each task
// computed exactly as matvec computes it (the same bits). The group travels in the kernel's
// parameters (no upload, no host wait), so it holds at most kMatvecGroupMax tasks: 48 of 64 bytes
// (56 for the task, 8 for its first block), under the 4 KiB a launch's parameters may take (checked
// below). rows or n of 0 skip a task.
inline constexpr int kMatvecGroupMax = 48;
// A grouped launch's tasks (group_task.cuh finds a block's): matvec_group's, matvec_q8_group's and
// mmq_group's below, gemm.cu's unscaling and gemm_fused.cu's.
template <class Task>
struct TaskGroup {
    int n_tasks = 0;
    int64_t first[kMatvecGroupMax] = {};   // the launcher's: each task's first block
    Task task[kMatvecGroupMax];
};
struct MatvecTask {
    const void* W = nullptr;     // rows of row_bytes (the group's)
    const float* x = nullptr;    // n rows ldx apart (0: cols)
    float* y = nullptr;          // n rows ldy apart (0: rows)
    int64_t rows = 0, n = 0, ldx = 0, ldy = 0;
};
using MatvecGroup = TaskGroup<MatvecTask>;
// The group kernel's parameters: the group, the row size and the width.
static_assert(sizeof(MatvecGroup) + sizeof(size_t) + sizeof(int64_t) <= 4096, "a launch takes at most 4 KiB of parameters");
void matvec_group(quant::Type type, size_t row_bytes, int64_t cols, const MatvecGroup& group, void* stream);
// Several int8 matvecs of one weight type, row size and width in one launch, as matvec_group:
// task i's n rows of quantized activations at xq (q8_act_row_bytes apart), its results in y (rows
// ldy apart, 0: rows). Each task gets the bits matvec_q8 gives it alone.
struct MatvecQ8Task {
    const void* W = nullptr;
    const void* xq = nullptr;
    float* y = nullptr;
    int64_t rows = 0, n = 0, ldy = 0;
};
using MatvecQ8Group = TaskGroup<MatvecQ8Task>;
static_assert(sizeof(MatvecQ8Group) + 2 * sizeof(size_t) + sizeof(int64_t) + 2 * sizeof(uint64_t) <= 4096,
              "a launch takes at most 4 KiB of parameters");
void matvec_q8_group(quant::Type type, size_t row_bytes, int64_t cols, const MatvecQ8Group& group, void* stream);

// ---- prefill GEMM on int8 tensor cores (mmq.cu) ------------------------------------------------
// matvec_q8's product for many tokens: the types and alignments of matvec_q8_supported, the
// activations quantize_act's rows (q8_act_row_bytes apart), y[t * ldy + r] (ldy 0: rows). The
// weights are read once per 64 tokens and multiplied as int8 levels on the tensor cores (mma.cuh):
// the integer sums are the CPU's, so results agree with the CPU backend to fp32 rounding (closer
// than gemm_matmul's fp16 operands). Not yet measured on a GPU against gemm_matmul: CudaBackend
// takes it when KINFER_CUDA_GEMM=int8. At most 65535 x 64 tokens a call.
void mmq_matmul(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, const void* xq, int64_t n,
                float* y, int64_t ldy, void* stream);
// mmq_matmul for every task of the group (a MoE layer's experts in prefill) in one launch; each
// task's results are the bits it gets alone.
void mmq_group(quant::Type type, size_t row_bytes, int64_t cols, const MatvecQ8Group& group, void* stream);
// mma.cuh's product on one warp, for the checks: A 16 x 32 int8 (rows 32 bytes apart) times B, 8
// columns of 32 (each 32 bytes apart), into out[4][16][8] (row-major): k = 32 by the tensor cores
// and by the plain form, then k = 16 (the first 16 of each row and column) the same two ways. In
// CPU mode all four are the plain form; on a GPU the first and third are PTX's mma.sync.
void mma_check(const int8_t* A, const int8_t* B, int32_t* out, void* stream);

// ---- prefill GEMM (gemm.cu; cuBLAS behind blas.h) -------------------------------------------
// From this many tokens on, a matmul takes gemm_matmul instead of matvec (or mmq_matmul, with
// KINFER_CUDA_GEMM=int8: CudaBackend::set_prefill_gemm). The matvec reads a
// weight row once per 4 tokens; the GEMM path reads the quantized row once, then writes and reads
// a 2-byte copy of each weight (about 4 bytes an element more). For a 4-bit type (~0.56 bytes an
// element) the two move the same bytes near n = 32, for Q8_0 (~1.06) near 20, and past that the
// tensor cores' flops win too. A first guess from byte counts, not measured on a GPU.
inline constexpr int64_t kGemmMinTokens = 32;
// Tokens per activation copy: a longer call goes in chunks (its weights dequantized per chunk).
inline constexpr int64_t kGemmMaxTokens = 4096;
// The dequantized weight tile's size at most (16 MiB: about a third of the H200's L2, so a tile
// written by dequant_rows is still there when the GEMM reads it; not measured).
inline constexpr size_t kGemmTileBytes = size_t(16) << 20;

// The GEMM operands' element type for weight type t: F32 weights stay fp32 (an fp32 GEMM, no
// TF32: they are the small precision-sensitive ones); BF16 weights are used as they are, with
// bf16 activations; every other type (F16 and the quantized ones) is dequantized to fp16, with
// fp16 activations. fp16 keeps 11 significant bits where bf16 keeps 8, so a dequantized weight
// and an activation are rounded by at most 2^-11 of their value, below the CPU backend's own Q8
// activation rounding. The price is fp16's range (65520 or more becomes inf), which the GEMM meets
// per token: a token row with a value past it is scaled by a power of two first and its outputs
// multiplied back after (convert_rows_f16_scaled).
Elem gemm_elem(quant::Type t);
// Rows [0, rows) of W (row_bytes apart, cols elements, any type of matvec_supported()) as out
// elements, rows ldy elements apart (0: cols): the CPU's dequantized values (quant's
// to_float) bit for bit, then rounded to fp16 / bf16 as quant/fp16.h rounds (nearest even).
void dequant_rows(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, Elem out, void* y,
                  int64_t ldy, void* stream);
// rows of cols fp32 values (ldx apart) as out elements (ldy apart), quant/fp16.h's rounding.
void convert_rows(const float* x, int64_t ldx, int64_t rows, int64_t cols, Elem out, void* y, int64_t ldy,
                  void* stream);
// convert_rows to fp16 for at most kGemmMaxTokens token rows, each row r multiplied by 2^-k_r
// first, k_r the least that brings its largest |x| under 2^15 when that is 65504 or more (0 when
// it is less, or inf): scale[r] = 2^k_r, by which the GEMM's outputs for that token are
// multiplied back. A row in range converts bit for bit as convert_rows converts it; a scaled one
// keeps fp16's 11 significant bits for every value from 2^(k_r - 14) up.
void convert_rows_f16_scaled(const float* x, int64_t ldx, int64_t rows, int64_t cols, void* y, int64_t ldy,
                             float* scale, void* stream);
// One chunk of n tokens' converted activations in a GEMM workspace (gemm.cu's and gemm_fused.cu's):
// the values (none for fp32: used where they are) from its start, then, for fp16, the tokens'
// scales from `values` on; each part a multiple of 256 bytes, so what follows is as aligned as
// the chunk.
struct GemmActBytes {
    size_t values = 0, total = 0;
};
GemmActBytes gemm_act_layout(Elem e, int64_t cols, int64_t n);
// The workspace bytes one chunk of n tokens' converted activations (and, for fp16, their scales)
// take in gemm_matmul; weight tiles take the rest.
size_t gemm_act_bytes(quant::Type type, int64_t cols, int64_t n);
// The workspace gemm_matmul wants for this shape: one chunk's converted activations plus one
// weight tile (bounded by kGemmMaxTokens and kGemmTileBytes, not by the matrix).
size_t gemm_workspace_bytes(quant::Type type, int64_t rows, int64_t cols, int64_t n);
// matvec's result (y[t * ldy + r] = W.row(r) . x[t]) through dequantized tiles and blas's GEMM,
// fp32 accumulate. `blas` must queue its work on `stream`. A workspace smaller than
// gemm_workspace_bytes() gives smaller tiles; one that cannot hold a chunk and one row throws.
void gemm_matmul(Blas* blas, quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols,
                 const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy, void* workspace, size_t ws_bytes,
                 void* stream);

// One weight matrix's product in gemm_matmul_grouped: y[t * ldy + r] = W.row(r) . x[t * ldx ..]
// for r < rows, t < n (ldx 0: cols; ldy 0: rows).
struct GemmTask {
    const void* W = nullptr;
    int64_t rows = 0;
    const float* x = nullptr;
    int64_t ldx = 0, n = 0;
    float* y = nullptr;
    int64_t ldy = 0;
};
// The most workspace gemm_matmul_grouped fills before it multiplies what it holds.
inline constexpr size_t kGemmGroupBytes = size_t(256) << 20;
// The workspace gemm_matmul_grouped wants for these tasks: every task's converted activations
// and dequantized weights up to kGemmGroupBytes, and at least what gemm_matmul wants for the
// largest task (which then goes alone, in tiles).
size_t gemm_grouped_workspace_bytes(quant::Type type, int64_t cols, const GemmTask* tasks, int64_t count);
// gemm_matmul for many weights of one type, width and row size (a MoE layer's routed experts in
// prefill): tasks are taken in order while their activations (converted) and weights (dequantized
// whole) fit the workspace, then those go as one gemm_grouped (one cuBLAS call); a task that
// does not fit alone, or has more than kGemmMaxTokens tokens, goes through gemm_matmul. Each
// product is gemm_matmul's (the same conversions; in CPU mode the same bits).
void gemm_matmul_grouped(Blas* blas, quant::Type type, size_t row_bytes, int64_t cols, const GemmTask* tasks,
                         int64_t count, void* workspace, size_t ws_bytes, void* stream);

// ---- prefill GEMM on fp16 tensor cores, the weights decoded in the kernel (gemm_fused.cu) ----
// gemm_matmul's product for the quantized types of matvec_supported (not F32 / F16 / BF16, which
// gemm_matmul uses where they are) without its dequantized copy: each 128-token tile reads the
// quantized rows once and decodes them into shared memory as fp16. Both operands are gemm_matmul's
// bit for bit (the weights as dequant_rows rounds them, the activations as
// convert_rows_f16_scaled converts and scales them), the sums fp32 in another order. CudaBackend
// takes it when KINFER_CUDA_GEMM=fused. Not measured on a GPU.
bool fused_gemm_supported(quant::Type t);
// The workspace fused_gemm_matmul wants: one chunk's fp16 activations and their scales (at most
// kGemmMaxTokens tokens; a smaller workspace takes smaller chunks).
size_t fused_gemm_workspace_bytes(int64_t cols, int64_t n);
void fused_gemm_matmul(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
                       int64_t ldx, int64_t n, float* y, int64_t ldy, void* workspace, size_t ws_bytes, void* stream);
// The grouped form (a MoE layer's experts): every task's activations converted into the workspace,
// then up to kMatvecGroupMax tasks a launch while they fit; a task that does not fit alone, or has
// more than kGemmMaxTokens tokens, goes through fused_gemm_matmul. Each task's results are the bits
// fused_gemm_matmul gives it alone.
size_t fused_gemm_grouped_workspace_bytes(int64_t cols, const GemmTask* tasks, int64_t count);
void fused_gemm_grouped(quant::Type type, size_t row_bytes, int64_t cols, const GemmTask* tasks, int64_t count,
                        void* workspace, size_t ws_bytes, void* stream);

// ---- rows and element-wise ------------------------------------------------------------------
// y = x / sqrt(mean(x^2) + eps) [* w] per row of d; rows ld apart; y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t d, float eps, int64_t ld, void* stream);
// x = softmax(x * scale) per row of n.
void softmax_rows(float* x, int64_t rows, int64_t n, float scale, void* stream);
// g = silu(g) * u (situ false) or SiTU-GLU (DESIGN.md 3.4) over n elements.
void glu(float* g, const float* u, int64_t n, bool situ, float beta, float linear_beta, void* stream);

// x = x / max(|x|, eps) per row of d, in place.
void l2_norm(float* x, int64_t rows, int64_t d, float eps, void* stream);
void add(float* y, const float* a, int64_t n, void* stream);              // y += a
void mul_sigmoid(float* y, const float* g, int64_t n, void* stream);      // y *= sigmoid(g)
void sigmoid(float* x, int64_t n, void* stream);
// out[t] = sum over k < K of ys[t][k] (slot order), rows of cols.
void sum_slots(const float* ys, int64_t n, int64_t K, int64_t cols, float* out, void* stream);
// y[r][c] = y[r][c] * w[r] over rows of cols (scatter_weighted's product, in place).
void scale_rows(float* y, const float* w, int64_t rows, int64_t cols, void* stream);

// ---- MoE routing ------------------------------------------------------------------------------
// probs [n][E] logits -> sigmoid scores in place; sel [n][K] the top-K of score + bias (ties to
// the lower id), w [n][K] their scores, divided by their sum (at least 2^-14) when norm, times
// scale. sel and w are device memory.
void route(float* probs, const float* bias, int64_t n, int64_t E, int64_t K, bool norm, float scale, int32_t* sel,
           float* w, void* stream);

// dst row j = src row idx[j] / div for j < rows (rows of cols; idx: a device array).
void gather_rows(const float* src, int64_t cols, const int64_t* idx, int64_t div, int64_t rows, float* dst, void* stream);
// dst row idx[j] = src row j * wj[j] for j < rows (rows of cols; idx, wj: device arrays).
void scatter_weighted(const float* src, int64_t cols, const int64_t* idx, const float* wj, int64_t rows, float* dst,
                      void* stream);

// ---- AttnRes ------------------------------------------------------------------------------------
// The banked block sums, passed by value to the kernel (device pointers [n x d] each).
inline constexpr int kAttnResMaxBlocks = 32;
struct AttnResStack {
    const float* blocks[kAttnResMaxBlocks] = {};
    int m = 0;
};
// out = softmax-weighted mix of the banked blocks and p, scored on their RMS-normalised rows
// against w (the CPU op's order of sums).
void attn_res_mix(const AttnResStack& stack, const float* p, const float* w, float* out, int64_t n, int64_t d,
                  float eps, void* stream);

// The arithmetic of the kernels that have a tensor-core form (kernel_math.h).
using F32Math = ::kinfer::cuda::F32Math;

// ---- KDA ----------------------------------------------------------------------------------------
// The delta-rule recurrence, token by token (decode, and short prefills): q, k, v, g [n][H*D]
// (g the log-decay), beta [n][H], state [H][D][D] (state[h][j] = column j of S), o [n][H*D].
// D a multiple of 32, at most 256. Each warp keeps one state row in registers for all n tokens.
void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                   float* o, int64_t n, int64_t H, int64_t D, void* stream);
// The same recurrence in chunks of `chunk` tokens (prefill), the WY / UT form (kda_chunked.cu):
// same arguments and layouts, equal to kda_recurrent up to fp32 reassociation. chunk 16, 32 or
// 64 (64 up to D = 128; 0: kda_chunked_default_chunk(D)); the state is updated once a chunk.
// slices: blocks a head's D value columns are split over, each with its own copy of the
// chunk's C x C products (0: 1 up to D = 128, else D / 128). D 32, 64, 128 or 256.
// math: fp32 (kda_chunked.cu; value slices of a multiple of 32 columns) or the state products on
// tensor cores (slices of a multiple of 16): TF32 (kda_chunked_mma.cu: tf32x3, tf32) or fp16
// (kda_chunked_mma_f16.cuh: f16x3, f16; C = 64 only up to D = 64); CudaBackend's KINFER_CUDA_KDA.
// f16x2 (the MLA's) is refused.
void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                 float* o, int64_t n, int64_t H, int64_t D, void* stream, int chunk = 0, int slices = 0,
                 F32Math math = F32Math::fp32);
int kda_chunked_default_chunk(int64_t D);
// mma_tf32.cuh's product on one warp, for the checks: A 16 x 8 fp32 (row-major) times B, 8 columns
// of 8 (each 8 floats apart), into out[4][16][8] (row-major): the operands rounded to TF32 once,
// by the tensor cores and by the plain form; then as 3xTF32 splits, the same two ways. In CPU mode
// all four are the plain form; on a GPU the first and third are PTX's mma.sync.
void mma_tf32_check(const float* A, const float* B, float* out, void* stream);
// mma_f16.cuh's product on one warp, likewise: A 16 x 16 (row-major) times B, 8 columns of 16, both
// rounded to fp16, into out[9][16][8]: by the tensor cores (PTX's m16n8k16 on a GPU; A by
// ldmatrix), by the plain form, by the tensor cores with B's fragments loaded from a row-major copy
// (f16_frag_b_cols), then both n tiles of a copy that holds B's columns and the same in reverse
// order loaded by one ldmatrix (on a GPU), row-major (f16_frag_b_cols_x2: out[3], out[4]) and by
// columns (f16_frag_b_rows_x2: out[5], out[6]), and both k16 steps of a copy by columns whose k
// 16 .. 31 hold B's columns reversed (f16_frag_b_rows_k2: out[7], out[8]); the reversed products
// put back in order.
void mma_f16_check(const float* A, const float* B, float* out, void* stream);

// The KDA decay gate in place on g [n][H*D]: K3 (lower_bound) lb * sigmoid(-a f), Kimi Linear
// softplus(f) a, with f = g + dt_bias and a [H] = -exp(A_log).
void kda_decay(float* g, const float* dt_bias, const float* a, int64_t n, int64_t H, int64_t D, bool lower_bound,
               float lb, void* stream);
// Causal depthwise conv (taps [channels][W], W <= 8) + SiLU in place on x [n][channels]; state
// [channels][W-1] holds the last W-1 inputs, oldest first, and is updated.
void conv_silu(float* x, int64_t n, int64_t channels, int64_t W, const float* taps, float* state, void* stream);

// ---- MLA ----------------------------------------------------------------------------------------
// Absorbed MLA over the latent cache (flash-decoding): Q [n][H][r + dr] at positions pos0 + t,
// cache rows [pos0 + n][r + dr], lat [n][H][r]. The positions are split into pieces of `split`
// (a block each, per head or group of 16 heads, and token), combined in a second pass; scratch
// holds mla_scratch_floats() floats.
//   kernel: per_head reads the cache once per head; grouped once per 16 heads (r <= 512,
//   r + dr <= 640); automatic takes grouped where it fits and H > 1 (mla.cu says why).
//   split 0: 256 for the per-head kernel (its scores sit in shared memory), for the grouped one
//   enough pieces for ~528 blocks, at least 64 positions each (mla_split).
//   math: the grouped kernel's two products as fp32 FMAs or on TF32 tensor cores (mla_mma.cuh),
//   or for the paged f16 cache on fp16 ones (mla_mma_f16.cuh); the per-head kernel is fp32 always.
enum class MlaKernel { automatic, per_head, grouped };
struct MlaArgs {
    int64_t n = 0, pos0 = 0, H = 0, r = 0, dr = 0;
    float scale = 1;
    int64_t split = 0;
    MlaKernel kernel = MlaKernel::automatic;
    F32Math math = F32Math::fp32;
};
bool mla_grouped(const MlaArgs& a);   // the kernel a call with these arguments takes
int64_t mla_split(const MlaArgs& a);  // the positions per piece it uses
size_t mla_scratch_floats(const MlaArgs& a);
void mla_attend_absorbed(const float* cache, const float* Q, float* lat, const MlaArgs& a, float* scratch,
                         void* stream);

// ---- the paged latent cache (backend.h LatentPages) ---------------------------------------------
// The cache types, numbered as backend::CacheType (f32, f16, q8_0).
inline constexpr int kLatentF32 = 0, kLatentF16 = 1, kLatentQ8_0 = 2;
struct LatentArgs {
    int type = kLatentF32;
    int64_t R = 0, page_rows = 0;
    size_t row_bytes = 0;
    const uint8_t* const* pages = nullptr;   // device array of page pointers (CPU mode: host)
};
// Rows [j0, j0 + n) of the cache from f32 rows ld floats apart, converted as the CPU converts
// (q8_0: R a multiple of 32; the scale amax / 127 rounded to fp16, the quants round(x / d)).
void latent_store(const LatentArgs& c, int64_t j0, int64_t n, const float* rows, int64_t ld, void* stream);
// Rows [j0, j0 + n) of the cache into f32 rows [n][R].
void latent_load(const LatentArgs& c, int64_t j0, int64_t n, float* rows, void* stream);
// mla_attend_absorbed reading the cache rows through the pages (the tiled op's GPU form: the
// keys are split into pieces of a.split, a block each, combined in a second pass).
void mla_attend_paged(const LatentArgs& c, const float* Q, float* lat, const MlaArgs& a, float* scratch, void* stream);

// ---- MLA, the decompressed (MHA) form for prefill chunks (mla_mha.cu) --------------------------
// Per head h: K_h = [attn_k_b[h]^T c | k_pe], V_h = attn_v_b[h] c, then causal attention of the n
// queries q [n][H][dn + dr] (positions pos0 + t) over keys [0, pos0 + n), o [n][H][dv]. The keys
// are expanded in blocks of key_block (0: mla_mha_default_key_block) with two fp32 GEMMs (blas)
// for all heads; the online softmax is kept in the workspace between blocks.
// math: the flash kernel's products as fp32 FMAs or on TF32 tensor cores (mla_mha_mma.cuh; dv
// up to 256, fp32 past it), as for MlaArgs; f16x2 / f16 over the pages of an f16 cache also
// expand the keys on fp16 tensor cores (the weights split in two or rounded once), the flash
// kernel then as tf32x3 / tf32.
struct MlaMhaArgs {
    int64_t n = 0, pos0 = 0, H = 0, r = 0, dr = 0, dn = 0, dv = 0;
    float scale = 1;
    int64_t key_block = 0;
    F32Math math = F32Math::fp32;
};
// A 3-D weight as H slices of rows one after another, row_bytes apart (backend::Mat's layout):
// attn_k_b is H x r rows of dn, attn_v_b H x dv rows of r. Any type of matvec_supported().
struct HeadWeights {
    quant::Type type = quant::Type::F32;
    const void* data = nullptr;
    size_t row_bytes = 0;
};
int64_t mla_mha_default_key_block(const MlaMhaArgs& a);
// The workspace mla_attend_mha needs, or mla_attend_mha_paged over the cache c (its type decides
// whether the fp16 expansion's arrays are asked for).
size_t mla_mha_workspace_bytes(const MlaMhaArgs& a);
size_t mla_mha_workspace_bytes(const MlaMhaArgs& a, const LatentArgs& c);
// Over contiguous f32 cache rows [pos0 + n][r + dr] (the untiled decompressed op).
void mla_attend_mha(Blas* blas, const HeadWeights& k_b, const HeadWeights& v_b, const float* cache, const float* q,
                    float* o, const MlaMhaArgs& a, void* workspace, size_t ws_bytes, void* stream);
// Through the pages of the latent cache (the tiled op).
void mla_attend_mha_paged(Blas* blas, const HeadWeights& k_b, const HeadWeights& v_b, const LatentArgs& c,
                          const float* q, float* o, const MlaMhaArgs& a, void* workspace, size_t ws_bytes,
                          void* stream);

}  // namespace kinfer::cuda::KINFER_CUDA_NS
