// Helpers of the expert-store tests: the tiny models and a byte check of acquired experts.
#pragma once
#include "test_util.h"

#include "gguf/reader.h"
#include "runtime/expert_store.h"

#include <cstring>
#include <string>

namespace kinfer::test {

inline int n_layer_of(const gguf::File& f) { return int(f.get_int(f.architecture() + ".block_count")); }

// True when every part of r holds exactly the bytes of the expert's slices in the mapping.
inline bool same_bytes(const runtime::ExpertStore& s, const runtime::ExpertRef& r) {
    const auto& L = s.layout().layers[size_t(r.layer)];
    for (int p = 0; p < 3; ++p)
        if (std::memcmp(r.part[p], s.layout().mapped(r.layer, p, r.expert), L.slice[p]) != 0) return false;
    return true;
}

}  // namespace kinfer::test
