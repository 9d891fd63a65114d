// The CPU execution mode itself (src/backend/cuda/cpu_mode.h): kernels written as CUDA C++ run on
// host threads with CUDA's block, warp, barrier, shuffle, vote, atomic and shared-memory
// semantics. Each case would fail if the emulation got that part wrong (a missing barrier reads
// stale values, a wrong shuffle source gives a wrong sum).
#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/compat.h"
#include "backend/cuda/mma_gather.cuh"
#include "backend/cuda/reduce.cuh"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

using kinfer::cuda::kDynamicNoOptIn;
using kinfer::cuda::kDynamicOptInMax;
using kinfer::cuda::kFullMask;

// A block-wide sum: shuffle-down within each warp, one shared slot per warp, then warp 0.
__global__ void block_sum_kernel(const int* x, int n, int* out) {
    __shared__ int per_warp[32];
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    int v = i < n ? x[i] : 0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(kFullMask, v, unsigned(o));
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    if (lane == 0) per_warp[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < int(blockDim.x / 32) ? per_warp[lane] : 0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(kFullMask, v, unsigned(o));
        if (lane == 0) out[blockIdx.x] = v;
    }
}

TEST_CASE("cuda cpu mode: a block reduction with warp shuffles and shared memory") {
    const int n = 1000, threads = 128, blocks = (n + threads - 1) / threads;
    std::vector<int> x(n), out(blocks, -1);
    for (int i = 0; i < n; ++i) x[size_t(i)] = (i * 7919) % 1013 - 500;
    auto* k = &block_sum_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(blocks)), dim3(threads), 0, nullptr, x.data(), n, out.data());
    for (int b = 0; b < blocks; ++b) {
        int want = 0;
        for (int i = b * threads; i < std::min(n, (b + 1) * threads); ++i) want += x[size_t(i)];
        CHECK(out[size_t(b)] == want);
    }
}

