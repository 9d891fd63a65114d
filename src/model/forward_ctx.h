// Internal: what every layer function of the forward pass needs (the layer's backend and its
// scratch, the placed weights, the states). Not part of the public API; include model/session.h.
#pragma once
#include "backend/backend.h"
#include "backend/registry.h"
#include "backend/workspace.h"
#include "common/error.h"
#include "model/placement.h"
#include "model/session.h"

#include <memory>
#include <vector>

namespace kinfer::model {

using backend::Mat;
using backend::ScratchScope;

// One chunk's run: backends, placement, one scratch workspace per backend, the states.
struct FwdEnv {
    const HParams& hp;
    const Placement& pl;
    backend::Backends& bk;
    std::vector<std::unique_ptr<backend::Workspace>>& ws;   // [0] cpu, [1 + i] device i
    std::vector<Session::LayerState>& states;
    const SessionOptions& opt;
    int64_t pos0;     // position of the first token of this chunk
    int64_t n;        // tokens in this chunk

    backend::Workspace& ws_of(const backend::Backend& be) const {
        for (auto& w : ws)
            if (&w->backend() == &be) return *w;
        fail("no scratch workspace for backend {}", be.name());
    }
};

// What a layer function sees: the env plus the backend the layer runs on.
struct FwdCtx {
    const FwdEnv& env;
    const HParams& hp;
    const Weights& w;
    backend::Backend& be;
    backend::Workspace& ws;
    std::vector<Session::LayerState>& states;
    const SessionOptions& opt;
    int64_t pos0, n;

    FwdCtx(const FwdEnv& e, backend::Backend& b)
        : env(e), hp(e.hp), w(e.pl.weights()), be(b), ws(e.ws_of(b)), states(e.states), opt(e.opt), pos0(e.pos0), n(e.n) {}
    backend::Glu glu() const { return backend::Glu{hp.use_situ(), hp.situ_beta, hp.situ_linear_beta}; }
};

// Layer pieces (one file each). xn is the normed layer input [n x n_embd] on c.be; out gets
// [n x n_embd] there.
void kda_layer(FwdCtx& c, int il, const float* xn, float* out);
void mla_layer(FwdCtx& c, int il, const float* xn, float* out);
void dense_ffn(FwdCtx& c, int il, const float* xn, float* out);
void moe_ffn(FwdCtx& c, int il, const float* xn, float* out);

}  // namespace kinfer::model
