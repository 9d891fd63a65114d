#include "dist/plan.h"

#include "common/error.h"

#include <algorithm>
#include <fmt/format.h>
#include <limits>

namespace kinfer::dist {

SplitKind parse_split(const std::string& s) {
    if (s == "pipeline") return SplitKind::pipeline;
    if (s == "experts") return SplitKind::experts;
    throw UsageError(fmt::format("--split must be pipeline or experts (got '{}')", s));
}

const char* split_name(SplitKind k) { return k == SplitKind::pipeline ? "pipeline" : "experts"; }

namespace {

// "blk.12.attn_q.weight" -> 12; -1 for global tensors.
int layer_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    return std::atoi(name.c_str() + 4);
}

bool is_routed_expert(const std::string& name) { return name.find("_exps.") != std::string::npos; }
bool is_head(const std::string& name) { return name.rfind("output", 0) == 0; }   // output, output_norm, output_res_score

// Contiguous split of w into `parts` non-empty ranges minimising the largest sum (exact DP; a
// model has at most a few hundred layers). Returns the first index of every range and the end.
std::vector<int> balance(const std::vector<uint64_t>& w, int parts) {
    const int L = int(w.size());
    std::vector<uint64_t> pre(size_t(L + 1), 0);
    for (int i = 0; i < L; ++i) pre[size_t(i + 1)] = pre[size_t(i)] + w[size_t(i)];
    const uint64_t inf = std::numeric_limits<uint64_t>::max();
    // best[k][i]: the smallest largest sum splitting w[0, i) into k ranges; cut[k][i] the last cut.
    std::vector<std::vector<uint64_t>> best(size_t(parts + 1), std::vector<uint64_t>(size_t(L + 1), inf));
    std::vector<std::vector<int>> cut(size_t(parts + 1), std::vector<int>(size_t(L + 1), 0));
    best[0][0] = 0;
    for (int k = 1; k <= parts; ++k)
        for (int i = k; i <= L; ++i)
            for (int j = k - 1; j < i; ++j) {
                if (best[size_t(k - 1)][size_t(j)] == inf) continue;
                const uint64_t v = std::max(best[size_t(k - 1)][size_t(j)], pre[size_t(i)] - pre[size_t(j)]);
                if (v < best[size_t(k)][size_t(i)]) best[size_t(k)][size_t(i)] = v, cut[size_t(k)][size_t(i)] = j;
            }
    std::vector<int> bounds(size_t(parts + 1));
    bounds[size_t(parts)] = L;
    for (int k = parts, i = L; k > 0; --k) i = bounds[size_t(k - 1)] = cut[size_t(k)][size_t(i)];
    return bounds;
}

}  // namespace

uint64_t residual_bytes_per_token(const model::HParams& hp, int boundary) {
    uint64_t blocks = 0;
    const int bs = hp.attn_res_block_size;
    if (hp.arch == model::Arch::KimiK3 && bs > 0) blocks = uint64_t((boundary + bs - 1) / bs);
    return (1 + blocks) * uint64_t(hp.n_embd) * sizeof(float);
}

