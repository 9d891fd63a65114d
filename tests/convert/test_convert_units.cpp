// Unit checks of the converter's building blocks: torch's exp, numpy's fp16 rounding, the MXFP4
// repack, gguf-py's naming heuristics and size label, and the HF name mapping.
#include "convert/hf_names.h"
#include "convert/model_name.h"
#include "convert/mxfp4_repack.h"
#include "convert/numerics.h"
#include "quant/fp16.h"
#include "test_util.h"

using namespace kinfer;
using namespace kinfer::convert;

TEST_CASE("torch_expf reproduces torch 1.13's exp where glibc differs by 1 ulp") {
    // golden/hf/README.md, "Verification": A_log bits -> the GGUF's -exp(A_log) bits.
    const uint32_t cases[][2] = {{0x3ec58eac, 0xbfbc4578}, {0x3fe2a218, 0xc0bbf988},
                                 {0x3ef3dc2f, 0xbfce1762}, {0x4017c0de, 0xc12b5aca}};
    for (const auto& c : cases) {
        CAPTURE(c[0]);
        CHECK(quant::f32_bits(-torch_expf(quant::f32_from_bits(c[0]))) == c[1]);
    }
    CHECK(torch_expf(0.0f) == 1.0f);
    CHECK(torch_expf(-200.0f) == 0.0f);
    CHECK(std::isinf(torch_expf(200.0f)));
}

TEST_CASE("fp32 -> fp16 follows numpy, NaN payload included") {
    CHECK(fp32_to_fp16_numpy(1.0f) == 0x3c00);
    CHECK(fp32_to_fp16_numpy(65520.0f) == 0x7c00);           // rounds to inf
    CHECK(fp32_to_fp16_numpy(65519.0f) == 0x7bff);
    CHECK(fp32_to_fp16_numpy(quant::f32_from_bits(0x7fc00000)) == 0x7e00);
    CHECK(fp32_to_fp16_numpy(quant::f32_from_bits(0x7f800001)) == 0x7c01);   // stays NaN
    CHECK(fp32_to_fp16_numpy(quant::f32_from_bits(0xffa00000)) == 0xfd00);   // payload kept
    CHECK(fp32_to_fp16_numpy(5.9604644775390625e-8f) == 0x0001);            // smallest subnormal
    CHECK(fp32_to_fp16_numpy(2.98023223876953125e-8f) == 0x0000);           // tie -> even (0)
}

TEST_CASE("MXFP4 repack moves element j and j+16 into one byte, scale first") {
    uint8_t packed[16], scale[1] = {0x7d}, out[17];
    for (int i = 0; i < 16; ++i) packed[i] = uint8_t((2 * i) % 16 | (((2 * i + 1) % 16) << 4));   // codes 0..15,0..15
    repack_mxfp4(packed, scale, 1, 32, out);
    CHECK(out[0] == 0x7d);
    for (int j = 0; j < 16; ++j) CHECK(out[1 + j] == uint8_t(j | (j << 4)));   // element j+16 has code j too
}

TEST_CASE("general.name and size label follow gguf-py") {
    auto m = model_name_from_dir("hf-k3-tiny", 4'000'000);
    CHECK(m.name == "Hf K3 Tiny");
    CHECK(!m.basename);
    CHECK(!m.size_label);
    auto k = model_name_from_dir("Kimi-Linear-48B-A3B-Instruct", 49'000'000'000);
    CHECK(k.name == "Kimi Linear 48B A3B Instruct");
    CHECK(k.basename == "Kimi-Linear");
    CHECK(k.size_label == "48B-A3B");
    CHECK(k.finetune == "Instruct");
    auto v = model_name_from_dir("Kimi-K3", 1'000'000'000'000);
    CHECK(v.name == "Kimi K3");
    CHECK(!v.size_label);
    CHECK(size_label(0, 3'000'000, 1'100'000, 32) == "32x4.1M");
    CHECK(size_label(500'000, 0, 0, 0) == "500K");
    CHECK(size_label(48'000'000'000, 0, 0, 0) == "48B");
    CHECK(size_label(1'200'000, 0, 0, 0) == "1.2M");
}

TEST_CASE("HF names map to llama.cpp's GGUF names per architecture") {
    CHECK(map_hf_name("model.layers.3.self_attn.q_a_layernorm.weight", ModelArch::KimiK3) == "blk.3.attn_q_a_norm.weight");
    CHECK(map_hf_name("model.layers.0.self_attn.A_log", ModelArch::KimiLinear) == "blk.0.ssm_a");
    CHECK(map_hf_name("model.layers.0.self_attn.dt_proj.bias", ModelArch::KimiLinear) == "blk.0.ssm_dt.bias");
    CHECK(map_hf_name("model.layers.1.block_sparse_moe.gate.e_score_correction.bias", ModelArch::KimiK3) ==
          "blk.1.exp_probs_b.bias");
    CHECK(map_hf_name("lm_head.weight", ModelArch::KimiK3) == "output.weight");
    CHECK(!map_hf_name("model.layers.1.block_sparse_moe.routed_expert_norm.weight", ModelArch::KimiLinear));
    CHECK(!map_hf_name("model.layers.1.self_attn.g_a_proj.weight", ModelArch::KimiK3));
    CHECK(first_number("model.layers.12.mlp.up_proj.weight") == 12);
    CHECK(first_number("lm_head.weight") == -1);
    CHECK(is_multimodal_tensor("vision_tower.blocks.0.attn.qkv.weight"));
    CHECK(is_multimodal_tensor("mm_projector.proj.0.weight"));
    CHECK(!is_multimodal_tensor("language_model.model.layers.0.mlp_res_norm.weight"));
}
