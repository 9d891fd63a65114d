// What `kinfer info` says about a vision projector (mmproj) file: the projector type, the
// tower's shape, the preprocessing limits and what they mean in tokens. Read from the keys and
// tensor table alone, so it works on any clip GGUF, kimik3 or not.
#pragma once
#include "gguf/reader.h"

#include <nlohmann/json.hpp>
#include <string>

namespace kinfer::vision {

nlohmann::ordered_json describe_mmproj(const gguf::File& f);
// The same as indented text lines (each ending in '\n').
std::string describe_mmproj_text(const nlohmann::ordered_json& d);

}  // namespace kinfer::vision
