// A persistent pool of worker threads. Decode is memory bound, so each op hands every thread
// one contiguous run of the weight rows (see DESIGN.md section 5); the matmuls let the threads
// that finish first take the ends of the others' runs (backend/cpu/row_split.h). With more
// threads than CPUs (oversubscribed()), the matmuls take finer slices claimed in turn instead
// (matmul.cpp).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

namespace kinfer::runtime {

class ThreadPool {
public:
    // n_threads <= 0 picks default_threads(). The calling thread works as thread 0.
    explicit ThreadPool(int n_threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // More threads than the CPUs this process may run on (sched_getaffinity): some share a CPU.
    bool oversubscribed() const { return oversubscribed_; }

    // Runs fn(ith, nth) for ith = 0..nth-1 (nth = size()) and waits for all of them. Each ith
    // is a task, claimed by whichever thread is free first: when the machine is oversubscribed
    // and a worker is not scheduled, the caller runs its share instead of waiting for it.
    // Not reentrant: fn must not call run() again.
    void run(const std::function<void(int ith, int nth)>& fn);

    // Splits [0, n) into size() contiguous ranges, fn(begin, end, ith) per non-empty range.
    // Small jobs (n < min_per_thread * 2) run on the calling thread alone.
    void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end, int ith)>& fn,
                      int64_t min_per_thread = 1);

    // Physical cores when known, else the hardware thread count.
    static int default_threads();
    // The CPUs this process may run on: its affinity mask (the hardware thread count without one),
    // capped by a cgroup CPU quota (v2 cpu.max, v1 cfs quota / period, on its cgroup or an
    // ancestor); 0 when nothing is known.
    static int available_cpus();
    // The CPUs a quota of "QUOTA PERIOD" (cgroup v2's cpu.max; v1's two files joined by a space)
    // allows, rounded up; 0 for "max", v1's -1 or anything unreadable.
    static int quota_cpus(std::string_view cpu_max);

private:
    void worker(int ith);

    int n_threads_ = 1;
    bool oversubscribed_ = false;
    std::chrono::nanoseconds spin_{0};   // a worker's spin before it sleeps (thread_pool.cpp)
    std::vector<std::thread> threads_;
    // Claims the next task of generation gen; -1 when none is left (or gen is over).
    int claim(uint32_t gen);

    const std::function<void(int, int)>* job_ = nullptr;
    std::atomic<uint32_t> generation_{0};      // bumped per run(); workers wait on it
    std::atomic<uint64_t> next_{0};            // (generation << 32) | next task index
    std::atomic<int> done_{0};                 // tasks finished in the current generation
    std::atomic<bool> stop_{false};
};

}  // namespace kinfer::runtime
