// The thread pool with more threads than CPUs (workers then spin only briefly before sleeping):
// every task of every run still runs exactly once, with gaps between runs long enough for the
// workers to fall asleep, and parallel_for covers its range once.
#include "test_util.h"

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "quant/types.h"
#include "runtime/thread_pool.h"

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
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

TEST_CASE("thread pool: a cgroup CPU quota in CPUs, rounded up; none for max, -1 or garbage") {
    using P = runtime::ThreadPool;
    CHECK(P::quota_cpus("200000 100000\n") == 2);
    CHECK(P::quota_cpus("150000 100000") == 2);
    CHECK(P::quota_cpus("50000 100000") == 1);
    CHECK(P::quota_cpus("-1 100000") == 0);        // cgroup v1's unlimited
    CHECK(P::quota_cpus("max 100000") == 0);       // cgroup v2's
    CHECK(P::quota_cpus("100000") == 0);           // no period
    CHECK(P::quota_cpus("") == 0);
    CHECK(P::quota_cpus("1x 5") == 0);
    const int avail = P::available_cpus();
    CHECK(avail >= 0);
    CHECK(P::default_threads() >= 1);
    if (avail > 0) CHECK(P::default_threads() <= avail);
}

// matmul_jobs with more threads than CPUs takes finer slices, claimed in turn (matmul.cpp says
// why): the same bits as one thread, for a quantized and an F32 weight.
TEST_CASE("thread pool: an oversubscribed pool's matmul gives one thread's bits") {
    const int cpus = runtime::ThreadPool::available_cpus();
    REQUIRE(cpus > 0);
    runtime::ThreadPool one(1), over(cpus + 1);
    CHECK_FALSE(one.oversubscribed());
    REQUIRE(over.oversubscribed());
    const int64_t rows = 301, cols = 512, n = 37;
    std::vector<float> w(size_t(rows * cols)), x(size_t(n * cols));
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 7919 % 201) - 100) / 64.0f;
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 104729 % 97) - 48) / 32.0f;
    for (quant::Type type : {quant::Type::Q4_K, quant::Type::F32}) {
        CAPTURE(quant::traits(type).name);
        const quant::Traits& t = quant::traits(type);
        const size_t rb = quant::row_size(t, cols);
        std::vector<uint8_t> q(rb * size_t(rows));
        if (type == quant::Type::F32) std::memcpy(q.data(), w.data(), q.size());
        else
            for (int64_t r = 0; r < rows; ++r) t.from_float_ref(w.data() + r * cols, q.data() + size_t(r) * rb, cols);
        backend::Mat W;
        W.type = type, W.cols = cols, W.rows = rows, W.data = q.data(), W.row_bytes = rb, W.name = "test";
        std::vector<float> y1(size_t(n * rows)), y2(y1.size(), -1.0f);
        backend::cpu::matmul(one, W, x.data(), n, y1.data());
        backend::cpu::matmul(over, W, x.data(), n, y2.data());
        CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) == 0);
    }
}

// MLA attention claims its (token, head) pairs in turn when oversubscribed (attention.cpp): each
// pair's output is its own, so one thread's bits.
TEST_CASE("thread pool: an oversubscribed pool's MLA attention gives one thread's bits") {
    REQUIRE(runtime::ThreadPool::available_cpus() > 0);
    runtime::ThreadPool one(1), over(runtime::ThreadPool::available_cpus() + 1);
    REQUIRE(over.oversubscribed());
    backend::MlaShape s;
    s.n = 9, s.pos0 = 5, s.H = 6, s.r = 64, s.dr = 16, s.scale = 0.125f;
    const int64_t R = s.r + s.dr, n_kv = s.pos0 + s.n;
    std::vector<float> cache(size_t(n_kv * R)), q(size_t(s.n * s.H * R));
    for (size_t i = 0; i < cache.size(); ++i) cache[i] = float(int(i * 7919 % 211) - 105) / 100.0f;
    for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i * 104729 % 89) - 44) / 50.0f;
    std::vector<float> a(size_t(s.n * s.H * s.r), -1.0f), b(a.size(), -2.0f);
    for (int rep = 0; rep < 3; ++rep) {   // the claim counter starts afresh each call
        backend::cpu::mla_attend_absorbed(one, cache.data(), q.data(), a.data(), s);
        backend::cpu::mla_attend_absorbed(over, cache.data(), q.data(), b.data(), s);
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
}
