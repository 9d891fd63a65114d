// The per-type trait table and the one-time choice of kernel level (AVX-512 > AVX2 > scalar,
// or KINFER_ISA=scalar|avx2|avx512). Every consumer reaches kernels through traits(type).
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cpuid.h>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/types.h"

namespace kinfer::quant {

namespace {
// F16C through CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
}  // namespace

bool cpu_supports(Isa isa) {
    switch (isa) {
        case Isa::scalar: return true;
        case Isa::avx2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
        case Isa::avx512:
            return cpu_supports(Isa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vnni");
    }
    return false;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::scalar: return "scalar";
        case Isa::avx2: return "avx2";
        case Isa::avx512: return "avx512";
    }
    return "?";
}

namespace {

Isa choose_isa() {
    Isa best = cpu_supports(Isa::avx512) ? Isa::avx512 : cpu_supports(Isa::avx2) ? Isa::avx2 : Isa::scalar;
    if (const char* env = std::getenv("KINFER_ISA"); env && *env) {
        for (Isa want : {Isa::scalar, Isa::avx2, Isa::avx512}) {
            if (std::strcmp(env, isa_name(want)) != 0) continue;
            if (cpu_supports(want)) return want;
            std::fprintf(stderr, "kinfer: KINFER_ISA=%s not supported by this CPU, using %s\n", env, isa_name(best));
            return best;
        }
        std::fprintf(stderr, "kinfer: unknown KINFER_ISA=%s (scalar|avx2|avx512), using %s\n", env, isa_name(best));
    }
    return best;
}

// SIMD kernels of each kind (vec_dot, several activation rows, several weight rows, tiles), by
// the scalar reference kernel of their type; one table per kind, one lookup for all of them.
template <class Fn>
struct SimdEntry { VecDotFn ref; Fn avx2, avx512; };

#define KINFER_SIMD_ENTRY(name) {ref::vec_dot_##name, avx2::vec_dot_##name, avx512::vec_dot_##name},
const SimdEntry<VecDotFn> kSimd[] = {KINFER_SIMD_VEC_DOTS(KINFER_SIMD_ENTRY)};
#undef KINFER_SIMD_ENTRY
#define KINFER_SIMD_ENTRY(name) {ref::vec_dot_##name, avx2::vec_dot_multi_##name, avx512::vec_dot_multi_##name},
const SimdEntry<VecDotMultiFn> kSimdMulti[] = {KINFER_SIMD_VEC_DOTS_MULTI(KINFER_SIMD_ENTRY)};
#undef KINFER_SIMD_ENTRY
#define KINFER_SIMD_ENTRY(name) {ref::vec_dot_##name, avx2::vec_dot_rows_##name, avx512::vec_dot_rows_##name},
#define KINFER_SIMD_ENTRY_AVX2(name) {ref::vec_dot_##name, avx2::vec_dot_rows_##name, nullptr},
const SimdEntry<VecDotRowsFn> kSimdRows[] = {KINFER_SIMD_VEC_DOTS_ROWS(KINFER_SIMD_ENTRY)
                                             KINFER_SIMD_VEC_DOTS_ROWS_Q8_0(KINFER_SIMD_ENTRY_AVX2)};
#undef KINFER_SIMD_ENTRY
#undef KINFER_SIMD_ENTRY_AVX2
#define KINFER_SIMD_ENTRY(name) {ref::vec_dot_##name, avx2::vec_dot_tile_##name, avx512::vec_dot_tile_##name},
#define KINFER_SIMD_ENTRY_AVX512(name) {ref::vec_dot_##name, nullptr, avx512::vec_dot_tile_##name},
const SimdEntry<VecDotTileFn> kSimdTile[] = {KINFER_SIMD_VEC_DOTS_TILE(KINFER_SIMD_ENTRY)
                                             KINFER_SIMD_VEC_DOTS_TILE_AVX512(KINFER_SIMD_ENTRY_AVX512)};
#undef KINFER_SIMD_ENTRY
#undef KINFER_SIMD_ENTRY_AVX512

// The kernel of this kind for the type whose reference kernel is ref_fn, at level isa; nullptr
// when that level has none of its own or the CPU lacks it.
template <class Fn, size_t N>
Fn simd_lookup(const SimdEntry<Fn> (&table)[N], VecDotFn ref_fn, Isa isa) {
    if (isa == Isa::scalar || !ref_fn || !cpu_supports(isa)) return nullptr;
    for (const SimdEntry<Fn>& e : table) {
        if (e.ref == ref_fn) return isa == Isa::avx2 ? e.avx2 : e.avx512;
    }
    return nullptr;
}

constexpr size_t kMaxId = 40;

std::array<Traits, kMaxId> build_table(Isa isa) {
    std::array<Traits, kMaxId> t{};
    // The format facts come from type_facts.h; this table adds the CPU functions: to_float,
    // from_float_ref, vec_dot_ref, quantize (chunk path), from_float (activation path).
    auto set = [&](Type ty, ToFloatFn to, FromFloatFn ref_q, VecDotFn dot, FromFloatFn chunk, FromFloatFn act) {
        const TypeFacts f = type_facts(ty);
        Traits& e = t[size_t(ty)];
        e = Traits{ty, f.name, f.block_size, f.type_size, f.quantized, to, ref_q, dot, dot, f.vec_dot_type, chunk, act,
                   nullptr, nullptr, nullptr};
        if (VecDotFn fast = simd_lookup(kSimd, dot, isa)) e.vec_dot = fast;
        e.vec_dot_multi = simd_lookup(kSimdMulti, dot, isa);
        e.vec_dot_rows = simd_lookup(kSimdRows, dot, isa);
        e.vec_dot_tile = simd_lookup(kSimdTile, dot, isa);
    };
    set(Type::F32, dequantize_row_f32, quantize_row_f32, ref::vec_dot_f32_f32, quantize_row_f32, quantize_row_f32);
    set(Type::F16, dequantize_row_f16, quantize_row_f16, ref::vec_dot_f16_f32, quantize_row_f16, quantize_row_f16);
    set(Type::BF16, dequantize_row_bf16, quantize_row_bf16, ref::vec_dot_bf16_f32, quantize_row_bf16,
        quantize_row_bf16);
    set(Type::Q4_0, dequantize_row_q4_0, quantize_row_q4_0_ref, ref::vec_dot_q4_0_q8_0, quantize_row_q4_0_ref,
        quantize_row_q4_0_ref);
    set(Type::Q4_1, dequantize_row_q4_1, quantize_row_q4_1_ref, ref::vec_dot_q4_1_q8_1, quantize_row_q4_1_ref,
        quantize_row_q4_1_ref);
    set(Type::Q5_0, dequantize_row_q5_0, quantize_row_q5_0_ref, ref::vec_dot_q5_0_q8_0, quantize_row_q5_0_ref,
        quantize_row_q5_0_ref);
    set(Type::Q5_1, dequantize_row_q5_1, quantize_row_q5_1_ref, ref::vec_dot_q5_1_q8_1, quantize_row_q5_1_ref,
        quantize_row_q5_1_ref);
    set(Type::Q8_0, dequantize_row_q8_0, quantize_row_q8_0_ref, ref::vec_dot_q8_0_q8_0, quantize_row_q8_0_ref,
        quantize_row_q8_0);
    set(Type::Q8_1, dequantize_row_q8_1, quantize_row_q8_1_ref, nullptr, quantize_row_q8_1_ref, quantize_row_q8_1);
    set(Type::Q2_K, dequantize_row_q2_K, quantize_row_q2_K_ref, ref::vec_dot_q2_K_q8_K, quantize_row_q2_K_ref,
        quantize_row_q2_K_ref);
    set(Type::Q3_K, dequantize_row_q3_K, quantize_row_q3_K_ref, ref::vec_dot_q3_K_q8_K, quantize_row_q3_K_ref,
        quantize_row_q3_K_ref);
    set(Type::Q4_K, dequantize_row_q4_K, quantize_row_q4_K_ref, ref::vec_dot_q4_K_q8_K, quantize_row_q4_K_ref,
        quantize_row_q4_K_ref);
    set(Type::Q5_K, dequantize_row_q5_K, quantize_row_q5_K_ref, ref::vec_dot_q5_K_q8_K, quantize_row_q5_K_ref,
        quantize_row_q5_K_ref);
    set(Type::Q6_K, dequantize_row_q6_K, quantize_row_q6_K_ref, ref::vec_dot_q6_K_q8_K, quantize_row_q6_K_ref,
        quantize_row_q6_K_ref);
    set(Type::Q8_K, dequantize_row_q8_K, quantize_row_q8_K_ref, nullptr, quantize_row_q8_K_ref, quantize_row_q8_K);
    set(Type::IQ4_NL, dequantize_row_iq4_nl, quantize_row_iq4_nl_ref, ref::vec_dot_iq4_nl_q8_0, quantize_iq4_nl,
        quantize_iq4_nl);
    set(Type::IQ4_XS, dequantize_row_iq4_xs, quantize_row_iq4_xs_ref, ref::vec_dot_iq4_xs_q8_K,
        quantize_row_iq4_xs_ref, quantize_row_iq4_xs_ref);
    set(Type::MXFP4, dequantize_row_mxfp4, quantize_row_mxfp4_ref, ref::vec_dot_mxfp4_q8_0, quantize_row_mxfp4_ref,
        quantize_row_mxfp4_ref);
    for (Type ty : {Type::I8, Type::I16, Type::I32, Type::I64, Type::F64}) set(ty, nullptr, nullptr, nullptr, nullptr, nullptr);
    return t;
}

struct State {
    Isa isa = choose_isa();
    std::array<Traits, kMaxId> table = build_table(isa);
};

const State& state() {
    static const State s;  // built once, thread-safe
    return s;
}

}  // namespace

Isa active_isa() { return state().isa; }

namespace {
template <class Fn, size_t N>
Fn simd_for_type(const SimdEntry<Fn> (&table)[N], Type t, Isa isa) {
    const Traits* tr = traits_or_null(uint32_t(t));
    return tr ? simd_lookup(table, tr->vec_dot_ref, isa) : nullptr;
}
}  // namespace

VecDotFn vec_dot_for(Type t, Isa isa) { return simd_for_type(kSimd, t, isa); }
VecDotMultiFn vec_dot_multi_for(Type t, Isa isa) { return simd_for_type(kSimdMulti, t, isa); }
VecDotRowsFn vec_dot_rows_for(Type t, Isa isa) { return simd_for_type(kSimdRows, t, isa); }
VecDotTileFn vec_dot_tile_for(Type t, Isa isa) { return simd_for_type(kSimdTile, t, isa); }

const Traits* traits_or_null(uint32_t id) {
    if (id >= kMaxId) return nullptr;
    const Traits& t = state().table[id];
    return t.name ? &t : nullptr;
}

const Traits& traits(Type t) {
    const Traits* p = traits_or_null(uint32_t(t));
    if (!p) {
        std::fprintf(stderr, "kinfer: unknown ggml type id %u\n", unsigned(t));
        std::abort();
    }
    return *p;
}

std::optional<Type> type_from_name(std::string_view name) {
    for (uint32_t id = 0; id < kMaxId; ++id) {
        const Traits* t = traits_or_null(id);
        if (!t || std::strlen(t->name) != name.size()) continue;
        bool eq = true;
        for (size_t i = 0; i < name.size() && eq; ++i) {
            eq = std::tolower(static_cast<unsigned char>(name[i])) == std::tolower(static_cast<unsigned char>(t->name[i]));
        }
        if (eq) return t->type;
    }
    return std::nullopt;
}

}  // namespace kinfer::quant
