// `kinfer convert CHECKPOINT_DIR -o OUT.gguf [--outtype ...] [--dry-run]`: a Hugging Face Kimi K3
// / Kimi Linear checkpoint to GGUF, byte-identical to llama.cpp's convert_hf_to_gguf.py.
#include "cli/command.h"
#include "common/error.h"
#include "convert/converter.h"

namespace {

std::function<int()> setup(CLI::App& app) {
    struct Args {
        std::string dir, out, outtype = "f16";
        bool dry_run = false, no_progress = false;
    };
    auto a = std::make_shared<Args>();
    app.add_option("checkpoint", a->dir, "Hugging Face checkpoint directory (config.json, *.safetensors, tiktoken.model)")
        ->required();
    app.add_option("-o,--outfile", a->out, "Output GGUF file");
    app.add_option("--outtype", a->outtype,
                   "Tensor type for weights: f32, f16, bf16, q8_0 or auto (as llama.cpp; MXFP4 experts stay MXFP4)")
        ->capture_default_str();
    app.add_flag("--dry-run", a->dry_run, "Print the metadata and tensor plan with sizes; write nothing");
    app.add_flag("--no-progress", a->no_progress, "No progress bar");
    return [a] {
        auto t = kinfer::convert::outtype_from_name(a->outtype);
        if (!t) kinfer::fail("convert: unknown --outtype '{}' (expected f32, f16, bf16, q8_0 or auto)", a->outtype);
        if (!a->dry_run && a->out.empty()) kinfer::fail("convert: -o OUT.gguf is required (or --dry-run)");
        kinfer::convert::ConvertOptions o;
        o.checkpoint_dir = a->dir;
        o.output = a->out;
        o.outtype = *t;
        o.dry_run = a->dry_run;
        o.progress = !a->no_progress;
        kinfer::convert::convert_checkpoint(o);
        return 0;
    };
}

}  // namespace

KINFER_COMMAND("convert", "Convert a Hugging Face safetensors checkpoint to GGUF", setup);
