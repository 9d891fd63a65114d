// CpuBackend's vision-tower ops (backend.h "the vision tower"), kept apart from the text ops.
#include "backend/cpu/vision_kernels.h"
#include "backend/cpu_backend.h"

namespace kinfer::backend {

void CpuBackend::gelu(float* x, int64_t n, bool erf) {
    need_f32(x, n, "gelu", "x");
    pool_->parallel_for(n, [&](int64_t b, int64_t e, int) {
        if (erf) cpu::gelu_erf(x + b, e - b);
        else cpu::gelu(x + b, e - b);
    }, 4096);
}

void CpuBackend::rope_2d(float* x, int64_t n, int64_t H, int64_t D, const int32_t* pos_x, const int32_t* pos_y,
                         float theta, int64_t ld) {
    if (ld == 0) ld = H * D;
    if (n > 0) need_f32(x, (n - 1) * ld + H * D, "rope_2d", "x");
    pool_->parallel_for(n, [&](int64_t b, int64_t e, int) {
        cpu::rope_2d(x + b * ld, e - b, H, D, pos_x + b, pos_y + b, theta, ld);
    }, 16);
}

void CpuBackend::attend_full(const float* q, const float* k, const float* v, float* o, int64_t n, int64_t H,
                             int64_t D, float scale) {
    for (const float* p : {q, k, v}) need_f32(p, n * H * D, "attend_full", "q/k/v");
    need_f32(o, n * H * D, "attend_full", "o");
    cpu::attend_full(*pool_, q, k, v, o, n, H, D, scale);
}

}  // namespace kinfer::backend
