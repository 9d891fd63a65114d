// Helpers of the expert-store tests: the tiny models, a byte check of acquired experts, and a
// pass that acquires every expert once.
#pragma once
#include "test_util.h"

#include "gguf/reader.h"
#include "model/hparams.h"
#include "model/session.h"
#include "model/tensor_list.h"
#include "runtime/expert_store.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace kinfer::test {

inline int n_layer_of(const gguf::File& f) { return int(f.get_int(f.architecture() + ".block_count")); }
// The routed expert tensors of each layer, by the model's tensor list.
inline runtime::ExpertTensorNames expert_names(const gguf::File& f) {
    return model::expert_tensor_names(model::load_hparams(f));
}

// True when every part of r holds exactly the bytes of the expert's slices in the mapping
// (after waiting, on the host, for a device copy still in flight).
inline bool same_bytes(runtime::ExpertStore& s, const runtime::ExpertRef& r) {
    s.wait(r);
    const auto& L = s.layout().layers[size_t(r.layer)];
    for (int p = 0; p < 3; ++p)
        if (std::memcmp(r.part[p], s.layout().mapped(r.layer, p, r.expert), L.slice[p]) != 0) return false;
    return true;
}

// Acquires every expert of every layer (routing them first, one layer at a time, k at a time)
// and checks the bytes.
inline void check_all(runtime::ExpertStore& s, int k = 4) {
    const auto& lay = s.layout();
    for (int l = 0; l < lay.n_layer; ++l) {
        if (!lay.layers[size_t(l)].present()) continue;
        for (int e0 = 0; e0 < lay.n_expert; e0 += k) {
            std::vector<int32_t> sel;
            for (int e = e0; e < std::min(e0 + k, lay.n_expert); ++e) sel.push_back(e);
            s.route(l, sel, 1);
            for (int32_t e : sel) {
                runtime::ExpertRef r = s.acquire(l, e);
                REQUIRE_MESSAGE(same_bytes(s, r), "layer " << l << " expert " << e << " tier " << runtime::tier_name(r.tier));
                s.release(r);
            }
        }
    }
}

// The session the store tests run: a 64-token context, 2 threads, prefill chunks of n_batch.
inline model::SessionOptions small_session(int n_batch) {
    model::SessionOptions so;
    so.n_ctx = 64;
    so.n_batch = n_batch;
    so.n_threads = 2;
    return so;
}

// A fixed pseudo-random prompt of n_prompt tokens prefilled in chunks of so.n_batch, then n_gen
// tokens decoded one by one: the logits of every prefilled position, then of every decode step.
struct TokenRun {
    std::vector<float> prefill, decode;
};
inline TokenRun run_tokens(const model::Model& m, const model::SessionOptions& so, int n_prompt, int n_gen) {
    model::Session s(m, so);
    const int64_t V = m.hparams().n_vocab;
    std::vector<int32_t> ids;
    for (int i = 0; i < n_prompt; ++i) ids.push_back(int32_t((i * 7919 + 13) % V));
    TokenRun r;
    s.prefill(ids, &r.prefill);
    for (int i = 0; i < n_gen; ++i) {
        s.decode(int32_t((i * 104729 + 5) % V));
        r.decode.insert(r.decode.end(), s.logits().begin(), s.logits().end());
    }
    return r;
}

}  // namespace kinfer::test
