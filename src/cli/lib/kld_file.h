// The file `perplexity --kl-divergence-base` writes and `--kl-divergence` reads: the base model's
// log-probabilities at every scored position, 2 bytes per vocabulary entry (the encoding of
// perplexity_stats.h), plus what is needed to refuse a mismatched pairing: the vocabulary size,
// the window size and a hash of the token stream.
//
// Layout (little-endian): "KINFKLD1" | u32 n_ctx | u32 n_vocab | u32 n_chunk | u32 reserved |
// u64 fnv1a64(tokens) | i32 tokens[n_chunk * n_ctx] | per chunk, per scored position: record.
#pragma once
#include "common/safe_file.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kinfer::ppl {

uint64_t hash_tokens(const std::vector<int32_t>& tokens);

class KldWriter {
public:
    // Writes to a TempFile beside `path` (common/safe_file.h); finish() renames it into place,
    // destruction without finish() removes it.
    KldWriter(std::string path, uint32_t n_ctx, uint32_t n_vocab, uint32_t n_chunk, const std::vector<int32_t>& tokens);
    void write_records(const uint16_t* recs, size_t n_u16);
    void finish();

private:
    kinfer::TempFile tmp_;
};

class KldReader {
public:
    explicit KldReader(const std::string& path);
    ~KldReader();
    uint32_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
    uint64_t tokens_hash = 0;
    std::vector<int32_t> tokens;
    // Reads the next n_u16 values; throws naming the file and offset when it is short.
    void read_records(uint16_t* recs, size_t n_u16);

private:
    std::string path_;
    FILE* f_ = nullptr;
};

}  // namespace kinfer::ppl
