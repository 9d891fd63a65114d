#include "dist/plan.h"

#include "common/error.h"

#include <algorithm>
#include <fmt/format.h>
#include <limits>

namespace kinfer::dist {

SplitKind parse_split(const std::string& s) {
    if (s == "pipeline") return SplitKind::pipeline;
    if (s == "experts") return SplitKind::experts;
    if (s == "both") return SplitKind::both;
    throw UsageError(fmt::format("--split must be pipeline, experts or both (got '{}')", s));
}

const char* split_name(SplitKind k) {
    return k == SplitKind::pipeline ? "pipeline" : k == SplitKind::experts ? "experts" : "both";
}

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

Plan Plan::make(const model::Model& m, SplitKind kind, int ranks, int stages) {
    const model::HParams& hp = m.hparams();
    if (ranks < 1) throw UsageError(fmt::format("--ranks must be at least 1 (got {})", ranks));
    Plan p;
    p.kind = kind, p.ranks = ranks;
    if (kind == SplitKind::pipeline) {
        p.stages = ranks, p.shards = 1;
    } else if (kind == SplitKind::experts) {
        p.stages = 1, p.shards = ranks;
    } else {
        if (stages == 0) stages = 2;
        if (stages < 1 || ranks % stages != 0)
            throw UsageError(fmt::format("--split both: {} ranks do not make {} stages of equal size (--stages)", ranks, stages));
        p.stages = stages, p.shards = ranks / stages;
    }
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
    const char* what = split_name(kind);
    if (p.stages > hp.n_layer)
        throw UsageError(fmt::format("--split {}: {} stages for {} layers (each stage needs a layer)", what, p.stages, hp.n_layer));
    const int E = int(hp.n_expert);
    if (p.shards > 1 && E == 0) throw UsageError(fmt::format("--split {}: this model has no routed experts", what));
    if (p.shards > 1 && p.shards > E)
        throw UsageError(fmt::format("--split {}: {} expert shards for {} experts per layer", what, p.shards, E));

    // Stages: contiguous layer ranges balanced by the bytes a stage reads per token (the last
    // stage also reads the head). Each rank of a stage reads the dense part and its share of the
    // experts, so the experts weigh 1/E there.
    std::vector<uint64_t> w(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il)
        w[size_t(il)] = layer_bytes[size_t(il)] + expert_bytes[size_t(il)] / uint64_t(p.shards);
    std::vector<uint64_t> wb = w;
    wb.back() += head;
    const std::vector<int> b = balance(wb, p.stages);
    p.part.resize(size_t(ranks));
    for (int r = 0; r < ranks; ++r) {
        RankPart& q = p.part[size_t(r)];
        q.stage = r / p.shards, q.shard = r % p.shards;
        q.first_layer = b[size_t(q.stage)], q.last_layer = b[size_t(q.stage + 1)];
        q.first_expert = int(int64_t(q.shard) * E / p.shards), q.last_expert = int(int64_t(q.shard + 1) * E / p.shards);
        q.embeds = q.stage == 0;
        q.head = q.stage == p.stages - 1 && q.shard == 0;
        uint64_t experts = 0;
        for (int il = q.first_layer; il < q.last_layer; ++il) q.bytes += layer_bytes[size_t(il)], experts += expert_bytes[size_t(il)];
        if (E) q.bytes += experts * uint64_t(q.last_expert - q.first_expert) / uint64_t(E);
        if (q.embeds) q.bytes += embd;
        if (q.head) q.bytes += head;
    }

    // On the wire, per token: each stage boundary carries the residual once per shard (shard e
    // of one stage feeds shard e of the next); within a stage, every (token, slot) row of its MoE
    // layers goes from the shard that owns the expert to each of the other shards, at the latent
    // width (K3: expert_latent_length); the head rank sends the logits to rank 0.
    uint64_t resid = 0, slots = 0;
    for (int s = 0; s + 1 < p.stages; ++s) resid += residual_bytes_per_token(hp, b[size_t(s + 1)]) * uint64_t(p.shards);
    if (p.shards > 1) {
        int n_moe = 0;
        for (int il = 0; il < hp.n_layer; ++il) n_moe += expert_bytes[size_t(il)] > 0;
        slots = uint64_t(n_moe) * uint64_t(hp.n_expert_used) * uint64_t(hp.latent_dim()) * sizeof(float) * uint64_t(p.shards - 1);
    }
    const uint64_t back = p.stages > 1 ? uint64_t(hp.n_vocab) * sizeof(float) : 0;
    p.bytes_per_decode_token = resid + slots + back;
    p.bytes_per_prefill_token = resid + slots;
    p.bytes_per_all_logits_token = resid + slots + back;
    return p;
}

int Plan::layer_stage(int il) const {
    for (int s = 0; s < stages; ++s) {
        const RankPart& q = part[size_t(rank_at(s, 0))];
        if (il >= q.first_layer && il < q.last_layer) return s;
    }
    return -1;
}

int Plan::expert_shard(int e) const {
    for (int k = 0; k < shards; ++k) {
        const RankPart& q = part[size_t(k)];
        if (e >= q.first_expert && e < q.last_expert) return k;
    }
    return -1;
}

std::string format_plan(const Plan& p, const model::Model& m) {
    auto mib = [](uint64_t b) { return fmt::format("{:.2f} MiB", double(b) / 1048576.0); };
    std::string s = fmt::format("plan: {} ({}), {} ranks, --split {}", m.path(), m.describe(), p.ranks, split_name(p.kind));
    if (p.kind == SplitKind::both) s += fmt::format(" ({} stages x {} expert shards)", p.stages, p.shards);
    s += "\n";
    s += fmt::format("{:>4}  {:>5}  {:>5}  {:>9}  {:>9}  {:>6}  {:>4}  {:>12}\n", "rank", "stage", "shard", "layers", "experts", "embeds",
                     "head", "bytes");
    for (int r = 0; r < p.ranks; ++r) {
        const RankPart& q = p.part[size_t(r)];
        s += fmt::format("{:>4}  {:>5}  {:>5}  {:>9}  {:>9}  {:>6}  {:>4}  {:>12}\n", r, q.stage, q.shard,
                         fmt::format("{}-{}", q.first_layer, q.last_layer - 1),
                         q.last_expert > q.first_expert ? fmt::format("{}-{}", q.first_expert, q.last_expert - 1) : "-",
                         q.embeds ? "yes" : "no", q.head ? "yes" : "no", mib(q.bytes));
    }
    s += fmt::format("bytes moved per decoded token:                 {}\n", p.bytes_per_decode_token);
    s += fmt::format("bytes moved per prefill token (last logits):   {}\n", p.bytes_per_prefill_token);
    s += fmt::format("bytes moved per prefill token (every logit):   {}\n", p.bytes_per_all_logits_token);
    return s;
}

}  // namespace kinfer::dist
