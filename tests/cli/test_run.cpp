// kinfer run end to end: greedy parity with llama.cpp on the shipped golden models, seeded
// sampling reproducibility, --json, stop strings, context-full, stdin, and one clean error line
// for each kind of bad input.
#include "cli_util.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>

using namespace kinfer::test;
using nlohmann::json;

namespace {

const char* kModels[] = {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"};

std::vector<int> parse_ids(const std::string& line) {
    std::vector<int> v;
    size_t a = 0;
    while (a < line.size()) {
        size_t b = line.find(' ', a);
        if (b == std::string::npos) b = line.size();
        if (b > a) v.push_back(std::stoi(line.substr(a, b - a)));
        a = b + 1;
    }
    return v;
}

json run_json(const std::string& model, const std::string& args) {
    // stderr apart: --json keeps stderr quiet, but a failure message must not break parsing.
    auto r = run_command(quiet(run_cmd(model, args + " --json")));
    REQUIRE_MESSAGE(r.rc == 0, r.out);
    return json::parse(r.out);
}

// Exactly one line, "kinfer: error: ...", and exit status rc (1: runtime error, 2: usage).
void expect_one_error(const std::string& cmd, const std::string& needle, int rc = 1) {
    auto r = run_command(cmd);
    INFO(cmd);
    INFO(r.out);
    CHECK(r.rc == rc);
    const auto lines = lines_of(r.out);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].rfind("kinfer: error: ", 0) == 0);
    CHECK(lines[0].find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("run: greedy ids equal llama.cpp's on the golden models") {
    // llama.cpp did not stop at end-of-generation tokens in these runs: --ignore-eos. They are
    // exact-mode runs (F32 cache): -ctk f32 (kinfer's default f16 cache may flip a near-tie).
    const int n = sanitized() ? 6 : 32;
    for (const char* m : kModels) {
        CAPTURE(m);
        std::ifstream f(data(std::string("logits/") + m + "/p64.json"));
        REQUIRE(f);
        const json g = json::parse(f);
        std::vector<int> want = g.at("generated_ids").get<std::vector<int>>();
        want.resize(size_t(n));
        auto r = run_command(quiet(run_cmd(m, "--prompt-ids " + quote(data("prompt64.ids.txt")) +
                                                  " --temp 0 --ignore-eos --print-ids -ctk f32 -n " + std::to_string(n))));
        REQUIRE_MESSAGE(r.rc == 0, r.out);
        CHECK(parse_ids(lines_of(r.out).at(0)) == want);
    }
}

TEST_CASE("run: the same seed and settings give the same text") {
    const std::string args = "-p 'Once upon a time' -n 12 --temp 0.9 --top-k 50 --top-p 0.9 --seed 1234 --repeat-penalty 1.1 --ignore-eos";
    const json a = run_json(kModels[0], args);
    const json b = run_json(kModels[0], args);
    CHECK(a.at("generated_ids") == b.at("generated_ids"));
    CHECK(a.at("text") == b.at("text"));
    CHECK(a.at("generated_ids").size() == 12);
    CHECK(a.at("generated_tokens") == 12);
}

TEST_CASE("run: --seed and --temp change the picks (a CLI ignoring either fails here)") {
    // All filters off, so the temperature alone shapes the distribution. On these random models
    // the greedy picks have margins of 0.05 and more (p64.json): at --temp 0.01 sampling gives
    // the greedy ids; at --temp 5 the distribution is nearly flat over 4352 tokens, so 24 draws
    // are mostly distinct, differ from greedy, and differ between seeds.
    const std::string base = "--prompt-ids " + quote(data("prompt64.ids.txt")) + " --ignore-eos -n 24 --top-k 0 --top-p 1 --min-p 0";
    const auto ids = [&](const std::string& extra) { return run_json(kModels[1], base + " " + extra).at("generated_ids").get<std::vector<int>>(); };
    const auto greedy = ids("--temp 0");
    REQUIRE(greedy.size() == 24);
    CHECK(ids("--temp 0.01 --seed 5") == greedy);
    const auto hot5 = ids("--temp 5 --seed 5"), hot6 = ids("--temp 5 --seed 6");
    CHECK(hot5 != greedy);
    CHECK(hot5 != hot6);
    CHECK(std::set<int>(hot5.begin(), hot5.end()).size() >= 16);
    CHECK(ids("--temp 5 --seed 5") == hot5);
}

TEST_CASE("run: --json holds text, counts, timings and the stop reason") {
    const json j = run_json(kModels[1], "--prompt-ids " + quote(data("prompt64.ids.txt")) + " --temp 0 --ignore-eos -n 5");
    CHECK(j.at("text").is_string());
    CHECK(j.at("prompt_tokens") == 64);
    CHECK(j.at("generated_tokens") == 5);
    CHECK(j.at("generated_ids").size() == 5);
    CHECK(j.at("stop_reason") == "length");
    CHECK(j.at("prompt_ms").get<double>() >= 0);
    CHECK(j.at("generation_tps").get<double>() > 0);
}

TEST_CASE("run: streamed text equals the --json text, and -p, stdin and - agree") {
    const std::string args = "--temp 0 --ignore-eos -n 8";
    auto streamed = run_command(quiet(run_cmd(kModels[0], "-p 'The cat' " + args)));
    REQUIRE(streamed.rc == 0);
    const json j = run_json(kModels[0], "-p 'The cat' " + args);
    CHECK(streamed.out == j.at("text").get<std::string>());   // not a terminal: no extra newline
    auto piped = run_command(quiet("printf 'The cat' | " + run_cmd(kModels[0], args)));
    CHECK(piped.out == streamed.out);
    auto dash = run_command(quiet("printf 'The cat' | " + run_cmd(kModels[0], args + " -")));
    CHECK(dash.out == streamed.out);
    // The timing line goes to stderr, one line.
    auto both = run_command(stderr_only(run_cmd(kModels[0], "-p 'The cat' " + args)));
    const auto lines = lines_of(both.out);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("prompt ") != std::string::npos);
    CHECK(lines[0].find("generated 8 tokens") != std::string::npos);
}

TEST_CASE("run: a stop string ends generation before it") {
    const std::string args = "--prompt-ids " + quote(data("prompt64.ids.txt")) + " --temp 0 --ignore-eos -n 24";
    const json full = run_json(kModels[0], args);
    const std::string text = full.at("text");
    // A stop string taken from the middle of the greedy text (whole bytes of ASCII letters).
    size_t at = std::string::npos;
    for (size_t i = text.size() / 3; i + 2 < text.size(); ++i)
        if (isalpha((unsigned char)text[i]) && isalpha((unsigned char)text[i + 1])) { at = i; break; }
    if (at == std::string::npos) return;   // nothing usable in this model's output
    const std::string stop = text.substr(at, 2);
    const size_t first = text.find(stop);
    const json cut = run_json(kModels[0], args + " -r " + quote(stop));
    CHECK(cut.at("stop_reason") == "stop_string");
    CHECK(cut.at("text") == text.substr(0, first));
}

TEST_CASE("run: a full context stops generation and says so") {
    const json j = run_json(kModels[1], "--prompt-ids " + quote(data("prompt64.ids.txt")) + " --temp 0 --ignore-eos -n -1 -c 70");
    CHECK(j.at("stop_reason") == "context_full");
    CHECK(j.at("generated_tokens") == 7);   // 6 decoded to fill the context, and the last sampled one
    auto r = run_command(run_cmd(kModels[1], "--prompt-ids " + quote(data("prompt64.ids.txt")) +
                                                 " --temp 0 --ignore-eos -n -1 -c 70 --print-ids"));
    CHECK(r.rc == 0);
    CHECK(r.out.find("context full") != std::string::npos);
}

TEST_CASE("run: --chat wraps the prompt in the chat format") {
    for (const char* m : kModels) {
        CAPTURE(m);
        const json j = run_json(m, "--chat -p 'Hi there' -sys 'Be brief.' -n 6 --temp 0 --no-think");
        CHECK(j.at("prompt_tokens").get<int>() > 5);
        CHECK(j.at("generated_tokens").get<int>() <= 6);
    }
    const json k = run_json(kModels[0], "--chat --chat-template kimi-k2 -p 'Hi' -n 3 --temp 0");
    CHECK(k.at("prompt_tokens").get<int>() > 3);
}

TEST_CASE("run: bad input gives one error line and exit status 1") {
    const std::string bin = quote(kinfer_bin());
    const std::string m = quote(tiny_model(kModels[0]));
    expect_one_error(bin + " run -m /nonexistent/model.gguf -p hi", "/nonexistent/model.gguf");
    expect_one_error(bin + " run -m " + m + " -f /nonexistent/prompt.txt", "/nonexistent/prompt.txt");
    expect_one_error(bin + " run -m " + m + " -c 8 -p 'a prompt that is clearly longer than eight tokens of context'",
                     "-c");
    expect_one_error(bin + " run -m " + m + " -p 'ab\\xffcd'", "offset 2");
    expect_one_error(bin + " run -m " + m + " -p \"$(printf 'xyz\\303')\" --no-escape", "offset 3");
    expect_one_error(bin + " run -m " + m + " -p hi --chat --chat-template nonsense", "nonsense");
    expect_one_error(bin + " run -m " + m + " -p hi --logit-bias 12x3", "--logit-bias");
    expect_one_error(bin + " run -m " + m + " -p hi --logit-bias 999999+1", "999999");
    expect_one_error(bin + " run -m " + m + " -p hi -f /etc/hostname", "one way");
    expect_one_error(bin + " run -m " + m + " --prompt-ids /nonexistent/ids.txt", "/nonexistent/ids.txt");
    expect_one_error(bin + " run -m " + m + " -p hi --chat --think-effort extreme", "think-effort");
    expect_one_error(bin + " run -m " + m + " -p hi stray", "stray", 2);
    expect_one_error(bin + " run -m " + m + " -p ''", "empty");
    // No -m: the demo model when it is built, else a pointer to -m.
    if (!std::filesystem::exists(std::string(KINFER_SOURCE_DIR) + "/models/kinfer-demo.gguf"))
        expect_one_error(bin + " run -p hi", "no model: pass -m FILE");
}

namespace {
// A copy of a tiny model with general.sampling.* set as `keys` says (llama.cpp's
// model-embedded sampling defaults), at `dst`.
void with_sampling_keys(const std::string& src, const std::string& dst,
                        const std::function<void(kinfer::gguf::Writer&)>& keys) {
    auto f = kinfer::gguf::File::open(src);
    kinfer::gguf::Writer w(dst);
    for (const auto& v : f->kv()) w.add_value(v);
    keys(w);
    for (const auto& t : f->tensors()) w.add_tensor(t.name, t.type, t.ne, t.n_dims);
    for (const auto& t : f->tensors()) w.write_tensor(t.data, t.nbytes);
    w.finish();
}
}  // namespace

TEST_CASE("run: the model's general.sampling.* fill the flags left at their defaults; a flag wins; bad values are named") {
    const auto tmp = std::filesystem::temp_directory_path() / ("kinfer_sampling_" + std::to_string(::getpid()));
    std::filesystem::create_directories(tmp);
    const std::string src = tiny_model(kModels[1]), greedy_model = (tmp / "greedy.gguf").string(),
                      bad_model = (tmp / "bad.gguf").string();
    with_sampling_keys(src, greedy_model, [](kinfer::gguf::Writer& w) {
        w.add_f32("general.sampling.temp", 0.0f);   // greedy
        w.add_i32("general.sampling.top_k", 7);
    });
    with_sampling_keys(src, bad_model, [](kinfer::gguf::Writer& w) {
        w.add_f32("general.sampling.temp", -3.0f);
        w.add_string("general.sampling.top_p", "high");
        w.add_f32("general.sampling.top_k", 2.5f);
    });
    const std::string base = "--prompt-ids " + quote(data("prompt64.ids.txt")) + " --ignore-eos -n 16 --seed 5 --json";
    auto ids = [&](const std::string& model, const std::string& extra) {
        const auto r = run_command(quiet(quote(kinfer_bin()) + " run -m " + quote(model) + " -t 2 " + base + " " + extra));
        REQUIRE_MESSAGE(r.rc == 0, r.out);
        return json::parse(r.out).at("generated_ids").get<std::vector<int>>();
    };
    const auto greedy = ids(src, "--temp 0"), sampled = ids(src, "");
    REQUIRE(greedy != sampled);   // seed 5 at the default temperature leaves the greedy path
    CHECK(ids(greedy_model, "") == greedy);              // the model's temp 0 is taken
    CHECK(ids(greedy_model, "--temp 0.8") != sampled);   // the flag wins for temp, the model's top_k 7 stays
    CHECK(ids(greedy_model, "--temp 0.8 --top-k 40") == sampled);   // flags for both: the model's values unused
    CHECK(ids(bad_model, "") == sampled);                // unusable values are not used...
    // stderr alone (run_command adds 2>&1 after the parentheses).
    const auto r = run_command("(" + quote(kinfer_bin()) + " run -m " + quote(bad_model) + " -t 2 -v " + base + " 2>&1 >/dev/null)");
    INFO(r.out);
    CHECK(r.rc == 0);                                    // ...and each is named once on stderr
    CHECK(r.out.find("general.sampling.temp = -3 is outside 0..100: not used") != std::string::npos);
    CHECK(r.out.find("general.sampling.top_p is a string, not a number: not used") != std::string::npos);
    CHECK(r.out.find("general.sampling.top_k = 2.5 is not a whole number: not used") != std::string::npos);
    const auto v = run_command("(" + quote(kinfer_bin()) + " run -m " + quote(greedy_model) + " -t 2 -v " + base + " 2>&1 >/dev/null)");
    CHECK(v.out.find("sampling from the model: temp 0, top_k 7") != std::string::npos);
    std::filesystem::remove_all(tmp);
}

// --list-devices needs no model: it exits while the line is parsed, as llama.cpp's does, with the
// CPU, the --device ones and every CUDA GPU (or why there is none).
TEST_CASE("run: --list-devices without a model, at the top and in a command, with a --device") {
    for (const std::string& args : {std::string("--list-devices"), std::string("run --list-devices"),
                                   std::string("bench --device sim:64MiB --list-devices")}) {
        CAPTURE(args);
        auto r = run_command(std::string(KINFER_BIN) + " " + args + " 2>&1");
        REQUIRE_MESSAGE(r.rc == 0, r.out);
        CHECK(r.out.rfind("cpu: host memory", 0) == 0);
        CHECK((r.out.find("sim0: simulated device") != std::string::npos) == (args.find("sim:") != std::string::npos));
    }
    auto bad = run_command(std::string(KINFER_BIN) + " run --device bogus --list-devices 2>&1");
    CHECK(bad.rc == 1);
    CHECK(bad.out.find("--device 'bogus'") != std::string::npos);
}
