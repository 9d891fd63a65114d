// The CPU execution mode's launch. Each CUDA thread of a block is a fiber on the launching host
// thread; the blocks of a grid run one after another (cpu_mode.h says why).
// A fiber runs until it reaches a barrier (__syncthreads, __syncwarp, a shuffle or a vote) or
// returns, then the scheduler resumes the next fiber that can go on. Fibers rather than host
// threads: a barrier costs a context switch instead of waking up to 1024 OS threads, which on a
// loaded 2-core CI machine is the difference between milliseconds and seconds per test, and the
// schedule is deterministic. A barrier that the live threads can never complete (a
// __syncthreads skipped by some of them) is reported as an error instead of hanging.
//
// The switch itself: on x86-64 a few instructions that save the callee-saved registers and swap
// stack pointers (kinfer_fiber_switch below); glibc's swapcontext also saves the signal mask with
// a system call each switch, which took over half of the CPU mode's time (test_cuda: 17 of 32 s
// in the kernel). Fibers are made once per host thread and reused by every block and launch: a
// fiber whose kernel body returned waits at the top of its loop for the next one.
#include "backend/cuda/cpu_mode.h"
#include "backend/cuda/compat.h"   // kSharedNoOptIn

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

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

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
// kinfer_fiber_switch(&save, to): pushes the System V callee-saved registers on the current
// stack, stores the stack pointer in *save, loads `to` and pops the same from there. The SSE and
// x87 control words are left alone: every fiber of a thread runs kernel code that never changes
// them (saving and loading them was most of a switch's cost: fldcw is microcoded). A new fiber's
// stack is laid out as if it had switched away at its start (see fiber()), returning into
// kinfer_fiber_start, which calls the function in r12.
extern "C" void kinfer_fiber_switch(void** save, void* to);
extern "C" void kinfer_fiber_start();
asm(R"(
    .pushsection .text
    .p2align 4
    .globl kinfer_fiber_switch
    .hidden kinfer_fiber_switch
    .type kinfer_fiber_switch, @function
kinfer_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kinfer_fiber_switch, .-kinfer_fiber_switch

    .p2align 4
    .globl kinfer_fiber_start
    .hidden kinfer_fiber_start
    .type kinfer_fiber_start, @function
kinfer_fiber_start:
    call *%r12
    ud2
    .size kinfer_fiber_start, .-kinfer_fiber_start
    .popsection
)");
#endif

