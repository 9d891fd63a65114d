// A rank that dies mid-run, or cannot map its part, ends the whole job within seconds with a
// message that names the rank and the cause: no rank waits for ever.
#include "dist_util.h"

#include <chrono>
#include <doctest/doctest.h>

using namespace kinfer::test;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("dist: a rank that cannot open the model ends every rank, naming the rank and the file") {
    if (!have_mpirun()) return;
    // The path is relative: rank 0 runs in tests/data, where it exists; rank 1 runs in an empty
    // directory, where it does not.
    const std::string empty = scratch_dir("nomodel");
    for (const char* split : {"pipeline", "experts"}) {
        CAPTURE(split);
        const auto t0 = std::chrono::steady_clock::now();
        const auto r = run_command("mpirun --allow-run-as-root --oversubscribe -np 1 --wdir " + data("") + " " + kinfer_bin() +
                                   " eval -m models/k3-tiny-a-Q4_K_M.gguf --tokens prompt64.ids.txt -t 1 --split " + split +
                                   " : -np 1 --wdir " + empty + " " + kinfer_bin());
        const double secs = seconds_since(t0);
        INFO(r.out);
        CHECK(r.rc != 0);
        CHECK(r.out.find("rank 1 of 2") != std::string::npos);
        CHECK(r.out.find("models/k3-tiny-a-Q4_K_M.gguf") != std::string::npos);
        CHECK(secs < 30);
    }
    std::filesystem::remove_all(empty);
}

TEST_CASE("dist: a rank killed mid-run ends the others within seconds, naming the rank") {
    if (!have_mpirun()) return;
    const std::string dir = scratch_dir("kill");
    for (const char* split : {"pipeline", "experts"}) {
        CAPTURE(split);
        // A long greedy decode on 3 ranks; after 2 s rank 1 gets SIGKILL. The script prints how
        // long the job took to end after the kill.
        const std::string script =
            mpirun(3) + kinfer_bin() + " eval -m " + data("models/k3-tiny-a-Q4_K_M.gguf") + " --tokens " +
            data("prompt64.ids.txt") + " -t 1 -c 200000 --greedy 150000 --split " + split + " >" + dir +
            "/out 2>&1 & mp=$!; sleep 2; "
            "for p in $(pgrep -P $mp); do tr '\\0' '\\n' </proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -9 $p; done; "
            "t0=$(date +%s.%N); wait $mp; rc=$?; t1=$(date +%s.%N); "
            "echo \"rc=$rc after=$(echo \"$t1 - $t0\" | bc)\"; left=$(pgrep -P $mp | wc -l); echo left=$left";
        const auto r = run_command("bash -c " + [&] {
            std::string q = "'";
            for (char c : script) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
            return q + "'";
        }());
        const std::string out = read_bytes(dir + "/out");
        INFO(r.out);
        INFO(out);
        REQUIRE(r.out.find("rc=") != std::string::npos);
        CHECK(r.out.find("rc=0 ") == std::string::npos);
        const double after = std::stod(r.out.substr(r.out.find("after=") + 6));
        CHECK(after < 10.0);
        CHECK(r.out.find("left=0") != std::string::npos);
        CHECK(out.find("rank 1") != std::string::npos);
        CHECK((out.find("signal 9") != std::string::npos || out.find("Killed") != std::string::npos));
    }
    std::filesystem::remove_all(dir);
}
