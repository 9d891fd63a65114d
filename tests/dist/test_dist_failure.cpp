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
        const auto r = run_command(mpirun_bare() + "-np 1 --wdir " + data("") + " " + kinfer_bin() +
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

// Starts a long greedy decode on 3 ranks, sends `signal` to rank 1 after 2 s, and returns the
// script's report ("rc=N after=SECONDS left=K": exit status, seconds from the signal to the end
// of the job, processes of the job still alive) and the job's output in *out.
std::string signal_rank1(const std::string& split, const std::string& signal, const std::string& extra, const std::string& dir,
                         std::string* out) {
    const std::string script =
        mpirun(3) + kinfer_bin() + " eval -m " + data("models/k3-tiny-a-Q4_K_M.gguf") + " --tokens " +
        data("prompt64.ids.txt") + " -t 1 -c 200000 --greedy 150000 --split " + split + " " + extra + " >" + dir +
        "/out 2>&1 & mp=$!; sleep 2; "
        "for p in $(pgrep -P $mp); do tr '\\0' '\\n' </proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -" + signal +
        " $p; done; "
        "t0=$(date +%s.%N); wait $mp; rc=$?; t1=$(date +%s.%N); "
        "echo \"rc=$rc after=$(echo \"$t1 - $t0\" | bc)\"; left=$(pgrep -P $mp | wc -l); echo left=$left";
    std::string q = "'";
    for (char c : script) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    q += "'";
    const auto r = run_command("bash -c " + q);
    *out = read_bytes(dir + "/out");
    return r.out;
}

double after_of(const std::string& report) { return std::stod(report.substr(report.find("after=") + 6)); }

TEST_CASE("dist: a rank killed mid-run ends the others within seconds, naming the rank") {
    if (!have_mpirun()) return;
    const std::string dir = scratch_dir("kill");
    for (const char* split : {"pipeline", "experts"}) {
        CAPTURE(split);
        std::string out;
        const std::string rep = signal_rank1(split, "9", "", dir, &out);
        INFO(rep);
        INFO(out);
        REQUIRE(rep.find("rc=") != std::string::npos);
        CHECK(rep.find("rc=0 ") == std::string::npos);
        CHECK(after_of(rep) < 10.0);
        CHECK(rep.find("left=0") != std::string::npos);
        CHECK(out.find("rank 1") != std::string::npos);
        CHECK((out.find("signal 9") != std::string::npos || out.find("Killed") != std::string::npos));
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("dist: a rank that stops answering mid-run ends the job after --dist-timeout, naming it") {
    if (!have_mpirun()) return;
    const std::string dir = scratch_dir("stop");
    for (const char* split : {"pipeline", "experts"}) {
        CAPTURE(split);
        std::string out;
        // SIGSTOP: rank 1 is alive but silent; MPI itself would wait for ever.
        const std::string rep = signal_rank1(split, "STOP", "--dist-timeout 2", dir, &out);
        INFO(rep);
        INFO(out);
        REQUIRE(rep.find("rc=") != std::string::npos);
        CHECK(rep.find("rc=0 ") == std::string::npos);
        CHECK(after_of(rep) < 15.0);
        CHECK(rep.find("left=0") != std::string::npos);
        // Rank 0 names the stopped rank either as the one it waits for ("no residual from rank 1
        // within 2 s") or, when the stop caught rank 0 sending, as the one that did not take it.
        const bool named = out.find("from rank 1 within 2 s") != std::string::npos ||
                           out.find("rank 1 did not take the residual within 2 s") != std::string::npos;
        CHECK(named);
    }
    std::filesystem::remove_all(dir);
}
