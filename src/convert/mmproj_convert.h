// `kinfer convert DIR --mmproj MMPROJ.gguf`: the vision tower and projector of a Kimi K3
// checkpoint as the mmproj GGUF llama.cpp's mtmd loads (projector `kimik3`), with the keys,
// tensor names, order, shapes and bytes of llama.cpp's converter (README section 4 of
// ../shared/golden/vision): vision_tower.* and mm_projector.* in reading order, the Q and K rows
// of each wqkv de-interleaved for the split 2-D RoPE, V unchanged.
#pragma once
#include "convert/tensor_plan.h"

#include <cstdio>
#include <string>

namespace kinfer::convert {

// Throws kinfer::Error naming the file and key / tensor when the checkpoint has no usable vision
// tower. outtype: F32 (what the golden file was made with; byte-identical), F16 or BF16 (2-D and
// larger tensors in that type, vectors in F32, gguf-py's rule; not compared with llama.cpp).
void convert_mmproj(const std::string& checkpoint_dir, const std::string& output, OutType outtype,
                    std::FILE* log = stderr);

// Row permutation of the fused wqkv for n_head heads of head_dim rows: for the Q and K blocks,
// row a*4 + b*2 + c of a head moves to b*(head_dim/2) + a*2 + c (a < head_dim/4, b, c < 2).
// Returns, for every output row, the input row it takes.
std::vector<int64_t> qkv_deinterleave_rows(int64_t n_head, int64_t head_dim);

}  // namespace kinfer::convert
