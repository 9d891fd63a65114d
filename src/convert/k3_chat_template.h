// The chat template llama.cpp embeds in K3 GGUFs converted from a checkpoint without one.
#pragma once
#include <string_view>

namespace kinfer::convert {

std::string_view k3_chat_template();   // 14909 bytes, sha256 4578103bf225f58d...

}  // namespace kinfer::convert
