#include "dist/plan.h"

#include "common/error.h"
#include "common/fnv1a.h"
#include "dist/layer_profile.h"

#include <algorithm>
#include <cmath>
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

// Bytes of the file's tensors by where they run.
struct Tally {
    std::vector<uint64_t> layer, experts;   // per layer: the dense tensors, the routed experts
    uint64_t embd = 0, head = 0;
};

Tally tally(const model::Model& m) {
    const int L = m.hparams().n_layer;
    Tally t;
    t.layer.assign(size_t(L), 0), t.experts.assign(size_t(L), 0);
    for (const auto& ti : m.file().tensors()) {
        const int il = layer_of(ti.name);
        if (il >= 0 && il < L) (is_routed_expert(ti.name) ? t.experts : t.layer)[size_t(il)] += ti.nbytes;
        else if (is_head(ti.name)) t.head += ti.nbytes;
        else t.embd += ti.nbytes;
    }
    return t;
}

// layer_weights (plan.h). A profile holds a layer's whole time in one process; a shard of a
// stage runs the dense part and 1 / shards of the experts, estimated as that share of its bytes.
std::vector<uint64_t> weights_of(const Tally& t, int shards, const StageCosts* costs) {
    const size_t L = t.layer.size();
    std::vector<uint64_t> w(L);
    for (size_t il = 0; il < L; ++il) {
        const uint64_t all = t.layer[il] + t.experts[il], share = t.layer[il] + t.experts[il] / uint64_t(shards);
        if (!costs) w[il] = share;
        else if (shards == 1 || all == 0) w[il] = costs->layer[il];
        else w[il] = uint64_t(std::llround(double(costs->layer[il]) * double(share) / double(all)));
    }
    if (L) w.back() += costs ? costs->head : t.head;
    return w;
}

void check_costs(const model::Model& m, const StageCosts* costs) {
    if (costs && costs->layer.size() != size_t(m.hparams().n_layer))
        fail("stage costs for {} layers, the model has {}", costs->layer.size(), m.hparams().n_layer);
}

}  // namespace

Balance parse_balance(const std::string& s) {
    if (s == "bytes") return Balance::bytes;
    if (s == "decode") return Balance::decode;
    if (s == "prefill") return Balance::prefill;
    throw UsageError(fmt::format("--balance must be bytes, decode or prefill (got '{}')", s));
}

const char* balance_name(Balance b) { return b == Balance::bytes ? "bytes" : b == Balance::decode ? "decode" : "prefill"; }

