// Broken checkpoints, made from the golden ones in a temp dir: each must fail with a message that
// names the file and the tensor, before any output file (or temp file) exists.
#include "convert/converter.h"
#include "test_util.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace kinfer;

namespace {

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
void spit(const fs::path& p, const std::string& s) {
    fs::remove(p);   // the copies are read-only like the originals
    std::ofstream(p, std::ios::binary) << s;
}

struct Sandbox {
    fs::path root, ckpt, out;
    explicit Sandbox(const std::string& model) {
        root = fs::temp_directory_path() / ("kinfer-broken-" + std::to_string(::getpid()) + "-" + std::to_string(rand()));
        ckpt = root / model;   // same directory name as the original
        out = root / "out";
        fs::create_directories(out);
        fs::copy(test::golden("hf/" + model), ckpt);
        for (const auto& e : fs::directory_iterator(ckpt))
            fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write);
    }
    ~Sandbox() { fs::remove_all(root); }

    // Rewrites a shard's JSON header (data section unchanged; offsets are relative to it).
    void edit_header(const std::string& shard, const std::function<void(json&)>& fn) {
        const std::string s = slurp(ckpt / shard);
        uint64_t n = 0;
        std::memcpy(&n, s.data(), 8);
        json h = json::parse(s.substr(8, n));
        fn(h);
        const std::string nh = h.dump();
        std::string o(8, '\0');
        const uint64_t nn = nh.size();
        std::memcpy(o.data(), &nn, 8);
        spit(ckpt / shard, o + nh + s.substr(8 + n));
    }
    void edit_index(const std::function<void(json&)>& fn) {
        json idx = json::parse(slurp(ckpt / "model.safetensors.index.json"));
        fn(idx);
        spit(ckpt / "model.safetensors.index.json", idx.dump());
    }
    std::string shard_of(const std::string& tensor) {
        return json::parse(slurp(ckpt / "model.safetensors.index.json"))["weight_map"][tensor].get<std::string>();
    }
    // Removes a tensor from its shard and from the index: the checkpoint simply lacks it.
    void drop_tensor(const std::string& t) {
        edit_header(shard_of(t), [&](json& h) { h.erase(t); });
        edit_index([&](json& i) { i["weight_map"].erase(t); });
    }

    // Runs the conversion; returns the error message ("" on success).
    std::string convert() {
        convert::ConvertOptions o;
        o.checkpoint_dir = ckpt.string();
        o.output = (out / "x.gguf").string();
        o.outtype = convert::OutType::BF16;
        o.progress = false;
        std::FILE* devnull = std::fopen("/dev/null", "w");
        std::string err;
        try {
            convert::convert_checkpoint(o, devnull, devnull);
        } catch (const Error& e) {
            err = e.what();
        }
        std::fclose(devnull);
        return err;
    }
    bool out_empty() const { return fs::is_empty(out); }
};

void expect_failure(Sandbox& sb, const std::vector<std::string>& needles) {
    const std::string err = sb.convert();
    CAPTURE(err);
    REQUIRE(!err.empty());
    for (const auto& n : needles) CHECK(err.find(n) != std::string::npos);
    CHECK(sb.out_empty());
}

}  // namespace

TEST_CASE("convert: a truncated shard names the shard and a tensor") {
    if (!test::have_golden("hf/hf-kl-tiny/config.json")) return;
    Sandbox sb("hf-kl-tiny");
    const fs::path p = sb.ckpt / "model-00002-of-00003.safetensors";
    fs::resize_file(p, fs::file_size(p) - 1000);
    expect_failure(sb, {"model-00002-of-00003.safetensors", "tensor '", "truncated"});
}

TEST_CASE("convert: a tensor missing from its shard names the shard and the tensor") {
    if (!test::have_golden("hf/hf-kl-tiny/config.json")) return;
    Sandbox sb("hf-kl-tiny");
    const std::string t = "model.layers.2.self_attn.q_proj.weight";
    const std::string shard = sb.shard_of(t);
    sb.edit_header(shard, [&](json& h) { h.erase(t); });
    expect_failure(sb, {shard, t});
}

TEST_CASE("convert: a tensor missing from shard and index names the index and the tensor") {
    if (!test::have_golden("hf/hf-kl-tiny/config.json")) return;
    Sandbox sb("hf-kl-tiny");
    const std::string t = "model.layers.4.self_attn.f_b_proj.weight";
    sb.drop_tensor(t);
    expect_failure(sb, {"model.safetensors.index.json", t});
}

TEST_CASE("convert: a tensor only the model's tensor list requires (the router bias) is named before writing") {
    if (!test::have_golden("hf/hf-kl-tiny/config.json")) return;
    Sandbox sb("hf-kl-tiny");
    const std::string t = "model.layers.1.block_sparse_moe.gate.e_score_correction_bias";
    sb.drop_tensor(t);
    expect_failure(sb, {"model.safetensors.index.json", t, "needed for GGUF tensor 'blk.1.exp_probs_b.bias'"});
}

