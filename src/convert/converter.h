// `kinfer convert`: Hugging Face Kimi checkpoint -> GGUF, identical to llama.cpp's
// convert_hf_to_gguf.py output. Everything that can fail on the input (config, headers, shapes,
// missing tensors) is checked while planning, before the output exists; tensors are then
// streamed one at a time (experts one expert at a time), so peak memory stays near one expert's
// weights, and the file appears under its name only when complete (writer temp file + rename).
#pragma once
#include "convert/tensor_plan.h"

#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace kinfer::convert {

struct ConvertOptions {
    std::string checkpoint_dir;
    std::string output;                 // required unless dry_run
    OutType outtype = OutType::F16;     // llama.cpp's default
    bool dry_run = false;
    bool progress = true;
    // Optional: called on the plan before anything is written, to choose other tensor types
    // (the CLI uses it for llama-quantize mixtures such as Q4_K_M; convert itself stays free of
    // the quantize rules). It may change types, shapes with the same element count, and
    // file_type; the data is then encoded from f32 with each type's reference quantizer.
    std::function<void(Plan&)> retype;
    std::string outtype_label;          // for the log line when retype is set
};

std::optional<OutType> outtype_from_name(const std::string& s);   // f32 f16 bf16 q8_0 auto
const char* outtype_name(OutType t);

// Converts (or, with dry_run, prints the plan to `out`); notices go to `log`.
// Throws kinfer::Error naming the file and tensor on any defect.
void convert_checkpoint(const ConvertOptions& opt, std::FILE* out = stdout, std::FILE* log = stderr);

}  // namespace kinfer::convert