namespace kinfer::cuda::cpu_mode {

namespace {

constexpr size_t kStackBytes = 128 * 1024;   // per fiber; kernels keep little on the stack

// A saved execution context: a stack pointer (x86-64) or a ucontext.
struct Context {
#if defined(__x86_64__)
    void* sp = nullptr;
#else
    ucontext_t uc{};
#endif
};

void switch_context(Context& from, Context& to) {
#if defined(__x86_64__)
    kinfer_fiber_switch(&from.sp, to.sp);
#else
    swapcontext(&from.uc, &to.uc);
#endif
}

// A barrier over `expected` live fibers; a phase completes when all of them have arrived.
struct Barrier {
    unsigned expected = 0, arrived = 0;
    uint64_t generation = 0;
    void complete() {
        arrived = 0;
        ++generation;
    }
};

// A fiber of the host thread's pool: its stack and context outlive launches.
struct Fiber {
    Context ctx;
    std::unique_ptr<char[]> stack;
    void* asan_fake_stack = nullptr;
    bool clean = true;                           // at the top of its loop (not inside a kernel)
};

// A CUDA thread of the running block.
struct Thread {
    uint3 idx{};
    Barrier* waiting = nullptr;                  // the barrier it waits on, or nullptr
    uint64_t wait_generation = 0;
    bool done = false;
    unsigned exchanges = 0;                      // shuffles, votes and shares so far: which slot set is next
    struct Copy {
        void* dst;
        const void* src;
        size_t bytes;
    };
    std::vector<Copy> copies;                    // async_copy's, not yet waited for
};

struct Launch {
    std::function<void()> body;
    dim3 grid, block;
    unsigned n_threads = 0, n_warps = 0;
    bool reverse = false, by_warp = false;       // the schedule (cpu_mode.h), read once a launch
    std::vector<unsigned char> shared;
    std::vector<Thread> threads;
    Barrier block_bar;
    std::vector<Barrier> warp_bar;
    // Shuffles, votes and shares (put_and_wait): each lane puts its words in its slots of one
    // of two sets, then waits for the warp once. Exchange k uses set k % 2, so a lane that moves
    // on to exchange k + 1 writes the other set while slower lanes still read this one, and
    // cannot reach exchange k + 2 (this set again) before every lane has arrived at k + 1, that
    // is, read k. One barrier an exchange instead of two (a fiber switch per lane each).
    std::vector<uint64_t> words[2];              // kShareWords a thread
    std::vector<uint64_t> per_lane[2];           // share_warp's scratch: 32 words a warp, each set
    std::vector<unsigned> filled[2];             // per warp: 1 + the exchange whose scratch is claimed
    // Per warp: the fewest exchanges a lane that has left the kernel (returned or thrown) took
    // part in; an exchange numbered that or later is missing that lane (put_and_wait).
    std::vector<unsigned> left_after;
    unsigned current = 0;
    std::exception_ptr error;
    unsigned lanes_in(unsigned warp) const { return std::min(32u, n_threads - warp * 32u); }
};

thread_local Launch* active = nullptr;
thread_local std::vector<std::unique_ptr<Fiber>> pool;   // fiber t runs CUDA thread t
thread_local Context scheduler;
#if defined(KINFER_ASAN_FIBERS)
thread_local const void* scheduler_stack = nullptr;      // for ASan's fiber annotations
thread_local size_t scheduler_stack_size = 0;
#endif

// Switches between the scheduler and a fiber, with ASan's annotations where it is on.
void to_scheduler(Fiber& f) {
#if defined(KINFER_ASAN_FIBERS)
    __sanitizer_start_switch_fiber(&f.asan_fake_stack, scheduler_stack, scheduler_stack_size);
#endif
    switch_context(f.ctx, scheduler);
#if defined(KINFER_ASAN_FIBERS)
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, &scheduler_stack, &scheduler_stack_size);
#endif
}

void to_fiber(Fiber& f) {
#if defined(KINFER_ASAN_FIBERS)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack.get(), kStackBytes);
#endif
    switch_context(scheduler, f.ctx);
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
    Thread& t = L.threads[L.current];
    t.waiting = &b;
    t.wait_generation = b.generation;
    to_scheduler(*pool[L.current]);
}

// A returned thread leaves its barriers; if the others were only waiting for it, they go on.
void leave(Barrier& b) {
    --b.expected;
    if (b.arrived > 0 && b.arrived == b.expected) b.complete();
}

// Every fiber's life: run the current block's body for its CUDA thread, report back, wait for
// the next block (of this launch or a later one).
void fiber_main() {
#if defined(KINFER_ASAN_FIBERS)
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack, &scheduler_stack_size);
#endif
    for (;;) {
        Launch& L = *active;
        Fiber& f = *pool[L.current];
        f.clean = false;
        try {
            L.body();
            if (!L.threads[L.current].copies.empty())
                throw std::logic_error("cuda cpu mode: a thread returned with cp.async copies it never waited for");
        } catch (...) {
            if (!L.error) L.error = std::current_exception();
        }
        L.threads[L.current].copies.clear();
        L.threads[L.current].done = true;
        unsigned& first_missed = L.left_after[L.current / 32];
        first_missed = std::min(first_missed, L.threads[L.current].exchanges);
        leave(L.block_bar);
        leave(L.warp_bar[L.current / 32]);
        f.clean = true;
        to_scheduler(f);
    }
}