TEST_CASE("convert: a wrong shape names the shard and the tensor") {
    if (!test::have_golden("hf/hf-kl-tiny/config.json")) return;
    Sandbox sb("hf-kl-tiny");
    const std::string t = "model.layers.1.self_attn.q_proj.weight";   // [128, 128] -> [64, 256]: same bytes
    const std::string shard = sb.shard_of(t);
    sb.edit_header(shard, [&](json& h) { h[t]["shape"] = json::array({64, 256}); });
    expect_failure(sb, {shard, t, "[64, 256]", "config.json"});
}

TEST_CASE("convert: bad JSON names the file") {
    if (!test::have_golden("hf/hf-kl-tiny/config.json")) return;
    {
        Sandbox sb("hf-kl-tiny");
        spit(sb.ckpt / "config.json", "{\"architectures\": [\"KimiLinearForCausalLM\"], ");
        expect_failure(sb, {"config.json", "not valid JSON"});
    }
    {
        Sandbox sb("hf-kl-tiny");
        std::string s = slurp(sb.ckpt / "model-00003-of-00003.safetensors");
        s[8] = '#';
        spit(sb.ckpt / "model-00003-of-00003.safetensors", s);
        expect_failure(sb, {"model-00003-of-00003.safetensors", "not valid JSON"});
    }
}

TEST_CASE("convert: a missing BF16 expert names the expert tensor") {
    if (!test::have_golden("hf/hf-kl-tiny/config.json")) return;
    Sandbox sb("hf-kl-tiny");
    const std::string t = "model.layers.3.block_sparse_moe.experts.5.w2.weight";
    sb.drop_tensor(t);
    expect_failure(sb, {"model.safetensors.index.json", t});
}

TEST_CASE("convert: a missing MXFP4 expert names the expert tensor") {
    if (!test::have_golden("hf/hf-k3-tiny/config.json")) return;
    Sandbox sb("hf-k3-tiny");
    const std::string t = "language_model.model.layers.2.block_sparse_moe.experts.7.w3.weight_packed";
    sb.drop_tensor(t);
    expect_failure(sb, {"model.safetensors.index.json", t});
}

TEST_CASE("convert: an MXFP4 scale of the wrong shape names the tensor") {
    if (!test::have_golden("hf/hf-k3-tiny/config.json")) return;
    Sandbox sb("hf-k3-tiny");
    const std::string t = "language_model.model.layers.5.block_sparse_moe.experts.3.w1.weight_scale";   // [32, 2]
    const std::string shard = sb.shard_of(t);
    sb.edit_header(shard, [&](json& h) { h[t]["shape"] = json::array({64, 1}); });
    expect_failure(sb, {shard, t});
}

TEST_CASE("convert: the CLI reports a broken checkpoint as one error line and exit code 1") {
    if (!test::have_golden("hf/hf-kl-tiny/config.json")) return;
    Sandbox sb("hf-kl-tiny");
    fs::resize_file(sb.ckpt / "model-00001-of-00003.safetensors", 100);
    const std::string log = (sb.root / "log.txt").string();
    const std::string cmd = test::kinfer_bin() + " convert " + sb.ckpt.string() + " -o " + (sb.out / "x.gguf").string() +
                            " --outtype bf16 > " + log + " 2>&1";
    const int rc = std::system(cmd.c_str());
    CHECK(WEXITSTATUS(rc) == 1);
    const std::string msg = slurp(log);
    CHECK(msg.find("kinfer: error: ") != std::string::npos);
    CHECK(msg.find("model-00001-of-00003.safetensors") != std::string::npos);
    CHECK(sb.out_empty());
}

TEST_CASE("convert: a vision tower and projector are skipped; the text GGUF is unchanged") {
    if (!test::have_golden("hf/gguf/hf-k3-tiny-bf16.gguf")) return;
    Sandbox sb("hf-k3-tiny");
    // A fourth shard with a vision-tower stub, listed in the index like the real release's.
    const std::string shard = "model-00004-of-00004.safetensors";
    const std::string hdr = R"({"__metadata__":{"format":"pt"},)"
                            R"("mm_projector.proj.0.weight":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,32]},)"
                            R"("vision_tower.patch_embed.proj.weight":{"dtype":"BF16","shape":[8,2],"data_offsets":[32,64]}})";
    std::string file(8, '\0');
    const uint64_t n = hdr.size();
    std::memcpy(file.data(), &n, 8);
    spit(sb.ckpt / shard, file + hdr + std::string(64, '\x3f'));
    sb.edit_index([&](json& i) {
        i["weight_map"]["mm_projector.proj.0.weight"] = shard;
        i["weight_map"]["vision_tower.patch_embed.proj.weight"] = shard;
    });
    CHECK(sb.convert().empty());
    CHECK(slurp(sb.out / "x.gguf") == slurp(test::golden("hf/gguf/hf-k3-tiny-bf16.gguf")));
}
