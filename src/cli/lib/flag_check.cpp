#include "cli/lib/flag_check.h"

#include "common/error.h"
#include "runtime/device.h"

#include <cctype>
#include <cerrno>
#include <charconv>
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

SizeSpec parse_size_spec(std::string_view s, bool allow_count) {
    const char* form = allow_count ? "a size like 141GiB, or COUNTxSIZE like 8x141GiB" : "a size like 2TiB or 512GiB";
    const std::string whole(s);
    SizeSpec r;
    const size_t x = s.find_first_of("xX");
    if (x != std::string_view::npos) {
        if (!allow_count) fail("'{}' is not a size (expected {})", whole, form);
        const std::string_view c = s.substr(0, x);
        const auto [end, ec] = std::from_chars(c.data(), c.data() + c.size(), r.count);
        if (c.empty() || ec != std::errc() || end != c.data() + c.size() || r.count < 1 || r.count > 4096)
            fail("'{}': the count before 'x' must be 1..4096 (expected {})", whole, form);
        s = s.substr(x + 1);
    }
    // parse_bytes takes what stod takes ("inf", " 1"); a size here starts with a digit.
    if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) fail("'{}' is not a size (expected {})", whole, form);
    r.bytes = runtime::parse_bytes(s);
    if (r.bytes == 0) fail("'{}' is an empty size (expected {})", whole, form);
    return r;
}

CLI::Validator size_in(bool allow_count) {
    return CLI::Validator(
        [=](std::string& s) -> std::string {
            try {
                parse_size_spec(s, allow_count);
            } catch (const Error& e) {
                return e.what();
            }
            return {};
        },
        allow_count ? "[COUNTx]SIZE" : "SIZE");
}

}  // namespace kinfer::cli
