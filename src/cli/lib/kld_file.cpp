#include "cli/lib/kld_file.h"

#include "common/error.h"

#include <cerrno>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace kinfer::ppl {

namespace {
constexpr char kMagic[8] = {'K', 'I', 'N', 'F', 'K', 'L', 'D', '1'};
}

uint64_t hash_tokens(const std::vector<int32_t>& tokens) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : tokens) {
        uint32_t u = uint32_t(t);
        for (int b = 0; b < 4; ++b) {
            h ^= (u >> (8 * b)) & 0xff;
            h *= 1099511628211ull;
        }
    }
    return h;
}

KldWriter::KldWriter(std::string path, uint32_t n_ctx, uint32_t n_vocab, uint32_t n_chunk,
                     const std::vector<int32_t>& tokens)
    : tmp_(std::move(path)) {
    FILE* f = tmp_.file();
    const uint32_t hdr[4] = {n_ctx, n_vocab, n_chunk, 0};
    const uint64_t h = hash_tokens(tokens);
    bool ok = std::fwrite(kMagic, 1, 8, f) == 8 && std::fwrite(hdr, 4, 4, f) == 4 && std::fwrite(&h, 8, 1, f) == 1 &&
              std::fwrite(tokens.data(), 4, tokens.size(), f) == tokens.size();
    if (!ok) fail("{}: write failed: {}", tmp_.temp_path(), std::strerror(errno));
}

void KldWriter::write_records(const uint16_t* recs, size_t n) {
    if (std::fwrite(recs, 2, n, tmp_.file()) != n) fail("{}: write failed: {}", tmp_.temp_path(), std::strerror(errno));
}

void KldWriter::finish() { tmp_.commit(); }

KldReader::KldReader(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) fail("{}: cannot open: {}", path, std::strerror(errno));
    // A constructor that throws runs no destructor: close the file on every failure below
    // (fuzz_kld_base ran out of descriptors without this).
    struct CloseOnThrow {
        FILE*& f;
        bool armed = true;
        ~CloseOnThrow() {
            if (armed && f) std::fclose(f), f = nullptr;
        }
    } guard{f_};
    char magic[8];
    uint32_t hdr[4];
    if (std::fread(magic, 1, 8, f_) != 8 || std::memcmp(magic, kMagic, 8) != 0)
        fail("{}: at byte 0: expected the magic 'KINFKLD1' of a kinfer --kl-divergence-base file", path);
    if (std::fread(hdr, 4, 4, f_) != 4 || std::fread(&tokens_hash, 8, 1, f_) != 1)
        fail("{}: at byte 8: truncated header", path);
    n_ctx = hdr[0];
    n_vocab = hdr[1];
    n_chunk = hdr[2];
    if (n_ctx < 2 || n_vocab == 0 || n_chunk == 0 || uint64_t(n_ctx) * n_chunk > (1ull << 32))
        fail("{}: at byte 8: implausible header (n_ctx {}, n_vocab {}, n_chunk {})", path, n_ctx, n_vocab, n_chunk);
    // Check the header's token count against the file before allocating for it: a tiny file must
    // not make the reader reserve gigabytes (found by fuzz_kld_base).
    struct stat st {};
    const uint64_t want = uint64_t(n_ctx) * n_chunk * 4;
    if (fstat(fileno(f_), &st) == 0 && uint64_t(st.st_size) < 32 + want)
        fail("{}: at byte 32: expected {} token ids, the file is shorter", path, uint64_t(n_ctx) * n_chunk);
    tokens.resize(size_t(n_ctx) * n_chunk);
    if (std::fread(tokens.data(), 4, tokens.size(), f_) != tokens.size())
        fail("{}: at byte 32: expected {} token ids, the file is shorter", path, tokens.size());
    if (hash_tokens(tokens) != tokens_hash) fail("{}: at byte 24: token hash does not match the stored tokens", path);
    guard.armed = false;
}

KldReader::~KldReader() {
    if (f_) std::fclose(f_);
}

void KldReader::read_records(uint16_t* recs, size_t n) {
    const long at = std::ftell(f_);
    if (std::fread(recs, 2, n, f_) != n) fail("{}: at byte {}: expected {} more bytes of log-probabilities, the file ends", path_, at, 2 * n);
}

}  // namespace kinfer::ppl
