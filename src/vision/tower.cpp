#include "vision/tower.h"

#include "common/error.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace kinfer::vision {

void emit_stage(const StageHook& hook, backend::Backend& be, const std::string& name, const float* x, int64_t rows,
                int64_t cols) {
    if (!hook) return;
    std::vector<float> host(size_t(rows * cols));
    be.download(host.data(), x, host.size() * sizeof(float));
    hook(name, host.data(), rows, cols);
}

std::vector<float> resample_pos_grid(const std::vector<float>& grid, int in_h, int in_w, int C, int out_h, int out_w) {
    if (in_h == out_h && in_w == out_w) return grid;
    std::vector<float> out(size_t(out_h) * size_t(out_w) * size_t(C));
    // One axis of ggml's bilinear: source coordinate, the two taps (clamped) and the weight.
    struct Tap {
        int i0, i1;
        float t;
    };
    auto taps = [](int n_out, int n_in) {
        std::vector<Tap> v(static_cast<size_t>(n_out));
        const float sf = float(n_out) / float(n_in);
        for (int i = 0; i < n_out; ++i) {
            const float s = (float(i) + 0.5f) / sf - 0.5f;
            int i0 = int(std::floor(s));
            int i1 = i0 + 1;
            i0 = std::clamp(i0, 0, n_in - 1);
            i1 = std::clamp(i1, 0, n_in - 1);
            v[size_t(i)] = {i0, i1, std::clamp(s - float(i0), 0.0f, 1.0f)};
        }
        return v;
    };
    const auto ty = taps(out_h, in_h), tx = taps(out_w, in_w);
    auto at = [&](int y, int x, int c) { return grid[(size_t(y) * size_t(in_w) + size_t(x)) * size_t(C) + size_t(c)]; };
    for (int y = 0; y < out_h; ++y)
        for (int x = 0; x < out_w; ++x) {
            const Tap& a = ty[size_t(y)];
            const Tap& b = tx[size_t(x)];
            float* o = &out[(size_t(y) * size_t(out_w) + size_t(x)) * size_t(C)];
            // ggml's a(1-dx)(1-dy) + b dx(1-dy) + c(1-dx)dy + d dx dy as GCC contracts it on an FMA
            // machine (the golden build): b dx (1-dy) rounded, then three FMAs in turn. mtmd
            // interpolates the grid permuted to [H, W, C], so its x runs along H and its y along W.
            const float dx = a.t, dy = b.t;
            for (int c = 0; c < C; ++c)
                o[c] = std::fma(at(a.i1, b.i1, c) * dx, dy,
                                std::fma(at(a.i0, b.i1, c) * (1 - dx), dy,
                                         std::fma(at(a.i0, b.i0, c) * (1 - dx), 1 - dy, at(a.i1, b.i0, c) * dx * (1 - dy))));
        }
    return out;
}

std::vector<float> im2col_patches(const float* planar, int W, int H, int P) {
    const int gw = W / P, gh = H / P;
    const size_t K = size_t(3) * size_t(P) * size_t(P);
    std::vector<float> rows(size_t(gw) * size_t(gh) * K);
    for (int gy = 0; gy < gh; ++gy)
        for (int gx = 0; gx < gw; ++gx) {
            float* r = &rows[(size_t(gy) * size_t(gw) + size_t(gx)) * K];
            for (int c = 0; c < 3; ++c)
                for (int ky = 0; ky < P; ++ky) {
                    const float* src = planar + (size_t(c) * size_t(H) + size_t(gy * P + ky)) * size_t(W) + size_t(gx * P);
                    std::copy_n(src, P, r + (size_t(c) * size_t(P) + size_t(ky)) * size_t(P));
                }
        }
    return rows;
}