Plan Plan::make(const model::Model& m, SplitKind kind, int ranks) {
    const model::HParams& hp = m.hparams();
    if (ranks < 1) throw UsageError(fmt::format("--ranks must be at least 1 (got {})", ranks));
    Plan p;
    p.kind = kind, p.ranks = ranks;
    p.part.resize(size_t(ranks));
    std::vector<uint64_t> layer_bytes(size_t(hp.n_layer), 0), expert_bytes(size_t(hp.n_layer), 0);
    uint64_t embd = 0, head = 0;
    for (const auto& t : m.file().tensors()) {
        const int il = layer_of(t.name);
        if (il >= 0 && il < hp.n_layer) {
            (is_routed_expert(t.name) ? expert_bytes : layer_bytes)[size_t(il)] += t.nbytes;
        } else if (is_head(t.name)) {
            head += t.nbytes;
        } else {
            embd += t.nbytes;
        }
    }
    const uint64_t vocab_row = uint64_t(hp.n_vocab) * sizeof(float);
    if (kind == SplitKind::pipeline) {
        if (ranks > hp.n_layer)
            throw UsageError(fmt::format("--split pipeline: {} ranks for {} layers (each rank needs a layer)", ranks, hp.n_layer));
        std::vector<uint64_t> w(size_t(hp.n_layer));
        for (int il = 0; il < hp.n_layer; ++il) w[size_t(il)] = layer_bytes[size_t(il)] + expert_bytes[size_t(il)];
        std::vector<uint64_t> wb = w;
        wb.back() += head;   // the last rank reads the head for every token it emits
        const std::vector<int> b = balance(wb, ranks);
        uint64_t resid = 0;
        for (int r = 0; r < ranks; ++r) {
            RankPart& q = p.part[size_t(r)];
            q.first_layer = b[size_t(r)], q.last_layer = b[size_t(r + 1)];
            q.first_expert = 0, q.last_expert = int(hp.n_expert);
            q.embeds = r == 0, q.head = r == ranks - 1;
            for (int il = q.first_layer; il < q.last_layer; ++il) q.bytes += w[size_t(il)];
            if (q.embeds) q.bytes += embd;
            if (q.head) q.bytes += head;
            if (r + 1 < ranks) resid += residual_bytes_per_token(hp, q.last_layer);
        }
        const uint64_t back = ranks > 1 ? vocab_row : 0;   // logits from the last rank to rank 0
        p.bytes_per_decode_token = resid + back;
        p.bytes_per_prefill_token = resid;
        p.bytes_per_all_logits_token = resid + back;
    } else {
        const int E = int(hp.n_expert);
        if (E == 0) throw UsageError("--split experts: this model has no routed experts");
        if (ranks > E) throw UsageError(fmt::format("--split experts: {} ranks for {} experts per layer", ranks, E));
        uint64_t dense = 0, experts = 0;
        int n_moe = 0;
        for (int il = 0; il < hp.n_layer; ++il) {
            dense += layer_bytes[size_t(il)], experts += expert_bytes[size_t(il)];
            n_moe += expert_bytes[size_t(il)] > 0;
        }
        for (int r = 0; r < ranks; ++r) {
            RankPart& q = p.part[size_t(r)];
            q.first_layer = 0, q.last_layer = hp.n_layer;
            q.first_expert = int(int64_t(r) * E / ranks), q.last_expert = int(int64_t(r + 1) * E / ranks);
            q.embeds = true, q.head = r == 0;
            q.bytes = dense + embd + experts * uint64_t(q.last_expert - q.first_expert) / uint64_t(E) + (q.head ? head : 0);
        }
        // Every (token, slot) row of every MoE layer goes from the rank that owns its expert to
        // each of the others: the expert outputs in the latent width (K3: expert_latent_length).
        const uint64_t slots = uint64_t(n_moe) * uint64_t(hp.n_expert_used) * uint64_t(hp.latent_dim()) * sizeof(float);
        p.bytes_per_decode_token = p.bytes_per_prefill_token = p.bytes_per_all_logits_token = slots * uint64_t(ranks - 1);
    }
    return p;
}

int Plan::layer_owner(int il) const {
    for (int r = 0; r < ranks; ++r)
        if (il >= part[size_t(r)].first_layer && il < part[size_t(r)].last_layer) return r;
    return -1;
}

int Plan::expert_owner(int e) const {
    for (int r = 0; r < ranks; ++r)
        if (e >= part[size_t(r)].first_expert && e < part[size_t(r)].last_expert) return r;
    return -1;
}

std::string format_plan(const Plan& p, const model::Model& m) {
    auto mib = [](uint64_t b) { return fmt::format("{:.2f} MiB", double(b) / 1048576.0); };
    std::string s = fmt::format("plan: {} ({}), {} ranks, --split {}\n", m.path(), m.describe(), p.ranks, split_name(p.kind));
    s += fmt::format("{:>4}  {:>9}  {:>9}  {:>6}  {:>4}  {:>12}\n", "rank", "layers", "experts", "embeds", "head", "bytes");
    for (int r = 0; r < p.ranks; ++r) {
        const RankPart& q = p.part[size_t(r)];
        s += fmt::format("{:>4}  {:>9}  {:>9}  {:>6}  {:>4}  {:>12}\n", r, fmt::format("{}-{}", q.first_layer, q.last_layer - 1),
                         q.last_expert > q.first_expert ? fmt::format("{}-{}", q.first_expert, q.last_expert - 1) : "-",
                         q.embeds ? "yes" : "no", q.head ? "yes" : "no", mib(q.bytes));
    }
    s += fmt::format("bytes moved per decoded token:                 {}\n", p.bytes_per_decode_token);
    s += fmt::format("bytes moved per prefill token (last logits):   {}\n", p.bytes_per_prefill_token);
    s += fmt::format("bytes moved per prefill token (every logit):   {}\n", p.bytes_per_all_logits_token);
    return s;
}

}  // namespace kinfer::dist
