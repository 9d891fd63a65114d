// `kinfer info`: the report library on hand-made files, and the built binary on every golden and
// shipped GGUF (--json) and on a broken file (one error line, exit code 1).
#include "cli/lib/info_report.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "gguf_files.h"
#include "test_util.h"
#include "tiny_gguf.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using kinfer::gguf::File;

namespace {

struct RunResult {
    int code = -1;
    std::string out, err;
};

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string shell_quote(const std::string& s) {
    std::string r = "'";
    for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return r + "'";
}

RunResult run_kinfer(const std::string& args) {
    fs::path tmp = fs::temp_directory_path() / ("kinfer_test_info_" + std::to_string(::getpid()));
    std::string cmd = shell_quote(kinfer::test::kinfer_bin()) + " " + args + " >" + shell_quote(tmp.string() + ".out") +
                      " 2>" + shell_quote(tmp.string() + ".err");
    int st = std::system(cmd.c_str());
    RunResult r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = slurp(tmp.string() + ".out");
    r.err = slurp(tmp.string() + ".err");
    fs::remove(tmp.string() + ".out");
    fs::remove(tmp.string() + ".err");
    return r;
}


}  // namespace

TEST_CASE("info: chat template families and byte sizes") {
    using kinfer::cli::chat_template_family;
    CHECK(chat_template_family("{% for m in messages %}<|open|>{{ m.role }}") == "K3 XTML");
    CHECK(chat_template_family("<|im_user|>user<|im_middle|>") == "Kimi K2");
    CHECK(chat_template_family("{{ bos_token }}") == "other");
    CHECK(kinfer::cli::human_bytes(512) == "512 B");
    CHECK(kinfer::cli::human_bytes(3 * 1024 * 1024 + 512 * 1024) == "3.50 MiB");
}

TEST_CASE("info: report of the tiny hand-made file") {
    kinfer::test::TinyGguf g;
    g.build();
    auto f = File::from_memory(g.b.data(), g.b.size(), "tiny.gguf");
    kinfer::cli::InfoOptions opt;
    opt.context = 100;
    auto r = kinfer::cli::info_report(*f, opt);
    CHECK(r["architecture"] == "kimi-k3");
    CHECK(r["name"] == "tiny");
    CHECK(r["layer_kinds"] == nlohmann::ordered_json({"KDA", "KDA", "KDA", "MLA"}));
    CHECK(r["tensors"].size() == 3);
    // Not a loadable model (its hyper-parameters are incomplete): no roles, and the reason.
    CHECK(r["tensor_check"]["loads"] == false);
    CHECK(r["tensor_check"]["why"].get<std::string>().find("missing") != std::string::npos);
    CHECK(r["tensors"][0]["kind"] == "other");
    CHECK(r["totals"]["weights_bytes"] == 64 + 34 + 8);
    CHECK(r["metadata"]["general.big"]["value"] == ~uint64_t(0));
    CHECK(r["metadata"]["tokenizer.ggml.tokens"]["value"]["length"] == 3);
    CHECK(r["memory"]["n_kda_layers"] == 3);
    CHECK(r["tokenizer"]["chat_template"]["present"] == false);
    std::string text = kinfer::cli::info_text(r);
    CHECK(text.find("KDA KDA KDA MLA") != std::string::npos);
    opt.with_tensors = false;
    CHECK(!kinfer::cli::info_report(*f, opt).contains("tensors"));
}

