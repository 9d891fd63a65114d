// Memory copy bandwidth with T threads (each copies its own 256 MiB buffer), the yardstick for
// decode's GB/s: decode streams every weight a token touches once. Reports the best of 5 rounds
// as copy GB/s (bytes copied per second) and read+write GB/s.
//
//   c++ -O2 -pthread tools/bench/membw.cpp -o /tmp/membw && /tmp/membw [THREADS] [MiB]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    const size_t bytes = size_t(argc > 2 ? std::atoi(argv[2]) : 256) << 20;
    std::vector<std::vector<char>> src(size_t(threads), std::vector<char>(bytes, 1)), dst(size_t(threads), std::vector<char>(bytes, 2));
    double best = 0;
    for (int round = 0; round < 5; ++round) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] { std::memcpy(dst[size_t(t)].data(), src[size_t(t)].data(), bytes); });
        for (auto& th : pool) th.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, double(bytes) * threads / s / 1e9);
    }
    std::printf("memcpy, %d threads: %.1f GB/s copied (%.1f GB/s read + write)\n", threads, best, 2 * best);
    return 0;
}
