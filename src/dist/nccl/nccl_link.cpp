// The NCCL link of --split (device_link.h): the residual and the expert rows go from one GPU's
// memory to another's with ncclSend / ncclRecv on the backend's compute stream, so they follow
// the kernels that wrote them and precede the ones that read them, with no host copy.
//
// - libnccl is opened with dlopen when a run asks for the link, as cuBLAS is (blas.cu): linking
//   it would cost every kinfer start its load time. KINFER_NCCL_LIBRARY names another library
//   with NCCL's API; tests load an emulation over MPI that way (tests/dist/nccl_emu.cpp), which
//   exports kinfer_nccl_emulation and then also serves backends whose memory the host can read
//   (the simulated device), so the link's code runs without a GPU.
// - The communicator is non-blocking (config.blocking = 0): every call returns at once and the
//   link polls it, so a silent or dead peer ends the job after Comm::timeout_s with a message
//   (ncclCommAbort, then Comm::abort) instead of a hang.
// - Rank 0 makes the unique id and sends it to every rank over MPI (the bootstrap NCCL asks for).
#include "backend/backend.h"
#include "common/error.h"
#include "dist/mpi/device_link.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>

namespace kinfer::dist {

namespace {

// The NCCL entry points the link uses, resolved from the opened library.
struct NcclApi {
    decltype(&ncclGetUniqueId) get_unique_id = nullptr;
    decltype(&ncclCommInitRankConfig) init_rank_config = nullptr;
    decltype(&ncclCommGetAsyncError) async_error = nullptr;
    decltype(&ncclCommAbort) abort = nullptr;
    decltype(&ncclCommFinalize) finalize = nullptr;
    decltype(&ncclCommDestroy) destroy = nullptr;
    decltype(&ncclGroupStart) group_start = nullptr;
    decltype(&ncclGroupEnd) group_end = nullptr;
    decltype(&ncclSend) send = nullptr;
    decltype(&ncclRecv) recv = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
    bool emulation = false;   // the test emulation (host memory, no stream)
    std::string path;
};

const NcclApi& api() {
    static const NcclApi a = [] {
        NcclApi r;
        const char* env = std::getenv("KINFER_NCCL_LIBRARY");
        const std::string so = "libnccl.so." + std::to_string(NCCL_MAJOR);
        void* lib = nullptr;
        if (env && *env) {
            r.path = env;
            lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        } else {
            r.path = so;
            lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!lib) lib = dlopen((std::string(KINFER_NCCL_LIB_DIR) + "/" + so).c_str(), RTLD_NOW | RTLD_LOCAL);
        }
        if (!lib) fail("--dist-link nccl: cannot open {} ({}); NCCL comes with the CUDA toolkit", r.path, dlerror());
        auto sym = [&](auto& f, const char* name) {
            f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
            if (!f) fail("--dist-link nccl: {} has no {}", r.path, name);
        };
        sym(r.get_unique_id, "ncclGetUniqueId");
        sym(r.init_rank_config, "ncclCommInitRankConfig");
        sym(r.async_error, "ncclCommGetAsyncError");
        sym(r.abort, "ncclCommAbort");
        sym(r.finalize, "ncclCommFinalize");
        sym(r.destroy, "ncclCommDestroy");
        sym(r.group_start, "ncclGroupStart");
        sym(r.group_end, "ncclGroupEnd");
        sym(r.send, "ncclSend");
        sym(r.recv, "ncclRecv");
        sym(r.error_string, "ncclGetErrorString");
        r.emulation = dlsym(lib, "kinfer_nccl_emulation") != nullptr;
        return r;
    }();
    return a;
}

class NcclLink final : public DeviceLink {
public:
    NcclLink(Comm& comm, backend::Backend& be) : comm_(comm), be_(be), api_(api()) {
        device_ = be.native_device();
        stream_ = static_cast<cudaStream_t>(be.native_stream());
        // The emulation serves the simulated device too (its memory is the host's).
        const bool usable = device_ >= 0 || (api_.emulation && !be.host_memory());
        if (!usable)
            fail("--dist-link nccl: this rank's layers run on {}, not on a GPU (-ngl and --device cudaN put them there)", be.name());
        if (device_ >= 0) check_cuda(cudaSetDevice(device_), "cudaSetDevice");
        ncclUniqueId id{};
        if (comm_.rank() == 0) {
            check(api_.get_unique_id(&id), "ncclGetUniqueId");
            for (int q = 1; q < comm_.size(); ++q) comm_.send(q, kTagLink, &id, sizeof id);
        } else {
            comm_.recv_into(0, kTagLink, &id, sizeof id, comm_.timeout_s);
        }
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclResult_t r = api_.init_rank_config(&nccl_, comm_.size(), id, comm_.rank(), &config);
        if (r != ncclSuccess && r != ncclInProgress) check(r, "ncclCommInitRankConfig");
        settle("the communicator's set-up");
    }

