// `kinfer convert CHECKPOINT_DIR -o OUT.gguf [--outtype ...] [--dry-run]`: a Hugging Face Kimi K3
// / Kimi Linear checkpoint to GGUF, byte-identical to llama.cpp's convert_hf_to_gguf.py for its
// outtypes (f32, f16, bf16, q8_0, auto). Any llama-quantize type name (Q4_K_M, Q6_K, ...) is
// also accepted: the tensors then get the types llama-quantize would choose (cli/lib/
// quantize_plan) in one streaming pass, with MXFP4 experts kept as they come.
#include "cli/command.h"
#include "cli/lib/quantize_plan.h"
#include "common/error.h"
#include "common/safe_file.h"
#include "convert/converter.h"
#include "convert/mmproj_convert.h"

namespace {

using namespace kinfer;

// Re-types a conversion plan the way llama-quantize would type the same tensors.
void apply_quantize_plan(convert::Plan& plan, const std::string& arch, int n_layer, int n_expert, cli::Ftype ftype) {
    cli::ModelDesc m;
    m.arch = arch;
    m.n_layer = n_layer;
    m.n_expert = n_expert;
    m.n_gqa = 0;   // layer 0 is KDA (head_count_kv 0) in every Kimi hybrid
    for (const auto& t : plan.tensors) {
        cli::TensorDesc d;
        d.name = t.name;
        d.type = t.type;
        for (int i = 0; i < 4; ++i) d.ne[i] = t.ne[i];
        d.nbytes = t.nbytes();
        m.tensors.push_back(d);
    }
    cli::QuantizeOptions o;
    o.ftype = ftype;
    const cli::QuantizePlan qp = cli::make_quantize_plan(m, o);
    for (const auto& q : qp.tensors) {
        auto& t = plan.tensors.at(q.src);
        if (t.type == quant::Type::MXFP4) continue;   // experts keep their native MXFP4
        t.type = q.to;
    }
    plan.file_type = uint32_t(ftype);
}

std::function<int()> setup(CLI::App& app) {
    struct Args {
        std::string dir, out, outtype = "f16", mmproj;
        bool dry_run = false, no_progress = false;
    };
    auto a = std::make_shared<Args>();
    app.add_option("checkpoint", a->dir, "Hugging Face checkpoint directory (config.json, *.safetensors, tiktoken.model)")
        ->required();
    app.add_option("-o,--outfile", a->out, "Output GGUF file");
    app.add_option("--outtype", a->outtype,
                   "f32, f16, bf16, q8_0 or auto (exactly as llama.cpp's converter), or a llama-quantize type "
                   "(Q4_K_M, Q6_K, ...); MXFP4 experts stay MXFP4")
        ->capture_default_str();
    app.add_option("--mmproj", a->mmproj,
                   "also write the vision tower + projector as llama.cpp's mmproj GGUF here (K3 with a vision tower; "
                   "f32, f16 or bf16); without -o only this file is written");
    app.add_flag("--dry-run", a->dry_run, "Print the metadata and tensor plan with sizes; write nothing");
    app.add_flag("--no-progress", a->no_progress, "No progress bar");
    return [a] {
        convert::ConvertOptions o;
        o.checkpoint_dir = a->dir;
        o.output = a->out;
        o.dry_run = a->dry_run;
        o.progress = !a->no_progress;
        if (auto t = convert::outtype_from_name(a->outtype)) {
            o.outtype = *t;
        } else if (auto f = cli::ftype_from_name(a->outtype)) {
            o.outtype = convert::OutType::F32;   // values are quantized from f32
            o.outtype_label = cli::ftype_name(*f);
            const std::string dir = a->dir;
            o.retype = [f, dir](convert::Plan& plan) {
                const convert::HfConfig cfg = convert::load_hf_config(dir);
                apply_quantize_plan(plan, cfg.gguf_arch, int(cfg.n_layer), int(cfg.n_expert), *f);
            };
        } else {
            fail("convert: unknown --outtype '{}' (expected f32, f16, bf16, q8_0, auto or one of {})", a->outtype,
                 cli::ftype_list());
        }
        if (!a->dry_run && a->out.empty() && a->mmproj.empty()) fail("convert: -o OUT.gguf is required (or --dry-run)");
        if (!a->dry_run && !a->out.empty()) check_output_path(a->out, "convert: -o");   // before reading a 600 GB checkpoint
        if (!a->mmproj.empty()) {
            check_output_path(a->mmproj, "convert: --mmproj");
            if (a->mmproj == a->out) fail("convert: --mmproj and -o name the same file");
            if (a->dry_run) fail("convert: --mmproj has no --dry-run");
        }
        if (a->dry_run || !a->out.empty()) convert::convert_checkpoint(o);
        if (!a->mmproj.empty() && !a->dry_run) {
            // The projector keeps f32 for quantized text outtypes (llama.cpp quantizes mmproj files apart).
            const bool plain = !o.retype && (o.outtype == convert::OutType::F16 || o.outtype == convert::OutType::BF16);
            convert::convert_mmproj(a->dir, a->mmproj, plain ? o.outtype : convert::OutType::F32);
        }
        return 0;
    };
}

}  // namespace

KINFER_COMMAND("convert", "Convert a Hugging Face safetensors checkpoint to GGUF", setup);
