// An emulation of the few NCCL calls kinfer's NCCL link makes (src/dist/nccl/nccl_link.cpp),
// over MPI, for the link's test without a GPU: kinfer loads it instead of libnccl through
// KINFER_NCCL_LIBRARY, sees kinfer_nccl_emulation, and then runs the link on the simulated
// device, whose memory the host can read. Semantics kept: sends and receives queued between
// ncclGroupStart and ncclGroupEnd run together when the group ends (so two ranks may list a
// swap in either order); outside a group each runs at once. Every call completes before it
// returns, so the streams (there are none here) have nothing left to do; but ncclCommFinalize
// answers ncclInProgress and finishes at the next ncclCommGetAsyncError, as a non-blocking
// communicator's may, and ncclCommDestroy of a communicator not finalized ends the process with
// a message (NCCL tolerates it; the link must not rely on that: it finalizes, then destroys).
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr char kMagic[] = "kinfer-nccl-emulation";
constexpr int kTag = 7700;   // apart from kinfer's own MPI tags (dist/mpi/comm.h)

struct Comm {
    int rank = 0, nranks = 0;
    enum { open, finalizing, finalized } state = open;
};
struct Op {
    bool send;
    void* p;
    size_t bytes;
    int peer;
};

int g_depth = 0;
std::vector<Op> g_ops;

ncclResult_t flush() {
    std::vector<MPI_Request> reqs(g_ops.size());
    for (size_t i = 0; i < g_ops.size(); ++i) {
        const Op& o = g_ops[i];
        if (o.bytes > size_t(INT32_MAX)) return ncclInvalidArgument;
        if (o.send) MPI_Isend(o.p, int(o.bytes), MPI_BYTE, o.peer, kTag, MPI_COMM_WORLD, &reqs[i]);
        else MPI_Irecv(o.p, int(o.bytes), MPI_BYTE, o.peer, kTag, MPI_COMM_WORLD, &reqs[i]);
    }
    g_ops.clear();
    return MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE) == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

ncclResult_t queue(bool send, const void* p, size_t count, ncclDataType_t type, int peer, ncclComm_t comm) {
    const auto* c = reinterpret_cast<const Comm*>(comm);
    if (!c || type != ncclUint8 || peer < 0 || peer >= c->nranks) return ncclInvalidArgument;
    g_ops.push_back({send, const_cast<void*>(p), count, peer});
    return g_depth > 0 ? ncclSuccess : flush();
}

}  // namespace

extern "C" {

// What tells kinfer's link that this is the emulation.
__attribute__((visibility("default"))) int kinfer_nccl_emulation = 1;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    std::memset(id, 0, sizeof *id);
    std::memcpy(id->internal, kMagic, sizeof kMagic);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t*) {
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (std::memcmp(id.internal, kMagic, sizeof kMagic) != 0 || nranks != world || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    *comm = reinterpret_cast<ncclComm_t>(new Comm{rank, nranks});
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
    auto* c = reinterpret_cast<Comm*>(comm);
    *err = ncclSuccess;
    if (c && c->state == Comm::finalizing) {   // in progress once, then done
        *err = ncclInProgress;
        c->state = Comm::finalized;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    auto* c = reinterpret_cast<Comm*>(comm);
    if (!c || c->state != Comm::open) return ncclInvalidUsage;
    c->state = Comm::finalizing;
    return ncclInProgress;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    delete reinterpret_cast<Comm*>(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    auto* c = reinterpret_cast<Comm*>(comm);
    if (c && c->state != Comm::finalized) {
        std::fprintf(stderr, "nccl emulation: ncclCommDestroy of a communicator that was not finalized (state %d)\n",
                     int(c->state));
        std::abort();
    }
    delete c;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
    ++g_depth;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (g_depth == 0) return ncclInvalidUsage;
    return --g_depth == 0 ? flush() : ncclSuccess;
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
    return queue(true, buf, count, type, peer, comm);
}

ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
    return queue(false, buf, count, type, peer, comm);
}

const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }

}  // extern "C"
