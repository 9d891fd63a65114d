#include "runtime/thread_pool.h"

#include <sched.h>

#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace kinfer::runtime {

namespace {
// Workers spin this long before sleeping on a futex. Decode wakes the pool every 20-400 us, with
// the main thread's own work in between (norms, routing, sampling between tokens). The spin used
// to be 2000 pause rounds: about 60 us on a Sapphire Rapids core, where a pause takes ~140
// cycles, so the worker slept through most of those gaps and every run began with a futex wake,
// 30-40 us late (k3-wide Q4_K_M decode on a 2-vCPU Xeon VM: 27 runs a token, the worker's starts
// 1.0-1.2 ms late in all per token; 0.06 ms with this spin). Counted in time, not rounds, because
// a pause costs 10 to 140 cycles depending on the core.
constexpr std::chrono::nanoseconds kSpin{1'000'000};
// With more threads than the CPUs this process may run on, a spinning worker holds a CPU that a
// thread with work needs: spin only briefly, then sleep.
constexpr std::chrono::nanoseconds kSpinOversubscribed{2'000};
// The clock is read once every this many pause rounds.
constexpr int kSpinClockEvery = 16;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
}  // namespace

int ThreadPool::default_threads() {
    // Count distinct (physical id, core id) pairs; hyper-threads share a core's bandwidth.
    std::ifstream f("/proc/cpuinfo");
    std::set<std::pair<int, int>> cores;
    std::string line;
    int phys = 0;
    while (std::getline(f, line)) {
        auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        if (line.rfind("physical id", 0) == 0) phys = std::stoi(line.substr(colon + 1));
        if (line.rfind("core id", 0) == 0) cores.insert({phys, std::stoi(line.substr(colon + 1))});
    }
    int hw = int(std::thread::hardware_concurrency());
    int n = cores.empty() ? hw : int(cores.size());
    if (hw > 0 && n > hw) n = hw;
    return n > 0 ? n : 1;
}

int ThreadPool::available_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return int(std::thread::hardware_concurrency());   // 0 when not known
}

ThreadPool::ThreadPool(int n_threads) {
    n_threads_ = n_threads > 0 ? n_threads : default_threads();
    const int cpus = available_cpus();
    oversubscribed_ = cpus > 0 && n_threads_ > cpus;   // not known: taken as fitting
    spin_ = oversubscribed_ ? kSpinOversubscribed : kSpin;
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& t : threads_) t.join();
}

int ThreadPool::claim(uint32_t gen) {
    uint64_t cur = next_.load(std::memory_order_acquire);
    for (;;) {
        if (uint32_t(cur >> 32) != gen || int(cur & 0xffffffffu) >= n_threads_) return -1;
        if (next_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) return int(cur & 0xffffffffu);
    }
}

void ThreadPool::worker(int) {
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen = generation_.load(std::memory_order_acquire);
        const auto spin_end = std::chrono::steady_clock::now() + spin_;
        for (int spin = 1; gen == seen; ++spin) {
            cpu_relax();
            gen = generation_.load(std::memory_order_acquire);
            if (spin % kSpinClockEvery == 0 && std::chrono::steady_clock::now() >= spin_end) break;
        }
        if (gen == seen) {
            generation_.wait(seen, std::memory_order_acquire);
            continue;
        }
        seen = gen;
        if (stop_.load()) return;
        // job_ is the one of generation gen as long as a task of gen can still be claimed.
        const std::function<void(int, int)>* job = job_;
        for (int task; (task = claim(gen)) >= 0;) {
            (*job)(task, n_threads_);
            done_.fetch_add(1, std::memory_order_acq_rel);
        }
    }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
    next_.store(uint64_t(gen) << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
    generation_.notify_all();
    for (int task; (task = claim(gen)) >= 0;) {
        fn(task, n_threads_);
        done_.fetch_add(1, std::memory_order_acq_rel);
    }
    // Only tasks a worker actually started are left: wait for them, yielding the core in case
    // that worker shares it with us.
    for (int spin = 0; done_.load(std::memory_order_acquire) != n_threads_; ++spin) {
        if (spin < 64) cpu_relax();
        else std::this_thread::yield();
    }
    job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t min_per_thread) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n < 2 * min_per_thread) {
        fn(0, n, 0);
        return;
    }
    int64_t nth = n_threads_;
    if (n / min_per_thread < nth) nth = n / min_per_thread;
    run([&](int ith, int) {
        if (ith >= nth) return;
        int64_t b = n * ith / nth, e = n * (ith + 1) / nth;
        if (b < e) fn(b, e, ith);
    });
}

}  // namespace kinfer::runtime
