// A persistent pool of worker threads. Decode is memory bound, so each op hands every thread
// one contiguous slice of the weight rows (see DESIGN.md section 5): the slices are stable from
// call to call, so a thread keeps streaming "its" part of each matrix.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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

    // Runs fn(ith, nth) on every thread (ith = 0..nth-1) and waits for all of them.
    // Not reentrant: fn must not call run() again.
    void run(const std::function<void(int ith, int nth)>& fn);

    // Splits [0, n) into size() contiguous ranges, fn(begin, end, ith) per non-empty range.
    // Small jobs (n < min_per_thread * 2) run on the calling thread alone.
    void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end, int ith)>& fn,
                      int64_t min_per_thread = 1);

    // Physical cores when known, else the hardware thread count.
    static int default_threads();

private:
    void worker(int ith);

    int n_threads_ = 1;
    std::vector<std::thread> threads_;
    const std::function<void(int, int)>* job_ = nullptr;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::condition_variable cv_;
};

}  // namespace kinfer::runtime
