// Long prompts (issue 15): the tiled (flash) MLA kernels against the untiled ones, the latent
// cache types and pages, the -c memory check, and parity with llama.cpp over 16K tokens
// (../shared/golden/llama.cpp/long).
#include "test_util.h"
#include "parity_util.h"

#include "common/error.h"
#include "common/fnv1a.h"
#include "model/session.h"
#include "model/session_file.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

using namespace kinfer;
using namespace kinfer::test;

namespace {

// 160 tokens (prompt64 two and a half times): 4 prefill chunks of 40, then decodes.
std::vector<int32_t> ids160() {
    auto ids = read_ids(golden("llama.cpp/prompts/prompt64.ids.txt"));
    std::vector<int32_t> out;
    while (out.size() < 160) out.insert(out.end(), ids.begin(), ids.end());
    out.resize(160);
    return out;
}

// Logits of a 120-token prefill in chunks of 40 followed by 40 decodes (the decode path too).
std::vector<float> run(const model::Model& m, const std::vector<int32_t>& ids, model::SessionOptions so) {
    so.n_ctx = 256;
    so.n_batch = 40;
    so.n_threads = 2;
    model::Session s(m, so);
    std::vector<float> out;
    s.prefill(std::span(ids).first(120), &out);
    for (size_t i = 120; i < ids.size(); ++i) {
        s.decode(ids[i]);
        out.insert(out.end(), s.logits().begin(), s.logits().end());
    }
    return out;
}

}  // namespace

TEST_CASE("MLA tiled: absorbed and MHA forms == the untiled kernels, prefill and decode") {
    for (const char* name : {"k3-tiny-a", "kl-tiny-a"}) {
        auto m = f32_model(name);
        if (!m) return;
        const auto ids = ids160();
        const int64_t V = m->hparams().n_vocab;
        const auto ref = run(*m, ids, {});
        for (int form : {0, 1}) {
            auto x = run(*m, ids, {.tiled_min_keys = 0, .mla_tiled_form = form});
            Diff d = compare(x.data(), ref.data(), 160, V);
            print_diff(std::string(name) + (form ? " tiled MHA" : " tiled absorbed") + " vs untiled", d);
            CHECK(d.max_abs < 5e-5);
            CHECK(d.argmax_agree == 160);
        }
    }
}

TEST_CASE("MLA tiled decode: keys split into chunks across the threads, merged == untiled") {
    auto m = f32_model("k3-tiny-a");
    if (!m) return;
    auto ids = ids160();
    while (ids.size() < 700) ids.insert(ids.end(), ids.begin(), ids.begin() + 160);
    ids.resize(700);   // 690-key prefill, then decodes over 3 key chunks of 256
    const int64_t V = m->hparams().n_vocab;
    auto decodes = [&](model::SessionOptions so) {
        so.n_ctx = 768;
        so.n_threads = 2;
        model::Session s(*m, so);
        s.prefill(std::span(ids).first(690));
        std::vector<float> out;
        for (size_t i = 690; i < ids.size(); ++i) {
            s.decode(ids[i]);
            out.insert(out.end(), s.logits().begin(), s.logits().end());
        }
        return out;
    };
    for (backend::CacheType ct : {backend::CacheType::f32, backend::CacheType::f16}) {
        const auto ref = decodes({.cache_type = ct});
        const auto x = decodes({.cache_type = ct, .tiled_min_keys = 0});
        Diff d = compare(x.data(), ref.data(), 10, V);
        print_diff(std::string("decode over 700 keys, tiled, ") + backend::cache_type_name(ct), d);
        CHECK(d.max_abs < 5e-5);
        CHECK(d.argmax_agree == 10);
    }
}

TEST_CASE("latent cache: pages of any size give the same logits bit for bit") {
    auto m = f32_model("k3-tiny-a");
    if (!m) return;
    const auto ids = ids160();
    for (int64_t min_keys : {int64_t(1024), int64_t(0)}) {
        const auto ref = run(*m, ids, {.tiled_min_keys = min_keys});
        const auto x = run(*m, ids, {.cache_page_rows = 7, .tiled_min_keys = min_keys});
        CHECK(x == ref);
    }
}