float* tower_forward(const Mmproj& mm, backend::Workspace& ws, const float* planar, int W, int H,
                     const TowerOptions& opt, const StageHook& hook) {
    const VisionHParams& hp = mm.hparams();
    backend::Backend& be = ws.backend();
    const int P = hp.pre.patch;
    if (W <= 0 || H <= 0 || W % P || H % P) fail("vision tower: a {} x {} canvas is not whole {}-pixel patches", W, H, P);
    const int gw = W / P, gh = H / P;
    const int64_t N = int64_t(gw) * gh, C = hp.n_embd, Q = hp.q_dim(), F = hp.n_ff;
    const float eps = opt.tower_eps > 0 ? opt.tower_eps : hp.eps;

    // Patch embedding: the im2col rows go up once; the matmul rounds them to the weight's f16.
    const auto cols = im2col_patches(planar, W, H, P);
    float* pix = ws.get(cols.size());
    be.upload(pix, cols.data(), cols.size() * sizeof(float));
    float* x = ws.get(size_t(N * C));
    be.matmul(mm.patch(), pix, N, x);
    emit_stage(hook, be, "patch_conv", x, N, C);

    // Position grid (a small weight, resampled on the host per patch grid), added.
    const auto pos = resample_pos_grid(mm.pos_grid(), hp.pos_h, hp.pos_w, int(C), gh, gw);
    float* pe = ws.get(pos.size());
    be.upload(pe, pos.data(), pos.size() * sizeof(float));
    if (hook && (gh != hp.pos_h || gw != hp.pos_w)) hook("pos_embd_interp", pos.data(), N, C);
    be.add(x, pe, N * C);
    emit_stage(hook, be, "embd_inp", x, N, C);

    std::vector<int32_t> pos_x(static_cast<size_t>(N)), pos_y(static_cast<size_t>(N));
    for (int64_t p = 0; p < N; ++p) pos_x[size_t(p)] = int32_t(p % gw), pos_y[size_t(p)] = int32_t(p / gw);

    float* h = ws.get(size_t(N * C));
    float* qkv = ws.get(size_t(N * 3 * Q));
    float* q = ws.get(size_t(N * Q));
    float* k = ws.get(size_t(N * Q));
    float* v = ws.get(size_t(N * Q));
    float* o = ws.get(size_t(N * Q));
    float* u = ws.get(size_t(N * F));
    const float scale = 1.0f / std::sqrt(float(hp.head_dim));
    for (int b = 0; b < hp.n_layer; ++b) {
        const VisionBlock& blk = mm.blocks()[size_t(b)];
        const std::string sfx = fmt::format("-{}", b);
        be.rms_norm(x, blk.ln1, h, N, C, eps);
        emit_stage(hook, be, "layer_inp_normed" + sfx, h, N, C);
        be.matmul(blk.qkv, h, N, qkv);
        be.copy_rows(q, Q, qkv, 3 * Q, N, Q);
        be.copy_rows(k, Q, qkv + Q, 3 * Q, N, Q);
        be.copy_rows(v, Q, qkv + 2 * Q, 3 * Q, N, Q);
        be.rope_2d(q, N, hp.n_head, hp.head_dim, pos_x.data(), pos_y.data(), hp.rope_theta);
        be.rope_2d(k, N, hp.n_head, hp.head_dim, pos_x.data(), pos_y.data(), hp.rope_theta);
        emit_stage(hook, be, "Qcur_pos" + sfx, q, N, Q);
        emit_stage(hook, be, "Kcur_pos" + sfx, k, N, Q);
        be.attend_full(q, k, v, o, N, hp.n_head, hp.head_dim, scale);
        emit_stage(hook, be, "kqv_out" + sfx, o, N, Q);
        be.matmul(blk.out, o, N, h);
        be.add(x, h, N * C);
        emit_stage(hook, be, "ffn_inp" + sfx, x, N, C);
        be.rms_norm(x, blk.ln2, h, N, C, eps);
        be.matmul(blk.up, h, N, u);
        be.gelu(u, N * F);
        be.matmul(blk.down, u, N, h);
        be.add(x, h, N * C);
        emit_stage(hook, be, "layer_out" + sfx, x, N, C);
    }
    be.rms_norm(x, mm.post_ln(), x, N, C, eps);
    emit_stage(hook, be, "vit_out", x, N, C);
    return x;
}

}  // namespace kinfer::vision
