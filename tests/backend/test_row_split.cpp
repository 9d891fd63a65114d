// RowSplit, matmul_jobs' division of a pass's rows among the pool's tasks (row_split.h): every
// unit claimed once whoever claims it, regions of about equal cost, an owner's pieces in order from
// its front, helpers taking the ends of slow regions; and matmul_jobs' bits whatever the split.
#include "test_util.h"

#include "backend/cpu/matmul.h"
#include "backend/cpu/row_split.h"
#include "quant/types.h"
#include "runtime/thread_pool.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

using namespace kinfer;
using backend::cpu::RowSplit;

TEST_CASE("row split: one claim per unit, pieces in order from the owner's front, regions of equal cost") {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 300; ++trial) {
        const size_t jobs = 1 + rng() % 6;
        std::vector<int64_t> units(jobs);
        std::vector<double> cost(jobs);
        for (size_t i = 0; i < jobs; ++i) {
            units[i] = rng() % 4 == 0 ? 0 : int64_t(rng() % 300);   // some jobs without rows
            cost[i] = 1.0 + double(rng() % 50);
        }
        const int parts = 1 + int(rng() % 5);
        const int64_t min_units = 1 + int64_t(rng() % 9);
        CAPTURE(trial);
        RowSplit split;
        split.reset(units.data(), cost.data(), jobs, parts, min_units);
        const int64_t total = split.total_units();
        int64_t sum = 0;
        double total_cost = 0, max_cost = 0;
        for (size_t i = 0; i < jobs; ++i) {
            sum += units[i];
            total_cost += double(units[i]) * cost[i];
            if (units[i]) max_cost = std::max(max_cost, cost[i]);
        }
        REQUIRE(total == sum);
        // Region r's cost: within one unit of total / parts.
        auto cost_of = [&](int64_t b, int64_t e) {
            double c = 0;
            split.for_each_job(b, e, [&](size_t j, int64_t u0, int64_t u1) {
                CHECK(u0 < u1);
                CHECK(u1 <= units[j]);
                c += double(u1 - u0) * cost[j];
            });
            return c;
        };
        for (int r = 0; r < parts; ++r) {
            CHECK(split.region_start(r) <= split.region_start(r + 1));
            CHECK(cost_of(split.region_start(r), split.region_start(r + 1)) <= total_cost / parts + max_cost + 1e-9);
        }
        CHECK(split.region_start(parts) == total);
        // Tasks claim in a random interleaving; each unit exactly once.
        std::vector<int> hits(size_t(total), 0);
        std::vector<int> cursor(size_t(parts), 0);
        std::vector<int64_t> next_front(static_cast<size_t>(parts));
        for (int r = 0; r < parts; ++r) next_front[size_t(r)] = split.region_start(r);
        std::vector<bool> done(size_t(parts), false);
        std::vector<int64_t> claimed(size_t(parts), 0);
        for (int left = parts; left > 0;) {
            const int t = int(rng() % unsigned(parts));
            if (done[size_t(t)]) continue;
            int64_t b = -1, e = -1;
            const bool own = cursor[size_t(t)] == 0;
            if (!split.claim(t, cursor[size_t(t)], b, e)) {
                done[size_t(t)] = true;
                --left;
                continue;
            }
            REQUIRE(0 <= b);
            REQUIRE(b < e);
            REQUIRE(e <= total);
            if (own && cursor[size_t(t)] == 0) {   // from its own front, in order
                CHECK(b == next_front[size_t(t)]);
                next_front[size_t(t)] = e;
            }
            // A piece within one region, below the minimum only when it takes what was left of it.
            int region = 0;
            while (split.region_start(region + 1) <= b) ++region;
            CHECK(e <= split.region_start(region + 1));
            claimed[size_t(region)] += e - b;
            if (e - b < min_units) CHECK(claimed[size_t(region)] == split.region_start(region + 1) - split.region_start(region));
            for (int64_t u = b; u < e; ++u) ++hits[size_t(u)];
        }
        int wrong = 0;
        for (int h : hits) wrong += h != 1;
        CHECK(wrong == 0);
    }
}

