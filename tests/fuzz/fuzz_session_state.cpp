// libFuzzer target for Session::load_state, the parser behind --prompt-cache files and chat's
// /load-state. A random file stops at the checksum, so the input is mostly edits to a real state:
// one of the shipped tiny models prefills a few tokens and saves its state with an extra section
// holding a sampler's state (as chat keeps it); the edits then overwrite bytes, cut or grow the
// file, and the checksum is recomputed unless the input says not to. load_state must either
// throw kinfer::Error with the session unchanged (it still decodes, and the same state saved
// before reloads), or load, after which the session decodes a token. The extra bytes it hands
// over go to Sampler::load_state, which must load them or throw kinfer::Error. Crashes, hangs,
// sanitizer reports and other exceptions are bugs.
//
// Input: byte 0: bit 0 picks the model (k3 / kl), bit 1 keeps the damaged checksum, bit 2 feeds
// the input's remaining bytes as the whole file instead; then 6-byte edits: u8 op, u8 value,
// u32 offset (op 0: set the byte, 1: truncate to the offset, 2: append value-filled bytes, 3: add
// value to a little-endian u32 there).
#include "fuzz_util.h"

#include "common/fnv1a.h"
#include "model/model.h"
#include "model/session.h"
#include "text/sampler.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace kinfer;

namespace {

struct Base {
    std::unique_ptr<model::Model> model;
    std::unique_ptr<model::Session> session;
    std::vector<uint8_t> state;   // the session's state after its prompt
};

Base make(const char* file) {
    Base b;
    b.model = model::Model::load(std::string(KINFER_TEST_DATA_DIR) + "/models/" + file);
    model::SessionOptions opt;
    opt.n_ctx = 64;
    opt.n_batch = 8;
    opt.n_threads = 1;
    b.session = std::make_unique<model::Session>(*b.model, opt);
    const int32_t ids[5] = {1, 2, 3, 4, 5};
    b.session->prefill(ids);
    text::SamplerParams sp;
    sp.seed = 7;
    text::Sampler smp(sp, size_t(b.model->hparams().n_vocab));
    for (int32_t id : {3, 9, 27}) smp.accept(id);
    const std::string extra = smp.save_state();
    b.state = b.session->save_state({reinterpret_cast<const uint8_t*>(extra.data()), extra.size()});
    return b;
}

Base& base(int which) {
    static Base k3 = make("k3-tiny-a-Q4_K_M.gguf");
    static Base kl = make("kl-tiny-a-Q4_K_M.gguf");
    return which ? kl : k3;
}

void edit(std::vector<uint8_t>& f, const uint8_t* e) {
    uint32_t off;
    std::memcpy(&off, e + 2, 4);
    switch (e[0] % 4) {
        case 0:
            if (!f.empty()) f[off % f.size()] = e[1];
            break;
        case 1: f.resize(std::min<size_t>(f.size(), off % (f.size() + 1))); break;
        case 2: f.insert(f.end(), off % 4096, e[1]); break;
        default:
            if (f.size() >= 4) {
                const size_t at = off % (f.size() - 3);
                uint32_t v;
                std::memcpy(&v, f.data() + at, 4);
                v += uint32_t(e[1]) | (uint32_t(int8_t(e[1]) < 0 ? 0xffffff00u : 0));   // small +/- steps
                std::memcpy(f.data() + at, &v, 4);
            }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    Base& b = base(data[0] & 1);
    std::vector<uint8_t> f;
    if (data[0] & 4) {
        f.assign(data + 1, data + size);
    } else {
        f = b.state;
        for (size_t i = 1; i + 6 <= size && i < 1 + 6 * 32; i += 6) edit(f, data + i);
        if (!(data[0] & 2) && f.size() >= 8) {
            const uint64_t sum = fnv1a(f.data(), f.size() - 8);
            std::memcpy(f.data() + f.size() - 8, &sum, 8);
        }
    }
    model::Session& s = *b.session;
    const size_t n_vocab = size_t(b.model->hparams().n_vocab);
    const bool loaded = fuzz::tolerate([&] {
        s.load_state(f, [&](std::span<const uint8_t> x) {
            fuzz::tolerate([&] {
                text::Sampler smp(text::SamplerParams{}, n_vocab);
                smp.load_state(std::string_view(reinterpret_cast<const char*>(x.data()), x.size()));
                fuzz::sink(smp.save_state());
            });
        });
    });
    // Loaded or refused, the session must decode; then it goes back to the saved state, which
    // must load (a refusal must not have left it half-changed).
    fuzz::tolerate([&] {
        if (s.n_past() < 64) s.decode(6);
        if (s.logits().size() != size_t(b.model->hparams().n_vocab)) __builtin_trap();
    });
    fuzz::sink(uint64_t(loaded));
    s.load_state(b.state);   // throws (a bug, reported by libFuzzer) if the good state no longer loads
    return 0;
}
