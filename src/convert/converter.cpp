// See converter.h.
#include "convert/converter.h"
#include "convert/plan_check.h"

#include "common/error.h"
#include "common/progress_line.h"
#include "convert/gguf_metadata.h"
#include "convert/mxfp4_repack.h"
#include "convert/numerics.h"
#include "gguf/writer.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

namespace kinfer::convert {

std::optional<OutType> outtype_from_name(const std::string& s0) {
    std::string s = s0;
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (s == "f32") return OutType::F32;
    if (s == "f16") return OutType::F16;
    if (s == "bf16") return OutType::BF16;
    if (s == "q8_0") return OutType::Q8_0;
    if (s == "auto") return OutType::Auto;
    return std::nullopt;
}

const char* outtype_name(OutType t) {
    switch (t) {
        case OutType::F32: return "f32";
        case OutType::F16: return "f16";
        case OutType::BF16: return "bf16";
        case OutType::Q8_0: return "q8_0";
        case OutType::Auto: return "auto";
    }
    return "?";
}

namespace {

// Elements [first, first + n) of a checkpoint tensor as f32 (integers by value, as torch's
// .to(float32) does).
void load_f32(const StTensor& t, int64_t first, int64_t n, float* dst) {
    const size_t es = dtype_size(t.dtype);
    const uint8_t* p = t.data + size_t(first) * es;
    if (dtype_is_float(t.dtype)) return to_f32(t.dtype, p, dst, size_t(n));
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t* q = p + size_t(i) * es;
        switch (t.dtype) {
            case DType::BOOL: dst[i] = q[0] ? 1.0f : 0.0f; break;
            case DType::U8: dst[i] = float(q[0]); break;
            case DType::I8: dst[i] = float(int8_t(q[0])); break;
            case DType::I16: { int16_t v; std::memcpy(&v, q, 2); dst[i] = float(v); break; }
            case DType::U16: { uint16_t v; std::memcpy(&v, q, 2); dst[i] = float(v); break; }
            case DType::I32: { int32_t v; std::memcpy(&v, q, 4); dst[i] = float(v); break; }
            case DType::U32: { uint32_t v; std::memcpy(&v, q, 4); dst[i] = float(v); break; }
            case DType::I64: { int64_t v; std::memcpy(&v, q, 8); dst[i] = float(v); break; }
            case DType::U64: { uint64_t v; std::memcpy(&v, q, 8); dst[i] = float(v); break; }
            default: fail("{}: tensor '{}': dtype {} cannot be converted", t.path(), t.name, dtype_name(t.dtype));
        }
    }
}

class Streamer {
public:
    Streamer(gguf::Writer& w, ProgressLine& pr) : w_(w), pr_(pr) {}

