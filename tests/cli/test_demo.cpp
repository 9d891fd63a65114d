// The shipped demo model (models/kinfer-demo.gguf, trained by tools/train): kinfer run uses it
// when no -m is given and writes text, and kinfer perplexity on the held-out sample agrees with
// the PyTorch reference's number for the same text and windows (tests/data/demo/reference.json,
// written by tools/train/ship_demo.sh from the F32 checkpoint; the shipped file is Q8_0).
#include "cli_util.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace kinfer::test;
using nlohmann::json;

namespace {
std::string demo_model() { return data("../../models/kinfer-demo.gguf"); }
}  // namespace

TEST_CASE("demo model: kinfer run without -m generates text with it") {
    REQUIRE_MESSAGE(std::filesystem::exists(demo_model()), "models/kinfer-demo.gguf is missing");
    auto r = run_command(quiet(quote(kinfer_bin()) + " run -p 'In the beginning God' -n 24 --temp 0 --repeat-penalty 1.15 -t 2 --json"));
    REQUIRE_MESSAGE(r.rc == 0, r.out);
    const json j = json::parse(r.out);
    CHECK(std::filesystem::equivalent(j["model"].get<std::string>(), demo_model()));
    const std::string text = j["text"].get<std::string>();
    INFO(text);
    // Readable: mostly letters and spaces, several words.
    size_t letters = 0, spaces = 0;
    for (unsigned char c : text) letters += std::isalpha(c) != 0, spaces += c == ' ';
    CHECK(text.size() >= 40);
    CHECK(spaces >= 5);
    CHECK(double(letters + spaces) >= 0.8 * double(text.size()));
}

TEST_CASE("demo model: held-out perplexity equals the PyTorch reference within 0.5 %") {
    const json ref = json::parse(std::ifstream(data("demo/reference.json")));
    const std::string cmd = quote(kinfer_bin()) + " perplexity -m " + quote(demo_model()) + " -f " +
                            quote(data("demo/heldout-head.txt")) + " --no-escape -c " + std::to_string(ref["ctx"].get<int>()) +
                            " --chunks " + std::to_string(ref["n_chunk"].get<int>()) + " -t 2 --json";
    auto r = run_command(quiet(cmd));
    REQUIRE_MESSAGE(r.rc == 0, r.out);
    // --json: the running [i]ppl line, then the summary object.
    const json j = json::parse(r.out.substr(r.out.find('{')));
    const double ppl = j["ppl"].get<double>(), want = ref["ppl"].get<double>();
    INFO("kinfer " << ppl << ", reference " << want);
    CHECK(j["tokens_scored"].get<int>() == ref["n_scored"].get<int>());
    CHECK(std::abs(ppl / want - 1.0) < 0.005);
}

TEST_CASE("demo model: a chat reply cut by -n at any token shows no piece of K3's channel markers") {
    REQUIRE_MESSAGE(std::filesystem::exists(demo_model()), "models/kinfer-demo.gguf is missing");
    // The whole greedy reply first: its think block, the response and the turn's end.
    const std::string base = quote(kinfer_bin()) + " run -m " + quote(demo_model()) + " --chat -p Hello --temp 0 -t 2 --json";
    auto full = run_command(quiet(base + " -n 64"));
    REQUIRE_MESSAGE(full.rc == 0, full.out);
    const json f = json::parse(full.out);
    const int n_full = f["generated_tokens"].get<int>();
    REQUIRE(n_full > 4);
    REQUIRE(!f["text"].get<std::string>().empty());
    // Every shorter limit ends the reply somewhere: inside the think block, inside a marker's
    // tokens (`<|close|>` before `response<|sep|>`), or in the text. None may print `<|`. (Under
    // the sanitizers, every limit from the reply's last ten tokens, where its closing markers are.)
    for (int n = kinfer::test::sanitized() ? std::max(1, n_full - 10) : 1; n <= n_full; ++n) {
        auto r = run_command(quiet(base + " -n " + std::to_string(n)));
        REQUIRE_MESSAGE(r.rc == 0, r.out);
        const std::string text = json::parse(r.out)["text"].get<std::string>();
        CAPTURE(n);
        CAPTURE(text);
        CHECK(text.find("<|") == std::string::npos);
        CHECK(f["text"].get<std::string>().rfind(text, 0) == 0);   // a prefix of the whole reply
    }
}