TEST_CASE("latent cache: f16 and q8_0 stay close to f32") {
    auto m = f32_model("k3-tiny-a");
    if (!m) return;
    const auto ids = ids160();
    const int64_t V = m->hparams().n_vocab;
    const auto ref = run(*m, ids, {});
    struct Case {
        backend::CacheType t;
        double mean_bound, max_bound;
    };
    // Measured (both kernels alike): f16 mean 1.4e-5 / max 2.8e-4, q8_0 mean 3.5e-4 / max 8.5e-3;
    // the bounds are about 4x those.
    for (const Case& c : {Case{backend::CacheType::f16, 6e-5, 1.2e-3}, Case{backend::CacheType::q8_0, 1.5e-3, 3.5e-2}}) {
        for (int64_t min_keys : {int64_t(1024), int64_t(0)}) {
            const auto x = run(*m, ids, {.cache_type = c.t, .tiled_min_keys = min_keys});
            double sum = 0;
            for (size_t i = 0; i < x.size(); ++i) sum += std::fabs(double(x[i]) - ref[i]);
            Diff d = compare(x.data(), ref.data(), 160, V);
            const double mean = sum / double(x.size());
            std::printf("%-8s min_keys %-5lld mean|d| %.3g  max|d| %.3g  argmax %d/160\n", backend::cache_type_name(c.t),
                        (long long)min_keys, mean, d.max_abs, d.argmax_agree);
            CHECK(mean < c.mean_bound);
            CHECK(d.max_abs < c.max_bound);
            CHECK(d.argmax_agree >= 158);
        }
    }
}

TEST_CASE("latent cache: -c costs nothing up front; a -c beyond memory is refused with the bytes") {
    auto m = f32_model("k3-tiny-a");
    if (!m) return;
    const auto t0 = std::chrono::steady_clock::now();
    model::Session s(*m, {.n_ctx = 1000000, .n_threads = 2, .cache_type = backend::CacheType::f16});
    s.prefill(std::vector<int32_t>{4096, 198});
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(secs < 1.0);
    CHECK(s.state_bytes() < size_t(4) << 20);   // one page per MLA layer, not 1M rows
    CHECK(s.latent_bytes_per_token() == 2 * 96 * 2);
    try {
        model::Session huge(*m, {.n_ctx = int64_t(1) << 40, .n_threads = 1});
        FAIL("a context of 2^40 tokens was accepted");
    } catch (const Error& e) {
        const std::string msg = e.what();
        INFO(msg);
        CHECK(msg.find("latent cache needs " + std::to_string((uint64_t(1) << 40) * 768) + " bytes") != std::string::npos);
        CHECK(msg.find("bytes are free") != std::string::npos);
    }
}

// llama.cpp over 16K tokens, F32 cache, exact mode: the last 32 prompt rows (batch) within 1e-4
// and the 32 greedy tokens after the prompt. The attention runs the tiled kernels here. With the
// f16 cache (kinfer's CLI default) the same rows are held to mean |d| < 0.01 and the same greedy
// tokens (measured: f16 mean 1.0e-6, max 1.3e-5; f32 max 3.1e-6).
TEST_CASE("parity at length: k3-tiny-a F32, 16K tokens, tiled MLA, f32 and f16 cache") {
    if (test::sanitized()) {
        // Two 16K prefills take minutes under the sanitizers, the longest case of CI's budget; the
        // tiled kernels and the paging run under them in the "MLA tiled" and "latent cache" cases.
        skip_case(SkipKind::machine, "16K-token parity is a Release-suite case (too slow under the sanitizers)");
        return;
    }
    const std::string dir = "llama.cpp/long/";
    if (!have_golden(dir + "k3-tiny-a-F32/a16k.batch.f32")) return;
    auto m = f32_model("k3-tiny-a");
    if (!m) return;
    const auto ids = read_ids(golden(dir + "prompt16k.ids.txt"));
    const auto j = read_json(golden(dir + "k3-tiny-a-F32/a16k.json"));
    const auto ref = read_f32(golden(dir + "k3-tiny-a-F32/a16k.batch.f32"));
    const int64_t V = m->hparams().n_vocab;
    REQUIRE(ids.size() == 16384);
    REQUIRE(ref.size() == size_t(32 * V));
    const auto gen_ref = j["generated_ids"].get<std::vector<int32_t>>();

    for (backend::CacheType ct : {backend::CacheType::f32, backend::CacheType::f16}) {
        model::Session s(*m, {.n_ctx = 16448, .n_threads = 2, .cache_type = ct});
        std::vector<float> last;
        s.prefill(std::span(ids).first(16384 - 32));
        s.prefill(std::span(ids).last(32), &last);
        Diff d = compare(last.data(), ref.data(), 32, V);
        double sum = 0;
        for (size_t i = 0; i < last.size(); ++i) sum += std::fabs(double(last[i]) - ref[i]);
        const double mean = sum / double(last.size());
        print_diff(std::string("k3-tiny-a 16K last 32, cache ") + backend::cache_type_name(ct), d);
        std::printf("%-36s mean|d| %.3g\n", "", mean);
        if (ct == backend::CacheType::f32) CHECK(d.max_abs <= 1e-4);
        else CHECK(mean < 0.01);
        CHECK(d.argmax_agree == 32);

        std::vector<int32_t> gen;
        for (size_t i = 0; i < gen_ref.size(); ++i) {
            gen.push_back(argmax(s.logits().data(), V));
            if (i + 1 < gen_ref.size()) s.decode(gen.back());
        }
        CHECK(gen == gen_ref);
    }
}

