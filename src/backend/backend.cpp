#include "backend/backend.h"

#include "common/error.h"
#include "quant/types.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kinfer::backend {

Buffer Backend::alloc_pinned_host(size_t bytes, std::string_view what) {
    void* p = std::aligned_alloc(4096, (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096);
    if (!p) fail("cannot allocate {} bytes of host memory for {}", bytes, what);
    return Buffer{static_cast<uint8_t*>(p), bytes, 0};
}

void Backend::free_pinned_host(Buffer& b) {
    std::free(b.ptr);
    b = Buffer{};
}

bool cpu_can_matmul(quant::Type t) {
    if (t == quant::Type::F32) return true;
    const quant::Traits* tr = quant::traits_or_null(uint32_t(t));
    return tr && tr->vec_dot && tr->to_float;
}

void to_float_host(quant::Type t, const void* src, float* dst, int64_t n, std::string_view what) {
    const quant::Traits* tr = quant::traits_or_null(uint32_t(t));
    if (!tr || !tr->to_float) fail("tensor '{}': type {} cannot be read as floats", what, uint32_t(t));
    tr->to_float(src, dst, n);
}

// Backends without a copy engine copy at once: the event has already happened.
Event Backend::upload_async(void* dst, const void* host_src, size_t bytes) {
    upload(dst, host_src, bytes);
    return Event{};
}

void Backend::wait(Event) {}

void Backend::matmul_many(std::span<const std::pair<Mat, float*>> outs, const float* x, int64_t n) {
    if (outs.size() == 0) return;
    const MatInput in{x, n, outs.begin()->first.cols, 0};
    std::vector<MatTask> tasks;
    tasks.reserve(outs.size());
    for (const auto& [W, y] : outs) tasks.push_back(MatTask{W, 0, 0, n, y, 0});
    matmul_tasks({&in, 1}, tasks);
}

void Backend::route_resident(float*, const float*, int64_t, const RouteParams&, int32_t*, float*) {
    fail("backend {}: op route_resident is not implemented", name());
}
void Backend::matmul_id(const Mat&, int64_t, const int32_t*, int64_t, const float*, int64_t, float*) {
    fail("backend {}: op matmul_id is not implemented", name());
}
void Backend::scale_rows(float*, const float*, int64_t, int64_t) { fail("backend {}: op scale_rows is not implemented", name()); }

void Backend::mla_cache_store(const LatentPages&, int64_t, int64_t, const float*, int64_t) {
    fail("backend {}: op mla_cache_store is not implemented", name());
}
void Backend::mla_cache_load(const LatentPages&, int64_t, int64_t, float*) {
    fail("backend {}: op mla_cache_load is not implemented", name());
}
void Backend::mla_attend_tiled(const LatentPages&, const float*, float*, const MlaShape&) {
    fail("backend {}: op mla_attend_tiled is not implemented", name());
}
void Backend::mla_attend_tiled_mha(const Mat&, const Mat&, const LatentPages&, const float*, float*, const MlaShape&) {
    fail("backend {}: op mla_attend_tiled_mha is not implemented", name());
}
void Backend::gelu(float*, int64_t, bool) { fail("backend {}: op gelu is not implemented", name()); }
void Backend::rope_2d(float*, int64_t, int64_t, int64_t, const int32_t*, const int32_t*, float, int64_t) {
    fail("backend {}: op rope_2d is not implemented", name());
}
void Backend::attend_full(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t, float) {
    fail("backend {}: op attend_full is not implemented", name());
}

const char* cache_type_name(CacheType t) {
    switch (t) {
        case CacheType::f32: return "f32";
        case CacheType::f16: return "f16";
        case CacheType::q8_0: return "q8_0";
    }
    return "?";
}

bool parse_cache_type(std::string_view s, CacheType& out) {
    for (CacheType t : {CacheType::f32, CacheType::f16, CacheType::q8_0})
        if (s == cache_type_name(t)) {
            out = t;
            return true;
        }
    return false;
}

size_t cache_row_bytes(CacheType t, int64_t floats) {
    switch (t) {
        case CacheType::f32: return size_t(floats) * 4;
        case CacheType::f16: return size_t(floats) * 2;
        case CacheType::q8_0:   // blocks of 32: an f16 scale and 32 int8
            if (floats % 32 != 0) fail("a q8_0 latent cache needs rows of a multiple of 32 values (got {})", floats);
            return size_t(floats / 32) * 34;
    }
    return 0;
}

void copy_between(Backend& dst_be, void* dst, Backend& src_be, const void* src, size_t bytes) {
    if (&dst_be == &src_be) return dst_be.copy(dst, src, bytes);
    if (src_be.host_memory() && !dst_be.host_memory()) return dst_be.upload(dst, src, bytes);
    if (dst_be.host_memory() && !src_be.host_memory()) return src_be.download(dst, src, bytes);
    if (src_be.host_memory() && dst_be.host_memory()) {   // two host backends: plain memory
        std::memcpy(dst, src, bytes);
        return;
    }
    if (src_be.copy_to(dst_be, dst, src, bytes)) return;  // GPU to GPU
    std::vector<uint8_t> staging(bytes);                   // device to device through the host
    src_be.download(staging.data(), src, bytes);
    dst_be.upload(dst, staging.data(), bytes);
}

void place_rows(Backend& be, const float* src, int64_t cols, std::span<const int64_t> idx, float* dst) {
    if (idx.empty()) return;
    const std::vector<float> ones(size_t(*std::max_element(idx.begin(), idx.end()) + 1), 1.0f);
    be.scatter_weighted(src, cols, idx, ones.data(), dst);
}

}  // namespace kinfer::backend
