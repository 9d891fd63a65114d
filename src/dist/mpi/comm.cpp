#include "dist/mpi/comm.h"

#include "common/error.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace kinfer::dist {

namespace {

Comm* g_comm = nullptr;

bool launched_by_mpirun() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

const char* tag_name(int tag) {
    switch (tag) {
        case kTagCommand: return "command";
        case kTagResidual: return "residual";
        case kTagLogits: return "logits";
        case kTagSlots: return "expert outputs";
        case kTagStats: return "statistics";
        case kTagLink: return "link set-up";
    }
    return "message";
}

// Polls done() until it is true: for the first 2 ms it only yields the core between polls (a
// peer's answer mid-pass is usually that close, and a sleep would add its own latency to every
// hop), then sleeps 50 us growing to 1 ms, so a rank idle between commands leaves the cores to
// the busy ones. Calls on_timeout() once the deadline passes (timeout_s < 0: no deadline).
// Adds the seconds it took to waited.
template <class Done, class OnTimeout>
void poll(Done done, double timeout_s, OnTimeout on_timeout, double& waited_total) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    int sleep_us = 50;
    for (int i = 0; !done(); ++i) {
        const double waited = std::chrono::duration<double>(clock::now() - t0).count();
        if (timeout_s >= 0 && waited > timeout_s) on_timeout();
        if (waited < 2e-3) {
            std::this_thread::yield();
        } else {
            std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
            sleep_us = std::min(1000, sleep_us * 2);
        }
    }
    waited_total += std::chrono::duration<double>(clock::now() - t0).count();
}

}  // namespace

Comm* Comm::start(int* argc, char*** argv) {
    if (g_comm || !launched_by_mpirun()) return g_comm;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return nullptr;
    auto* c = new Comm;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &c->local_size_);
    MPI_Comm_free(&local);
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_Get_processor_name(name, &len);
    c->host_.assign(name, size_t(len));
    g_comm = c;
    return c;
}

Comm* Comm::get() { return g_comm; }

void Comm::finish() { MPI_Finalize(); }

void Comm::abort(const std::string& why) {
    std::fprintf(stderr, "kinfer: error: rank %d of %d (%s): %s\n", rank_, size_, host_.c_str(), why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
}

void Comm::send(int to, Tag tag, const void* data, size_t bytes) {
    if (bytes > size_t(INT32_MAX)) abort(fmt::format("a {} message of {} bytes is too large for one MPI send", tag_name(tag), bytes));
    MPI_Request req;
    MPI_Isend(data, int(bytes), MPI_BYTE, to, tag, MPI_COMM_WORLD, &req);
    poll([&] { int f = 0; MPI_Test(&req, &f, MPI_STATUS_IGNORE); return f != 0; }, timeout_s,
         [&] { abort(fmt::format("rank {} did not take the {} within {:.0f} s (stuck or gone)", to, tag_name(tag), timeout_s)); }, wait_s);
    bytes_sent += bytes;
}

std::vector<uint8_t> Comm::recv(int from, Tag tag, double timeout) {
    MPI_Status st;
    poll([&] { int f = 0; MPI_Iprobe(from, tag, MPI_COMM_WORLD, &f, &st); return f != 0; }, timeout,
         [&] { abort(fmt::format("no {} from rank {} within {:.0f} s (stuck or gone)", tag_name(tag), from, timeout)); }, wait_s);
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    std::vector<uint8_t> out(static_cast<size_t>(count));
    MPI_Recv(out.data(), count, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return out;
}

void Comm::recv_into(int from, Tag tag, void* data, size_t bytes, double timeout) {
    std::vector<uint8_t> m = recv(from, tag, timeout);
    if (m.size() != bytes) abort(fmt::format("the {} from rank {} has {} bytes, expected {}", tag_name(tag), from, m.size(), bytes));
    std::copy(m.begin(), m.end(), static_cast<uint8_t*>(data));
}

void Comm::all_gather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>& in, Tag tag,
                      const std::vector<int>& group) {
    std::vector<MPI_Request> reqs;
    std::vector<int> peer;   // the rank of each request
    for (int q : group) {
        if (q == rank_) continue;
        if (mine.size() > size_t(INT32_MAX) || in[size_t(q)].size() > size_t(INT32_MAX))
            abort(fmt::format("{} for rank {} too large for one MPI message", tag_name(tag), q));
        reqs.emplace_back();
        MPI_Irecv(in[size_t(q)].data(), int(in[size_t(q)].size()), MPI_BYTE, q, tag, MPI_COMM_WORLD, &reqs.back());
        reqs.emplace_back();
        MPI_Isend(mine.data(), int(mine.size()), MPI_BYTE, q, tag, MPI_COMM_WORLD, &reqs.back());
        peer.insert(peer.end(), {q, q});
        bytes_sent += mine.size();
    }
    // Names the ranks whose part has not arrived or been taken.
    auto silent = [&] {
        std::string who;
        for (size_t i = 0; i < reqs.size(); ++i) {
            int f = 0;
            MPI_Test(&reqs[i], &f, MPI_STATUS_IGNORE);
            const std::string q = std::to_string(peer[i]);
            if (!f && who.find(q) == std::string::npos) who += (who.empty() ? "" : ", ") + q;
        }
        return who;
    };
    poll([&] { int f = 0; MPI_Testall(int(reqs.size()), reqs.data(), &f, MPI_STATUSES_IGNORE); return f != 0; }, timeout_s,
         [&] { abort(fmt::format("no {} from rank {} within {:.0f} s (stuck or gone)", tag_name(tag), silent(), timeout_s)); }, wait_s);
}

}  // namespace kinfer::dist