TEST_CASE("info: the binary on every golden and shipped GGUF (--json)") {
    for (const auto& path : kinfer::test::all_test_ggufs()) {
        CAPTURE(path);
        auto f = File::open(path);
        RunResult r = run_kinfer("info --json -c 1000 " + shell_quote(path));
        CAPTURE(r.err);
        REQUIRE(r.code == 0);
        CHECK(r.err.empty());
        nlohmann::json j = nlohmann::json::parse(r.out);
        std::string arch = f->architecture();
        CHECK(j["architecture"] == arch);
        CHECK(j["file_size"] == f->file_size());
        CHECK(j["gguf_version"] == 3);
        CHECK(j["n_tensors"] == f->tensors().size());
        CHECK(j["tensors"].size() == f->tensors().size());
        CHECK(j["tensors"][0]["name"] == f->tensors()[0].name);
        CHECK(j["hparams"]["block_count"] == f->get_int(arch + ".block_count"));
        CHECK(j["layer_kinds"].size() == size_t(f->get_int(arch + ".block_count")));
        CHECK(j["tokenizer"]["model"] == "gpt2");
        CHECK(j["tokenizer"]["pre"] == "kimi-k2");
        CHECK(j["tokenizer"]["vocab_size"] == 4352);
        CHECK(j["tokenizer"]["special"]["bos"]["text"] == "[BOS]");
        CHECK(j["memory"]["context"] == 1000);
        uint64_t weights = 0;
        for (const auto& t : f->tensors()) weights += t.nbytes;
        CHECK(j["memory"]["weights_bytes"] == weights);
        // KDA state: n_kda * H * D * D * 4; MLA: n_mla * (kv_lora + rope) * 2 per token.
        int64_t H = f->get_int(arch + ".attention.head_count"), D = f->get_int(arch + ".kda.head_dim");
        int64_t n_kda = 0, n_layers = f->get_int(arch + ".block_count");
        for (int64_t i = 0; i < n_layers; ++i) n_kda += f->get(arch + ".attention.head_count_kv").int_at(size_t(i)) == 0;
        CHECK(j["memory"]["kda_state_bytes"] == n_kda * H * D * D * 4);
        int64_t per_tok = (n_layers - n_kda) * (f->get_int(arch + ".attention.kv_lora_rank") +
                                                f->get_int(arch + ".rope.dimension_count")) * 2;
        CHECK(j["memory"]["mla_cache_bytes"] == per_tok * 1000);
        bool has_tmpl = f->find("tokenizer.chat_template") != nullptr;
        CHECK(j["tokenizer"]["chat_template"]["present"] == has_tmpl);
        if (has_tmpl) CHECK(j["tokenizer"]["chat_template"]["family"] == (arch == "kimi-k3" ? "K3 XTML" : "Kimi K2"));
    }
    // Text mode and --no-tensors on the shipped K3 model.
    std::string k3 = kinfer::test::data("models/k3-tiny-a-Q4_K_M.gguf");
    RunResult t = run_kinfer("info " + shell_quote(k3));
    REQUIRE(t.code == 0);
    CHECK(t.out.find("KDA KDA KDA MLA KDA KDA KDA MLA") != std::string::npos);
    CHECK(t.out.find("blk.0.attn_q.weight") != std::string::npos);
    CHECK(t.out.find("MLA latent cache") != std::string::npos);
    RunResult nt = run_kinfer("info --no-tensors " + shell_quote(k3));
    REQUIRE(nt.code == 0);
    CHECK(nt.out.find("blk.0.attn_q.weight") == std::string::npos);
}