// ---- --prompt-cache files -------------------------------------------------------------------

namespace {


std::vector<uint8_t> read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// 32 greedy steps from the session's current logits: ids and every step's logits.
std::pair<std::vector<int32_t>, std::vector<float>> continue_greedy(model::Session& s, int n) {
    const int64_t V = s.model().hparams().n_vocab;
    std::vector<int32_t> ids;
    std::vector<float> lg;
    for (int i = 0; i < n; ++i) {
        lg.insert(lg.end(), s.logits().begin(), s.logits().end());
        ids.push_back(argmax(s.logits().data(), V));
        s.decode(ids.back());
    }
    return {ids, lg};
}

}  // namespace

TEST_CASE("prompt cache: a saved prompt reloaded continues exactly like the uninterrupted run") {
    auto m = f32_model("k3-tiny-a");
    if (!m) return;
    const auto ids = ids160();
    for (backend::CacheType ct : {backend::CacheType::f32, backend::CacheType::f16, backend::CacheType::q8_0}) {
        const model::SessionOptions so{.n_ctx = 512, .n_batch = 64, .n_threads = 2, .cache_type = ct,
                                       .cache_page_rows = 32, .tiled_min_keys = 100};
        model::Session a(*m, so);
        a.prefill(ids);
        const std::string path = temp_path("state.bin");
        model::save_session_file(a, path);
        const auto ref = continue_greedy(a, 32);

        model::Session b(*m, so);
        model::load_session_file(b, path);
        CHECK(b.n_past() == int64_t(ids.size()));
        CHECK(b.tokens() == ids);
        const auto got = continue_greedy(b, 32);
        CHECK(got.first == ref.first);
        CHECK(got.second == ref.second);   // bit for bit
        std::filesystem::remove(path);
    }
}

TEST_CASE("prompt cache: damaged, truncated, wrong-model and wrong-type files are refused with one line") {
    auto m = f32_model("k3-tiny-a");
    auto other = f32_model("kl-tiny-a");
    if (!m || !other) return;
    const auto ids = ids160();
    model::Session a(*m, {.n_ctx = 256, .n_threads = 2});
    a.prefill(ids);
    const std::string path = temp_path("good.bin"), bad = temp_path("bad.bin");
    model::save_session_file(a, path);
    const auto good = read_bytes(path);
    auto refused = [&](model::Session& s, const std::vector<uint8_t>& bytes, const std::string& why) {
        write_bytes(bad, bytes);
        const auto before = s.tokens();
        try {
            model::load_session_file(s, bad);
            FAIL("accepted: " << why);
        } catch (const Error& e) {
            const std::string msg = e.what();
            INFO(msg);
            CHECK(msg.find(why) != std::string::npos);
            CHECK(msg.find('\n') == std::string::npos);
            CHECK(msg.rfind(bad, 0) == 0);   // names the file
        }
        CHECK(s.tokens() == before);          // the session is untouched
    };
    model::Session b(*m, {.n_ctx = 256, .n_threads = 2});
    b.prefill(std::vector<int32_t>{4096, 198});
    auto flipped = good;
    flipped[flipped.size() / 2] ^= 0x10;
    refused(b, flipped, "checksum mismatch");
    refused(b, std::vector<uint8_t>(good.begin(), good.begin() + long(good.size() * 2 / 3)), "damaged or truncated");
    refused(b, std::vector<uint8_t>(good.begin(), good.begin() + 5), "bad magic");
    refused(b, {}, "empty file");
    model::Session wrong_type(*m, {.n_ctx = 256, .n_threads = 2, .cache_type = backend::CacheType::f16});
    refused(wrong_type, good, "saved with a f32 latent cache, this session uses f16");
    model::Session wrong_model(*other, {.n_ctx = 256, .n_threads = 2});
    refused(wrong_model, good, "another model");
    model::Session small(*m, {.n_ctx = 100, .n_threads = 2});
    refused(small, good, "do not fit");
    auto future = good;
    future[8] = 9;   // the version
    const uint64_t sum = fnv1a(future.data(), future.size() - 8);
    std::memcpy(future.data() + future.size() - 8, &sum, 8);
    refused(b, future, "format version 9, this kinfer reads versions 2 and 3");
    std::filesystem::remove(path);
    std::filesystem::remove(bad);
}