// Each round every thread writes its slot, waits, reads its neighbour's: without the barriers a
// thread would read a slot its neighbour has not written yet (or has already overwritten).
__global__ void rotate_kernel(int* out, int rounds) {
    __shared__ int slot[256];
    const int t = int(threadIdx.x), n = int(blockDim.x);
    int v = t + 1000 * int(blockIdx.x);
    for (int r = 0; r < rounds; ++r) {
        slot[t] = v;
        __syncthreads();
        v = slot[(t + 1) % n];
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

TEST_CASE("cuda cpu mode: __syncthreads orders a shared-memory exchange, round after round and block after block") {
    const int threads = 96, blocks = 3, rounds = 37;
    std::vector<int> out(threads * blocks, -1);
    auto* k = &rotate_kernel;
    KINFER_LAUNCH(k, dim3(blocks), dim3(threads), 0, nullptr, out.data(), rounds);
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < threads; ++t) CHECK(out[size_t(b * threads + t)] == (t + rounds) % threads + 1000 * b);
}

// Shuffle flavours, votes and a partial last warp (48 threads: lanes 0..15 of warp 1 exist).
__global__ void warp_ops_kernel(int* out) {
    const int t = int(threadIdx.x), lane = t % 32;
    int* o = out + t * 6;
    int v = t;
    for (int m = 1; m < 32; m <<= 1) v += __shfl_xor_sync(kFullMask, v, m);  // butterfly all-reduce
    o[0] = v;
    int s = lane + 1;                                                          // inclusive scan
    for (int d = 1; d < 32; d <<= 1) {
        const int u = __shfl_up_sync(kFullMask, s, unsigned(d));
        if (lane >= d) s += u;
    }
    o[1] = s;
    o[2] = __shfl_sync(kFullMask, t * 10, 3);                                  // broadcast lane 3
    o[3] = int(__ballot_sync(kFullMask, lane % 3 == 0));
    o[4] = __any_sync(kFullMask, t == 40) + 2 * __all_sync(kFullMask, lane < 16);
    o[5] = __shfl_down_sync(kFullMask, t, 4);
}

TEST_CASE("cuda cpu mode: xor / up / down / broadcast shuffles and ballot / any / all, with a partial warp") {
    const int threads = 48;
    std::vector<int> out(threads * 6, -1);
    auto* k = &warp_ops_kernel;
    KINFER_LAUNCH(k, dim3(1), dim3(threads), 0, nullptr, out.data());
    for (int t = 0; t < threads; ++t) {
        INFO("thread ", t);
        const int warp = t / 32, lane = t % 32, lanes = warp == 0 ? 32 : 16;
        const int* o = &out[size_t(t) * 6];
        // Butterfly over a partial warp: a missing partner contributes the caller's own value,
        // so only the full warp's result is meaningful.
        if (warp == 0) CHECK(o[0] == 31 * 32 / 2);
        if (warp == 0) CHECK(o[1] == (lane + 1) * (lane + 2) / 2);
        CHECK(o[2] == (warp * 32 + 3) * 10);
        unsigned want = 0;
        for (int i = 0; i < lanes; ++i) want |= unsigned(i % 3 == 0) << i;
        CHECK(unsigned(o[3]) == want);
        CHECK(o[4] == (warp == 1 ? 1 + 2 : 0));
        CHECK(o[5] == (lane + 4 < lanes ? t + 4 : t));
    }
}

// The plain tensor-core products' gather (mma_gather.cuh): the CPU mode's one exchange gives each
// lane what the GPU's 16 shuffles give. Two warps, rounds alternating with a shuffle so that the
// exchanges' two slot sets take turns; every lane's words name their warp, lane, round and word.
__global__ void mma_gather_kernel(uint64_t* out, int rounds) {
    using namespace kinfer::cuda::emu;
    const uint64_t t = threadIdx.x;
    for (int r = 0; r < rounds; ++r) {
        const uint64_t base = t << 16 | uint64_t(r) << 8;
        const MmaGather s = mma_gather_shuffled(base | 0, base | 1, base | 2);
        const MmaGather e = mma_gather_shared(base | 0, base | 1, base | 2);
        uint64_t* o = out + (size_t(r) * blockDim.x + t) * 32;
        for (int src = 0; src < 4; ++src) {
            o[src] = s.a_g[src], o[4 + src] = s.a_g8[src], o[8 + src] = s.b_c0[src], o[12 + src] = s.b_c1[src];
            o[16 + src] = e.a_g[src], o[20 + src] = e.a_g8[src], o[24 + src] = e.b_c0[src], o[28 + src] = e.b_c1[src];
        }
        if (r % 2) (void)__shfl_sync(kFullMask, int(t), 0);
    }
}
__global__ void share_partial_warp_kernel() {
    const uint64_t w[1] = {threadIdx.x};
    (void)kinfer::cuda::cpu_mode::share_warp(w, 1);
}

TEST_CASE("cuda cpu mode: the tensor-core products' gather, one exchange for sixteen shuffles") {
    const int threads = 64, rounds = 5;
    std::vector<uint64_t> out(size_t(rounds * threads * 32), ~uint64_t(0));
    auto* k = &mma_gather_kernel;
    KINFER_LAUNCH(k, dim3(1), dim3(threads), 0, nullptr, out.data(), rounds);
    int bad = 0;
    for (int r = 0; r < rounds; ++r)
        for (int t = 0; t < threads; ++t) {
            const int warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
            const uint64_t* o = &out[(size_t(r) * threads + size_t(t)) * 32];
            auto word = [&](int from_lane, int w) { return uint64_t(32 * warp + from_lane) << 16 | uint64_t(r) << 8 | uint64_t(w); };
            for (int src = 0; src < 4; ++src) {
                const uint64_t want[4] = {word(4 * g + src, 0), word(4 * g + src, 1), word(8 * q + src, 2), word(8 * q + 4 + src, 2)};
                for (int f = 0; f < 4; ++f) {
                    bad += o[4 * f + src] != want[f];        // the shuffles
                    bad += o[16 + 4 * f + src] != want[f];   // the one exchange
                }
            }
        }
    CHECK(bad == 0);
    // A partial warp cannot take part (nor can it in a GPU's mma.sync).
    auto* kp = &share_partial_warp_kernel;
    CHECK_THROWS_WITH_AS(KINFER_LAUNCH(kp, dim3(1), dim3(48), 0, nullptr), doctest::Contains("full warp"), std::logic_error);
}

// warp_sum / warp_max (reduce.cuh) against the shuffle butterfly they stand for, bit for bit: a
// full warp takes the one-exchange form, the partial one (lanes 64..79) the shuffles themselves.
// The values span 2^-20 .. 2^20 with both signs, so another order of the sums gives other bits.
// Two blocks of three rounds: the warp's first lane back fills the results for all, once an
// exchange, and block 1 starts its exchanges from 0 again. A sum or a max ends the same in every
// lane, so which lane's result a lane takes shows only with an order-dependent op: 2a + b
// (exact here) gives every lane its own, in 1-D blocks and in 16 x 5 ones (lanes are numbered by
// the thread's place in the block, not by threadIdx.x).
constexpr int kReduceRounds = 3;
__global__ void warp_reduce_kernel(const float* x, float* out) {
    using namespace kinfer::cuda::emu;
    const int nb = int(blockDim.x * blockDim.y), t = int(blockIdx.x) * nb + int(threadIdx.y * blockDim.x + threadIdx.x);
    const auto ordered = [](float a, float b) { return 2.0f * a + b; };
    for (int r = 0; r < kReduceRounds; ++r) {
        const float v = x[t] * float(1 + r);
        float s = v, m = v, q = float(t % 32 + r);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
        const float qb = warp_butterfly(q, ordered);
        for (int o = 16; o > 0; o >>= 1) q = ordered(q, __shfl_xor_sync(kFullMask, q, o));
        float* o = out + 6 * (size_t(r) * 2 * size_t(nb) + size_t(t));
        o[0] = warp_sum(v);
        o[1] = s;
        o[2] = warp_max(v);
        o[3] = m;
        o[4] = qb;
        o[5] = q;
    }
}

// One warp_sum a block: every block's exchange is number 0, and must not take an earlier block's.
__global__ void warp_sum_once_kernel(const float* x, float* out) {
    const int t = int(blockIdx.x * blockDim.x + threadIdx.x);
    out[t] = kinfer::cuda::emu::warp_sum(x[t]);
}

TEST_CASE("cuda cpu mode: warp_sum and warp_max in one exchange, the bits of the shuffle butterfly") {
    {
        std::vector<float> x(96), out(96, -1.0f);
        for (int i = 0; i < 96; ++i) x[size_t(i)] = float(i / 32 + 1);
        auto* k = &warp_sum_once_kernel;
        KINFER_LAUNCH(k, dim3(3), dim3(32), 0, nullptr, x.data(), out.data());
        for (int i = 0; i < 96; ++i) CHECK(out[size_t(i)] == float(32 * (i / 32 + 1)));
    }
    const int threads = 80, n = 2 * threads;
    std::mt19937 rng(77);
    std::uniform_real_distribution<float> e(-20.0f, 20.0f), u(-1.0f, 1.0f);
    int differ_from_serial = 0, lanes_differ = 0;
    for (int trial = 0; trial < 4; ++trial) {
        std::vector<float> x(n), out(size_t(6 * n * kReduceRounds), -1.0f);
        for (float& v : x) v = std::ldexp(u(rng), int(e(rng)));
        auto* k = &warp_reduce_kernel;
        const dim3 block = trial % 2 ? dim3(16, 5) : dim3(threads);
        KINFER_LAUNCH(k, dim3(2), block, 0, nullptr, x.data(), out.data());
        for (int r = 0; r < kReduceRounds; ++r)
            for (int t = 0; t < n; ++t) {
                INFO("trial ", trial, " round ", r, " thread ", t);
                const float* o = &out[6 * (size_t(r) * n + size_t(t))];
                CHECK(std::memcmp(&o[0], &o[1], sizeof(float)) == 0);
                CHECK(std::memcmp(&o[2], &o[3], sizeof(float)) == 0);
                CHECK(std::memcmp(&o[4], &o[5], sizeof(float)) == 0);
                const int block0 = t / threads * threads, first = block0 + (t - block0) / 32 * 32;
                const int last = std::min(block0 + threads, first + 32);   // this thread's warp
                CHECK(o[2] == float(1 + r) * *std::max_element(x.begin() + first, x.begin() + last));
                lanes_differ += t % 32 > 0 && o[4] != out[6 * (size_t(r) * n + size_t(t - 1)) + 4];
            }
        float serial = 0;
        for (int i = 0; i < 32; ++i) serial += x[size_t(i)];
        differ_from_serial += serial != out[0];
    }
    CHECK(differ_from_serial > 0);   // the inputs do tell one order of the sums from another
    CHECK(lanes_differ > 0);         // and the ordered op gives lanes results of their own
}

// Threads past the end return before the barrier; the others must still get through it.
__global__ void early_exit_kernel(const float* x, int n, float* out) {
    KINFER_DYNAMIC_SHARED(float, buf);
    const int t = int(threadIdx.x);
    const int i = int(blockIdx.x * blockDim.x) + t;
    if (i >= n) return;
    buf[t] = x[i] * 2;
    __syncthreads();
    const int valid = std::min(int(blockDim.x), n - int(blockIdx.x * blockDim.x));
    out[i] = buf[(t + 1) % valid];
}

TEST_CASE("cuda cpu mode: threads that return early leave __syncthreads; dynamic shared memory") {
    const int n = 70, threads = 32;
    std::vector<float> x(n), out(n, -1);
    std::iota(x.begin(), x.end(), 1.0f);
    auto* k = &early_exit_kernel;
    KINFER_LAUNCH(k, dim3(3), dim3(threads), threads * sizeof(float), nullptr, x.data(), n, out.data());
    for (int i = 0; i < n; ++i) {
        const int b = i / threads, valid = std::min(threads, n - b * threads), t = i % threads;
        CHECK(out[size_t(i)] == 2 * x[size_t(b * threads + (t + 1) % valid)]);
    }
}

__global__ void index_kernel(unsigned* out, int* counter, float* fsum) {
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    out[bid * blockDim.x * blockDim.y * blockDim.z + tid] = bid * 1000 + tid;
    atomicAdd(counter, 1);
    atomicAdd(fsum, 0.5f);
}

TEST_CASE("cuda cpu mode: 3-D grids and blocks index every thread once; atomics from all of them") {
    const dim3 grid(2, 3, 2), block(4, 2, 3);
    const unsigned nb = 12, nt = 24;
    std::vector<unsigned> out(nb * nt, 0xffffffffu);
    int counter = 0;
    float fsum = 0;
    auto* k = &index_kernel;
    KINFER_LAUNCH(k, grid, block, 0, nullptr, out.data(), &counter, &fsum);
    for (unsigned b = 0; b < nb; ++b)
        for (unsigned t = 0; t < nt; ++t) CHECK(out[b * nt + t] == b * 1000 + t);
    CHECK(counter == int(nb * nt));
    CHECK(fsum == doctest::Approx(0.5 * nb * nt));
}

}  // namespace

