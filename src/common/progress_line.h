// One progress line on stderr for long work over a known number of bytes (quantize, convert):
// a bar, bytes done of the total, MB/s, the time left and what is being done, rewritten in place
// at most five times a second and cut to the terminal's width. Only when stderr is a terminal:
// logs and pipes get nothing (the first-hour issue's "silent when not a terminal"). clear()
// takes the line away before other output is printed under it (the destructor too, so an error
// starts on a clean line); finish() leaves it as the last state.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <sys/ioctl.h>
#include <unistd.h>

namespace kinfer {

class ProgressLine {
public:
    explicit ProgressLine(uint64_t total_bytes, bool enabled = true)
        : total_(std::max<uint64_t>(total_bytes, 1)), on_(enabled && ::isatty(STDERR_FILENO) == 1), t0_(Clock::now()) {
        winsize ws{};
        if (on_ && ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) cols_ = ws.ws_col;
    }
    // An error printed while the line is up starts on a clean line.
    ~ProgressLine() { clear(); }
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;

    void update(uint64_t done_bytes, const std::string& what = {}) {
        done_ = done_bytes;
        if (!on_) return;
        const auto now = Clock::now();
        if (drawn_ && now - last_ < std::chrono::milliseconds(200)) return;   // also after clear()
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
        // At most 99:59:59 (a slow first chunk can promise years).
        const long left = long(std::min(359999.0, mbs > 0 ? double(total_ - std::min(done_, total_)) / 1e6 / mbs : 0.0));
        constexpr int kWidth = 24;
        char bar[kWidth + 1];
        for (int i = 0; i < kWidth; ++i) bar[i] = i < int(frac * kWidth) ? '=' : ' ';
        bar[kWidth] = 0;
        char line[160];
        int len = std::snprintf(line, sizeof line, "[%s] %5.1f%%  %.1f / %.1f MB  %.0f MB/s  %ld:%02ld:%02ld left", bar,
                                frac * 100, double(done_) / 1e6, double(total_) / 1e6, mbs, left / 3600, left / 60 % 60,
                                left % 60);
        len = std::clamp(len, 0, int(sizeof line) - 1);
        // One row of the terminal: a wrapped line would leave its first rows behind at each redraw.
        const int room = cols_ - 1 - len - 2;
        std::string tail = room > 3 && !what.empty() ? "  " + what.substr(0, size_t(room)) : std::string();
        std::fprintf(stderr, "\r%.*s%s\x1b[K", std::min(len, cols_ - 1), line, tail.c_str());
        std::fflush(stderr);
        shown_ = drawn_ = true;
    }

    uint64_t total_, done_ = 0;
    bool on_, shown_ = false, drawn_ = false;
    int cols_ = 80;
    Clock::time_point t0_, last_{};
};

}  // namespace kinfer
