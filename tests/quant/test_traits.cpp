// The trait table: ggml ids, names, block sizes and bytes; name lookup; ISA selection.
#include <cstdlib>
#include <cstring>
#include <string>

#include "quant/types.h"
#include "quant_test_util.h"

using namespace kinfer::quant;

TEST_CASE("traits: every ggml id maps to ggml's name, block size and block bytes") {
    struct Row { uint32_t id; const char* name; int64_t bs; size_t bytes; bool quantized; };
    const Row rows[] = {
        {0, "f32", 1, 4, false},       {1, "f16", 1, 2, false},       {2, "q4_0", 32, 18, true},
        {3, "q4_1", 32, 20, true},     {6, "q5_0", 32, 22, true},     {7, "q5_1", 32, 24, true},
        {8, "q8_0", 32, 34, true},     {9, "q8_1", 32, 36, true},     {10, "q2_K", 256, 84, true},
        {11, "q3_K", 256, 110, true},  {12, "q4_K", 256, 144, true},  {13, "q5_K", 256, 176, true},
        {14, "q6_K", 256, 210, true},  {15, "q8_K", 256, 292, true},  {20, "iq4_nl", 32, 18, true},
        {23, "iq4_xs", 256, 136, true}, {24, "i8", 1, 1, false},      {25, "i16", 1, 2, false},
        {26, "i32", 1, 4, false},      {27, "i64", 1, 8, false},      {28, "f64", 1, 8, false},
        {30, "bf16", 1, 2, false},     {39, "mxfp4", 32, 17, true},
    };
    for (const Row& r : rows) {
        INFO("id ", r.id);
        const Traits* t = traits_or_null(r.id);
        REQUIRE((t != nullptr));
        CHECK(uint32_t(t->type) == r.id);
        CHECK(std::strcmp(t->name, r.name) == 0);
        CHECK(t->block_size == r.bs);
        CHECK(t->type_size == r.bytes);
        CHECK(t->quantized == r.quantized);
        CHECK(type_from_name(r.name) == t->type);
        if (r.id < 24 || r.id == 30 || r.id == 39) {
            CHECK(bool(t->to_float));
            CHECK(bool(t->from_float_ref));
            CHECK(bool(t->quantize));
        }
    }
    // ggml ids kinfer does not implement (IQ2/IQ3/IQ1, TQ, ...) and out-of-range ids.
    for (uint32_t id : {4u, 5u, 16u, 17u, 18u, 19u, 21u, 22u, 29u, 34u, 35u, 40u, 1000u}) CHECK((traits_or_null(id) == nullptr));
    CHECK(type_from_name("Q4_K") == Type::Q4_K);
    CHECK(type_from_name("MXFP4") == Type::MXFP4);
    CHECK(!type_from_name("q4_k_m").has_value());
    CHECK(row_size(traits(Type::Q4_K), 4096) == 16 * 144);
}

TEST_CASE("traits: activation (vec_dot) types are ggml's pairing") {
    CHECK(traits(Type::Q4_0).vec_dot_type == Type::Q8_0);
    CHECK(traits(Type::Q4_1).vec_dot_type == Type::Q8_1);
    CHECK(traits(Type::Q5_0).vec_dot_type == Type::Q8_0);
    CHECK(traits(Type::Q5_1).vec_dot_type == Type::Q8_1);
    CHECK(traits(Type::Q8_0).vec_dot_type == Type::Q8_0);
    CHECK(traits(Type::IQ4_NL).vec_dot_type == Type::Q8_0);
    CHECK(traits(Type::MXFP4).vec_dot_type == Type::Q8_0);
    for (Type t : {Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::IQ4_XS}) {
        CHECK(traits(t).vec_dot_type == Type::Q8_K);
    }
    CHECK(traits(Type::F32).vec_dot_type == Type::F32);
    CHECK(traits(Type::F16).vec_dot_type == Type::F32);
    CHECK(traits(Type::BF16).vec_dot_type == Type::F32);
}

TEST_CASE("dispatch: the active ISA is supported and honours KINFER_ISA") {
    const Isa isa = active_isa();
    MESSAGE("active ISA: ", std::string(isa_name(isa)), " (avx2 ", cpu_supports(Isa::avx2), ", avx512 ", cpu_supports(Isa::avx512), ")");
    CHECK(cpu_supports(isa));
    if (const char* env = std::getenv("KINFER_ISA"); env && std::strcmp(env, "scalar") == 0) {
        CHECK(isa == Isa::scalar);
        CHECK((traits(Type::Q4_K).vec_dot == traits(Type::Q4_K).vec_dot_ref));
    }
    if (isa != Isa::scalar) CHECK((traits(Type::Q4_K).vec_dot == vec_dot_for(Type::Q4_K, isa)));
}