// Fiber i of the pool, made (its stack and a context that starts in fiber_main) on first use.
Fiber& fiber(unsigned i) {
    while (pool.size() <= i) {
        auto f = std::make_unique<Fiber>();
        f->stack.reset(new char[kStackBytes]);
#if defined(__x86_64__)
        // As kinfer_fiber_switch would have left it: r15..r12, rbx, rbp, then the return into
        // kinfer_fiber_start, placed so that its call sees a 16-byte aligned stack.
        auto top = (reinterpret_cast<uintptr_t>(f->stack.get()) + kStackBytes) & ~uintptr_t(15);
        auto* sp = reinterpret_cast<uint64_t*>(top - 72);
        sp[0] = sp[1] = sp[2] = 0;                // r15, r14, r13
        sp[3] = reinterpret_cast<uint64_t>(&fiber_main);   // r12: what kinfer_fiber_start calls
        sp[4] = sp[5] = 0;                        // rbx, rbp
        sp[6] = reinterpret_cast<uint64_t>(&kinfer_fiber_start);
        f->ctx.sp = sp;
#else
        getcontext(&f->ctx.uc);
        f->ctx.uc.uc_stack.ss_sp = f->stack.get();
        f->ctx.uc.uc_stack.ss_size = kStackBytes;
        f->ctx.uc.uc_link = nullptr;              // fiber_main never returns
        makecontext(&f->ctx.uc, fiber_main, 0);
#endif
        pool.push_back(std::move(f));
    }
    return *pool[i];
}

// KINFER_CPU_MODE_SCHEDULE, read at the first launch or schedule() (-1: not read yet).
std::atomic<int> g_schedule{-1};

Schedule schedule_from_env() {
    const char* env = std::getenv("KINFER_CPU_MODE_SCHEDULE");
    const std::string v = env ? env : "";
    if (v.empty() || v == "forward") return Schedule::forward;
    if (v == "reverse") return Schedule::reverse;
    if (v == "warps") return Schedule::warps;
    if (v == "warps-reverse") return Schedule::warps_reverse;
    throw std::invalid_argument("KINFER_CPU_MODE_SCHEDULE=" + v + ": expected forward, reverse, warps or warps-reverse");
}

std::mutex& launch_mutex() {
    static std::mutex m;
    return m;
}

void run_block(Launch& L) {
    L.block_bar = Barrier{L.n_threads, 0, 0};
    for (unsigned w = 0; w < L.n_warps; ++w) L.warp_bar[w] = Barrier{L.lanes_in(w), 0, 0};
    for (Thread& t : L.threads) {
        t.done = false;
        t.waiting = nullptr;
        t.exchanges = 0;
    }
    for (auto& f : L.filled) std::fill(f.begin(), f.end(), 0u);   // the block's exchanges count from 0
    std::fill(L.left_after.begin(), L.left_after.end(), ~0u);
    const bool reverse = L.reverse;
    unsigned left = L.n_threads;
    // Resumes thread t up to its next barrier, if it can go on; false if it cannot.
    auto resume = [&](unsigned t) {
        Thread& th = L.threads[t];
        if (th.done) return false;
        if (th.waiting) {
            if (th.waiting->generation == th.wait_generation) return false;   // its phase is not complete
            th.waiting = nullptr;
        }
        L.current = t;
        threadIdx = th.idx;
        to_fiber(*pool[t]);
        if (th.done) --left;
        return true;
    };
    // One sweep over threads [first, first + count), in the schedule's direction.
    auto sweep = [&](unsigned first, unsigned count) {
        bool any = false;
        for (unsigned k = 0; k < count; ++k) any |= resume(first + (reverse ? count - 1 - k : k));
        return any;
    };
    while (left > 0) {
        bool progressed = false;
        if (!L.by_warp) {
            progressed = sweep(0, L.n_threads);
        } else {
            for (unsigned k = 0; k < L.n_warps; ++k) {
                const unsigned w = reverse ? L.n_warps - 1 - k : k;
                while (sweep(w * 32, L.lanes_in(w))) progressed = true;   // until its lanes all wait or are done
            }
        }
        if (!progressed && left > 0)
            throw std::logic_error("cuda cpu mode: deadlock: " + std::to_string(left) +
                                   " threads wait at a barrier that the others never reach");
    }
}

}  // namespace

void set_schedule(Schedule s) { g_schedule.store(int(s)); }

Schedule schedule() {
    int s = g_schedule.load();
    if (s < 0) {
        // Two threads reading the environment at once agree on what they store.
        s = int(schedule_from_env());
        g_schedule.store(s);
    }
    return Schedule(s);
}

unsigned char* dynamic_shared() { return current().shared.data(); }

