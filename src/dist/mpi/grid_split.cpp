// Every --split as one grid of S pipeline stages x E expert shards (plan.h): rank r is stage
// r / E, shard r % E. pipeline is the grid S = ranks, E = 1; experts is S = 1, E = ranks; both
// is anything between.
//
// - Stage 0 embeds the chunk (each of its shards, from the same ids, gets the same bits).
// - A stage runs its layers [first, last). In a MoE layer each shard computes only its own
//   experts' (token, slot) rows of ys, already weighted, then the shards of the stage swap
//   their rows (an all-gather within the stage), so every shard holds all of ys and sums the
//   slots in selection order exactly as one process does. What moves is the expert outputs at
//   the latent width (K3: expert_latent_length): the inputs need not move, since every shard
//   computed the latent itself.
// - Shard e of a stage sends its residual (K3: the partial sum and every banked block sum,
//   Residual::to_bytes) to shard e of the next stage.
// - Shard 0 of the last stage runs the output head and sends the logits to rank 0.
// Every rank thus computes exactly what a single process computes for its part, so the logits
// are the same bits.
//
// How the bytes move (--dist-link): MPI through host memory, or NCCL between the GPUs' own
// memories (device_link.h). With NCCL the residual's header still goes over MPI, its rows go
// GPU to GPU; the expert rows are packed on the GPU (gather_rows), swapped and unpacked
// (scatter_weighted by 1, exact). Without NCCL a stage on a device stages both through the host. With several stages, --micro-batch keeps several pieces of a prefill chunk
// in flight (run()).
#include "backend/backend.h"
#include "dist/mpi/device_link.h"
#include "dist/mpi/rank_split.h"
#include "model/forward.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kinfer::dist {

namespace {

class GridSplit final : public RankSplit {
public:
    GridSplit(Comm& comm, const model::Model& m, SplitKind kind, int stages, const StageCosts* costs)
        : RankSplit(comm, m, kind, stages, costs) {
        const RankPart& p = mine();
        for (int e = 0; e < plan_.shards; ++e) stage_group_.push_back(plan_.rank_at(p.stage, e));
    }

    void open(const model::SessionOptions& o) override {
        RankSplit::open(o);
        link_open_ = false;   // every rank decides again at the session's first pass
    }
    void close() override {
        RankSplit::close();
        for (auto& [be, b] : scratch_) be->free(b);
        scratch_.clear();
        dlink_.reset();
        link_open_ = false;
    }

    bool shards_experts() const override { return plan_.shards > 1; }
    bool owns_expert(int, int e) const override { return plan_.expert_shard(e) == mine().shard; }

    void forward(const model::FwdEnv& env, const int32_t* tokens, bool want_all, float* host) override {
        try {
            const auto t0 = std::chrono::steady_clock::now();
            const double waited = comm_.wait_s;
            if (!link_open_) open_link(env);
            run(env, tokens, want_all, host);
            comm_.busy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - (comm_.wait_s - waited);
        } catch (const std::exception& e) {
            comm_.abort(fmt::format("{}: {}", describe(), e.what()));
        }
    }

    void gather_slots(int, const std::vector<int32_t>& sel, backend::Backend& be, float* ys, int64_t, int64_t,
                      int64_t lat) override {
        // Entries (t * K + slot) each shard computed, in entry order: every shard derives the
        // same lists from the same selections.
        std::vector<std::vector<int64_t>> of(static_cast<size_t>(comm_.size()));
        for (size_t i = 0; i < sel.size(); ++i) of[size_t(stage_group_[size_t(plan_.expert_shard(sel[i]))])].push_back(int64_t(i));
        if (be.host_memory()) return swap_rows_host(of, ys, lat);
        if (dlink_ && &be == link_be_) return swap_rows_device(of, be, ys, lat);
        // A device without the NCCL link: through host memory, the same messages as the host path.
        std::vector<float> host(sel.size() * size_t(lat));
        be.download(host.data(), ys, host.size() * sizeof(float));
        swap_rows_host(of, host.data(), lat);
        be.upload(ys, host.data(), host.size() * sizeof(float));
    }

private:
    std::vector<int> stage_group_;   // the ranks of this rank's stage, by shard
    bool link_open_ = false;         // the ranks have chosen the link for this session
    std::unique_ptr<DeviceLink> dlink_;   // NCCL, when chosen
    backend::Backend* link_be_ = nullptr; // the backend whose memory it moves (this rank's stage's)
    std::vector<std::pair<backend::Backend*, backend::Buffer>> scratch_;   // device buffers of the row swap

