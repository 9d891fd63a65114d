// The GGUF metadata llama.cpp's converter writes for a Kimi checkpoint, with the same keys,
// types, values and order (golden/hf/gguf/*.kv.txt): general.* (name heuristics, size label),
// the architecture hyper-parameters of TextModel + KimiLinearModel / KimiK3Model, then the
// tokenizer built from tiktoken.model + tokenizer_config.json and the chat template.
#pragma once
#include "convert/hf_config.h"
#include "convert/kv_list.h"
#include "convert/tensor_plan.h"

#include <string>

namespace kinfer::convert {

KvList build_metadata(const HfConfig& cfg, const Plan& plan, const std::string& ckpt_dir);

}  // namespace kinfer::convert
