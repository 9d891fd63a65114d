#include "runtime/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>

namespace kinfer::runtime {

namespace {
// Workers spin this long before sleeping on a futex. Decode wakes the pool every 20-650 us, with
// the main thread's own work in between (norms, routing, sampling between tokens). The spin used
// to be 2000 pause rounds, about 0.1 ms on a Sapphire Rapids core (~140 cycles a pause), so the
// worker slept through the longer gaps and those runs began with a futex wake 30-40 us late
// (k3-wide Q4_K_M decode on a 2-vCPU Xeon VM: 27 runs a token, the worker's starts 1.0-1.2 ms late
// in all per token; 0.06 ms with this spin). Counted in time, not rounds, because a pause costs 10
// to 140 cycles depending on the core. The cost is a CPU busy for up to 1 ms after each run, which
// is why available_cpus() counts a container's CPU quota: a pool with more threads than that spins
// only briefly.
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
    // No more than this process may use: its affinity mask (taskset) and CPU quota (a container's
    // --cpus), which /proc/cpuinfo does not show.
    const int avail = available_cpus();
    if (avail > 0 && n > avail) n = avail;
    return n > 0 ? n : 1;
}

int ThreadPool::quota_cpus(std::string_view cpu_max) {
    long long quota = 0, period = 0;
    const char* p = cpu_max.data();
    const char* const end = p + cpu_max.size();
    const auto number = [&](long long& v) {
        while (p < end && (*p == ' ' || *p == '\n')) ++p;
        const auto [next, ec] = std::from_chars(p, end, v);
        p = next;
        return ec == std::errc() && v > 0;
    };
    if (!number(quota) || !number(period)) return 0;   // "max", -1 (v1's unlimited), garbage
    return int(std::min<long long>((quota + period - 1) / period, 1 << 20));
}

namespace {
std::string read_file(const std::string& path) {
    std::ifstream f(path);
    return f ? std::string(std::istreambuf_iterator<char>(f), {}) : std::string();
}

// The smallest CPU quota on this process's cgroup and its ancestors (0: none). cgroup v2 keeps it
// in cpu.max; v1 in the cpu controller's cpu.cfs_quota_us / cpu.cfs_period_us.
int cgroup_quota_cpus() {
    std::ifstream f("/proc/self/cgroup");
    int best = 0;
    auto take = [&](int c) {
        if (c > 0 && (best == 0 || c < best)) best = c;
    };
    for (std::string line; std::getline(f, line);) {
        const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1);
        std::string path = line.substr(b + 1);
        const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
        const bool v1 = ("," + controllers + ",").find(",cpu,") != std::string::npos;   // "cpu,cpuacct"
        if (!v2 && !v1) continue;
        for (;;) {   // this cgroup, then each parent up to the root
            if (v2) {
                take(ThreadPool::quota_cpus(read_file("/sys/fs/cgroup" + path + "/cpu.max")));
            } else {
                const std::string dir = "/sys/fs/cgroup/cpu" + path;
                take(ThreadPool::quota_cpus(read_file(dir + "/cpu.cfs_quota_us") + " " + read_file(dir + "/cpu.cfs_period_us")));
            }
            if (path.empty() || path == "/") break;
            const size_t slash = path.find_last_of('/');
            path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
        }
    }
    return best;
}
}  // namespace

int ThreadPool::available_cpus() {
    int n = int(std::thread::hardware_concurrency());   // 0 when not known
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
    // A CPU quota gives this process that many CPUs' worth of time, whatever the mask allows:
    // more threads than that share them (the pool then spins briefly, matmul takes finer slices).
    static const int quota = cgroup_quota_cpus();
    if (quota > 0 && (n == 0 || quota < n)) n = quota;
    return n;
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