void sync_block() {
    Launch& L = current();
    wait_on(L, L.block_bar);
}

void sync_warp() {
    Launch& L = current();
    wait_on(L, L.warp_bar[L.current / 32]);
}

void async_copy(void* dst, const void* src, size_t bytes) {
    Launch& L = current();
    if (L.reverse) {   // at once: the earliest a GPU may make it (its wait is still required)
        std::memcpy(dst, src, bytes);
        bytes = 0;
    }
    L.threads[L.current].copies.push_back({dst, src, bytes});
}

void async_wait() {
    Launch& L = current();
    for (const Thread::Copy& c : L.threads[L.current].copies) std::memcpy(c.dst, c.src, c.bytes);
    L.threads[L.current].copies.clear();
}

int lane() { return int(current().current % 32); }

namespace {
// The calling lane's part of its warp's next exchange: its n words into this exchange's set, then
// the warp's barrier (every lane has put its words). Returns the exchange's number: every lane of
// the warp takes part in the same exchanges, so the count names it, and its parity is the set.
// A lane that left the kernel before an exchange (it returned, or threw: the launch then reports
// that first exception, not this one) would have the exchange complete without its words, which
// the others would read as zeros or stale ones: on a GPU a full-mask shuffle with an exited lane
// is undefined. Such an exchange throws instead (checked after the wait, when the lanes that will
// take part have all arrived or left).
unsigned put_and_wait(Launch& L, const uint64_t* mine, unsigned n) {
    const unsigned me = L.current, exchange = L.threads[me].exchanges++;
    std::copy(mine, mine + n, L.words[exchange & 1].begin() + std::ptrdiff_t(me * kShareWords));
    wait_on(L, L.warp_bar[me / 32]);
    if (L.left_after[me / 32] <= exchange)
        throw std::logic_error("cuda cpu mode: a shuffle, vote or warp exchange that a lane of the warp never reached (it "
                               "returned or threw before it): a full-mask exchange needs every lane");
    return exchange;
}
// Lane `lane`'s first word of exchange set `set`, in the caller's warp.
uint64_t word_of(const Launch& L, unsigned set, unsigned lane) {
    return L.words[set][size_t(L.current / 32 * 32 + lane) * kShareWords];
}
}  // namespace

uint64_t exchange(uint64_t mine, int src) {
    Launch& L = current();
    const unsigned set = put_and_wait(L, &mine, 1) & 1;
    return src >= 0 && unsigned(src) < L.lanes_in(L.current / 32) ? word_of(L, set, unsigned(src)) : mine;
}

bool full_warp() {
    const Launch& L = current();
    return L.lanes_in(L.current / 32) == 32;
}

WarpShare share_warp(const uint64_t* mine, unsigned n) {
    Launch& L = current();
    const unsigned warp = L.current / 32;
    // A GPU's mma.sync needs every lane of the warp too.
    if (n > kShareWords || L.lanes_in(warp) != 32)
        throw std::logic_error("cuda cpu mode: share_warp takes at most kShareWords words from every lane of a full warp");
    const unsigned exchange = put_and_wait(L, mine, n), set = exchange & 1;
    const bool first = L.filled[set][warp] != exchange + 1;
    L.filled[set][warp] = exchange + 1;
    return WarpShare{L.words[set].data() + size_t(warp) * 32 * kShareWords, L.per_lane[set].data() + size_t(warp) * 32,
                     first};
}

unsigned ballot(bool pred) {
    Launch& L = current();
    const uint64_t mine = pred ? 1 : 0;
    const unsigned set = put_and_wait(L, &mine, 1) & 1;
    unsigned bits = 0;
    for (unsigned i = 0; i < L.lanes_in(L.current / 32); ++i) bits |= unsigned(word_of(L, set, i) != 0) << i;
    return bits;
}

namespace {
std::mutex& opt_in_mutex() {
    static std::mutex m;
    return m;
}
std::map<uintptr_t, size_t>& opt_ins() {   // kernel -> its cudaFuncAttributeMaxDynamicSharedMemorySize
    static std::map<uintptr_t, size_t> m;
    return m;
}
constexpr size_t kDefaultDynamicShared = kDynamicNoOptIn, kMaxDynamicShared = kDynamicOptInMax;
}  // namespace