// Exact DP over prefix sums: a model has at most a few hundred layers, so O(parts * L^2) is
// nothing; ties keep the earliest cut, so the same weights always give the same ranges.
std::vector<int> contiguous_split(const std::vector<uint64_t>& w, int parts) {
    const int L = int(w.size());
    if (parts < 1 || parts > L) fail("cannot split {} layers into {} non-empty ranges", L, parts);
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

std::vector<uint64_t> layer_weights(const model::Model& m, int shards, const StageCosts* costs) {
    check_costs(m, costs);
    return weights_of(tally(m), std::max(shards, 1), costs);
}

uint64_t residual_bytes_per_token(const model::HParams& hp, int boundary) {
    uint64_t blocks = 0;
    const int bs = hp.attn_res_block_size;
    if (hp.arch == model::Arch::KimiK3 && bs > 0) blocks = uint64_t((boundary + bs - 1) / bs);
    return (1 + blocks) * uint64_t(hp.n_embd) * sizeof(float);
}

Plan Plan::make(const model::Model& m, SplitKind kind, int ranks, int stages, const StageCosts* costs) {
    const model::HParams& hp = m.hparams();
    if (ranks < 1) throw UsageError(fmt::format("--ranks must be at least 1 (got {})", ranks));
    check_costs(m, costs);
    Plan p;
    p.kind = kind, p.ranks = ranks;
    p.balance = costs ? costs->by : Balance::bytes;
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
    const Tally t = tally(m);
    const std::vector<uint64_t>& layer_bytes = t.layer;
    const std::vector<uint64_t>& expert_bytes = t.experts;
    const uint64_t embd = t.embd, head = t.head;
    const char* what = split_name(kind);
    if (p.stages > hp.n_layer)
        throw UsageError(fmt::format("--split {}: {} stages for {} layers (each stage needs a layer)", what, p.stages, hp.n_layer));
    const int E = int(hp.n_expert);
    if (p.shards > 1 && E == 0) throw UsageError(fmt::format("--split {}: this model has no routed experts", what));
    if (p.shards > 1 && p.shards > E)
        throw UsageError(fmt::format("--split {}: {} expert shards for {} experts per layer", what, p.shards, E));

    // Stages: contiguous layer ranges balanced by the bytes a stage reads per token, or by its
    // measured time (layer_weights).
    const std::vector<uint64_t> wb = weights_of(t, p.shards, costs);
    const std::vector<int> b = contiguous_split(wb, p.stages);
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
        for (int il = q.first_layer; il < q.last_layer; ++il) q.cost += wb[size_t(il)];
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

uint64_t Plan::digest() const {
    uint64_t h = fnv1a(&ranks, sizeof ranks);
    for (const RankPart& q : part) {
        const int32_t f[4] = {q.first_layer, q.last_layer, q.first_expert, q.last_expert};
        h = fnv1a(f, sizeof f, h);
    }
    return h;
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

std::string format_plan(const Plan& p, const model::Model& m, const LayerProfile* profile) {
    auto mib = [](uint64_t b) { return fmt::format("{:.2f} MiB", double(b) / 1048576.0); };
    std::string s = fmt::format("plan: {} ({}), {} ranks, --split {}", m.path(), m.describe(), p.ranks, split_name(p.kind));
    if (p.kind == SplitKind::both) s += fmt::format(" ({} stages x {} expert shards)", p.stages, p.shards);
    s += "\n";
    if (p.stages > 1)
        s += p.balance == Balance::bytes ? "stages balanced by the bytes each layer reads\n"
                                         : fmt::format("stages balanced by the measured {} time per token\n", balance_name(p.balance));
    // With a profile: each rank's predicted share of one process's time per token, from the
    // weights the plan would balance by (so a stage's shards each show their own share).
    std::vector<uint64_t> dec, pre;
    uint64_t dec_all = 0, pre_all = 0;
    if (profile) {
        const StageCosts dc = profile->costs(Balance::decode), pc = profile->costs(Balance::prefill);
        dec = layer_weights(m, p.shards, &dc), pre = layer_weights(m, p.shards, &pc);
        for (size_t il = 0; il < dec.size(); ++il) dec_all += dec[il], pre_all += pre[il];
    }
    auto share = [](const std::vector<uint64_t>& w, uint64_t all, const RankPart& q) {
        uint64_t x = 0;
        for (int il = q.first_layer; il < q.last_layer; ++il) x += w[size_t(il)];
        return fmt::format("{:.1f}%", all ? 100.0 * double(x) / double(all) : 0.0);
    };
    s += fmt::format("{:>4}  {:>5}  {:>5}  {:>9}  {:>9}  {:>6}  {:>4}  {:>12}", "rank", "stage", "shard", "layers", "experts", "embeds",
                     "head", "bytes");
    s += profile ? fmt::format("  {:>7}  {:>7}\n", "decode", "prefill") : "\n";
    for (int r = 0; r < p.ranks; ++r) {
        const RankPart& q = p.part[size_t(r)];
        s += fmt::format("{:>4}  {:>5}  {:>5}  {:>9}  {:>9}  {:>6}  {:>4}  {:>12}", r, q.stage, q.shard,
                         fmt::format("{}-{}", q.first_layer, q.last_layer - 1),
                         q.last_expert > q.first_expert ? fmt::format("{}-{}", q.first_expert, q.last_expert - 1) : "-",
                         q.embeds ? "yes" : "no", q.head ? "yes" : "no", mib(q.bytes));
        s += profile ? fmt::format("  {:>7}  {:>7}\n", share(dec, dec_all, q), share(pre, pre_all, q)) : "\n";
    }
    if (profile)
        s += fmt::format("decode / prefill: the predicted share of one process's time per token (profile measured with "
                         "threads {}, a {}-token prompt in chunks of {})\n", profile->threads, profile->prompt, profile->batch);
    s += fmt::format("bytes moved per decoded token:                 {}\n", p.bytes_per_decode_token);
    s += fmt::format("bytes moved per prefill token (last logits):   {}\n", p.bytes_per_prefill_token);
    s += fmt::format("bytes moved per prefill token (every logit):   {}\n", p.bytes_per_all_logits_token);
    return s;
}

}  // namespace kinfer::dist
