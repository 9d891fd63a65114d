// perplexity and run under mpirun print what one process prints; the other ranks print nothing.
#include "dist/plan.h"
#include "dist_util.h"

#include <doctest/doctest.h>

using namespace kinfer::test;

namespace {

// The final-estimate line and every chunk's value: perplexity prints them on stdout and stderr.
std::string ppl_numbers(const std::string& out) {
    std::string keep;
    size_t at = 0;
    while (at < out.size()) {
        size_t nl = out.find('\n', at);
        if (nl == std::string::npos) nl = out.size();
        const std::string line = out.substr(at, nl - at);
        // Drop the lines that hold timings (they differ run to run).
        if (line.find(" s,") == std::string::npos && line.find("seconds") == std::string::npos &&
            line.find("t/s") == std::string::npos && line.find("ms") == std::string::npos)
            keep += line + "\n";
        at = nl + 1;
    }
    return keep;
}

}  // namespace

TEST_CASE("dist: perplexity under mpirun prints the numbers of one process") {
    if (!have_mpirun()) return;
    const std::string model = data("models/k3-tiny-a-Q4_K_M.gguf");
    const std::string args = " perplexity -m " + model + " -f " + data("perplexity/gpl-3.txt") + " -c 128 -b 64 -t 1 --chunks 3";
    const auto one = run_command(stderr_to(kinfer_bin() + args, "/dev/null"));
    REQUIRE(one.rc == 0);
    REQUIRE(one.out.find("[1]") != std::string::npos);
    for (const char* split : {"pipeline", "experts"})
        for (int np : {2, 3}) {
            CAPTURE(split);
            CAPTURE(np);
            const auto many = run_command(stderr_to(mpirun(np) + kinfer_bin() + args + " --split " + split, "/dev/null"));
            REQUIRE(many.rc == 0);
            CHECK(ppl_numbers(many.out) == ppl_numbers(one.out));
        }
}

TEST_CASE("dist: run under mpirun: rank 0 alone prints, the text equals one process") {
    if (!have_mpirun()) return;
    const std::string args = " run -m " + data("models/k3-tiny-a-Q4_K_M.gguf") + " -p 'In the beginning' -n 24 --temp 0 -t 1";
    const auto one = run_command(stderr_to(kinfer_bin() + args, "/dev/null"));
    REQUIRE(one.rc == 0);
    REQUIRE(!one.out.empty());
    for (const char* split : {"pipeline", "experts"}) {
        CAPTURE(split);
        // --output-filename gives each rank its own stdout file, so another rank's bytes cannot hide.
        const std::string dir = scratch_dir("run");
        const auto many = run_command(mpirun(3) + "--output-filename " + dir + " " + kinfer_bin() + args + " --split " + split);
        REQUIRE(many.rc == 0);
        std::string r0 = read_bytes(dir + "/1/rank.0/stdout");
        // mpirun hands its ranks a pseudo-terminal for stdout, and run ends the text with a
        // newline on a terminal (so the shell prompt starts on a line of its own).
        if (!r0.empty() && r0.back() == '\n' && (one.out.empty() || one.out.back() != '\n')) r0.pop_back();
        CHECK(r0 == one.out);
        for (int r : {1, 2}) {
            CAPTURE(r);
            CHECK(read_bytes(dir + "/1/rank." + std::to_string(r) + "/stdout").empty());
            CHECK(read_bytes(dir + "/1/rank." + std::to_string(r) + "/stderr").empty());
        }
        std::filesystem::remove_all(dir);
    }
}

TEST_CASE("dist: --dist-stats: the bytes the ranks sent are the plan's bytes per token") {
    if (!have_mpirun()) return;
    const std::string model = data("models/k3-tiny-a-Q4_K_M.gguf");
    auto m = kinfer::model::Model::load(model);
    const int64_t n = 64;   // tests/data/prompt64.ids.txt
    const std::string dir = scratch_dir("stats");
    for (const char* split : {"pipeline", "experts", "both"}) {
        CAPTURE(split);
        const bool grid = std::string(split) == "both";
        const int R = grid ? 4 : 3;
        const auto plan = kinfer::dist::Plan::make(*m, kinfer::dist::parse_split(split), R, 2);
        const auto r = run_command(mpirun(R) + kinfer_bin() + " eval -m " + model + " --tokens " + data("prompt64.ids.txt") +
                                   " -t 1 --logits " + dir + "/l.f32 --dist-stats --split " + split + " --stages 2");
        INFO(r.out);
        REQUIRE(r.rc == 0);
        const size_t at = r.out.find("ranks sent ");
        REQUIRE(at != std::string::npos);
        const uint64_t sent = std::stoull(r.out.substr(at + 11));
        // Every row's logits are wanted (--logits); the residual messages between stages carry a
        // 24-byte header each; the commands (open, forward with 64 ids, close, stats) stay
        // under 2 KiB.
        uint64_t want = plan.bytes_per_all_logits_token * uint64_t(n);
        want += 24 * uint64_t(plan.stages - 1) * uint64_t(plan.shards);   // one residual message per boundary and shard
        CHECK(sent >= want);
        CHECK(sent < want + 2048);
        for (int q = 0; q < R; ++q) CHECK(r.out.find("rank " + std::to_string(q) + ": sent") != std::string::npos);
        CHECK(r.out.find(", busy ") != std::string::npos);   // each rank's compute time, the stages' balance
    }
    std::filesystem::remove_all(dir);
}