void set_max_dynamic_shared(uintptr_t kernel, int bytes) {
    if (bytes < 0 || size_t(bytes) > kMaxDynamicShared)
        throw std::invalid_argument("cuda cpu mode: cudaFuncSetAttribute: " + std::to_string(bytes) +
                                    " bytes of dynamic shared memory (a GPU allows 227 KiB with the kernel's "
                                    "static bytes, kDynamicOptInMax here)");
    std::lock_guard lock(opt_in_mutex());
    opt_ins()[kernel] = size_t(bytes);
}

void check_launch(uintptr_t kernel, dim3 grid, size_t shmem) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
        throw std::invalid_argument("cuda cpu mode: a grid of " + std::to_string(grid.x) + " x " + std::to_string(grid.y) +
                                    " x " + std::to_string(grid.z) +
                                    " blocks (a GPU launches 1..2^31-1 x 1..65535 x 1..65535)");
    if (shmem <= kDefaultDynamicShared) return;
    size_t allowed = kDefaultDynamicShared;
    {
        std::lock_guard lock(opt_in_mutex());
        if (auto it = opt_ins().find(kernel); it != opt_ins().end()) allowed = std::max(allowed, it->second);
    }
    if (shmem > allowed)
        throw std::invalid_argument("cuda cpu mode: " + std::to_string(shmem) + " bytes of dynamic shared memory, " +
                                    std::to_string(allowed) +
                                    " allowed (past 48 KiB a kernel opts in with cudaFuncSetAttribute)");
}

void check_block(dim3 block) {
    const uint64_t nt = uint64_t(block.x) * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.z > 64)
        throw std::invalid_argument("cuda cpu mode: a block has 1..1024 threads (z at most 64)");
}

void run(const std::function<void()>& body, dim3 grid, dim3 block, size_t shmem) {
    check_block(block);
    const unsigned nt = block.x * block.y * block.z;
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
    for (int set = 0; set < 2; ++set) {
        L.words[set].assign(size_t(L.n_warps) * 32 * kShareWords, 0);
        L.per_lane[set].assign(size_t(L.n_warps) * 32, 0);
        L.filled[set].resize(L.n_warps);
    }
    L.left_after.resize(L.n_warps);
    L.threads.resize(nt);
    for (unsigned t = 0; t < nt; ++t) {
        fiber(t);
        L.threads[t].idx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    }
    struct Restore {
        ~Restore() {
            active = nullptr;
            // A fiber left inside a kernel (a deadlock, an error in the scheduler) cannot be
            // resumed for another one: it goes, with whatever its stack held, and so do the ones
            // after it (fibers are used from 0 up: the pool stays a prefix).
            for (size_t i = 0; i < pool.size(); ++i)
                if (!pool[i]->clean) {
                    pool.resize(i);
                    break;
                }
        }
    } restore;
    active = &L;
    blockDim = block;
    gridDim = grid;
    const Schedule sched = schedule();
    L.reverse = sched == Schedule::reverse || sched == Schedule::warps_reverse;
    L.by_warp = sched == Schedule::warps || sched == Schedule::warps_reverse;
    for (uint64_t k = 0; k < nb && !L.error; ++k) {
        const uint64_t b = L.reverse ? nb - 1 - k : k;
        blockIdx = uint3{unsigned(b % grid.x), unsigned((b / grid.x) % grid.y), unsigned(b / (uint64_t(grid.x) * grid.y))};
        // A GPU's shared memory holds whatever the SM's last block left there: each block here
        // starts on 0xff bytes (a NaN as a float, -1 as an integer), so a kernel that reads dynamic
        // shared memory it never wrote goes wrong in the tests too. Under the warp-by-warp
        // schedules on 0x7f bytes instead (3.4e38 as a float, a large positive integer): a max
        // or a comparison skips a NaN (fmaxf), but not a huge value.
        const uint8_t fill = L.by_warp ? 0x7f : 0xff;
        std::fill(L.shared.begin(), L.shared.end(), fill);
        run_block(L);
    }
    if (L.error) std::rethrow_exception(L.error);
}

}  // namespace kinfer::cuda::cpu_mode