    // Device scratch i, at least `floats` long (grow-only, freed at close).
    float* scratch(size_t i, size_t floats, backend::Backend& be) {
        if (scratch_.size() <= i) scratch_.resize(i + 1, {nullptr, {}});
        auto& [owner, b] = scratch_[i];
        if (owner != &be || b.bytes < floats * sizeof(float)) {
            if (owner) owner->free(b);
            b = be.alloc(std::max<size_t>(floats, 1) * sizeof(float), "expert rows of a --split");
            owner = &be;
        }
        return reinterpret_cast<float*>(b.ptr);
    }

    // The expert rows of every shard of the stage into ys (host memory), over MPI.
    void swap_rows_host(const std::vector<std::vector<int64_t>>& of, float* ys, int64_t lat) {
        const int me = comm_.rank();
        const size_t row = size_t(lat) * sizeof(float);
        std::vector<std::vector<uint8_t>> in(static_cast<size_t>(comm_.size()));
        std::vector<uint8_t> packed(of[size_t(me)].size() * row);
        for (size_t j = 0; j < of[size_t(me)].size(); ++j)
            std::memcpy(packed.data() + j * row, ys + of[size_t(me)][j] * lat, row);
        for (int q : stage_group_)
            if (q != me) in[size_t(q)].resize(of[size_t(q)].size() * row);
        comm_.all_gather(packed, in, kTagSlots, stage_group_);
        for (int q : stage_group_) {
            if (q == me) continue;
            for (size_t j = 0; j < of[size_t(q)].size(); ++j)
                std::memcpy(ys + of[size_t(q)][j] * lat, in[size_t(q)].data() + j * row, row);
        }
    }

    // The same in the device's memory over the NCCL link: this shard's rows packed by
    // gather_rows, every peer's part received into its own buffer, then put in place
    // (backend::place_rows, exact).
    void swap_rows_device(const std::vector<std::vector<int64_t>>& of, backend::Backend& be, float* ys, int64_t lat) {
        const int me = comm_.rank();
        const size_t mine = of[size_t(me)].size();
        float* packed = scratch(0, mine * size_t(lat), be);
        if (mine) be.gather_rows(ys, lat, of[size_t(me)], 1, packed);
        std::vector<DeviceLink::Xfer> xs;
        std::vector<float*> in(static_cast<size_t>(comm_.size()), nullptr);
        size_t k = 1;
        for (int q : stage_group_) {
            if (q == me) continue;
            in[size_t(q)] = scratch(k++, of[size_t(q)].size() * size_t(lat), be);
            xs.push_back({true, packed, mine * size_t(lat) * sizeof(float), q});
            xs.push_back({false, in[size_t(q)], of[size_t(q)].size() * size_t(lat) * sizeof(float), q});
        }
        dlink_->run(xs, "expert rows");
        for (int q : stage_group_)
            if (q != me) backend::place_rows(be, in[size_t(q)], lat, of[size_t(q)], ys);
    }