namespace {

// Lane 0 waits at the warp barrier while the rest wait at the block barrier: on a GPU a hang.
__global__ void deadlock_kernel() {
    if (threadIdx.x == 0) __syncwarp();
    else __syncthreads();
}

TEST_CASE("cuda cpu mode: a barrier the live threads can never complete is an error, not a hang") {
    auto* k = &deadlock_kernel;
    CHECK_THROWS_WITH_AS(KINFER_LAUNCH(k, dim3(1), dim3(32), 0, nullptr), doctest::Contains("deadlock"), std::logic_error);
}

// Every lane takes part in one shuffle, then `quit` of warp 1 (mode 1: returns, 2: throws) leaves
// before the second, which the others reach; mode 0 has no lane leave. The sums go to out.
__global__ void leave_before_shuffle_kernel(int quit, int mode, int* out) {
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    int v = __shfl_xor_sync(kFullMask, lane, 1);
    if (mode && warp == 1 && lane == quit) {
        if (mode == 1) return;
        throw std::runtime_error("a kernel's own error");
    }
    v += __shfl_xor_sync(kFullMask, v, 16);
    out[threadIdx.x] = v;
}

// On a GPU a full-mask shuffle with an exited lane is undefined; here the shuffle completed
// without the lane's word, and the others read a zero or a stale one (a kernel whose own check
// had thrown in one lane then crashed in another's ldmatrix, hiding the check's message). Now
// such an exchange throws, and a lane's own exception is the one the launch reports. Leaving
// after the last exchange is fine, as is the last lane of an exchange running to its end while
// the others are still to read it (every lane here does, under each schedule).
TEST_CASE("cuda cpu mode: a warp exchange a lane left before is an error; a lane's own exception is the one reported") {
    namespace cm = kinfer::cuda::cpu_mode;
    for (const auto sched : {cm::Schedule::forward, cm::Schedule::reverse, cm::Schedule::warps, cm::Schedule::warps_reverse}) {
        INFO("schedule ", int(sched));
        const cm::Schedule before = cm::schedule();
        cm::set_schedule(sched);
        std::vector<int> out(64, -1);
        auto* k = &leave_before_shuffle_kernel;
        KINFER_LAUNCH(k, dim3(2), dim3(64), 0, nullptr, 0, 0, out.data());
        for (int t = 0; t < 64; ++t) CHECK(out[size_t(t)] == ((t % 32) ^ 1) + ((t % 32) ^ 17));
        for (const int quit : {0, 5, 31}) {
            INFO("lane ", quit);
            CHECK_THROWS_WITH_AS(KINFER_LAUNCH(k, dim3(2), dim3(64), 0, nullptr, quit, 1, out.data()),
                                 doctest::Contains("never reached"), std::logic_error);
            CHECK_THROWS_WITH_AS(KINFER_LAUNCH(k, dim3(2), dim3(64), 0, nullptr, quit, 2, out.data()),
                                 doctest::Contains("a kernel's own error"), std::runtime_error);
        }
        cm::set_schedule(before);
    }
}

// Thread t copies 16 bytes of src into its slot of dynamic shared memory with cp.async; with
// `early` it reads the slot back before waiting (a race on a GPU: the copy lands some time between
// the call and the wait), then after the wait and a barrier it reads its neighbour's slot. `leak`:
// thread 3 returns without waiting.
__global__ void async_copy_kernel(const uint4* src, int early, int leak, uint32_t* before, uint32_t* after) {
    KINFER_DYNAMIC_SHARED(uint4, slot);
    const int t = int(threadIdx.x), n = int(blockDim.x);
    kinfer::cuda::emu::cp_async16(&slot[t], &src[t]);
    if (leak && t == 3) return;
    if (early) before[t] = slot[t].x;
    kinfer::cuda::emu::cp_async_wait_all();
    __syncthreads();
    after[t] = slot[(t + 1) % n].x;
}

TEST_CASE("cuda cpu mode: cp.async lands at the wait (forward) or the call (reverse); unwaited is an error") {
    const int n = 64;
    std::vector<uint4> src(n);
    for (int t = 0; t < n; ++t) src[size_t(t)] = uint4{uint32_t(100 + t), 0, 0, 0};
    std::vector<uint32_t> before(n, 7), after(n, 7);
    namespace cm = kinfer::cuda::cpu_mode;
    const bool reverse = cm::schedule() == cm::Schedule::reverse || cm::schedule() == cm::Schedule::warps_reverse;
    auto* k = &async_copy_kernel;
    KINFER_LAUNCH(k, dim3(1), dim3(n), n * sizeof(uint4), nullptr, src.data(), 1, 0, before.data(), after.data());
    for (int t = 0; t < n; ++t) {
        // Under the forward schedules the fill (0xff bytes, 0x7f warp by warp), not the copy; under
        // the reverse ones the copy, made at the call.
        if (reverse) CHECK(before[size_t(t)] == uint32_t(100 + t));
        else CHECK((before[size_t(t)] == 0xffffffffu || before[size_t(t)] == 0x7f7f7f7fu));
        CHECK(after[size_t(t)] == uint32_t(100 + (t + 1) % n));
    }
    CHECK_THROWS_WITH_AS(
        KINFER_LAUNCH(k, dim3(1), dim3(n), n * sizeof(uint4), nullptr, src.data(), 0, 1, before.data(), after.data()),
        doctest::Contains("never waited for"), std::logic_error);
}

}  // namespace

