#include "cli/lib/machine_plan.h"

#include "cli/lib/info_report.h"

#include <fmt/format.h>

#include <algorithm>

namespace kinfer::cli {

namespace {
uint64_t u(const nlohmann::ordered_json& j, const char* k) { return j.at(k).get<uint64_t>(); }
uint64_t ceil_div(uint64_t a, uint64_t b) { return b ? (a + b - 1) / b : 0; }
}  // namespace

nlohmann::ordered_json machine_fit(const nlohmann::ordered_json& p, const Machine& m) {
    nlohmann::ordered_json f;
    const uint64_t dense = u(p, "weights_dense_bytes"), experts = u(p, "weights_routed_expert_bytes");
    const uint64_t n_exp = u(p, "routed_experts");
    // Layers may store their experts at different types (Q4_K_M's ffn_down): plan with the
    // average, rounded up, and split the bytes in proportion to the expert count.
    const uint64_t expert_each = ceil_div(experts, n_exp);
    const uint64_t latent = u(p, "latent_cache_bytes"), state = u(p, "kda_state_bytes") + u(p, "conv_state_bytes");
    const uint64_t scratch = u(p, "scratch_bytes") + u(p, "tiled_attention_bytes"), process = u(p, "process_bytes");
    f["gpus"] = m.n_gpu;
    f["gpu_bytes_each"] = m.gpu_bytes;
    f["ram_bytes"] = m.ram_bytes;

    uint64_t hot = 0, gpu_short = 0, gpu_each = 0;
    if (m.n_gpu > 0) {
        // The layers are spread evenly over the GPUs; each runs its own chunk's scratch.
        const uint64_t n = uint64_t(m.n_gpu);
        nlohmann::ordered_json g;
        g["dense_weights_bytes"] = ceil_div(dense, n);
        g["latent_cache_bytes"] = ceil_div(latent, n);
        g["kda_conv_state_bytes"] = ceil_div(state, n);
        g["scratch_bytes"] = scratch;
        g["reserve_bytes"] = kGpuReserveBytes;
        const uint64_t fixed = ceil_div(dense, n) + ceil_div(latent, n) + ceil_div(state, n) + scratch + kGpuReserveBytes;
        if (fixed > m.gpu_bytes) {
            gpu_short = fixed - m.gpu_bytes;
        } else if (expert_each) {
            // Whole experts only, as the expert store caches them.
            hot = std::min<uint64_t>(n_exp, (m.gpu_bytes - fixed) / expert_each * n);
        }
        const uint64_t hot_each = ceil_div(n_exp ? uint64_t(double(experts) * double(hot) / double(n_exp)) : 0, n);
        g["hot_experts"] = hot;
        g["hot_expert_bytes"] = hot_each;
        gpu_each = fixed + hot_each;
        g["total_bytes"] = gpu_each;
        g["short_bytes"] = gpu_short;
        f["per_gpu"] = g;
    }
    // RAM: the cold experts, the process; without GPUs, everything the plan counts.
    nlohmann::ordered_json r;
    const uint64_t cold = n_exp ? experts - uint64_t(double(experts) * double(hot) / double(n_exp)) : experts;
    r["cold_experts"] = n_exp - hot;
    r["cold_expert_bytes"] = cold;
    uint64_t ram = cold + process;
    if (m.n_gpu == 0) {
        r["dense_weights_bytes"] = dense;
        r["latent_cache_bytes"] = latent;
        r["kda_conv_state_bytes"] = state;
        r["scratch_bytes"] = scratch;
        ram += dense + latent + state + scratch;
    }
    r["process_bytes"] = process;
    r["total_bytes"] = ram;
    const uint64_t ram_short = ram > m.ram_bytes ? ram - m.ram_bytes : 0;
    r["short_bytes"] = ram_short;
    f["ram"] = r;
    f["fits"] = gpu_short == 0 && ram_short == 0;
    std::string v;
    if (gpu_short == 0 && ram_short == 0) {
        v = m.n_gpu ? fmt::format("fits: {} of {} routed experts on the GPUs; {} left on each GPU, {} of RAM left", hot, n_exp,
                                  human_bytes(m.gpu_bytes - gpu_each), human_bytes(m.ram_bytes - ram))
                    : fmt::format("fits in RAM; {} left", human_bytes(m.ram_bytes - ram));
    } else {
        v = "does not fit:";
        if (gpu_short)
            v += fmt::format(" each GPU is {} short for what every token reads (the dense weights, latent cache, state and "
                             "scratch need {} of {}): more GPUs, a smaller -c or -ctk q8_0;",
                             human_bytes(gpu_short), human_bytes(gpu_each), human_bytes(m.gpu_bytes));
        if (ram_short)
            v += fmt::format(" RAM is {} short ({} needed, {} there){};", human_bytes(ram_short), human_bytes(ram),
                             human_bytes(m.ram_bytes), n_exp - hot ? ": the cold experts would be read from disk" : "");
        v.pop_back();
    }
    f["verdict"] = v;
    return f;
}

std::string machine_fit_text(const nlohmann::ordered_json& f) {
    std::string o;
    const int n = f["gpus"].get<int>();
    o += n ? fmt::format("on {} GPU{} of {} and {} of RAM:\n", n, n > 1 ? "s" : "", human_bytes(u(f, "gpu_bytes_each")),
                         human_bytes(u(f, "ram_bytes")))
           : fmt::format("on {} of RAM, no GPU:\n", human_bytes(u(f, "ram_bytes")));
    auto line = [&](const std::string& label, uint64_t b) { o += fmt::format("    {:<44} {:>12}\n", label, human_bytes(b)); };
    if (n) {
        const auto& g = f["per_gpu"];
        o += "  each GPU:\n";
        line("dense + attention weights (its share)", u(g, "dense_weights_bytes"));
        line("latent cache (its share)", u(g, "latent_cache_bytes"));
        line("KDA + conv state (its share)", u(g, "kda_conv_state_bytes"));
        line("scratch", u(g, "scratch_bytes"));
        line("reserve (CUDA context, workspaces)", u(g, "reserve_bytes"));
        line(fmt::format("hot routed experts ({} in all)", g["hot_experts"].get<uint64_t>()), u(g, "hot_expert_bytes"));
        line("total", u(g, "total_bytes"));
    }
    const auto& r = f["ram"];
    o += "  RAM:\n";
    if (!n) {
        line("dense + attention weights", u(r, "dense_weights_bytes"));
        line("latent cache", u(r, "latent_cache_bytes"));
        line("KDA + conv state", u(r, "kda_conv_state_bytes"));
        line("scratch", u(r, "scratch_bytes"));
    }
    line(fmt::format("cold routed experts ({})", r["cold_experts"].get<uint64_t>()), u(r, "cold_expert_bytes"));
    line("kinfer process", u(r, "process_bytes"));
    line("total", u(r, "total_bytes"));
    o += "  " + f["verdict"].get<std::string>() + "\n";
    return o;
}

}  // namespace kinfer::cli
