#include "cli/lib/state_snapshots.h"

#include <algorithm>

namespace kinfer::cli {

void StateSnapshots::after_chunk(const model::Session& s) {
    const int64_t pos = s.n_past();
    if (every_ <= 0 || pos == 0 || pos % every_ != 0) return;
    if (!grid_.empty() && grid_.back().pos >= pos) return;   // already there (a chunk of 0 tokens)
    grid_.push_back(s.snapshot());
}

void StateSnapshots::at_prompt_end(const model::Session& s) {
    if (every_ <= 0 || s.n_past() == 0) return;
    if (!grid_.empty() && grid_.back().pos == s.n_past()) {   // the grid has this one already
        prompt_end_.reset();
        return;
    }
    prompt_end_ = s.snapshot();
}

const model::Session::Snapshot* StateSnapshots::at_or_before(int64_t pos) const {
    const model::Session::Snapshot* best = nullptr;
    for (const auto& g : grid_)
        if (g.pos <= pos) best = &g;
    if (prompt_end_ && prompt_end_->pos <= pos && (!best || prompt_end_->pos > best->pos)) best = &*prompt_end_;
    return best;
}

void StateSnapshots::drop_after(int64_t pos) {
    grid_.erase(std::remove_if(grid_.begin(), grid_.end(), [&](const auto& g) { return g.pos > pos; }), grid_.end());
    if (prompt_end_ && prompt_end_->pos > pos) prompt_end_.reset();
}

size_t StateSnapshots::bytes() const {
    size_t b = prompt_end_ ? prompt_end_->bytes() : 0;
    for (const auto& g : grid_) b += g.bytes();
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