    // The ranks choose the link together, before the session's first pass (so.link):
    // NCCL when asked for, or for auto when every rank's stage runs on a GPU that no other rank
    // uses (NCCL refuses two ranks of one communicator on one GPU); MPI otherwise.
    void open_link(const model::FwdEnv& env) {
        link_open_ = true;
        dlink_.reset();
        link_be_ = &env.pl.layer(mine().first_layer);
        if (link == Link::mpi || (link == Link::automatic && !have_nccl_link())) return;
        // Each rank's endpoint ("" and why when its stage cannot take the link), all-gathered.
        const LinkEndpoint mine_ep = link_endpoint(*link_be_);
        std::vector<uint8_t> rec(kEndpointBytes, 0);
        const std::string text = mine_ep.id.empty() ? "!" + mine_ep.why : mine_ep.id;
        std::memcpy(rec.data(), text.data(), std::min(text.size(), kEndpointBytes - 1));
        std::vector<int> all(static_cast<size_t>(comm_.size()));
        for (int q = 0; q < comm_.size(); ++q) all[size_t(q)] = q;
        std::vector<std::vector<uint8_t>> in(all.size(), std::vector<uint8_t>(kEndpointBytes));
        in[size_t(comm_.rank())] = rec;
        comm_.all_gather(rec, in, kTagLink, all);
        std::string problem;
        for (int q = 0; q < comm_.size() && problem.empty(); ++q) {
            const std::string a(reinterpret_cast<const char*>(in[size_t(q)].data()));
            if (a.empty() || a[0] == '!') {
                problem = fmt::format("rank {} cannot use NCCL: {}", q, a.empty() ? "no endpoint" : a.substr(1));
                break;
            }
            for (int r = 0; r < q; ++r)
                if (a == reinterpret_cast<const char*>(in[size_t(r)].data()))
                    problem = fmt::format("ranks {} and {} are on the same GPU ({}), and NCCL takes one rank per GPU", r, q, a);
        }
        if (!problem.empty()) {
            if (link == Link::nccl) comm_.abort("--dist-link nccl: " + problem);
            return;   // auto: MPI, on every rank alike (they all saw the same records)
        }
        dlink_ = open_nccl_link(comm_, *link_be_);
    }

    const RankPart& mine() const { return plan_.part[size_t(comm_.rank())]; }
    int head_rank() const { return plan_.rank_at(plan_.stages - 1, 0); }

    // The residual over the NCCL link: its header (n, d, banked blocks) over MPI as
    // Residual::to_bytes has it, then p and every block GPU to GPU.
    void send_residual(model::Residual& res, const model::FwdEnv& env, int to) {
        res.move_to(*link_be_, env.ws_of(*link_be_));
        const int64_t head[3] = {res.n, res.d, int64_t(res.stack.size())};
        comm_.send(to, kTagResidual, head, sizeof head);
        const size_t bytes = size_t(res.n * res.d) * sizeof(float);
        std::vector<DeviceLink::Xfer> xs{{true, res.p, bytes, to}};
        for (float* b : res.stack) xs.push_back({true, b, bytes, to});
        dlink_->run(xs, "residual");
    }
    model::Residual recv_residual(const std::vector<uint8_t>& head_bytes, backend::Backend& be, backend::Workspace& ws, int from) {
        int64_t head[3];
        if (head_bytes.size() != sizeof head) fail("the residual header from rank {} has {} bytes, expected {}", from, head_bytes.size(), sizeof head);
        std::memcpy(head, head_bytes.data(), sizeof head);
        if (head[0] <= 0 || head[1] <= 0 || head[2] < 0 || head[2] > 4096)
            fail("the residual header from rank {}: {} x {}, {} blocks", from, head[0], head[1], head[2]);
        if (&be != link_be_) fail("the residual arrives on {}, the link is on {}", be.name(), link_be_->name());
        model::Residual r;
        r.be = &be, r.n = head[0], r.d = head[1];
        const size_t bytes = size_t(r.n * r.d) * sizeof(float);
        r.p = ws.get(size_t(r.n * r.d));
        std::vector<DeviceLink::Xfer> xs{{false, r.p, bytes, from}};
        for (int64_t i = 0; i < head[2]; ++i) {
            r.stack.push_back(ws.get(size_t(r.n * r.d)));
            xs.push_back({false, r.stack.back(), bytes, from});
        }
        dlink_->run(xs, "residual");
        return r;
    }

