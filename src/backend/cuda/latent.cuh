// Reading and writing the paged latent cache (backend.h LatentPages) inside a kernel: row j of
// [c | k_pe] (R floats stored as f32, f16 or q8_0) lives in pages[j / page_rows] at byte
// (j % page_rows) * row_bytes. The page table is a device array of device pointers. The f16 and
// q8_0 conversions are quant/'s (fp16.h, blocks.h), the ones the CPU cache uses, so a row
// written here reads back with the CPU's bits.
#pragma once
#include "backend/cuda/compat.h"
#include "backend/cuda/kernels.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

namespace kinfer::cuda::KINFER_CUDA_NS {

__device__ inline const uint8_t* latent_row(const LatentArgs& c, int64_t j) {
    return c.pages[j / c.page_rows] + size_t(j % c.page_rows) * c.row_bytes;
}

// Element i of a row, as f32. q8_0: block i / 32 is an fp16 scale (2 bytes) and 32 int8.
__device__ inline float latent_at(const LatentArgs& c, const uint8_t* row, int64_t i) {
    switch (c.type) {
        case kLatentF32: return reinterpret_cast<const float*>(row)[i];
        case kLatentF16: return quant::fp16_to_fp32(reinterpret_cast<const quant::fp16_t*>(row)[i]);
        default: {
            const uint8_t* b = row + (i / quant::QK8_0) * sizeof(quant::block_q8_0);
            const float d = quant::fp16_to_fp32(quant::fp16_t(b[0] | (b[1] << 8)));
            return d * float(int8_t(b[2 + i % quant::QK8_0]));
        }
    }
}

// The rows attention reads: the contiguous f32 rows of the untiled path, or the pages.
//   at(j, i)          element i of row j;
//   row(j), at(r, i)  the same with row j's address found once (a page lookup divides by the
//                     page size), for loops that read many elements of one row.
struct F32Rows {
    const float* p;
    int64_t R;
    using Row = const float*;
    __device__ Row row(int64_t j) const { return p + j * R; }
    __device__ float at(Row r, int64_t i) const { return r[i]; }
    __device__ float at(int64_t j, int64_t i) const { return p[j * R + i]; }
};
struct PagedRows {
    LatentArgs c;
    using Row = const uint8_t*;
    __device__ Row row(int64_t j) const { return latent_row(c, j); }
    __device__ float at(Row r, int64_t i) const { return latent_at(c, r, i); }
    __device__ float at(int64_t j, int64_t i) const { return latent_at(c, latent_row(c, j), i); }
};

}  // namespace kinfer::cuda::KINFER_CUDA_NS
