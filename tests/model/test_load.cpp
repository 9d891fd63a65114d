// Loading: hyper-parameters from GGUF keys, the tensor list, and clear errors for broken files.
#include "test_util.h"

#include "common/error.h"
#include "gguf/writer.h"
#include "model/model.h"
#include "model/tensor_list.h"

#include <doctest/doctest.h>
#include <filesystem>
#include <functional>

using namespace kinfer;
using namespace kinfer::test;

TEST_CASE("hparams of the shipped tiny models") {
    auto k3 = model::Model::load(data("models/k3-tiny-a-Q4_K_M.gguf"));
    const auto& h = k3->hparams();
    CHECK(h.arch == model::Arch::KimiK3);
    CHECK(h.n_layer == 8);
    CHECK(h.n_embd == 256);
    CHECK(h.n_vocab == 4352);
    CHECK(h.n_kda_layers() == 6);
    CHECK(!h.is_kda(3));
    CHECK(!h.is_kda(7));
    CHECK(h.kda_head_dim == 32);
    CHECK(h.has_gate_lower_bound);
    CHECK(h.gate_lower_bound == -5.0f);
    CHECK(h.q_lora_rank == 64);
    CHECK(h.kv_lora_rank == 64);
    CHECK(h.key_length_mla == 64);
    CHECK(h.value_length_mla == 32);
    CHECK(h.rope_dim == 32);
    CHECK(h.n_expert == 32);
    CHECK(h.n_expert_used == 4);
    CHECK(h.expert_latent == 32);
    CHECK(h.n_expert_shared == 2);
    CHECK(h.attn_res_block_size == 3);
    CHECK(h.situ_beta == 4.0f);
    CHECK(h.situ_linear_beta == 25.0f);
    CHECK(h.expert_weights_norm);
    CHECK(k3->weights().layers[0].ssm_g != nullptr);        // full-rank gate
    CHECK(k3->weights().layers[3].attn_gate != nullptr);    // MLA output gate

    auto kl = model::Model::load(data("models/kl-tiny-a-Q4_K_M.gguf"));
    const auto& l = kl->hparams();
    CHECK(l.arch == model::Arch::KimiLinear);
    CHECK(l.n_layer == 7);
    CHECK(!l.has_gate_lower_bound);
    CHECK(l.q_lora_rank == 0);
    CHECK(l.expert_latent == 0);
    CHECK(l.expert_weights_scale == doctest::Approx(2.446f));
    CHECK(l.expert_weights_norm);                          // hard-coded for kimi-linear
    CHECK(kl->weights().layers[0].ssm_g_a != nullptr);      // low-rank gate
    CHECK(kl->weights().layers[6].attn_q != nullptr);       // no q-LoRA
    CHECK(kl->weights().layers[0].ssm_a != nullptr);        // {1, n_head} in quantized files
}

TEST_CASE("the tensor list covers every tensor of the file") {
    for (const char* f : {"models/k3-tiny-a-Q4_K_M.gguf", "models/kl-tiny-a-Q4_K_M.gguf"}) {
        auto m = model::Model::load(data(f));
        size_t listed = 0;
        model::for_each_tensor(m->hparams(), [&](const std::string& n) { return m->file().find_tensor(n) != nullptr; },
                               [&](const model::TensorSpec& s) { listed += m->file().find_tensor(s.name) != nullptr; });
        CHECK(listed == m->file().tensors().size());
    }
}

namespace {
// Copies a GGUF, dropping one tensor and letting `kv` rewrite metadata.
void rewrite(const std::string& src, const std::string& dst, const std::string& drop,
             const std::function<bool(gguf::Writer&, const gguf::Value&)>& kv) {
    auto f = gguf::File::open(src);
    gguf::Writer w(dst);
    for (const auto& v : f->kv())
        if (!kv(w, v)) w.add_value(v);
    std::vector<const gguf::TensorInfo*> keep;
    for (const auto& t : f->tensors())
        if (t.name != drop) {
            w.add_tensor(t.name, t.type, t.ne, t.n_dims);
            keep.push_back(&t);
        }
    for (auto* t : keep) w.write_tensor(t->data, t->nbytes);
    w.finish();
}
}  // namespace

TEST_CASE("broken files fail with a clear error") {
    const std::string src = data("models/k3-tiny-a-Q4_K_M.gguf");
    const auto tmp = std::filesystem::temp_directory_path() / "kinfer_test_model";
    std::filesystem::create_directories(tmp);
    auto none = [](gguf::Writer&, const gguf::Value&) { return false; };

    const std::string a = (tmp / "noconv.gguf").string();
    rewrite(src, a, "blk.0.ssm_conv1d_q.weight", none);
    CHECK_THROWS_WITH_AS(model::Model::load(a), doctest::Contains("blk.0.ssm_conv1d_q.weight' missing (KDA layer 0)"), Error);

    const std::string b = (tmp / "experts.gguf").string();
    rewrite(src, b, "", [](gguf::Writer& w, const gguf::Value& v) {
        if (v.key != "kimi-k3.expert_count") return false;
        w.add_u32(v.key, 16);
        return true;
    });
    CHECK_THROWS_WITH_AS(model::Model::load(b), doctest::Contains("holds 32 experts, expert_count is 16"), Error);

    const std::string c = (tmp / "nokey.gguf").string();
    rewrite(src, c, "", [](gguf::Writer&, const gguf::Value& v) { return v.key == "kimi-k3.kda.head_dim"; });
    CHECK_THROWS_WITH_AS(model::Model::load(c), doctest::Contains("kimi-k3.kda.head_dim"), Error);

    const std::string d = (tmp / "arch.gguf").string();
    rewrite(src, d, "", [](gguf::Writer& w, const gguf::Value& v) {
        if (v.key != "general.architecture") return false;
        w.add_string(v.key, "llama");
        return true;
    });
    CHECK_THROWS_WITH_AS(model::Model::load(d), doctest::Contains("not supported"), Error);

    // An embedding table of a type with no float conversion (found by fuzz_model_load: embedding a
    // token called a null conversion).
    const std::string e = (tmp / "embd_f64.gguf").string();
    {
        auto f = gguf::File::open(src);
        gguf::Writer w(e);
        for (const auto& v : f->kv()) w.add_value(v);
        for (const auto& t : f->tensors())
            w.add_tensor(t.name, t.name == "token_embd.weight" ? quant::Type::F64 : t.type, t.ne, t.n_dims);
        for (const auto& t : f->tensors()) {
            if (t.name != "token_embd.weight") {
                w.write_tensor(t.data, t.nbytes);
                continue;
            }
            const std::vector<uint8_t> zeros(size_t(t.nelements()) * 8);
            w.write_tensor(zeros.data(), zeros.size());
        }
        w.finish();
    }
    CHECK_THROWS_WITH_AS(model::Model::load(e), doctest::Contains("token_embd.weight': type f64 cannot be read as floats"), Error);
    std::filesystem::remove_all(tmp);
}
