// `kinfer info`: everything worth knowing about a GGUF file before running it, gathered once as a
// JSON object (printed as is by --json) and rendered as text from that same object, so the two
// outputs always carry the same content. Works on any valid GGUF; the Kimi-specific parts
// (layer kinds, state sizes) appear when the keys are there.
#pragma once
#include "gguf/reader.h"

#include <nlohmann/json.hpp>
#include <string>

namespace kinfer::cli {

struct InfoOptions {
    int64_t context = 4096;     // tokens, for the per-sequence state estimate
    bool with_tensors = true;   // include the per-tensor table
    size_t array_head = 8;      // metadata arrays longer than this are abbreviated to their head
    size_t string_max = 120;    // metadata strings longer than this are abbreviated
};

nlohmann::ordered_json info_report(const gguf::File& f, const InfoOptions& opt);
std::string info_text(const nlohmann::ordered_json& report);

// "3.11 MiB"
std::string human_bytes(uint64_t n);

// The kind of layer each block is, from `{arch}.attention.head_count_kv` (0 = KDA, else MLA);
// empty when the key is absent or not a per-layer array.
std::vector<std::string> layer_kinds(const gguf::File& f);

// "K3 XTML", "Kimi K2" or "other", from a chat template's text.
std::string chat_template_family(std::string_view tmpl);

}  // namespace kinfer::cli
