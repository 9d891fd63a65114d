#include "cli/lib/flag_check.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>

namespace kinfer::cli {

namespace {
std::string num(double v) { return fmt::format("{:g}", v); }
}  // namespace

CLI::Validator real_in(double lo, double hi, bool lo_open) {
    const std::string range = lo_open ? fmt::format("more than {} and at most {}", num(lo), num(hi))
                                      : fmt::format("{}..{}", num(lo), num(hi));
    return CLI::Validator(
        [=](std::string& s) -> std::string {
            char* end = nullptr;
            errno = 0;
            const double v = std::strtod(s.c_str(), &end);
            if (s.empty() || end == s.c_str() || *end != '\0') return fmt::format("'{}' is not a number (range {})", s, range);
            const bool ok = (lo_open ? v > lo : v >= lo) && v <= hi;   // false for NaN
            if (!ok) return fmt::format("{} is outside the range {}", s, range);
            return {};
        },
        lo_open ? "(" + num(lo) + ".." + num(hi) + "]" : num(lo) + ".." + num(hi));
}

CLI::Validator int_in(int64_t lo, int64_t hi) {
    const std::string range = fmt::format("{}..{}", lo, hi);
    return CLI::Validator(
        [=](std::string& s) -> std::string {
            char* end = nullptr;
            errno = 0;
            const long long v = std::strtoll(s.c_str(), &end, 10);
            if (s.empty() || end == s.c_str() || *end != '\0') return fmt::format("'{}' is not an integer (range {})", s, range);
            if (errno == ERANGE || v < lo || v > hi) return fmt::format("{} is outside the range {}", s, range);
            return {};
        },
        range);
}

}  // namespace kinfer::cli
