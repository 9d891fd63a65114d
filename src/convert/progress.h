// A one-line progress bar on stderr for long conversions: bytes done, MB/s, time left.
// Redraws at most a few times per second; on a non-terminal it prints a line every 10 %.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace kinfer::convert {

class Progress {
public:
    Progress(uint64_t total_bytes, bool enabled);
    void add(uint64_t bytes);
    void finish();

private:
    void draw(bool force);
    uint64_t total_, done_ = 0;
    bool enabled_, tty_;
    int last_decile_ = -1;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace kinfer::convert
