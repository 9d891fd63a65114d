// Range checks for numeric flags, as CLI11 validators whose message is one line naming the value
// and the range ("--temp: -1 is outside 0..100"; CLI11 puts the flag name first). NaN and text
// that is not a number fail too. main.cpp turns every such error into exit code 2.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string_view>

namespace kinfer::cli {

// A real number in [lo, hi]; with lo_open, in (lo, hi].
CLI::Validator real_in(double lo, double hi, bool lo_open = false);
// An integer in [lo, hi] (no fraction, no exponent).
CLI::Validator int_in(int64_t lo, int64_t hi);

// "141GiB" or, with allow_count, "8x141GiB": a count (1 when absent) and a size in bytes
// (K/M/G/T, with or without iB, are powers of 1024: runtime::parse_bytes). The one size parser
// of the machine flags (info --plan --gpu / --ram); throws kinfer::Error with the expected form
// for anything else, a zero count or size included.
struct SizeSpec {
    int count = 1;
    uint64_t bytes = 0;
};
SizeSpec parse_size_spec(std::string_view s, bool allow_count);
// parse_size_spec as a validator.
CLI::Validator size_in(bool allow_count);

// The ranges kinfer uses for the same flag in every command.
constexpr int64_t kMaxThreads = 512;
constexpr int64_t kMaxCtx = int64_t(1) << 30;     // 1 G tokens: far past K3's 1 M context
constexpr int64_t kMaxBatch = int64_t(1) << 20;

}  // namespace kinfer::cli
