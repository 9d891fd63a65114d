// -ctk / --cache-type-k (llama.cpp's spelling; habits.cpp renames -ctk): the MLA latent cache's
// element type for the commands that build a session.
#pragma once
#include "backend/backend.h"

#include <CLI/CLI.hpp>
#include <string>

namespace kinfer::cli {

// Declares --cache-type-k on app, storing the name ("f16", "q8_0", "f32") in value; value's
// initial content is the command's default.
void add_cache_type_flag(CLI::App& app, std::string& value);
backend::CacheType cache_type_of(const std::string& value);

}  // namespace kinfer::cli
