// kinfer info --plan --gpu NxSIZE --ram SIZE (issue 15 item 5): the size parser of the machine
// flags, and where the memory plan goes on a planned machine: the verdict's "short by" is exact
// (that much more memory makes it fit), hot experts fill what the GPUs have left.
#include "cli_util.h"

#include "cli/lib/flag_check.h"
#include "cli/lib/machine_plan.h"
#include "cli/lib/memory_plan.h"
#include "common/error.h"
#include "gguf/reader.h"

#include <doctest/doctest.h>

using namespace kinfer;
using namespace kinfer::test;

TEST_CASE("machine plan: sizes and COUNTxSIZE parse; anything else is refused naming the form") {
    constexpr uint64_t G = uint64_t(1) << 30;
    CHECK(cli::parse_size_spec("141GiB", true).count == 1);
    CHECK(cli::parse_size_spec("141GiB", true).bytes == 141 * G);
    const auto g = cli::parse_size_spec("8x141GiB", true);
    CHECK(g.count == 8);
    CHECK(g.bytes == 141 * G);
    CHECK(cli::parse_size_spec("2TiB", false).bytes == 2048 * G);
    CHECK(cli::parse_size_spec("512MiB", false).bytes == G / 2);
    CHECK(cli::parse_size_spec("64KiB", false).bytes == 65536);
    CHECK(cli::parse_size_spec("1.5G", false).bytes == 3 * G / 2);
    CHECK(cli::parse_size_spec("4X80GB", true).count == 4);
    for (const char* bad : {"", "x141GiB", "0x10GiB", "8x", "8x0", "abc", "141QiB", "-1GiB", "inf", "8x-1G", "99999x1G",
                            "1e3x1G", " 1G"}) {
        CAPTURE(std::string(bad));
        CHECK_THROWS_AS(cli::parse_size_spec(bad, true), Error);
    }
    CHECK_THROWS_WITH_AS(cli::parse_size_spec("8x141GiB", false), doctest::Contains("not a size (expected a size like 2TiB"),
                         Error);
}

