// The arithmetic of the CUDA kernels that have tensor-core forms, in a namespace of its own: the
// kernels are compiled into kinfer::cuda::gpu or ::emu (kernel_ns.h), and CudaBackend, built for
// either, names the same enum (its KINFER_CUDA_KDA / KINFER_CUDA_MLA setting) without a mapping.
#pragma once

namespace kinfer::cuda {

// fp32 FMAs on the CUDA cores, or TF32 tensor cores (mma_tf32.cuh) on 3xTF32 splits (each fp32
// operand as two TF32 parts, three products: fp32-accurate) or on single products of TF32-rounded
// operands (about 2^-11 relative a product).
// f16x2 / f16: the MLA kernels over an f16 latent cache on fp16 tensor cores (mma_f16.cuh), the
// cache's values exact and the fp32 operand split in two fp16 parts (fp32-class) or rounded once
// (2^-11): the grouped absorbed kernel, and the decompressed form's key expansion; everything else
// takes tf32x3 / tf32 for them.
// f16x3 / f16: the chunked KDA's state products on fp16 tensor cores (kda_chunked_mma_f16.cuh),
// both fp32 operands scaled by powers of two and split in two fp16 parts, three products
// (fp32-class), or rounded once. The KDA refuses f16x2 (none of its operands is fp16), the MLA
// f16x3.
enum class F32Math { fp32, tf32x3, tf32, f16x2, f16, f16x3 };

}  // namespace kinfer::cuda
