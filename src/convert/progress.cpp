// See progress.h.
#include "convert/progress.h"

#include <cstdio>
#include <unistd.h>

namespace kinfer::convert {

Progress::Progress(uint64_t total, bool enabled)
    : total_(total ? total : 1), enabled_(enabled), tty_(::isatty(2) != 0),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void Progress::add(uint64_t bytes) {
    done_ += bytes;
    draw(false);
}

void Progress::draw(bool force) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double frac = double(done_) / double(total_);
    if (tty_) {
        if (!force && now - last_draw_ < std::chrono::milliseconds(200)) return;
    } else {
        const int decile = int(frac * 10);
        if (!force && decile == last_decile_) return;
        last_decile_ = decile;
    }
    last_draw_ = now;
    const double mbs = secs > 0 ? double(done_) / 1e6 / secs : 0;
    const double left = mbs > 0 ? double(total_ - std::min(done_, total_)) / 1e6 / mbs : 0;
    constexpr int kWidth = 30;
    char bar[kWidth + 1];
    const int filled = int(frac * kWidth);
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '=' : ' ';
    bar[kWidth] = 0;
    std::fprintf(stderr, "%s[%s] %5.1f%%  %.1f / %.1f MB  %.0f MB/s  %d:%02d left%s", tty_ ? "\r" : "", bar,
                 frac * 100, double(done_) / 1e6, double(total_) / 1e6, mbs, int(left) / 60, int(left) % 60,
                 tty_ ? "" : "\n");
    std::fflush(stderr);
}

void Progress::finish() {
    if (!enabled_) return;
    draw(true);
    if (tty_) std::fputc('\n', stderr);
}

}  // namespace kinfer::convert