    std::string describe() const {
        const RankPart& p = mine();
        std::string s = fmt::format("stage {} (layers {}-{})", p.stage, p.first_layer, p.last_layer - 1);
        if (plan_.shards > 1) s += fmt::format(", expert shard {} (experts {}-{})", p.shard, p.first_expert, p.last_expert - 1);
        return s;
    }

    // The chunk in pieces of micro_batch tokens (one piece when 0 or with a single stage). Each
    // layer sees the pieces in order, so a piece's result is what one process computes with
    // -b micro_batch. The head rank keeps the logits of every piece and sends them once at the
    // end: rank 0 then never waits on it while the pieces are still going round.
    void run(const model::FwdEnv& env, const int32_t* tokens, bool want_all, float* host) {
        const int r = comm_.rank(), head = head_rank();
        const int64_t V = env.hp.n_vocab;
        const int64_t piece = micro_batch > 0 && plan_.stages > 1 ? std::min(micro_batch, env.n) : env.n;
        const int64_t rows = want_all ? env.n : 1;
        std::vector<float> lg(r == head && r != 0 ? size_t(rows * V) : 0);
        float* out = r == 0 ? host : r == head ? lg.data() : nullptr;
        for (int64_t off = 0; off < env.n; off += piece) {
            model::FwdEnv e = env;
            e.pos0 = env.pos0 + off, e.n = std::min(piece, env.n - off);
            const bool final_piece = off + e.n == env.n;
            // Rows of this piece whose logits are wanted, written at `out + its row`.
            const int64_t want = want_all ? e.n : final_piece ? 1 : 0;
            // A rank that keeps no logits has out == null: no offset is applied to it.
            step(e, tokens + off, want, out ? out + (want_all ? off * V : 0) : nullptr);
        }
        if (r == head && r != 0) comm_.send(0, kTagLogits, lg.data(), lg.size() * sizeof(float));
        // Rank 0 waits on the whole pipeline, so longer than a rank waits on its neighbour: the
        // rank next to a silent one is the first to give up, and it names the silent one.
        if (r == 0 && head != 0)
            comm_.recv_into(head, kTagLogits, host, size_t(rows * V) * sizeof(float), 2 * comm_.timeout_s + 1);
    }

    // One piece through this rank's layers; the head rank writes the logits of its last `want`
    // rows to out.
    void step(const model::FwdEnv& env, const int32_t* tokens, int64_t want, float* out) {
        const RankPart& p = mine();
        model::Residual res;
        if (p.stage == 0) {
            res = model::embed(env, tokens);
        } else {
            const int from = plan_.rank_at(p.stage - 1, p.shard);
            const std::vector<uint8_t> in = comm_.recv(from, kTagResidual, comm_.timeout_s);
            backend::Backend& be = env.pl.layer(p.first_layer);
            res = dlink_ ? recv_residual(in, be, env.ws_of(be), from) : model::Residual::from_bytes(in, be, env.ws_of(be));
            if (res.n != env.n) fail("the residual from rank {} has {} rows, this piece {}", from, res.n, env.n);
        }
        model::forward_layers(env, p.first_layer, p.last_layer, res, {});
        if (p.stage + 1 < plan_.stages) {
            const int to = plan_.rank_at(p.stage + 1, p.shard);
            if (dlink_) return send_residual(res, env, to);
            const std::vector<uint8_t> bytes = res.to_bytes();
            comm_.send(to, kTagResidual, bytes.data(), bytes.size());
        } else if (p.head && want > 0) {
            model::output_logits(env, model::final_stream(env, res, {}), env.n - want, out);
        }
    }
};

}  // namespace

std::unique_ptr<RankSplit> make_split(Comm& comm, const model::Model& m, SplitKind kind, int64_t micro_batch, int stages,
                                      const StageCosts* costs) {
    auto s = std::make_unique<GridSplit>(comm, m, kind, stages, costs);
    s->micro_batch = micro_batch;
    return s;
}

}  // namespace kinfer::dist
