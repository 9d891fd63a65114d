// How one pass of several products (matmul_jobs) divides its weight rows among the pool's tasks.
//
// Each task owns one contiguous region of the rows, all jobs laid end to end, of about equal cost;
// the pool runs one task a thread (unless a worker starts late), so each thread streams one long
// run of the weights (DESIGN.md section 5). Equal cost is not equal time: two threads of one machine read memory at different rates from pass to pass
// (2-vCPU Xeon VM, k3-wide Q4_K_M decode: one thread idle 10 % of the time waiting for the other,
// either one). So a task that has finished its region takes the last pieces of a region whose
// owner is still at work. The owner claims from its front, helpers from its back, each claim half
// of what is left (and no less than a minimum piece): the owner's first claims are long runs that
// keep its streams going, and the pieces left for the end, when help arrives, are short.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace kinfer::backend::cpu {

class RowSplit {
public:
    // Job i has units[i] units (groups of rows) of cost[i] each; `parts` regions of about equal
    // cost; no claim smaller than min_units (but the last of a region). Not thread-safe: set up
    // before the pass, then claim() from the pass's tasks.
    void reset(const int64_t* units, const double* cost, size_t jobs, int parts, int64_t min_units);

    // The next piece [begin, end) of units (all jobs end to end) for the task that owns region
    // `own`: from its own region's front while any is left, then from the back of the others'
    // (`cursor` remembers which, start it at 0). False when every unit has been claimed.
    bool claim(int own, int& cursor, int64_t& begin, int64_t& end);

    // Calls f(job, first_unit, end_unit) for each job's part of the piece [begin, end), units
    // counted within the job.
    template <class F>
    void for_each_job(int64_t begin, int64_t end, F&& f) const {
        size_t j = job_of(begin);
        for (; begin < end; ++j) {
            const int64_t e = std::min(end, first_[j + 1]);
            if (begin < e) f(j, begin - first_[j], e - first_[j]);
            begin = e;
        }
    }

    int64_t total_units() const { return first_.empty() ? 0 : first_.back(); }
    // The first unit of region r (r = parts: the end), as reset() drew them.
    int64_t region_start(int r) const { return bounds_[r]; }

private:
    size_t job_of(int64_t unit) const;
    // A piece of region r from its front (the owner) or its back (a helper).
    bool take(int r, bool front, int64_t& begin, int64_t& end);

    // A region's unclaimed units: front in the low 32 bits, back in the high 32, one atomic so
    // that the owner and a helper never claim the same unit. A cache line each.
    struct alignas(64) Region {
        std::atomic<uint64_t> front_back{0};
    };
    std::unique_ptr<Region[]> regions_;
    int capacity_ = 0;
    int parts_ = 0;
    int64_t min_units_ = 1;
    std::vector<int64_t> first_;    // first_[i]: job i's first unit; first_[jobs]: the total
    std::vector<int64_t> bounds_;   // bounds_[r]: region r's first unit; bounds_[parts]: the total
};

}  // namespace kinfer::backend::cpu
