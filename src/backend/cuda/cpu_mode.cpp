// The CPU execution mode's launch. Each CUDA thread of a block is a fiber (ucontext) on the
// launching host thread; the blocks of a grid run one after another (cpu_mode.h says why).
// A fiber runs until it reaches a barrier (__syncthreads, __syncwarp, a shuffle or a vote) or
// returns, then the scheduler resumes the next fiber that can go on. Fibers rather than host
// threads: a barrier costs a context switch instead of waking up to 1024 OS threads, which on a
// loaded 2-core CI machine is the difference between milliseconds and seconds per test, and the
// schedule is deterministic. A barrier that the live threads can never complete (a
// __syncthreads skipped by some of them) is reported as an error instead of hanging.
#include "backend/cuda/cpu_mode.h"

#include <ucontext.h>

// AddressSanitizer (the CI's ASan suite runs test_cuda) must be told about every stack switch.
#if defined(__SANITIZE_ADDRESS__)
#define KINFER_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KINFER_ASAN_FIBERS 1
#endif
#endif
#if defined(KINFER_ASAN_FIBERS)
#include <sanitizer/common_interface_defs.h>
#endif

#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace kinfer::cuda::cpu_mode {

namespace {

constexpr size_t kStackBytes = 128 * 1024;   // per fiber; kernels keep little on the stack

// A barrier over `expected` live fibers; a phase completes when all of them have arrived.
struct Barrier {
    unsigned expected = 0, arrived = 0;
    uint64_t generation = 0;
    void complete() {
        arrived = 0;
        ++generation;
    }
};

struct Fiber {
    ucontext_t ctx{};
    std::unique_ptr<char[]> stack;
    uint3 idx{};
    Barrier* waiting = nullptr;                  // the barrier it waits on, or nullptr
    uint64_t wait_generation = 0;
    bool done = false;
    void* asan_fake_stack = nullptr;
};

struct Launch {
    std::function<void()> body;
    dim3 grid, block;
    unsigned n_threads = 0, n_warps = 0;
    std::vector<unsigned char> shared;
    std::vector<Fiber> fibers;
    Barrier block_bar;
    std::vector<Barrier> warp_bar;
    std::vector<uint64_t> slots;                 // one per thread: shuffles and votes
    ucontext_t scheduler{};
    const void* scheduler_stack = nullptr;       // for ASan's fiber annotations
    size_t scheduler_stack_size = 0;
    unsigned current = 0;
    std::exception_ptr error;
    unsigned lanes_in(unsigned warp) const { return std::min(32u, n_threads - warp * 32u); }
};

thread_local Launch* active = nullptr;

// Switches between the scheduler and a fiber, with ASan's annotations where it is on.
void to_scheduler(Launch& L, Fiber& f, bool finished) {
#if defined(KINFER_ASAN_FIBERS)
    __sanitizer_start_switch_fiber(finished ? nullptr : &f.asan_fake_stack, L.scheduler_stack, L.scheduler_stack_size);
#else
    (void)finished;
#endif
    swapcontext(&f.ctx, &L.scheduler);
#if defined(KINFER_ASAN_FIBERS)
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, &L.scheduler_stack, &L.scheduler_stack_size);
#endif
}

