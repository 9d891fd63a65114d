// `kinfer info --plan -c N`: the memory one run of a model needs, by part: the weights (mapped),
// the MLA latent cache (bytes per token for each cache type, and at N tokens for the chosen one),
// the KDA + conv state, the prefill scratch for one -b chunk, and the kinfer process itself.
// The sum is the peak RSS to expect; tests/cli compares it with a measured run.
#pragma once
#include "backend/backend.h"
#include "gguf/reader.h"

#include <nlohmann/json.hpp>
#include <string>

namespace kinfer::cli {

struct PlanOptions {
    int64_t n_ctx = 4096;                             // tokens in the latent cache (-c)
    int64_t n_batch = 512;                            // prefill chunk (-b)
    backend::CacheType cache_type = backend::CacheType::f16;
};

nlohmann::ordered_json memory_plan(const gguf::File& f, const PlanOptions& opt);
std::string memory_plan_text(const nlohmann::ordered_json& plan);

}  // namespace kinfer::cli