TEST_CASE("row split: threads that finish first take the end of a slow owner's region") {
    const int parts = 3;
    runtime::ThreadPool pool(parts);
    const int64_t units[2] = {4000, 2000};
    const double cost[2] = {1.0, 2.0};
    RowSplit split;
    for (int run = 0; run < 5; ++run) {
        split.reset(units, cost, 2, parts, 4);
        const int64_t r0 = split.region_start(0), r1 = split.region_start(1);
        std::vector<std::atomic<int>> hits(size_t(split.total_units()));
        std::vector<std::atomic<int>> by(size_t(split.total_units()));
        std::atomic<bool> helped_0{false};
        std::atomic<int> wrong_front{0};
        pool.run([&](int ith, int) {
            int cursor = 0;
            bool first = true;
            for (int64_t b, e; split.claim(ith, cursor, b, e);) {
                if (ith == 0 && cursor == 0 && first && b != r0) wrong_front.fetch_add(1);   // its own front first
                if (ith != 0 && b >= r0 && e <= r1) helped_0.store(true);
                for (int64_t u = b; u < e; ++u) {
                    hits[size_t(u)].fetch_add(1);
                    by[size_t(u)].store(ith);
                }
                // Region 0's owner is slow: after its first piece it waits (up to 10 s, however
                // late the other tasks start) until another task has taken a piece of its region.
                if (ith == 0 && first)
                    for (int i = 0; i < 10000 && !helped_0.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                first = false;
            }
        });
        int wrong = 0;
        for (auto& h : hits) wrong += h.load() != 1;
        CHECK(wrong == 0);
        CHECK(wrong_front.load() == 0);
        int64_t helped = 0;
        for (int64_t u = r0; u < r1; ++u) helped += by[size_t(u)].load() != 0;
        CHECK(helped > 0);
    }
}

// matmul_jobs: several products of different types, token counts (one of them none) and row
// counts (not multiples of 4) in one pass on 2 and 3 threads give one thread's bits.
TEST_CASE("row split: matmul_jobs on several threads gives one thread's bits") {
    const int64_t cols = 512;
    struct Spec {
        quant::Type type;
        int64_t rows, n;
    };
    const Spec specs[] = {{quant::Type::Q4_K, 301, 1}, {quant::Type::Q6_K, 64, 1}, {quant::Type::F32, 37, 1},
                          {quant::Type::Q8_0, 130, 0}, {quant::Type::Q4_K, 513, 3}, {quant::Type::F32, 90, 19}};
    std::vector<std::vector<uint8_t>> wq;
    std::vector<backend::cpu::QuantActs> acts(std::size(specs));
    std::vector<backend::cpu::MatJob> jobs;
    std::vector<float> x(size_t(19 * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 104729 % 97) - 48) / 32.0f;
    size_t out = 0;
    std::vector<size_t> at;
    for (size_t k = 0; k < std::size(specs); ++k) {
        const Spec& s = specs[k];
        const quant::Traits& t = quant::traits(s.type);
        const size_t rb = quant::row_size(t, cols);
        std::vector<float> w(size_t(s.rows * cols));
        for (size_t i = 0; i < w.size(); ++i) w[i] = float(int((i + k) * 7919 % 201) - 100) / 64.0f;
        wq.emplace_back(rb * size_t(s.rows));
        if (s.type == quant::Type::F32) std::memcpy(wq.back().data(), w.data(), wq.back().size());
        else
            for (int64_t r = 0; r < s.rows; ++r) t.from_float_ref(w.data() + r * cols, wq.back().data() + size_t(r) * rb, cols);
        backend::cpu::quantize_acts(nullptr, s.type, x.data(), std::max<int64_t>(s.n, 1), cols, cols, acts[k]);
        at.push_back(out);
        out += size_t(s.rows * std::max<int64_t>(s.n, 1));
    }
    auto run = [&](runtime::ThreadPool& pool) {
        std::vector<float> y(out, -1.0f);
        jobs.clear();
        for (size_t k = 0; k < std::size(specs); ++k) {
            backend::Mat W;
            W.type = specs[k].type, W.cols = cols, W.rows = specs[k].rows, W.data = wq[k].data();
            W.row_bytes = quant::row_size(quant::traits(W.type), cols), W.name = "test";
            jobs.push_back(backend::cpu::MatJob{W, &acts[k], specs[k].n, y.data() + at[k], 0});
        }
        backend::cpu::matmul_jobs(pool, jobs.data(), jobs.size());
        return y;
    };
    runtime::ThreadPool one(1);
    const std::vector<float> ref = run(one);
    // Pools with a CPU for each thread: an oversubscribed one takes matmul_jobs' other path.
    const int cpus = runtime::ThreadPool::available_cpus();
    if (cpus < 2) MESSAGE("1 CPU: matmul_jobs' split of rows among threads not exercised");
    for (int n : {2, 3}) {
        if (n > cpus) continue;
        CAPTURE(n);
        runtime::ThreadPool pool(n);
        REQUIRE_FALSE(pool.oversubscribed());
        for (int rep = 0; rep < 20; ++rep) {
            const std::vector<float> y = run(pool);
            REQUIRE(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) == 0);
        }
    }
}