    void write(const PlanTensor& p) {
        switch (p.xf) {
            case Xform::Convert: convert_rows(*p.src[0], 0, p.nelements(), p.ne[0], p.type); break;
            case Xform::StackExperts: {
                const int64_t per = p.ne[0] * p.ne[1];
                for (const StTensor* s : p.src) convert_rows(*s, 0, per, p.ne[0], p.type);
                break;
            }
            case Xform::Mxfp4Experts: {
                const int64_t rows = p.ne[1], cols = p.ne[0];
                out_.resize(size_t(rows * cols / 32) * kMxfp4BlockBytes);
                for (size_t e = 0; e + 1 < p.src.size(); e += 2) {
                    repack_mxfp4(p.src[e]->data, p.src[e + 1]->data, rows, cols, out_.data());
                    emit(out_.data(), out_.size());
                    release(*p.src[e]);
                    release(*p.src[e + 1]);
                }
                break;
            }
            case Xform::NegExp:
            case Xform::NegExpHeads: {
                const int64_t n = p.nelements();
                f32_.resize(size_t(n));
                load_f32(*p.src[0], 0, n, f32_.data());
                for (float& x : f32_) x = -torch_expf(x);
                encode_emit(p.type, n);
                break;
            }
            case Xform::KvbK:
            case Xform::KvbV: {
                const StTensor& s = *p.src[0];
                const int64_t nh = p.p0, nope = p.p1, v = p.p2, L = s.shape[1], rows = nope + v;
                std::vector<float> in(size_t(s.numel()));
                load_f32(s, 0, s.numel(), in.data());
                f32_.resize(size_t(p.nelements()));
                float* o = f32_.data();
                for (int64_t h = 0; h < nh; ++h) {
                    const float* hb = in.data() + h * rows * L;
                    if (p.xf == Xform::KvbK) {   // (nh, L, nope): o[h][l][n] = in[h][n][l]
                        for (int64_t l = 0; l < L; ++l)
                            for (int64_t n = 0; n < nope; ++n) *o++ = hb[n * L + l];
                    } else {                     // (nh, v, L): rows nope.. of each head
                        std::memcpy(o, hb + nope * L, size_t(v * L) * 4);
                        o += v * L;
                    }
                }
                encode_emit(p.type, p.nelements());
                break;
            }
            case Xform::FuseRes: {
                const int64_t n = p.nelements();
                std::vector<float> b(static_cast<size_t>(n));
                f32_.resize(size_t(n));
                load_f32(*p.src[0], 0, n, f32_.data());
                load_f32(*p.src[1], 0, n, b.data());
                for (int64_t i = 0; i < n; ++i) f32_[size_t(i)] *= b[size_t(i)];
                encode_emit(p.type, n);
                break;
            }
        }
        if (p.xf != Xform::Mxfp4Experts)
            for (const StTensor* s : p.src) release(*s);
    }

private:
    // Rows of `row` elements, a few MB at a time: memory stays flat whatever the tensor size.
    void convert_rows(const StTensor& s, int64_t first, int64_t n, int64_t row, quant::Type type) {
        const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 20) / row) * row;
        for (int64_t i = 0; i < n; i += chunk) {
            const int64_t m = std::min(chunk, n - i);
            f32_.resize(size_t(m));
            load_f32(s, first + i, m, f32_.data());
            encode_emit(type, m);
            // Drop the pages just read: a multi-GB embedding never becomes resident as a whole.
            const size_t es = dtype_size(s.dtype);
            s.file->release_range(s.data + size_t(first + i) * es, size_t(m) * es);
        }
    }
    void encode_emit(quant::Type type, int64_t n) {
        out_.resize(size_t(n) * 4 + 64);
        const size_t bytes = encode_f32(type, f32_.data(), n, out_.data());
        emit(out_.data(), bytes);
    }
    void emit(const uint8_t* p, size_t n) {
        w_.write(p, n);
        pr_.add(n);
    }
    static void release(const StTensor& s) { s.file->release(s); }

    gguf::Writer& w_;
    ProgressLine& pr_;
    std::vector<float> f32_;
    std::vector<uint8_t> out_;
};

void print_plan(const Plan& plan, const KvList& kv, const std::string& label, std::FILE* out) {
    fmt::print(out, "{} metadata keys:\n", kv.size());
    for (const auto& l : kv.describe()) fmt::print(out, "  {}\n", l);
    fmt::print(out, "{} tensors:\n", plan.tensors.size());
    for (const auto& t : plan.tensors)
        fmt::print(out, "  {:<36} {:<6} {:<22} {:>10.3f} MB  <- {}\n", t.name, quant::traits(t.type).name, t.shape_str(),
                   double(t.nbytes()) / 1e6, t.describe());
    fmt::print(out, "total tensor data: {:.3f} MB ({} bytes), outtype {}\n", double(plan.out_bytes) / 1e6, plan.out_bytes,
               label);
}

}  // namespace

void convert_checkpoint(const ConvertOptions& opt, std::FILE* out, std::FILE* log) {
    const HfConfig cfg = load_hf_config(opt.checkpoint_dir);
    const Checkpoint ck = Checkpoint::open(opt.checkpoint_dir);
    Plan plan = make_plan(ck, cfg, opt.outtype);
    if (opt.retype) {
        opt.retype(plan);
        plan.out_bytes = 0;
        for (const auto& t : plan.tensors) plan.out_bytes += t.nbytes();
    }
    if (!plan.skipped.empty())
        fmt::print(log, "kinfer convert: skipping {} vision tower / projector tensors (text model only), e.g. '{}'\n",
                   plan.skipped.size(), plan.skipped.front());
    const KvList kv = build_metadata(cfg, plan, opt.checkpoint_dir);
    check_plan_loads(plan, kv, cfg);
    if (opt.dry_run) {
        print_plan(plan, kv, opt.retype ? opt.outtype_label : outtype_name(plan.outtype), out);
        return;
    }
    if (opt.output.empty()) fail("convert: no output file (-o)");

    gguf::Writer w(opt.output);
    kv.apply(w);
    for (const auto& t : plan.tensors) w.add_tensor(t.name, t.type, t.ne, t.n_dims);
    fmt::print(log, "kinfer convert: {} ({}) -> {}: {} tensors, {:.1f} MB, outtype {}\n", opt.checkpoint_dir,
               cfg.gguf_arch, opt.output, plan.tensors.size(), double(plan.out_bytes) / 1e6,
               opt.retype ? opt.outtype_label : outtype_name(plan.outtype));
    ProgressLine progress(plan.out_bytes, opt.progress);
    Streamer s(w, progress);
    for (const auto& t : plan.tensors) s.write(t);
    w.finish();
    progress.finish();
}

}  // namespace kinfer::convert