namespace {

namespace cm = kinfer::cuda::cpu_mode;

// Each thread writes its slot, then reads the slot of the thread before it (thread 0: the last
// one), with or without the barrier between. Without it the kernel races: what a thread reads
// depends on whether its neighbour ran first. Block b also writes done[b] and reads done[b + 1]
// (a later block's word: no GPU orders blocks).
__global__ void neighbour_kernel(int* out, int* done, int sync) {
    KINFER_DYNAMIC_SHARED(int, slot);
    const int t = int(threadIdx.x), n = int(blockDim.x), b = int(blockIdx.x);
    slot[t] = 100 * b + t;
    if (sync) __syncthreads();
    out[b * n + t] = slot[(t + n - 1) % n];
    if (t == 0) {
        done[b] = 1;
        if (!sync && b + 1 < int(gridDim.x)) out[b * n] += 1000 * done[b + 1];
    }
}

std::vector<int> run_neighbours(cm::Schedule s, int sync) {
    const int threads = 64, blocks = 3;
    std::vector<int> out(threads * blocks, -7), done(blocks, 0);
    const cm::Schedule before = cm::schedule();
    cm::set_schedule(s);
    auto* k = &neighbour_kernel;
    KINFER_LAUNCH(k, dim3(blocks), dim3(threads), threads * sizeof(int), nullptr, out.data(), done.data(), sync);
    cm::set_schedule(before);
    return out;
}

TEST_CASE("cuda cpu mode: the reverse schedule exposes a missing __syncthreads and a dependence on block order") {
    // With the barrier: the same result in either order.
    const std::vector<int> fwd = run_neighbours(cm::Schedule::forward, 1), rev = run_neighbours(cm::Schedule::reverse, 1);
    CHECK(fwd == rev);
    for (int b = 0; b < 3; ++b)
        for (int t = 0; t < 64; ++t) CHECK(fwd[size_t(b * 64 + t)] == 100 * b + (t + 63) % 64);
    // Without it: forward lets thread t see thread t - 1's write (thread 0 reads the 0xff fill,
    // -1); reverse runs thread t - 1 after t, so every thread but 0 reads the fill, and block b
    // sees block b + 1's done word (1000 added).
    const std::vector<int> rf = run_neighbours(cm::Schedule::forward, 0), rr = run_neighbours(cm::Schedule::reverse, 0);
    CHECK(rf != rr);
    CHECK(rf[1] == 0);
    CHECK(rr[1] == -1);
    CHECK(rf[0] == -1);
    CHECK(rr[0] == 63 + 1000);
}

// Each thread writes its slot, then reads the slot 32 threads on (the other warp's), after a
// block barrier or only a warp barrier: the latter races with the other warp's write.
__global__ void cross_warp_kernel(int* out, int block_sync) {
    KINFER_DYNAMIC_SHARED(int, slot);
    const int t = int(threadIdx.x), n = int(blockDim.x);
    slot[t] = t;
    if (block_sync) __syncthreads();
    else __syncwarp();
    out[t] = slot[(t + 32) % n];
}

std::vector<int> run_cross_warp(cm::Schedule s, int block_sync) {
    std::vector<int> out(64, -7);
    const cm::Schedule before = cm::schedule();
    cm::set_schedule(s);
    auto* k = &cross_warp_kernel;
    KINFER_LAUNCH(k, dim3(1), dim3(64), 64 * sizeof(int), nullptr, out.data(), block_sync);
    cm::set_schedule(before);
    return out;
}

TEST_CASE("cuda cpu mode: the warp-by-warp schedules expose a value of another warp read after only a warp barrier") {
    using S = cm::Schedule;
    std::vector<int> fresh(64);
    for (int t = 0; t < 64; ++t) fresh[size_t(t)] = (t + 32) % 64;
    for (const S s : {S::forward, S::reverse, S::warps, S::warps_reverse}) CHECK(run_cross_warp(s, 1) == fresh);
    // Sweeps hold a warp at its __syncwarp until the sweep is over, except the lane that arrives
    // last, which goes on at once: the race shows in that one thread only.
    for (const S s : {S::forward, S::reverse}) {
        const std::vector<int> o = run_cross_warp(s, 0);
        int stale = 0;
        for (int t = 0; t < 64; ++t) stale += o[size_t(t)] != fresh[size_t(t)];
        CHECK(stale == 1);
    }
    // Warp by warp: the first warp to run reads the other's slots unwritten (these schedules fill
    // shared memory with 0x7f bytes).
    const int unwritten = 0x7f7f7f7f;
    const std::vector<int> w = run_cross_warp(S::warps, 0), wr = run_cross_warp(S::warps_reverse, 0);
    for (int t = 0; t < 64; ++t) {
        INFO("thread ", t);
        CHECK(w[size_t(t)] == (t < 32 ? unwritten : fresh[size_t(t)]));
        CHECK(wr[size_t(t)] == (t < 32 ? fresh[size_t(t)] : unwritten));
    }
}

__global__ void fill_kernel(int* out, int n) {
    KINFER_DYNAMIC_SHARED(int, buf);
    const int t = int(threadIdx.x);
    buf[t] = t;
    __syncthreads();
    if (t < n) out[t] = buf[n - 1 - t];
}
__global__ void opted_in_kernel(int* out) {
    KINFER_DYNAMIC_SHARED(int, buf);
    buf[threadIdx.x] = 5;
    out[threadIdx.x] = buf[threadIdx.x];
}

TEST_CASE("cuda cpu mode: launches a GPU refuses (grid extents, dynamic shared memory past 48 KiB without opt-in)") {
    std::vector<int> out(32, 0);
    auto* k = &fill_kernel;
    for (const dim3 grid : {dim3(0), dim3(1, 0), dim3(1, 1, 0), dim3(1, 65536), dim3(1, 1, 65536), dim3(0x80000000u)})
        CHECK_THROWS_WITH_AS(KINFER_LAUNCH(k, grid, dim3(32), 32 * sizeof(int), nullptr, out.data(), 32),
                             doctest::Contains("blocks"), std::invalid_argument);
    CHECK(out[0] == 0);   // nothing ran
    KINFER_LAUNCH(k, dim3(1, 65535), dim3(32), 32 * sizeof(int), nullptr, out.data(), 32);
    CHECK(out[0] == 31);
    // Without an opt-in, 48 KiB less the room left for the kernel's static bytes (compat.h).
    KINFER_LAUNCH(k, dim3(1), dim3(32), kDynamicNoOptIn, nullptr, out.data(), 32);
    CHECK_THROWS_WITH_AS(KINFER_LAUNCH(k, dim3(1), dim3(32), kDynamicNoOptIn + 4, nullptr, out.data(), 32),
                         doctest::Contains("opts in"), std::invalid_argument);
    // 64 KiB: refused until the kernel opts in to it; never more than 227 KiB.
    auto* big = &opted_in_kernel;
    CHECK_THROWS_WITH_AS(KINFER_LAUNCH(big, dim3(1), dim3(32), 64 * 1024, nullptr, out.data()),
                         doctest::Contains("opts in"), std::invalid_argument);
    CHECK(cudaFuncSetAttribute(big, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == 0);
    KINFER_LAUNCH(big, dim3(1), dim3(32), 64 * 1024, nullptr, out.data());
    CHECK(out[0] == 5);
    CHECK_THROWS_WITH_AS(KINFER_LAUNCH(big, dim3(1), dim3(32), 64 * 1024 + 4, nullptr, out.data()),
                         doctest::Contains("opts in"), std::invalid_argument);
    CHECK_THROWS_AS(cudaFuncSetAttribute(big, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kDynamicOptInMax) + 4),
                    std::invalid_argument);
    // Another kernel's opt-in is not this one's.
    CHECK_THROWS_AS(KINFER_LAUNCH(k, dim3(1), dim3(32), 64 * 1024, nullptr, out.data(), 32), std::invalid_argument);
}

}  // namespace
