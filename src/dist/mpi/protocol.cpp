#include "dist/mpi/protocol.h"

#include "common/error.h"

#include <cstring>

namespace kinfer::dist {

namespace {

// The fixed parts, copied as they are: every rank is the same binary on the same ABI.
struct OpenFixed {
    Op op;
    int32_t kind, stages;
    int64_t n_ctx, n_batch;
    int32_t n_threads;
    uint8_t kda_chunked, mla_decompressed;
    double timeout_s;
    int64_t micro_batch;
    int32_t cache_type;
    int64_t cache_page_rows, tiled_min_keys;
    int32_t balance;
    uint64_t plan_digest;
    int32_t n_gpu_layers, n_cpu_moe;
    uint8_t cpu_moe, shard_experts;
    int32_t link;
    int64_t device_len;   // bytes of the device spec, after the costs
    int64_t n_costs;      // 0, or the layers' costs then the head's (uint64 each), before the device and the path
};
struct ForwardFixed {
    Op op;
    int32_t want_all;
    int64_t pos0, n;
};

template <class T>
std::vector<uint8_t> with_tail(const T& fixed, const void* tail, size_t tail_bytes) {
    std::vector<uint8_t> m(sizeof(T) + tail_bytes);
    std::memcpy(m.data(), &fixed, sizeof(T));
    if (tail_bytes) std::memcpy(m.data() + sizeof(T), tail, tail_bytes);
    return m;
}

template <class T>
T fixed_of(std::span<const uint8_t> m, const char* what) {
    if (m.size() < sizeof(T)) fail("{} command: {} bytes, too short", what, m.size());
    T t;
    std::memcpy(&t, m.data(), sizeof(T));
    return t;
}

}  // namespace

Link parse_link(const std::string& s) {
    if (s == "mpi") return Link::mpi;
    if (s == "nccl") return Link::nccl;
    if (s == "auto" || s.empty()) return Link::automatic;
    usage_fail("--dist-link {}: expected mpi, nccl or auto", s);
}

std::vector<uint8_t> encode(const OpenCmd& c) {
    std::vector<uint64_t> costs = c.costs.layer;
    if (!costs.empty()) costs.push_back(c.costs.head);
    OpenFixed f{Op::open, int32_t(c.kind), c.stages, c.n_ctx, c.n_batch, c.n_threads, c.kda_chunked, c.mla_decompressed, c.timeout_s,
                 c.micro_batch, c.cache_type, c.cache_page_rows, c.tiled_min_keys, int32_t(c.costs.by), c.plan_digest,
                 c.n_gpu_layers, c.n_cpu_moe, c.cpu_moe, c.shard_experts, int32_t(c.link), int64_t(c.device.size()), int64_t(costs.size())};
    std::vector<uint8_t> tail(costs.size() * sizeof(uint64_t));
    if (!costs.empty()) std::memcpy(tail.data(), costs.data(), tail.size());
    tail.insert(tail.end(), c.device.begin(), c.device.end());
    tail.insert(tail.end(), c.model_path.begin(), c.model_path.end());
    return with_tail(f, tail.data(), tail.size());
}

std::vector<uint8_t> encode(const ForwardCmd& c) {
    ForwardFixed f{Op::forward, c.want_all, c.pos0, int64_t(c.tokens.size())};
    return with_tail(f, c.tokens.data(), c.tokens.size() * sizeof(int32_t));
}

std::vector<uint8_t> encode(Op plain) { return with_tail(plain, nullptr, 0); }

Op op_of(std::span<const uint8_t> m) { return fixed_of<Op>(m, "a"); }

OpenCmd decode_open(std::span<const uint8_t> m) {
    const auto f = fixed_of<OpenFixed>(m, "open");
    OpenCmd c;
    if (f.kind < int32_t(SplitKind::pipeline) || f.kind > int32_t(SplitKind::both)) fail("open command: split kind {} unknown", f.kind);
    c.kind = SplitKind(f.kind);
    c.stages = f.stages;
    c.n_ctx = f.n_ctx, c.n_batch = f.n_batch, c.n_threads = f.n_threads;
    c.kda_chunked = f.kda_chunked, c.mla_decompressed = f.mla_decompressed, c.timeout_s = f.timeout_s;
    c.micro_batch = f.micro_batch;
    c.cache_type = f.cache_type, c.cache_page_rows = f.cache_page_rows, c.tiled_min_keys = f.tiled_min_keys;
    if (f.balance < int32_t(Balance::bytes) || f.balance > int32_t(Balance::prefill)) fail("open command: balance {} unknown", f.balance);
    if (f.n_costs < 0 || uint64_t(f.n_costs) > (m.size() - sizeof f) / sizeof(uint64_t) || f.n_costs == 1)
        fail("open command: {} stage costs in {} bytes", f.n_costs, m.size());
    c.costs.by = Balance(f.balance);
    c.plan_digest = f.plan_digest;
    const size_t cost_bytes = size_t(f.n_costs) * sizeof(uint64_t);
    if (f.n_costs > 0) {
        std::vector<uint64_t> costs(size_t(f.n_costs));
        std::memcpy(costs.data(), m.data() + sizeof f, cost_bytes);
        c.costs.head = costs.back();
        c.costs.layer.assign(costs.begin(), costs.end() - 1);
    }
    if (f.device_len < 0 || uint64_t(f.device_len) > m.size() - sizeof f - cost_bytes)
        fail("open command: a device spec of {} bytes in {}", f.device_len, m.size());
    if (f.link < int32_t(Link::mpi) || f.link > int32_t(Link::automatic)) fail("open command: link {} unknown", f.link);
    c.n_gpu_layers = f.n_gpu_layers, c.n_cpu_moe = f.n_cpu_moe, c.cpu_moe = f.cpu_moe != 0, c.link = Link(f.link);
    c.shard_experts = f.shard_experts != 0;
    const char* tail = reinterpret_cast<const char*>(m.data()) + sizeof f + cost_bytes;
    c.device.assign(tail, size_t(f.device_len));
    c.model_path.assign(tail + f.device_len, m.size() - sizeof f - cost_bytes - size_t(f.device_len));
    return c;
}

ForwardCmd decode_forward(std::span<const uint8_t> m) {
    const auto f = fixed_of<ForwardFixed>(m, "forward");
    if (f.n <= 0 || m.size() != sizeof f + size_t(f.n) * sizeof(int32_t))
        fail("forward command: {} bytes for {} tokens", m.size(), f.n);
    ForwardCmd c;
    c.pos0 = f.pos0, c.want_all = f.want_all != 0;
    c.tokens.resize(size_t(f.n));
    std::memcpy(c.tokens.data(), m.data() + sizeof f, size_t(f.n) * sizeof(int32_t));
    return c;
}

}  // namespace kinfer::dist
