// libFuzzer target for routing traces (`kinfer bench --routing-replay FILE`): any file must
// either load, after which replay onto the trace's own shape and onto every shape check_replay
// accepts stays in range, and save + load gives the same trace; or throw kinfer::Error.
// Crashes, hangs, sanitizer reports, other exceptions and broken round trips are bugs.
#include "runtime/routing_trace.h"

#include "fuzz_util.h"

#include <vector>

using namespace kinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string in = fuzz::scratch_path("trace.in"), out = fuzz::scratch_path("trace.out");
    fuzz::write_file(in, data, size);
    runtime::RoutingTrace t;
    if (!fuzz::tolerate([&] { t = runtime::RoutingTrace::load(in); })) return 0;
    const int64_t n_tok = t.n_tokens();
    // The trace's own shape, then twice its experts (r = 2) and another layer count.
    const int shapes[3][3] = {{t.n_layer(), t.n_expert(), t.k()},
                              {t.n_layer() + 1, 2 * t.n_expert(), 2 * t.k()},
                              {1, t.n_expert(), t.k()}};
    for (const auto& s : shapes) {
        if (s[2] <= 0 || s[2] > 4096 || s[0] <= 0) continue;
        if (!fuzz::tolerate([&] { t.check_replay(s[0], s[1], s[2]); })) continue;
        std::vector<int32_t> sel(static_cast<size_t>(s[2]));
        for (int64_t tok : {int64_t(0), int64_t(1), n_tok - 1, n_tok, n_tok + 7}) {
            if (tok < 0) continue;
            for (int l = 0; l < s[0] && l < 4; ++l) {
                t.replay(tok, l, s[1], s[2], sel.data());
                for (int32_t e : sel)
                    if (e < 0 || e >= s[1]) __builtin_trap();   // an expert the model does not have
            }
        }
    }
    if (n_tok <= 4096) {
        t.save(out);
        const auto u = runtime::RoutingTrace::load(out);
        if (u.n_tokens() != n_tok || u.n_layer() != t.n_layer() || u.n_expert() != t.n_expert() || u.k() != t.k())
            __builtin_trap();
    }
    return 0;
}