    // Finalize, then destroy (NCCL's order): finalize flushes what the communicator still has in
    // flight and takes its leave of the peers, destroy only frees this side. On the non-blocking
    // communicator finalize finishes in the background: polled here up to Comm::timeout_s. A
    // destructor does not throw, so a failure or a peer that never finishes gets ncclCommAbort
    // and a line on stderr instead of the job's end.
    ~NcclLink() override {
        if (!nccl_) return;
        ncclResult_t r = api_.finalize(nccl_);
        using clock = std::chrono::steady_clock;
        const auto t0 = clock::now();
        while (r == ncclInProgress) {
            ncclResult_t st = ncclSuccess;
            if (const ncclResult_t q = api_.async_error(nccl_, &st); q != ncclSuccess) {
                r = q;   // the query itself failed: its error is the one to report
                break;
            }
            r = st;
            if (r != ncclInProgress) break;
            if (comm_.timeout_s >= 0 && std::chrono::duration<double>(clock::now() - t0).count() > comm_.timeout_s) break;
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        if (r == ncclSuccess) {
            api_.destroy(nccl_);
        } else {
            std::fprintf(stderr, "kinfer: rank %d: the NCCL link did not finalize (%s): aborted\n", comm_.rank(),
                         r == ncclInProgress ? "timed out" : api_.error_string(r));
            api_.abort(nccl_);
        }
    }

    const char* name() const override { return "nccl"; }

    void run(std::span<const Xfer> xs, const char* what) override {
        if (device_ >= 0) check_cuda(cudaSetDevice(device_), "cudaSetDevice");
        ncclResult_t r = api_.group_start();
        if (r != ncclSuccess) check(r, "ncclGroupStart");
        for (const Xfer& x : xs) {
            if (x.bytes == 0) continue;
            r = x.send ? api_.send(x.p, x.bytes, ncclUint8, x.peer, nccl_, stream_)
                       : api_.recv(x.p, x.bytes, ncclUint8, x.peer, nccl_, stream_);
            if (r != ncclSuccess && r != ncclInProgress) check(r, x.send ? "ncclSend" : "ncclRecv");
            if (x.send) comm_.bytes_sent += x.bytes;
        }
        r = api_.group_end();
        if (r != ncclSuccess && r != ncclInProgress) check(r, "ncclGroupEnd");
        settle(what);
        // Then the stream: the transfers are queued on it behind the kernels before them.
        if (stream_) wait([&] { const cudaError_t e = cudaStreamQuery(stream_);
                                if (e != cudaSuccess && e != cudaErrorNotReady) check_cuda(e, "cudaStreamQuery");
                                return e == cudaSuccess; }, what);
    }

private:
    Comm& comm_;
    backend::Backend& be_;
    const NcclApi& api_;
    int device_ = -1;
    cudaStream_t stream_ = nullptr;
    ncclComm_t nccl_ = nullptr;

    [[noreturn]] void die(const std::string& why) {
        if (nccl_) api_.abort(nccl_);   // frees the peers' side of every transfer in flight
        nccl_ = nullptr;
        comm_.abort(why);
    }
    void check(ncclResult_t r, const char* call) {
        if (r != ncclSuccess) die(fmt::format("{} on {}: {} ({})", call, be_.name(), api_.error_string(r), api_.path));
    }
    void check_cuda(cudaError_t e, const char* call) {
        if (e != cudaSuccess) die(fmt::format("{} on {}: {}", call, be_.name(), cudaGetErrorString(e)));
    }
    // Polls done() (it also checks the communicator's error state) until it holds, or ends the
    // job after Comm::timeout_s.
    template <class Done>
    void wait(Done done, const char* what) {
        using clock = std::chrono::steady_clock;
        const auto t0 = clock::now();
        for (int i = 0;; ++i) {
            ncclResult_t st = ncclSuccess;
            check(api_.async_error(nccl_, &st), "ncclCommGetAsyncError");
            if (st != ncclSuccess && st != ncclInProgress) check(st, what);
            if (st == ncclSuccess && done()) break;
            const double s = std::chrono::duration<double>(clock::now() - t0).count();
            if (comm_.timeout_s >= 0 && s > comm_.timeout_s)
                die(fmt::format("{} over NCCL did not finish within {:.0f} s (a peer is stuck or gone)", what, comm_.timeout_s));
            if (i > 200) std::this_thread::sleep_for(std::chrono::microseconds(50));
            else std::this_thread::yield();
        }
        comm_.wait_s += std::chrono::duration<double>(clock::now() - t0).count();
    }
    // Until the communicator has no call in progress (a non-blocking communicator's calls
    // return ncclInProgress and finish in the background).
    void settle(const char* what) { wait([] { return true; }, what); }
};

}  // namespace

bool have_nccl_link() { return true; }

LinkEndpoint link_endpoint(backend::Backend& be) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const NcclApi* a = nullptr;
    try {
        a = &api();
    } catch (const std::exception& e) {
        return {"", e.what()};
    }
    if (be.native_device() >= 0) {
        char bus[64] = {};
        if (cudaDeviceGetPCIBusId(bus, sizeof bus, be.native_device()) != cudaSuccess)
            return {"", fmt::format("no PCI bus id for {}", be.name())};
        return {fmt::format("{}/{}", host, bus), ""};
    }
    // The emulation moves host-readable memory: each process is its own endpoint.
    if (a->emulation && !be.host_memory()) return {fmt::format("{}/emulated-{}", host, getpid()), ""};
    return {"", fmt::format("its layers run on {}, not on a GPU (-ngl and --device cudaN put them there)", be.name())};
}

std::unique_ptr<DeviceLink> open_nccl_link(Comm& comm, backend::Backend& be) { return std::make_unique<NcclLink>(comm, be); }

}  // namespace kinfer::dist
