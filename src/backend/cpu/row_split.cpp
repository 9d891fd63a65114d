#include "backend/cpu/row_split.h"

#include "common/error.h"

#include <algorithm>
#include <cmath>

namespace kinfer::backend::cpu {

namespace {
constexpr uint64_t pack(int64_t front, int64_t back) { return uint64_t(front) | uint64_t(back) << 32; }
constexpr int64_t front_of(uint64_t v) { return int64_t(v & 0xffffffffu); }
constexpr int64_t back_of(uint64_t v) { return int64_t(v >> 32); }
}  // namespace

void RowSplit::reset(const int64_t* units, const double* cost, size_t jobs, int parts, int64_t min_units) {
    if (parts < 1) fail("RowSplit: {} parts", parts);
    first_.assign(jobs + 1, 0);
    double total_cost = 0;
    for (size_t i = 0; i < jobs; ++i) {
        first_[i + 1] = first_[i] + units[i];
        total_cost += double(units[i]) * cost[i];
    }
    if (first_.back() >= (int64_t(1) << 32)) fail("RowSplit: {} row groups, more than 2^32", first_.back());
    // Region r starts at the first unit whose cost before it reaches r / parts of the total.
    bounds_.assign(size_t(parts) + 1, first_.back());
    bounds_[0] = 0;
    double before = 0;   // the cost of the jobs before job i
    int r = 1;
    for (size_t i = 0; i < jobs && r < parts; ++i) {
        const double job_cost = double(units[i]) * cost[i];
        for (; r < parts && total_cost * r / parts < before + job_cost; ++r) {
            const double into = (total_cost * r / parts - before) / cost[i];   // units of job i before it
            bounds_[r] = first_[i] + std::clamp<int64_t>(int64_t(std::ceil(into)), 0, units[i]);
        }
        before += job_cost;
    }
    if (parts > capacity_) {
        regions_ = std::make_unique<Region[]>(size_t(parts));
        capacity_ = parts;
    }
    parts_ = parts;
    min_units_ = std::max<int64_t>(1, min_units);
    for (int p = 0; p < parts; ++p) regions_[p].front_back.store(pack(bounds_[p], bounds_[p + 1]), std::memory_order_relaxed);
}

size_t RowSplit::job_of(int64_t unit) const {
    // The last job whose first unit is <= unit (jobs without units share their successor's).
    return size_t(std::upper_bound(first_.begin(), first_.end() - 1, unit) - first_.begin()) - 1;
}

bool RowSplit::take(int r, bool front, int64_t& begin, int64_t& end) {
    std::atomic<uint64_t>& fb = regions_[r].front_back;
    uint64_t cur = fb.load(std::memory_order_relaxed);
    for (;;) {
        const int64_t f = front_of(cur), b = back_of(cur);
        if (f >= b) return false;
        // Half of what is left (the owner rounds up), no less than the minimum piece.
        const int64_t n = std::min(b - f, std::max(min_units_, (b - f + (front ? 1 : 0)) / 2));
        if (fb.compare_exchange_weak(cur, front ? pack(f + n, b) : pack(f, b - n), std::memory_order_relaxed)) {
            begin = front ? f : b - n, end = front ? f + n : b;
            return true;
        }
    }
}

bool RowSplit::claim(int own, int& cursor, int64_t& begin, int64_t& end) {
    // cursor 0: the own region; k > 0: region own + k (mod parts), helped from its back.
    if (cursor == 0) {
        if (take(own, true, begin, end)) return true;
        cursor = 1;
    }
    for (; cursor < parts_; ++cursor)
        if (take((own + cursor) % parts_, false, begin, end)) return true;
    return false;
}

}  // namespace kinfer::backend::cpu
