#include "runtime/thread_pool.h"

#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace kinfer::runtime {

namespace {
// Workers spin this many rounds before sleeping: decode issues an op every few microseconds,
// and a futex wake-up per op would cost more than the op itself.
constexpr int kSpinRounds = 20000;

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

ThreadPool::ThreadPool(int n_threads) {
    n_threads_ = n_threads > 0 ? n_threads : default_threads();
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int ith) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = generation_.load(std::memory_order_acquire);
        for (int spin = 0; gen == seen && spin < kSpinRounds; ++spin) {
            cpu_relax();
            gen = generation_.load(std::memory_order_acquire);
        }
        if (gen == seen) {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] { return generation_.load() != seen; });
            gen = generation_.load();
        }
        seen = gen;
        if (stop_.load()) return;
        (*job_)(ith, n_threads_);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_ = &fn;
    pending_.store(n_threads_ - 1, std::memory_order_release);
    {
        std::lock_guard<std::mutex> lock(mu_);
        generation_.fetch_add(1, std::memory_order_acq_rel);
    }
    cv_.notify_all();
    fn(0, n_threads_);
    while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
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
