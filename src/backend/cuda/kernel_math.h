// The arithmetic of the CUDA kernels that have tensor-core forms, in a namespace of its own: the
// kernels are compiled into kinfer::cuda::gpu or ::emu (kernel_ns.h), and CudaBackend, built for
// either, names the same enum (its KINFER_CUDA_KDA / KINFER_CUDA_MLA setting) without a mapping.
#pragma once
#include <cstring>

namespace kinfer::cuda {

// fp32 FMAs on the CUDA cores, or TF32 tensor cores (mma_tf32.cuh) on 3xTF32 splits (each fp32
// operand as two TF32 parts, three products: fp32-accurate) or on single products of TF32-rounded
// operands (about 2^-11 relative a product).
// f16x2 / f16: the MLA kernels over an f16 latent cache on fp16 tensor cores (mma_f16.cuh), the
// cache's values exact and the fp32 operand split in two fp16 parts (fp32-class) or rounded once
// (2^-11): the grouped absorbed kernel, and the decompressed form's key expansion. The
// decompressed form's flash kernel takes fp16 tensor cores over any cache, both operands split
// (three products, fp32-class) or rounded once. Everything else takes tf32x3 / tf32 for them.
// f16x3 / f16: the chunked KDA's state products on fp16 tensor cores (kda_chunked_mma_f16.cuh),
// both fp32 operands scaled by powers of two and split in two fp16 parts, three products
// (fp32-class), or rounded once. The KDA refuses f16x2 (none of its operands is fp16), the MLA
// f16x3.
enum class F32Math { fp32, tf32x3, tf32, f16x2, f16, f16x3 };

// Which family takes which form (kda: the chunked KDA; otherwise the MLA kernels), and the list
// that family's errors give: the one rule the backend's variables and the kernels' own checks share.
constexpr bool math_taken(F32Math m, bool kda) { return kda ? m != F32Math::f16x2 : m != F32Math::f16x3; }
inline const char* math_choices(bool kda) { return kda ? "fp32, tf32x3, tf32, f16x3 or f16" : "fp32, tf32x3, tf32, f16x2 or f16"; }

// A form by its name (KINFER_CUDA_KDA / KINFER_CUDA_MLA's values); false for no form's name.
inline bool math_from_name(const char* s, F32Math& m) {
    static constexpr struct {
        const char* name;
        F32Math math;
    } kNames[] = {{"fp32", F32Math::fp32}, {"tf32x3", F32Math::tf32x3}, {"tf32", F32Math::tf32},
                  {"f16x2", F32Math::f16x2}, {"f16", F32Math::f16}, {"f16x3", F32Math::f16x3}};
    for (const auto& n : kNames)
        if (std::strcmp(s, n.name) == 0) return m = n.math, true;
    return false;
}

}  // namespace kinfer::cuda
