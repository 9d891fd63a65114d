// One progress line on stderr for long work over a known number of bytes (quantize, convert):
// what is being done, a bar, bytes done of the total, MB/s and the time left, rewritten in
// place at most five times a second. Only when stderr is a terminal: logs and pipes get nothing
// (the "silent when not a terminal"). clear() takes the line away before other output is
// printed under it; finish() leaves it as the last state.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>

namespace kinfer {

class ProgressLine {
public:
    ProgressLine(uint64_t total_bytes, bool enabled = true)
        : total_(std::max<uint64_t>(total_bytes, 1)), on_(enabled && ::isatty(STDERR_FILENO) == 1), t0_(Clock::now()) {}

    void update(uint64_t done_bytes, const std::string& what = {}) {
        done_ = done_bytes;
        if (!on_) return;
        const auto now = Clock::now();
        if (shown_ && now - last_ < std::chrono::milliseconds(200)) return;
        last_ = now;
        draw(what, now);
    }
    void add(uint64_t bytes, const std::string& what = {}) { update(done_ + bytes, what); }
    void clear() {
        if (!shown_) return;
        std::fputs("\r\x1b[K", stderr);
        std::fflush(stderr);
        shown_ = false;
    }
    void finish() {
        if (!on_) return;
        draw({}, Clock::now());
        std::fputc('\n', stderr);
        shown_ = false;
    }

private:
    using Clock = std::chrono::steady_clock;
    void draw(const std::string& what, Clock::time_point now) {
        const double s = std::chrono::duration<double>(now - t0_).count();
        const double frac = std::min(1.0, double(done_) / double(total_));
        const double mbs = s > 0 ? double(done_) / 1e6 / s : 0.0;
        const double left = mbs > 0 ? double(total_ - std::min(done_, total_)) / 1e6 / mbs : 0.0;
        constexpr int kWidth = 24;
        char bar[kWidth + 1];
        for (int i = 0; i < kWidth; ++i) bar[i] = i < int(frac * kWidth) ? '=' : ' ';
        bar[kWidth] = 0;
        std::fprintf(stderr, "\r[%s] %5.1f%%  %.1f / %.1f MB  %.0f MB/s  %d:%02d left  %s\x1b[K", bar, frac * 100,
                     double(done_) / 1e6, double(total_) / 1e6, mbs, int(left) / 60, int(left) % 60, what.c_str());
        std::fflush(stderr);
        shown_ = true;
    }

    uint64_t total_, done_ = 0;
    bool on_, shown_ = false;
    Clock::time_point t0_, last_{};
};

}  // namespace kinfer
