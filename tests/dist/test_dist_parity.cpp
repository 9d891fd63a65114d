// mpirun -np 2 / -np 3 (and -np 4 as 2 stages x 2 expert shards) on localhost against one
// process: the logits of every golden tiny model must be the same bytes with --split pipeline,
// --split experts and --split both, in one batch and token by token, and the greedy
// continuation must be the same ids; also with the stages balanced by a layer profile.
#include "dist/layer_profile.h"
#include "dist_util.h"

#include <doctest/doctest.h>
#include <unistd.h>

using namespace kinfer::test;

namespace {

struct EvalOut {
    std::string logits;   // raw float32 bytes
    std::string greedy;   // stdout: the greedy ids
};

EvalOut eval(const std::string& prefix, const std::string& model, const std::string& mode, const std::string& dir,
             const std::string& tag, const std::string& extra) {
    const std::string out = dir + "/" + tag + ".f32";
    const std::string cmd = prefix + kinfer_bin() + " eval -m " + model + " --tokens " + data("prompt64.ids.txt") +
                            " --mode " + mode + " -t 1 --logits " + out + " --greedy 8 " + extra;
    const auto r = run_command(stderr_to(cmd, dir + "/" + tag + ".err"));
    INFO(cmd);
    INFO(read_bytes(dir + "/" + tag + ".err"));
    REQUIRE(r.rc == 0);
    return {read_bytes(out), r.out};
}

// Every split and rank count of `ranks` against the single-process run of one model and mode;
// with grid, also 4 ranks as 2 stages x 2 expert shards.
void check_model(const std::string& model, const std::string& mode, std::initializer_list<int> ranks, bool grid) {
    const std::string dir = scratch_dir("parity");
    const EvalOut one = eval("", model, mode, dir, "one", "");
    REQUIRE(one.logits.size() > 0);
    for (const char* split : {"pipeline", "experts"}) {
        for (int np : ranks) {
            CAPTURE(model);
            CAPTURE(mode);
            CAPTURE(split);
            CAPTURE(np);
            const EvalOut many = eval(mpirun(np), model, mode, dir, std::string(split) + std::to_string(np),
                                      std::string("--split ") + split);
            CHECK(many.logits.size() == one.logits.size());
            CHECK(many.logits == one.logits);   // bit for bit
            CHECK(many.greedy == one.greedy);
        }
    }
    if (grid) {   // both splits at once: 4 ranks as 2 pipeline stages of 2 expert shards each
        CAPTURE(model);
        CAPTURE(mode);
        const EvalOut both = eval(mpirun(4), model, mode, dir, "both4", "--split both --stages 2");
        CHECK(both.logits == one.logits);
        CHECK(both.greedy == one.greedy);
    }
    std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("dist: shipped tiny models, -np 2 and 3, every split (and 2 x 2), batch and decode: logits bit-identical") {
    if (!have_mpirun()) return;
    for (const char* m : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"})
        for (const char* mode : {"batch", "decode"}) check_model(data(std::string("models/") + m + ".gguf"), mode, {2, 3}, true);
}

TEST_CASE("dist: every golden tiny model at -np 3, pipeline and experts: logits bit-identical") {
    if (!have_mpirun()) return;
    for (const char* arch : {"k3-tiny-a", "kl-tiny-a"})
        for (const char* q : {"F32", "Q8_0", "MXFP4_MOE"}) {
            const std::string rel = std::string("llama.cpp/models/") + arch + "-" + q + ".gguf";
            if (!have_golden(rel)) continue;
            check_model(golden(rel), "batch", {3}, false);   // the grid runs on the shipped models above
        }
}

TEST_CASE("dist: --micro-batch N keeps pieces in flight and equals one process with -b N") {
    if (!have_mpirun()) return;
    const std::string dir = scratch_dir("micro");
    for (const char* m : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"}) {
        CAPTURE(m);
        const std::string model = data(std::string("models/") + m + ".gguf");
        const EvalOut one = eval("", model, "batch", dir, "one", "-b 16");
        const EvalOut many = eval(mpirun(3), model, "batch", dir, "micro", "-b 64 --micro-batch 16 --split pipeline");
        REQUIRE(one.logits.size() > 0);
        CHECK(many.logits == one.logits);
        CHECK(many.greedy == one.greedy);
        const EvalOut grid = eval(mpirun(4), model, "batch", dir, "micro4", "-b 64 --micro-batch 16 --split both --stages 2");
        CHECK(grid.logits == one.logits);
        CHECK(grid.greedy == one.greedy);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("dist: stages balanced by a layer profile (--layer-profile), -np 2 and 3: logits bit-identical") {
    if (!have_mpirun()) return;
    const std::string dir = scratch_dir("balance");
    for (const char* name : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"}) {
        CAPTURE(name);
        const std::string model = data(std::string("models/") + name + ".gguf");
        auto m = kinfer::model::Model::load(model);
        // A profile whose first layer outweighs the rest: its stage holds that layer alone, a
        // cut the byte balance never makes, so every rank must take the costs from rank 0.
        kinfer::dist::LayerProfile prof;
        prof.n_layer = m->hparams().n_layer, prof.fingerprint = m->fingerprint(), prof.model_name = name;
        prof.threads = 1, prof.prompt = 64, prof.batch = 64, prof.decode = 8;
        prof.decode_ns.assign(size_t(prof.n_layer + 1), 1000);
        prof.prefill_ns = prof.decode_ns;
        prof.prefill_ns[0] = 100000;
        const std::string path = dir + "/" + name + ".prof";
        prof.save(path);
        const auto costs = prof.costs(kinfer::dist::Balance::prefill);
        for (int np : {2, 3}) {
            const auto bytes = kinfer::dist::Plan::make(*m, kinfer::dist::SplitKind::pipeline, np);
            const auto timed = kinfer::dist::Plan::make(*m, kinfer::dist::SplitKind::pipeline, np, 0, &costs);
            REQUIRE(timed.part[0].last_layer == 1);
            REQUIRE(bytes.part[0].last_layer != 1);
        }
        for (const char* mode : {"batch", "decode"}) {
            CAPTURE(mode);
            const EvalOut one = eval("", model, mode, dir, "one", "");
            REQUIRE(one.logits.size() > 0);
            for (int np : {2, 3}) {
                CAPTURE(np);
                const EvalOut many = eval(mpirun(np), model, mode, dir, "timed" + std::to_string(np),
                                          "--split pipeline --dist-timeout 60 --layer-profile " + path);
                CHECK(many.logits == one.logits);   // bit for bit
                CHECK(many.greedy == one.greedy);
            }
        }
    }
    std::filesystem::remove_all(dir);
}

// -ngl under --split: every rank opens rank 0's device (here the strict simulated one, which
// checks every pointer an op is given: a rank touching a layer or an expert slice it did not
// copy fails) and places its share there. The residual and the expert rows then move through
// the host over MPI, or device to device over the NCCL link, run here on the NCCL emulation
// over MPI (tests/dist/nccl_emu) since no GPU is at hand: the same link code, the real
// libnccl's calls answered by the emulation.
TEST_CASE("dist: -ngl on a device under --split, over MPI and over the NCCL link: logits bit-identical to one process") {
    if (!have_mpirun()) return;
    const std::string dir = scratch_dir("device");
    const std::string dev = "--device sim:512MiB -ngl 99 ";
    std::vector<std::pair<std::string, std::string>> links{{"mpi", ""}};
#ifdef KINFER_NCCL_EMU
    links.emplace_back("nccl", std::string("KINFER_NCCL_LIBRARY=") + KINFER_NCCL_EMU + " ");
#else
    MESSAGE("kinfer was built without NCCL (no nccl.h): the NCCL link is not tested");
#endif
    // Each link with each split once, at 2 and at 3 ranks between them (the CPU-only cases above
    // cover every rank count and split): both models in one batch, K3 token by token too.
    struct Case {
        const char* split;
        int np;
    };
    for (const char* name : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"}) {
        const std::string model = data(std::string("models/") + name + ".gguf");
        for (const char* mode : {"batch", "decode"}) {
            if (std::string(mode) == "decode" && std::string(name) != "k3-tiny-a-Q4_K_M") continue;
            const EvalOut one = eval("", model, mode, dir, "one", dev);
            const EvalOut cpu = eval("", model, mode, dir, "cpu", "");
            REQUIRE(one.logits.size() > 0);
            CHECK(one.logits == cpu.logits);   // the simulated device runs the CPU's kernels
            for (size_t li = 0; li < links.size(); ++li)
                for (const Case& c : {Case{"pipeline", li == 0 ? 3 : 2}, Case{"experts", li == 0 ? 2 : 3}}) {
                    // Not a structured binding: clang before 16 cannot capture one in CAPTURE's lambda.
                    const std::string& link = links[li].first;
                    const std::string& env = links[li].second;
                    CAPTURE(name);
                    CAPTURE(mode);
                    CAPTURE(link);
                    CAPTURE(c.split);
                    CAPTURE(c.np);
                    const EvalOut many = eval(env + mpirun(c.np), model, mode, dir, link + c.split + std::to_string(c.np),
                                              dev + "--dist-timeout 60 --dist-link " + link + " --split " + c.split);
                    CHECK(many.logits == one.logits);   // bit for bit
                    CHECK(many.greedy == one.greedy);
                }
        }
    }
    // Two devices per rank sharing each rank's expert slice (--split-mode experts): the mode
    // travels to the workers, and each device takes its part of the rank's part.
    {
        const std::string model = data("models/k3-tiny-a-Q4_K_M.gguf");
        const std::string two = "--device sim:256MiB,sim:256MiB -ngl 99 --split-mode experts ";
        const EvalOut cpu = eval("", model, "batch", dir, "sm-cpu", "");
        const EvalOut one = eval("", model, "batch", dir, "sm-one", two);
        const EvalOut many = eval(mpirun(2), model, "batch", dir, "sm-many", two + "--dist-timeout 60 --split experts");
        REQUIRE(cpu.logits.size() > 0);
        CHECK(one.logits == cpu.logits);
        CHECK(many.logits == cpu.logits);
        CHECK(many.greedy == cpu.greedy);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("dist: --dist-link nccl where a rank's layers are on the CPU ends every rank with a message naming it") {
    if (!have_mpirun()) return;
    const std::string dir = scratch_dir("nolink");
    const std::string model = data("models/k3-tiny-a-Q4_K_M.gguf");
    std::string env;
#ifdef KINFER_NCCL_EMU
    env = std::string("KINFER_NCCL_LIBRARY=") + KINFER_NCCL_EMU + " ";
#endif
    const std::string cmd = env + mpirun(2) + kinfer_bin() + " eval -m " + model + " --tokens " + data("prompt64.ids.txt") +
                            " -t 1 --dist-timeout 60 --dist-link nccl --split pipeline";
    const auto r = run_command(cmd + " 2>&1");
    INFO(cmd);
    INFO(r.out);
    CHECK(r.rc != 0);
    CHECK(r.out.find("--dist-link nccl: rank 0 cannot use NCCL") != std::string::npos);
    // auto on the same ranks takes MPI and runs.
    const auto a = run_command(env + mpirun(2) + kinfer_bin() + " eval -m " + model + " --tokens " + data("prompt64.ids.txt") +
                               " -t 1 --dist-timeout 60 --dist-link auto --split pipeline 2>&1");
    CHECK(a.rc == 0);
    std::filesystem::remove_all(dir);
}
