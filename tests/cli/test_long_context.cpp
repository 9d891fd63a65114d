// Long prompts from the command line (issue 15): -ctk, -c far beyond the prompt, a -c beyond
// memory, --prompt-cache across processes, and info --plan against a measured peak RSS.
#include "cli_util.h"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

using namespace kinfer::test;

namespace {

// The shipped 64-token prompt repeated to n tokens, written as an id file.
std::string ids_file(size_t n) {
    std::ifstream in(data("prompt64.ids.txt"));
    std::vector<long long> ids;
    for (long long v; in >> v;) ids.push_back(v);
    REQUIRE(!ids.empty());
    std::string name = "p";   // built with += : GCC 12 warns (-Wrestrict, a false positive) on "p" + ...
    name += std::to_string(n);
    name += ".ids";
    const std::string path = temp_path(name);
    std::ofstream out(path);
    for (size_t i = 0; i < n; ++i) out << ids[i % ids.size()] << ' ';
    return path;
}

}  // namespace

TEST_CASE("long context: -c 1000000 on a 2-token prompt starts at once; a -c beyond memory is refused") {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = run_command(run_cmd("k3-tiny-a-Q4_K_M", "-p hi -n 1 --temp 0 -c 1000000 --log-disable"));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.out);
    CHECK(r.rc == 0);
    CHECK(secs < 2.0);   // the whole process (load, 1 token); the session itself is tested at < 1 s
    const auto big = run_command(run_cmd("k3-tiny-a-Q4_K_M", "-p hi -n 1 -c 999999999 -ctk f32"));
    INFO(big.out);
    CHECK(big.rc == 1);
    CHECK(big.out.find("-c 999999999: the latent cache needs 767999999232 bytes") != std::string::npos);
    CHECK(big.out.find("bytes are free") != std::string::npos);
    const auto bad = run_command(run_cmd("k3-tiny-a-Q4_K_M", "-p hi -n 1 -ctk q4_0"));
    CHECK(bad.rc == 2);
}

TEST_CASE("long context: run --prompt-cache in new processes gives the uncached tokens; a wrong file is refused") {
    const std::string ids = ids_file(160), cache = temp_path("run.cache");
    const std::string base = run_cmd("k3-tiny-a-Q4_K_M", "--prompt-ids " + quote(ids) + " --temp 0 -n 32 --print-ids -c 512");
    const auto plain = run_command(base + " --log-disable");
    REQUIRE(plain.rc == 0);
    const auto first = run_command(base + " --log-disable --prompt-cache " + quote(cache));
    CHECK(first.rc == 0);
    CHECK(std::filesystem::exists(cache));
    const auto second = run_command(base + " --prompt-cache " + quote(cache));
    INFO(second.out);
    CHECK(second.rc == 0);
    CHECK(second.out.find("160 of 160 prompt tokens reused") != std::string::npos);
    CHECK(first.out == plain.out);
    CHECK(second.out.find(plain.out) != std::string::npos);
    // A longer prompt that starts with the saved one reads only the rest.
    const std::string ids200 = ids_file(200);
    const auto longer = run_command(run_cmd("k3-tiny-a-Q4_K_M", "--prompt-ids " + quote(ids200) +
                                            " --temp 0 -n 4 -c 512 --prompt-cache " + quote(cache)));
    CHECK(longer.rc == 0);
    CHECK(longer.out.find("160 of 200 prompt tokens reused") != std::string::npos);
    // Another cache type, another model: refused with the reason, exit 1, the file left alone.
    const auto size = std::filesystem::file_size(cache);
    const auto other = run_command(base + " -ctk q8_0 --prompt-cache " + quote(cache));
    CHECK(other.rc == 1);
    CHECK(other.out.find("saved with a f16 latent cache, this session uses q8_0") != std::string::npos);
    const auto model = run_command(run_cmd("kl-tiny-a-Q4_K_M", "--prompt-ids " + quote(ids) + " -n 4 --prompt-cache " + quote(cache)));
    CHECK(model.rc == 1);
    CHECK(model.out.find("saved from another model") != std::string::npos);
    CHECK(std::filesystem::file_size(cache) == size);
    for (const auto& p : {cache, ids, ids200}) std::filesystem::remove(p);
}

TEST_CASE("long context: info --plan is within 10 % of the measured peak RSS") {
    if (!std::filesystem::exists("/usr/bin/time")) {
        skip_case(SkipKind::tool, "/usr/bin/time (GNU time) not found");
        return;
    }
    const std::string model = tiny_model("k3-tiny-a-Q4_K_M");
    const auto plan = run_command(quote(kinfer_bin()) + " info " + quote(model) + " --plan -c 4112 --json");
    REQUIRE(plan.rc == 0);
    const auto j = nlohmann::json::parse(plan.out);
    // Under the sanitizers the process's RSS includes their shadow memory and quarantine: the
    // plan is held to a measured run (a 4096-token prefill) in the Release suites only.
    if (!sanitized()) {
        const std::string ids = ids_file(4096), rss = temp_path("rss.txt");
        const auto r = run_command("/usr/bin/time -f %M -o " + quote(rss) + " " +
                                   run_cmd("k3-tiny-a-Q4_K_M", "--prompt-ids " + quote(ids) + " -n 0 -c 4112 --log-disable"));
        REQUIRE(r.rc == 0);
        std::ifstream f(rss);
        long long kb = 0;
        for (std::string line; std::getline(f, line);)
            if (!line.empty()) kb = std::stoll(line);
        const double planned = j["planned_rss_bytes"].get<double>(), measured = double(kb) * 1024;
        std::printf("info --plan: planned %.2f MiB, measured peak RSS %.2f MiB (%+.1f %%)\n", planned / 1048576,
                    measured / 1048576, 100 * (planned / measured - 1));
        CHECK(planned > measured * 0.9);
        CHECK(planned < measured * 1.1);
        std::filesystem::remove(rss);
        std::filesystem::remove(ids);
    }
    CHECK(j["latent_bytes_per_token"]["f16"].get<long long>() == 2 * 96 * 2);
    CHECK(j["latent_bytes_per_token"]["f32"].get<long long>() == 2 * 96 * 4);
    CHECK(j["latent_bytes_per_token"]["q8_0"].get<long long>() == 2 * 3 * 34);
}
