#include "cli/lib/cache_flags.h"

#include "common/error.h"

namespace kinfer::cli {

void add_cache_type_flag(CLI::App& app, std::string& value) {
    app.add_option("--cache-type-k", value,
                   "MLA latent cache type (also -ctk): f16, q8_0 or f32 (f32 is exact; it grows with the prompt, "
                   "-c only caps it)")
        ->capture_default_str()
        ->check(CLI::IsMember({"f16", "q8_0", "f32"}));
}

backend::CacheType cache_type_of(const std::string& value) {
    backend::CacheType t;
    if (!backend::parse_cache_type(value, t)) fail("--cache-type-k: unknown cache type '{}' (f16, q8_0 or f32)", value);
    return t;
}

}  // namespace kinfer::cli