void to_fiber(Launch& L, Fiber& f) {
#if defined(KINFER_ASAN_FIBERS)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack.get(), kStackBytes);
#endif
    swapcontext(&L.scheduler, &f.ctx);
#if defined(KINFER_ASAN_FIBERS)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

Launch& current() {
    if (!active) throw std::logic_error("cuda cpu mode: a device function was called outside a kernel launch");
    return *active;
}

void wait_on(Launch& L, Barrier& b) {
    if (++b.arrived == b.expected) {             // the last one in: everyone may go on
        b.complete();
        return;
    }
    Fiber& f = L.fibers[L.current];
    f.waiting = &b;
    f.wait_generation = b.generation;
    to_scheduler(L, f, false);
}

// A returned thread leaves its barriers; if the others were only waiting for it, they go on.
void leave(Barrier& b) {
    --b.expected;
    if (b.arrived > 0 && b.arrived == b.expected) b.complete();
}

void fiber_main() {
    Launch& L = *active;
    Fiber& f = L.fibers[L.current];
#if defined(KINFER_ASAN_FIBERS)
    __sanitizer_finish_switch_fiber(nullptr, &L.scheduler_stack, &L.scheduler_stack_size);
#endif
    try {
        L.body();
    } catch (...) {
        if (!L.error) L.error = std::current_exception();
    }
    f.done = true;
    leave(L.block_bar);
    leave(L.warp_bar[L.current / 32]);
    to_scheduler(L, f, true);                    // never resumed
}

std::mutex& launch_mutex() {
    static std::mutex m;
    return m;
}

// Apart from run_block's loop: getcontext returns twice, which would make the loop's locals
// "clobbered" (-Wclobbered).
[[gnu::noinline]] void init_fiber(Launch& L, Fiber& f) {
    f.done = false;
    f.waiting = nullptr;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = &L.scheduler;
    makecontext(&f.ctx, fiber_main, 0);
}

void run_block(Launch& L) {
    L.block_bar = Barrier{L.n_threads, 0, 0};
    for (unsigned w = 0; w < L.n_warps; ++w) L.warp_bar[w] = Barrier{L.lanes_in(w), 0, 0};
    for (unsigned t = 0; t < L.n_threads; ++t) init_fiber(L, L.fibers[t]);
    unsigned left = L.n_threads;
    while (left > 0) {
        bool progressed = false;
        for (unsigned t = 0; t < L.n_threads; ++t) {
            Fiber& f = L.fibers[t];
            if (f.done) continue;
            if (f.waiting) {
                if (f.waiting->generation == f.wait_generation) continue;   // its phase is not complete
                f.waiting = nullptr;
            }
            L.current = t;
            threadIdx = f.idx;
            to_fiber(L, f);
            progressed = true;
            if (f.done) --left;
        }
        if (!progressed && left > 0)
            throw std::logic_error("cuda cpu mode: deadlock: " + std::to_string(left) +
                                   " threads wait at a barrier that the others never reach");
    }
}

}  // namespace

unsigned char* dynamic_shared() { return current().shared.data(); }

void sync_block() {
    Launch& L = current();
    wait_on(L, L.block_bar);
}

void sync_warp() {
    Launch& L = current();
    wait_on(L, L.warp_bar[L.current / 32]);
}

int lane() { return int(current().current % 32); }

uint64_t exchange(uint64_t mine, int src) {
    Launch& L = current();
    const unsigned me = L.current, warp = me / 32, base = warp * 32;
    L.slots[me] = mine;
    wait_on(L, L.warp_bar[warp]);                // every lane has put its value
    const uint64_t got = src >= 0 && unsigned(src) < L.lanes_in(warp) ? L.slots[base + unsigned(src)] : mine;
    wait_on(L, L.warp_bar[warp]);                // every lane has read before any writes again
    return got;
}

unsigned ballot(bool pred) {
    Launch& L = current();
    const unsigned me = L.current, warp = me / 32, base = warp * 32;
    L.slots[me] = pred ? 1 : 0;
    wait_on(L, L.warp_bar[warp]);
    unsigned bits = 0;
    for (unsigned i = 0; i < L.lanes_in(warp); ++i) bits |= unsigned(L.slots[base + i] != 0) << i;
    wait_on(L, L.warp_bar[warp]);
    return bits;
}

void run(const std::function<void()>& body, dim3 grid, dim3 block, size_t shmem) {
    const unsigned nt = block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.z > 64)
        throw std::invalid_argument("cuda cpu mode: a block has 1..1024 threads (z at most 64)");
    const uint64_t nb = uint64_t(grid.x) * grid.y * grid.z;
    if (nb == 0) return;
    std::lock_guard lock(launch_mutex());        // __shared__ statics belong to one block at a time
    if (active) throw std::logic_error("cuda cpu mode: a kernel launched from inside a kernel");
    Launch L;
    L.body = body;
    L.grid = grid;
    L.block = block;
    L.n_threads = nt;
    L.n_warps = (nt + 31) / 32;
    L.shared.assign(shmem, 0);
    L.warp_bar.resize(L.n_warps);
    L.slots.assign(nt, 0);
    L.fibers.resize(nt);
    for (unsigned t = 0; t < nt; ++t) {
        L.fibers[t].stack.reset(new char[kStackBytes]);
        L.fibers[t].idx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    }
    struct Restore {
        ~Restore() { active = nullptr; }
    } restore;
    active = &L;
    blockDim = block;
    gridDim = grid;
    for (uint64_t b = 0; b < nb && !L.error; ++b) {
        blockIdx = uint3{unsigned(b % grid.x), unsigned((b / grid.x) % grid.y), unsigned(b / (uint64_t(grid.x) * grid.y))};
        // A GPU's shared memory holds whatever the SM's last block left there: each block here
        // starts on 0xff bytes (a NaN as a float, -1 as an integer), so a kernel that reads dynamic
        // shared memory it never wrote goes wrong in the tests too.
        std::fill(L.shared.begin(), L.shared.end(), uint8_t(0xff));
        run_block(L);
    }
    if (L.error) std::rethrow_exception(L.error);
}

}  // namespace kinfer::cuda::cpu_mode
