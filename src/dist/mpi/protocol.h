// What rank 0 tells the other ranks (tag kTagCommand): open a session like mine, run this chunk,
// drop the session, quit. Each message starts with its Op; the rest is a fixed little struct
// and, for open and forward, a tail (the stage costs and the model path, the token ids).
#pragma once
#include "dist/plan.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kinfer::dist {

enum class Op : int32_t { open = 1, forward = 2, close = 3, quit = 4 };

// How the ranks move the residual and the expert rows: MPI through host memory, NCCL between
// the GPUs' memories (dist/nccl), or NCCL when every rank's layers are on a GPU of its own and
// MPI otherwise (the ranks decide together at their first pass: grid_split.cpp).
enum class Link : int32_t { mpi = 0, nccl = 1, automatic = 2 };
Link parse_link(const std::string& s);   // "mpi" | "nccl" | "auto"

struct OpenCmd {
    SplitKind kind = SplitKind::pipeline;
    int32_t stages = 0;          // --split both: pipeline stages (0: the default)
    int64_t n_ctx = 0, n_batch = 0;
    int32_t n_threads = 0;
    bool kda_chunked = false, mla_decompressed = false;
    double timeout_s = 0;
    int64_t micro_batch = 0;     // pipeline: tokens per micro-batch (0: the whole chunk)
    // The latent cache as rank 0 has it (type, page size, tiled-kernel threshold): every rank's
    // MLA layers must round and tile alike, or the split stops being bit-identical.
    int32_t cache_type = 0;
    int64_t cache_page_rows = 256, tiled_min_keys = 1024;
    // --layer-profile: the stages are balanced by these costs rank 0 read (empty: by bytes), so
    // every rank makes the same plan without needing the file.
    StageCosts costs;
    uint64_t plan_digest = 0;    // Plan::digest of rank 0's plan
    // Rank 0's placement: every rank opens the same device (--device spec, empty: none) and puts
    // its share of the last n_gpu_layers layers there, so every rank rounds as rank 0 does.
    std::string device;
    int32_t n_gpu_layers = 0, n_cpu_moe = 0;
    bool cpu_moe = false;
    bool shard_experts = false;   // --split-mode experts among the rank's devices
    Link link = Link::automatic; // how the residual and the expert rows move (--dist-link)
    std::string model_path;
};

struct ForwardCmd {
    int64_t pos0 = 0;
    bool want_all = false;
    std::vector<int32_t> tokens;
};

std::vector<uint8_t> encode(const OpenCmd& c);
std::vector<uint8_t> encode(const ForwardCmd& c);
std::vector<uint8_t> encode(Op plain);   // close, quit

Op op_of(std::span<const uint8_t> m);    // throws on a message too short to hold one
OpenCmd decode_open(std::span<const uint8_t> m);
ForwardCmd decode_forward(std::span<const uint8_t> m);

}  // namespace kinfer::dist
