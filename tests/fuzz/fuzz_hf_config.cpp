// libFuzzer target for a Hugging Face checkpoint's JSON: config.json (load_hf_config: K3's
// nested text_config, the typed hyper-parameters and their checks) and
// model.safetensors.index.json (Checkpoint::open: the weight map against the shards present),
// then the converter's tensor plan over whatever loaded. Every call must return or throw
// kinfer::Error; crashes, hangs, sanitizer reports and other exceptions are bugs.
//
// Input: <config.json> \0 <model.safetensors.index.json>; without a \0 there is no index and the
// directory's one shard (a small fixed safetensors file named model-00001-of-00001.safetensors)
// is used directly.
#include "convert/hf_config.h"
#include "convert/safetensors.h"

#include "convert/tensor_plan.h"
#include "fuzz_util.h"

#include <filesystem>

using namespace kinfer;
namespace fs = std::filesystem;

namespace {

// One shard: a 2x2 BF16 tensor under a K3 name and a 4-element F32 norm.
const std::string& checkpoint_dir() {
    static const std::string dir = [] {
        const std::string d = fuzz::scratch_path("hf");
        fs::create_directories(d);
        const std::string hdr =
            R"({"language_model.model.embed_tokens.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
            R"("language_model.model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
        std::string f(8, '\0');
        uint64_t n = hdr.size();
        std::memcpy(f.data(), &n, 8);
        f += hdr;
        f += std::string(24, '\x3f');
        fuzz::write_file(d + "/model-00001-of-00001.safetensors", reinterpret_cast<const uint8_t*>(f.data()), f.size());
        return d;
    }();
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& dir = checkpoint_dir();
    const std::string_view all(reinterpret_cast<const char*>(data), size);
    const size_t sep = all.find('\0');
    const std::string_view config = all.substr(0, sep);
    fuzz::write_file(dir + "/config.json", reinterpret_cast<const uint8_t*>(config.data()), config.size());
    const std::string index = dir + "/model.safetensors.index.json";
    if (sep != std::string_view::npos) {
        const std::string_view idx = all.substr(sep + 1);
        fuzz::write_file(index, reinterpret_cast<const uint8_t*>(idx.data()), idx.size());
    } else {
        std::error_code ec;
        fs::remove(index, ec);
    }
    convert::HfConfig cfg;
    const bool have_cfg = fuzz::tolerate([&] { cfg = convert::load_hf_config(dir); });
    if (have_cfg) {
        for (int64_t il = -1; il <= cfg.n_layer && il < 4096; ++il) fuzz::sink(cfg.is_mla(il));
        fuzz::tolerate([&] { fuzz::sink(uint64_t(cfg.get_int("num_hidden_layers"))); });
        fuzz::tolerate([&] { fuzz::sink(uint64_t(cfg.find({"rope_theta", "head_dim"}).has_value())); });
    }
    convert::Checkpoint ck;
    if (!fuzz::tolerate([&] { ck = convert::Checkpoint::open(dir); })) return 0;
    for (const auto* t : ck.tensors()) fuzz::sink(t->name);
    if (have_cfg)
        for (auto o : {convert::OutType::F32, convert::OutType::BF16})
            fuzz::tolerate([&] { fuzz::sink(convert::make_plan(ck, cfg, o).tensors.size()); });
    return 0;
}
