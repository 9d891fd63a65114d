// `kinfer info --plan -c N --gpu 8x141GiB --ram 2TiB`: where the parts of the memory plan
// (memory_plan.h) go on a planned machine. GPUs take what every token reads (the dense and
// attention weights, the latent cache, the KDA + conv state, the scratch) and then as many routed
// experts as still fit (the hot ones, by the expert store's caching); the other (cold) experts
// stay in RAM. The verdict says whether that fits and, when not, by how much.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kinfer::cli {

struct Machine {
    int n_gpu = 0;             // 0: no GPUs (everything in RAM)
    uint64_t gpu_bytes = 0;    // each
    uint64_t ram_bytes = 0;
};

// What each GPU keeps back for the CUDA context, cuBLAS workspaces and allocator slack.
constexpr uint64_t kGpuReserveBytes = uint64_t(1) << 30;

// The placement of plan (memory_plan()'s object) on m, as an object for --json.
nlohmann::ordered_json machine_fit(const nlohmann::ordered_json& plan, const Machine& m);
std::string machine_fit_text(const nlohmann::ordered_json& fit);

}  // namespace kinfer::cli
