// The state snapshots chat keeps so that an edit of the conversation (/regen, a /load that
// shares a prefix) restarts near the edit instead of re-reading everything: a hybrid model
// cannot take tokens back out of its KDA state, so going back needs a copy of that state taken
// at or before the point of the edit (Session::snapshot; the latent cache is just cut there).
//
// Two kinds: one every `every` tokens of a prefill (on the grid: positions that are multiples of
// every), kept while the tokens before them stay; and the last turn's own two, at its start (the
// end of the previous reply, which no prefill grid covers) and at the end of its prompt, where
// /regen restarts (then nothing is re-read at all).
#pragma once
#include "model/session.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace kinfer::cli {

class StateSnapshots {
public:
    explicit StateSnapshots(int64_t every = 0) : every_(every) {}
    int64_t every() const { return every_; }   // 0: no snapshots (an edit re-reads from the start)

    // After a prefill chunk: takes a snapshot when the session sits on the grid.
    void after_chunk(const model::Session& s);
    // A turn's prompt is read: keeps the snapshot taken at its start (none for the first
    // turn) and takes one at its end, in place of the previous turn's two.
    void end_of_prompt(std::optional<model::Session::Snapshot> turn_start, const model::Session& s);

    // The latest snapshot at or before pos; nullptr when there is none (start from 0).
    const model::Session::Snapshot* at_or_before(int64_t pos) const;
    void drop_after(int64_t pos);   // the tokens after pos are going away
    void clear() {
        grid_.clear();
        turn_.clear();
    }
    size_t count() const { return grid_.size() + turn_.size(); }
    size_t bytes() const;

private:
    int64_t every_;
    std::vector<model::Session::Snapshot> grid_;   // ascending positions
    std::vector<model::Session::Snapshot> turn_;   // the last turn's start and prompt end, off the grid
};

// The default spacing for a session: one snapshot then costs about what the latent cache holds
// for that many tokens, so a conversation's snapshots take at most about as much memory as its
// latent cache. Rounded up to a multiple of n_batch (a restart from a grid snapshot repeats the
// chunks of the first reading) and at least 4 * n_batch, so short chats take few copies.
int64_t default_snapshot_every(const model::Session& s);

}  // namespace kinfer::cli
