// The list of GGUF tensors `kinfer convert` writes, in llama.cpp's order, with their types,
// shapes and the transform that produces each from the checkpoint. Built from the safetensors
// headers and config.json alone (no tensor data is read), so every missing or misshapen tensor
// is reported before an output file exists, and --dry-run can print the plan.
//
// Order (llama.cpp convert_hf_to_gguf.py + conversion/kimi_{k3,linear}.py):
//  1. K3 compressed-tensors MXFP4 experts, per (layer, w1/w2/w3) ascending;
//  2. every other tensor in reading order (shards by file name, names sorted inside a shard);
//     a tensor built from several sources appears where its last source is read (fused
//     AttnRes scores, stacked BF16 experts as gate/down/up, kv_b split as k_b then v_b).
#pragma once
#include "convert/hf_config.h"
#include "convert/safetensors.h"
#include "quant/types.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::convert {

enum class Xform {
    Convert,        // dtype conversion only (includes pure reshapes such as the conv weights)
    NegExp,         // -exp(x) (ssm_a from A_log), with torch's exp
    NegExpHeads,    // K3: -exp(x[:n]) on a padded 1-D A_log
    StackExperts,   // src[e] for each expert, stacked on a new outer dimension
    Mxfp4Experts,   // src = packed0, scale0, packed1, scale1, ...: repacked to block_mxfp4
    KvbK,           // kv_b viewed (n_head, nope+v, kv_lora): [:, :nope].transpose(1, 2)
    KvbV,           // the same view: [:, nope:]
    FuseRes,        // src = {res_norm, res_proj}: elementwise product in f32
};

struct PlanTensor {
    std::string name;                    // GGUF name
    quant::Type type = quant::Type::F32;
    int n_dims = 1;
    int64_t ne[4] = {1, 1, 1, 1};        // ggml order
    Xform xf = Xform::Convert;
    std::vector<const StTensor*> src;
    int64_t p0 = 0, p1 = 0, p2 = 0;      // KvbK/KvbV: n_head, nope, v; NegExpHeads: n

    int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    size_t nbytes() const;
    std::string shape_str() const;       // "{256, 64}"
    std::string describe() const;        // source(s) and transform, for --dry-run
};

enum class OutType { F32, F16, BF16, Q8_0, Auto };

struct Plan {
    std::vector<PlanTensor> tensors;
    OutType outtype = OutType::F32;      // after resolving Auto
    uint32_t file_type = 0;              // general.file_type (llama_ftype)
    std::vector<std::string> skipped;    // checkpoint tensors left out (vision tower, projector)
    uint64_t out_bytes = 0;              // tensor data, unpadded
    std::string source;                  // the index file (or the directory), for messages
};

Plan make_plan(const Checkpoint& ck, const HfConfig& cfg, OutType outtype);

}  // namespace kinfer::convert
