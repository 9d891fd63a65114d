// libFuzzer target for the KL-divergence base file (`perplexity --kl-divergence-base FILE`,
// read back by `--kl-divergence`): any file must either open, after which reading its records
// chunk by chunk works until it throws at the end of the file; or throw kinfer::Error. Crashes,
// hangs, sanitizer reports (including an allocation far beyond the file's size) and other
// exceptions are bugs.
#include "cli/lib/kld_file.h"

#include "fuzz_util.h"

#include <memory>
#include <vector>

using namespace kinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string in = fuzz::scratch_path("base.kld");
    fuzz::write_file(in, data, size);
    std::unique_ptr<ppl::KldReader> r;
    if (!fuzz::tolerate([&] { r = std::make_unique<ppl::KldReader>(in); })) return 0;
    if (r->tokens.size() != size_t(r->n_ctx) * r->n_chunk) __builtin_trap();
    if (ppl::hash_tokens(r->tokens) != r->tokens_hash) __builtin_trap();
    // What --kl-divergence reads per chunk: (n_ctx - 1 - n_ctx/2) positions of one record each.
    // Records are read in bounded pieces, as many as the file can hold.
    const size_t per_chunk = size_t(r->n_ctx - 1 - r->n_ctx / 2) * std::min<size_t>(r->n_vocab, 1 << 16);
    std::vector<uint16_t> buf(std::min<size_t>(per_chunk, 1 << 16));
    size_t left = size / 2 + 1;
    while (!buf.empty() && left > 0) {
        if (!fuzz::tolerate([&] { r->read_records(buf.data(), buf.size()); })) break;
        fuzz::sink(buf[0]);
        left -= std::min(left, buf.size());
    }
    return 0;
}
