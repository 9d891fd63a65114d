#include "cli/lib/memory_plan.h"

#include "cli/lib/info_report.h"
#include "model/hparams.h"
#include "model/session.h"
#include "model/tensor_list.h"
#include "text/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>

namespace kinfer::cli {

namespace {

// This process's resident set now (the executable, its libraries, the heap so far): what any
// kinfer run costs before it touches the model.
uint64_t self_rss_bytes() {
    std::ifstream f("/proc/self/status");
    std::string key;
    uint64_t kb = 0;
    while (f >> key) {
        if (key == "VmRSS:") {
            f >> kb;
            return kb * 1024;
        }
        f.ignore(1 << 20, '\n');
    }
    return 0;
}

// Floats of scratch per prefill token: the residual stream with its banked AttnRes blocks, and
// the largest layer's working set (MLA, KDA or the MoE FFN), following model/*.cpp's buffers.
uint64_t scratch_floats_per_token(const model::HParams& hp) {
    const int64_t H = hp.n_head, R = hp.mla_cache_dim(), r = hp.kv_lora_rank, dk = hp.key_length_mla,
                  dv = hp.value_length_mla, E = hp.n_embd, di = hp.d_inner();
    const int64_t blocks = hp.attn_res_block_size > 0 ? (hp.n_layer + hp.attn_res_block_size - 1) / hp.attn_res_block_size : 0;
    const int64_t stream = E * (4 + blocks);
    const int64_t mla = H * dk + hp.q_lora_rank + 2 * H * dv + R + H * R + H * r + E;
    const int64_t kda = 8 * di + 2 * H + E;
    const int64_t moe = hp.n_expert + hp.n_expert_used * (3 * hp.n_ff_exp + 2 * hp.latent_dim()) + 3 * hp.n_ff_shexp() +
                        2 * E + 3 * hp.n_ff;
    return uint64_t(stream + std::max({mla, kda, moe}));
}

}  // namespace

nlohmann::ordered_json memory_plan(const gguf::File& f, const PlanOptions& opt) {
    const model::HParams hp = model::load_hparams(f);
    nlohmann::ordered_json p;
    uint64_t weights = 0;
    for (const auto& t : f.tensors()) weights += t.nbytes;
    // The routed expert stacks apart (what a planned machine may leave in RAM, machine_plan.h):
    // by the tensor list's roles, each stack holding n_expert experts of one layer.
    uint64_t experts = 0;
    std::set<int> moe_layers;
    model::for_each_tensor(hp, [&](const std::string& n) { return f.find_tensor(n) != nullptr; },
                           [&](const model::TensorSpec& s) {
                               if (s.role != model::TensorRole::routed_experts) return;
                               if (const gguf::TensorInfo* t = f.find_tensor(s.name)) {
                                   experts += t->nbytes;
                                   moe_layers.insert(s.layer);
                               }
                           });
    const int64_t n_stacked = int64_t(moe_layers.size()) * hp.n_expert;
    const int n_mla = hp.n_mla_layers(), n_kda = hp.n_kda_layers();
    p["context"] = opt.n_ctx;
    p["batch"] = opt.n_batch;
    p["cache_type"] = backend::cache_type_name(opt.cache_type);
    p["weights_bytes"] = weights;
    p["weights_dense_bytes"] = weights - experts;            // every token reads them
    p["weights_routed_expert_bytes"] = experts;
    p["routed_experts"] = n_stacked;                          // over all layers
    nlohmann::ordered_json per_type;
    for (backend::CacheType t : {backend::CacheType::f32, backend::CacheType::f16, backend::CacheType::q8_0})
        per_type[backend::cache_type_name(t)] = uint64_t(n_mla) * backend::cache_row_bytes(t, hp.mla_cache_dim());
    p["latent_bytes_per_token"] = per_type;
    // The cache grows a page at a time (the session's default page).
    const uint64_t rows = uint64_t(model::latent_cache_rows(opt.n_ctx, model::SessionOptions{}.cache_page_rows));
    const uint64_t latent = rows * per_type[backend::cache_type_name(opt.cache_type)].get<uint64_t>();
    p["latent_cache_bytes"] = latent;
    const uint64_t kda = uint64_t(n_kda) * uint64_t(hp.kda_state_floats()) * 4;
    const uint64_t conv = uint64_t(n_kda) * uint64_t(hp.conv_state_floats()) * 4;
    p["kda_state_bytes"] = kda;
    p["conv_state_bytes"] = conv;
    // One chunk's activations, plus the untiled attention's contiguous copy of up to 1024 rows
    // and the last row's logits.
    const uint64_t chunk = uint64_t(std::min(opt.n_batch, std::max<int64_t>(opt.n_ctx, 1)));
    const uint64_t scratch = 4 * (chunk * scratch_floats_per_token(hp) +
                                  uint64_t(std::min<int64_t>(opt.n_ctx, 1024) * hp.mla_cache_dim()) + uint64_t(hp.n_vocab));
    p["scratch_bytes"] = scratch;
    // Beyond 1024 keys the tiled MHA prefill expands K and V for a block of up to 4096 keys
    // (16 MiB at most, attention_tiled_body.h) per call.
    uint64_t tiled = 0;
    if (n_mla > 0 && opt.n_ctx > 1024) {
        const uint64_t per_key = uint64_t(hp.n_head * (hp.key_length_mla + hp.value_length_mla)) * 4;
        const uint64_t kb = std::clamp<uint64_t>((uint64_t(16) << 20) / per_key / 32 * 32, 32, 4096);
        tiled = std::min<uint64_t>(kb, uint64_t(opt.n_ctx + 31) / 32 * 32) * per_key;
    }
    p["tiled_attention_bytes"] = tiled;
    // The process as a run has it before the model's pages are touched: code, libraries and the
    // tokenizer's tables (built here to be measured; a run builds the same ones).
    uint64_t base = self_rss_bytes();
    try {
        const auto tok = text::Tokenizer::from_gguf(f);
        base = self_rss_bytes();
    } catch (const std::exception&) {
        // A file without a usable vocabulary: the plan leaves the tokenizer out.
    }
    p["process_bytes"] = base;
    p["planned_rss_bytes"] = weights + latent + kda + conv + scratch + tiled + base;
    return p;
}

std::string memory_plan_text(const nlohmann::ordered_json& p) {
    std::string o = fmt::format("memory plan at -c {} (-b {}, -ctk {}):\n", p["context"].get<int64_t>(),
                                p["batch"].get<int64_t>(), p["cache_type"].get<std::string>());
    auto line = [&](const std::string& label, uint64_t b) {
        o += fmt::format("  {:<40} {:>16} bytes ({})\n", label, b, human_bytes(b));
    };
    line("weights (mapped)", p["weights_bytes"].get<uint64_t>());
    line("  dense + attention (read every token)", p["weights_dense_bytes"].get<uint64_t>());
    line(fmt::format("  routed experts ({})", p["routed_experts"].get<int64_t>()), p["weights_routed_expert_bytes"].get<uint64_t>());
    line(fmt::format("MLA latent cache at {} tokens", p["context"].get<int64_t>()), p["latent_cache_bytes"].get<uint64_t>());
    for (const auto& [k, v] : p["latent_bytes_per_token"].items())
        o += fmt::format("  {:<40} {:>16} bytes per token\n", "  latent cache, " + k, v.get<uint64_t>());
    line("KDA state", p["kda_state_bytes"].get<uint64_t>());
    line("conv state", p["conv_state_bytes"].get<uint64_t>());
    line("prefill scratch (one -b chunk)", p["scratch_bytes"].get<uint64_t>());
    line("tiled attention key block", p["tiled_attention_bytes"].get<uint64_t>());
    line("kinfer process (code, libs, tokenizer)", p["process_bytes"].get<uint64_t>());
    line("planned peak RSS", p["planned_rss_bytes"].get<uint64_t>());
    return o;
}

}  // namespace kinfer::cli