TEST_CASE("info: tensor roles and the loader's check come from the model's tensor list") {
    for (const char* name : {"models/k3-tiny-a-Q4_K_M.gguf", "models/kl-tiny-a-Q4_K_M.gguf"}) {
        CAPTURE(name);
        const std::string path = kinfer::test::data(name);
        auto f = File::open(path);
        kinfer::cli::InfoOptions opt;
        const auto r = kinfer::cli::info_report(*f, opt);
        CHECK(r["tensor_check"]["loads"] == true);
        CHECK(r["tensor_check"]["missing"].empty());
        CHECK(r["tensor_check"]["bad_shape"].empty());
        CHECK(r["tensor_check"]["unused"].empty());
        std::map<std::string, std::string> kind;
        for (const auto& t : r["tensors"]) kind[t["name"].get<std::string>()] = t["kind"].get<std::string>();
        CHECK(kind["token_embd.weight"] == "embeddings_output");
        CHECK(kind["blk.0.attn_norm.weight"] == "norm");
        CHECK(kind["blk.0.attn_q.weight"] == "attention_kda");
        CHECK(kind["blk.0.ssm_a"] == "attention_kda");
        CHECK(kind["blk.3.attn_kv_a_mqa.weight"] == "attention_mla");
        CHECK(kind["blk.0.ffn_gate.weight"] == "dense_ffn");
        CHECK(kind["blk.1.ffn_gate_inp.weight"] == "router");
        CHECK(kind["blk.1.exp_probs_b.bias"] == "router");
        CHECK(kind["blk.1.ffn_down_exps.weight"] == "routed_experts");
        CHECK(kind["blk.1.ffn_up_shexp.weight"] == "shared_experts");
        for (const auto& kv : kind) CHECK_MESSAGE(kv.second != "other", kv.first);
        if (f->architecture() == "kimi-k3") {
            CHECK(kind["blk.1.ffn_routed_down.weight"] == "latent_moe");
            CHECK(kind["blk.1.attn_res_score.weight"] == "attn_res");
        }
    }
    // The same file with one tensor dropped and one renamed: info names both, as the loader would.
    const std::string src = kinfer::test::data("models/k3-tiny-a-Q4_K_M.gguf");
    auto f = File::open(src);
    const fs::path dst = fs::temp_directory_path() / ("kinfer_test_info_check_" + std::to_string(::getpid()) + ".gguf");
    {
        kinfer::gguf::Writer w(dst.string());
        for (const auto& v : f->kv()) w.add_value(v);
        std::vector<const kinfer::gguf::TensorInfo*> keep;
        for (const auto& t : f->tensors()) {
            if (t.name == "blk.2.ssm_beta.weight") continue;
            w.add_tensor(t.name == "blk.2.ssm_norm.weight" ? "blk.2.ssm_norm_x.weight" : t.name, t.type, t.ne, t.n_dims);
            keep.push_back(&t);
        }
        for (auto* t : keep) w.write_tensor(t->data, t->nbytes);
        w.finish();
    }
    RunResult t = run_kinfer("info --no-tensors " + shell_quote(dst.string()));
    fs::remove(dst);
    REQUIRE(t.code == 0);
    CHECK(t.out.find("tensor check: the loader would refuse this file:") != std::string::npos);
    CHECK(t.out.find("missing blk.2.ssm_beta.weight") != std::string::npos);
    CHECK(t.out.find("missing blk.2.ssm_norm.weight") != std::string::npos);
    CHECK(t.out.find("not read by the model: blk.2.ssm_norm_x.weight") != std::string::npos);
    RunResult ok = run_kinfer("info --no-tensors " + shell_quote(src));
    CHECK(ok.out.find("tensor check: every tensor the model needs is present with its shape") != std::string::npos);
}

TEST_CASE("info: a missing or broken file gives one error line and exit code 1") {
    RunResult m = run_kinfer("info /nonexistent/model.gguf");
    CHECK(m.code == 1);
    CHECK(m.err.rfind("kinfer: error: ", 0) == 0);
    CHECK(m.err.find("'/nonexistent/model.gguf': cannot open") != std::string::npos);
    CHECK(std::count(m.err.begin(), m.err.end(), '\n') == 1);
    CHECK(m.out.empty());

    std::string src = slurp(kinfer::test::data("models/kl-tiny-a-Q4_K_M.gguf"));
    fs::path broken = fs::temp_directory_path() / ("kinfer_test_info_broken_" + std::to_string(::getpid()) + ".gguf");
    std::ofstream(broken, std::ios::binary).write(src.data(), 5000);
    RunResult b = run_kinfer("info " + shell_quote(broken.string()));
    fs::remove(broken);
    CAPTURE(b.err);
    CHECK(b.code == 1);
    CHECK(b.err.rfind("kinfer: error: " + broken.string() + ": at byte ", 0) == 0);
    CHECK(b.err.find("expected") != std::string::npos);
    CHECK(std::count(b.err.begin(), b.err.end(), '\n') == 1);
    CHECK(b.out.empty());
}
