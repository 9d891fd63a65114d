// The thread pool with more threads than CPUs (workers then spin only briefly before sleeping):
// every task of every run still runs exactly once, with gaps between runs long enough for the
// workers to fall asleep, and parallel_for covers its range once.
#include "test_util.h"

#include "runtime/thread_pool.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace kinfer;

TEST_CASE("thread pool: oversubscribed, every task once per run, across sleeps") {
    const int hw = std::max(1, int(std::thread::hardware_concurrency()));
    for (int n : {1, hw, 2 * hw + 1}) {
        CAPTURE(n);
        runtime::ThreadPool pool(n);
        REQUIRE(pool.size() == n);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> wrong_nth{0};
        for (int run = 0; run < 60; ++run) {
            for (auto& h : hits) h.store(0);
            pool.run([&](int ith, int nth) {
                if (nth != n) wrong_nth.fetch_add(1);   // no doctest assertion off the test's thread
                hits[size_t(ith)].fetch_add(1);
            });
            int bad = 0;
            for (auto& h : hits) bad += h.load() != 1;
            CHECK(bad == 0);
            CHECK(wrong_nth.load() == 0);
            if (run % 20 == 19) std::this_thread::sleep_for(std::chrono::milliseconds(5));   // workers sleep
        }
        std::vector<std::atomic<int>> cover(1000);
        pool.parallel_for(int64_t(cover.size()), [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) cover[size_t(i)].fetch_add(1);
        });
        int wrong = 0;
        for (auto& c : cover) wrong += c.load() != 1;
        CHECK(wrong == 0);
    }
}