TEST_CASE("machine plan: fits or not, and by how much; hot experts fill the GPUs, cold ones RAM") {
    const auto f = gguf::File::open(tiny_model("k3-tiny-a-Q4_K_M"));
    cli::PlanOptions po;
    po.n_ctx = 100000;
    const auto plan = cli::memory_plan(*f, po);
    const uint64_t experts = plan["weights_routed_expert_bytes"], n_exp = plan["routed_experts"];
    REQUIRE(n_exp > 0);
    CHECK(plan["weights_dense_bytes"].get<uint64_t>() + experts == plan["weights_bytes"].get<uint64_t>());
    const uint64_t each = (experts + n_exp - 1) / n_exp;   // the plan's expert size: the average, rounded up

    // Plenty: every expert is hot, RAM holds only the process.
    auto big = cli::machine_fit(plan, {.n_gpu = 2, .gpu_bytes = uint64_t(8) << 30, .ram_bytes = uint64_t(8) << 30});
    CHECK(big["fits"] == true);
    CHECK(big["per_gpu"]["hot_experts"] == n_exp);
    CHECK(big["ram"]["cold_experts"] == 0);
    CHECK(big["verdict"].get<std::string>().rfind("fits: ", 0) == 0);

    // A GPU the fixed parts do not fit: short by an exact amount.
    auto small = cli::machine_fit(plan, {.n_gpu = 2, .gpu_bytes = cli::kGpuReserveBytes, .ram_bytes = uint64_t(8) << 30});
    CHECK(small["fits"] == false);
    const uint64_t short_by = small["per_gpu"]["short_bytes"];
    CHECK(short_by > 0);
    CHECK(small["per_gpu"]["hot_experts"] == 0);
    CHECK(small["ram"]["cold_expert_bytes"] == experts);
    CHECK(small["verdict"].get<std::string>().find("does not fit: each GPU is") == 0);
    const uint64_t exact = cli::kGpuReserveBytes + short_by;
    auto just = cli::machine_fit(plan, {.n_gpu = 2, .gpu_bytes = exact, .ram_bytes = uint64_t(8) << 30});
    CHECK(just["fits"] == true);
    CHECK(just["per_gpu"]["hot_experts"] == 0);
    CHECK(cli::machine_fit(plan, {.n_gpu = 2, .gpu_bytes = exact - 1, .ram_bytes = uint64_t(8) << 30})["fits"] == false);

    // Room for 3 experts on each GPU: 6 hot, the rest cold in RAM, the bytes adding up.
    auto some = cli::machine_fit(plan, {.n_gpu = 2, .gpu_bytes = exact + 3 * each, .ram_bytes = uint64_t(8) << 30});
    CHECK(some["per_gpu"]["hot_experts"] == 6);
    CHECK(some["ram"]["cold_experts"] == n_exp - 6);
    const uint64_t hot_bytes = some["per_gpu"]["hot_expert_bytes"].get<uint64_t>() * 2;
    const uint64_t cold_bytes = some["ram"]["cold_expert_bytes"];
    CHECK(cold_bytes + hot_bytes >= experts);   // the per-GPU share is rounded up by at most a byte
    CHECK(cold_bytes + hot_bytes <= experts + 1);
    CHECK(some["per_gpu"]["total_bytes"].get<uint64_t>() <= exact + 3 * each);
    CHECK(some["fits"] == true);

    // RAM short: no GPU, everything in RAM; that much more RAM fits.
    auto cpu = cli::machine_fit(plan, {.n_gpu = 0, .gpu_bytes = 0, .ram_bytes = 1 << 20});
    CHECK(cpu["fits"] == false);
    const uint64_t ram_short = cpu["ram"]["short_bytes"];
    CHECK(cpu["ram"]["total_bytes"].get<uint64_t>() == plan["planned_rss_bytes"].get<uint64_t>());
    CHECK(cpu["verdict"].get<std::string>().find("RAM is ") != std::string::npos);
    CHECK(cli::machine_fit(plan, {.n_gpu = 0, .gpu_bytes = 0, .ram_bytes = (1 << 20) + ram_short})["fits"] == true);
}

TEST_CASE("machine plan: kinfer info --plan --gpu --ram, text and --json; bad sizes are usage errors") {
    const std::string bin = quote(kinfer_bin()) + " info " + quote(tiny_model("k3-tiny-a-Q4_K_M")) + " --plan -c 1000000 ";
    auto t = run_command(bin + "--gpu 8x141GiB --ram 2TiB");
    INFO(t.out);
    CHECK(t.rc == 0);
    CHECK(t.out.find("on 8 GPUs of 141.00 GiB and 2.00 TiB of RAM:") != std::string::npos);
    CHECK(t.out.find("hot routed experts") != std::string::npos);
    CHECK(t.out.find("  fits: ") != std::string::npos);
    auto j = run_command(quiet(bin + "--gpu 1x1GiB --ram 1MiB --json"));
    CHECK(j.rc == 0);
    const auto plan = nlohmann::json::parse(j.out);
    CHECK(plan["machine"]["fits"] == false);
    CHECK(plan["machine"]["gpus"] == 1);
    CHECK(plan["machine"]["verdict"].get<std::string>().find("does not fit") == 0);
    for (const char* bad : {"--gpu 8x --ram 1TiB", "--gpu 8x141GiB --ram 2QiB", "--gpu 0x1G --ram 1G", "--gpu 8x141GiB"}) {
        CAPTURE(std::string(bad));
        auto r = run_command(bin + bad);
        CHECK(r.rc == 2);
        CHECK(r.out.find(std::string(bad).find("QiB") != std::string::npos ? "--ram" : "--gpu") != std::string::npos);
    }
}
