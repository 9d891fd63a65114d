#include "cli/lib/state_snapshots.h"

#include <algorithm>

namespace kinfer::cli {

void StateSnapshots::after_chunk(const model::Session& s) {
    const int64_t pos = s.n_past();
    if (every_ <= 0 || pos == 0 || pos % every_ != 0) return;
    if (!grid_.empty() && grid_.back().pos >= pos) return;   // already there (a chunk of 0 tokens)
    grid_.push_back(s.snapshot());
}

void StateSnapshots::end_of_prompt(std::optional<model::Session::Snapshot> turn_start, const model::Session& s) {
    turn_.clear();
    if (every_ <= 0) return;
    // Position 0 needs none (a reset); a position the grid holds, no second copy. A turn's start
    // is where the last reply's decoding ended, which the prefill grid does not see.
    auto held = [&](int64_t pos) {
        return pos == 0 || std::any_of(grid_.begin(), grid_.end(), [&](const auto& g) { return g.pos == pos; }) ||
               std::any_of(turn_.begin(), turn_.end(), [&](const auto& g) { return g.pos == pos; });
    };
    if (turn_start && !held(turn_start->pos)) turn_.push_back(std::move(*turn_start));
    if (!held(s.n_past())) turn_.push_back(s.snapshot());
}

const model::Session::Snapshot* StateSnapshots::at_or_before(int64_t pos) const {
    const model::Session::Snapshot* best = nullptr;
    for (const auto* list : {&grid_, &turn_})
        for (const auto& g : *list)
            if (g.pos <= pos && (!best || g.pos > best->pos)) best = &g;
    return best;
}

void StateSnapshots::drop_after(int64_t pos) {
    for (auto* list : {&grid_, &turn_})
        list->erase(std::remove_if(list->begin(), list->end(), [&](const auto& g) { return g.pos > pos; }), list->end());
}

size_t StateSnapshots::bytes() const {
    size_t b = 0;
    for (const auto* list : {&grid_, &turn_})
        for (const auto& g : *list) b += g.bytes();
    return b;
}

int64_t default_snapshot_every(const model::Session& s) {
    const int64_t batch = std::max<int64_t>(1, s.options().n_batch);
    const size_t per_token = s.latent_bytes_per_token();
    // No MLA layers: the snapshots are the only memory that grows; one per 16 chunks.
    const int64_t raw = per_token ? int64_t((s.snapshot_bytes() + per_token - 1) / per_token) : 16 * batch;
    const int64_t every = (raw + batch - 1) / batch * batch;
    return std::max(every, 4 * batch);
}

}  // namespace kinfer::cli