TEST_CASE("prompt cache: a version 2 file (before the extra section) still loads; the extra bytes come back as saved") {
    auto m = f32_model("k3-tiny-a");
    if (!m) return;
    const auto ids = ids160();
    model::Session a(*m, {.n_ctx = 256, .n_threads = 2});
    a.prefill(std::span(ids).first(50));
    const std::string note = "a caller's note";
    const auto v3 = a.save_state({reinterpret_cast<const uint8_t*>(note.data()), note.size()});
    std::string back;
    model::Session b(*m, {.n_ctx = 256, .n_threads = 2});
    b.load_state(v3, [&](std::span<const uint8_t> x) { back.assign(x.begin(), x.end()); });
    CHECK(back == note);
    CHECK(b.logits() == a.logits());
    // A refusal by the caller leaves the session as it was.
    model::Session c(*m, {.n_ctx = 256, .n_threads = 2});
    c.prefill(std::vector<int32_t>{4096, 198});
    CHECK_THROWS_WITH_AS(c.load_state(v3, [](std::span<const uint8_t>) { fail("not mine"); }), "not mine", Error);
    CHECK(c.tokens() == std::vector<int32_t>{4096, 198});
    // Version 2: the same bytes without the extra section (its u64 size and the note).
    std::vector<uint8_t> v2(v3.begin(), v3.end() - std::ptrdiff_t(8 + 8 + note.size()));
    v2[8] = 2;
    const uint64_t sum = fnv1a(v2.data(), v2.size());
    v2.insert(v2.end(), reinterpret_cast<const uint8_t*>(&sum), reinterpret_cast<const uint8_t*>(&sum) + 8);
    model::Session d(*m, {.n_ctx = 256, .n_threads = 2});
    bool called = false;
    d.load_state(v2, [&](std::span<const uint8_t> x) { called = x.empty(); });
    CHECK(called);
    CHECK(d.tokens() == a.tokens());
    CHECK(d.logits() == a.logits());
}

TEST_CASE("state snapshots: rewind goes back bit for bit; a snapshot past the session or after other tokens is refused") {
    auto m = f32_model("k3-tiny-a");
    if (!m) return;
    const auto ids = ids160();
    const model::SessionOptions so{.n_ctx = 512, .n_batch = 40, .n_threads = 2, .cache_page_rows = 32};
    model::Session s(*m, so);
    s.prefill(std::span(ids).first(80));
    const model::Session::Snapshot snap = s.snapshot();
    CHECK(snap.bytes() == s.snapshot_bytes());
    std::vector<float> first;
    s.prefill(std::span(ids).subspan(80), &first);
    s.rewind(snap);
    CHECK(s.n_past() == 80);
    CHECK(s.tokens() == std::vector<int32_t>(ids.begin(), ids.begin() + 80));
    std::vector<float> again;
    s.prefill(std::span(ids).subspan(80), &again);
    CHECK(again == first);   // the same states, the same latent rows before 80: the same arithmetic

    model::Session other(*m, so);
    other.prefill(std::span(ids).first(40));
    auto refused = [&](model::Session& t, const char* why) {
        const auto tokens = t.tokens();
        const auto logits = t.logits();
        CHECK_THROWS_WITH_AS(t.rewind(snap), doctest::Contains(why), Error);
        CHECK(t.tokens() == tokens);
        CHECK(t.logits() == logits);
    };
    refused(other, "is not within this session's 40 tokens");
    auto swapped = ids;
    std::swap(swapped[3], swapped[4]);
    other.reset();
    other.prefill(std::span(swapped).first(100));
    refused(other, "taken after other tokens");
}

TEST_CASE("prompt cache: the state of a session with no tokens yet saves and loads (the loaded session is empty)") {
    // Found by fuzz_session_state: loading zero token ids copied into an empty vector's null
    // data() (undefined behaviour; the ASan + UBSan build stops there).
    auto m = model::Model::load(data("models/k3-tiny-a-Q4_K_M.gguf"));
    model::Session fresh(*m, {.n_ctx = 64, .n_threads = 1});
    const auto empty = fresh.save_state({});
    model::Session s(*m, {.n_ctx = 64, .n_threads = 1});
    s.prefill(std::vector<int32_t>{4096, 198, 7});
    s.load_state(empty, nullptr);
    CHECK(s.tokens().empty());
    CHECK(s.n_past() == 0);
    // It goes on as a fresh session does.
    model::Session ref(*m, {.n_ctx = 64, .n_threads = 1});
    s.prefill(std::vector<int32_t>{5, 6});
    ref.prefill(std::vector<int32_t>{5, 6});
    CHECK(s.logits() == ref.logits());
}
