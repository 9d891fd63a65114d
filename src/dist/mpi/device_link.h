// Moving buffers that live in a GPU's memory between the ranks of a --split without a trip
// through host memory: the residual from stage to stage and the expert rows within a stage.
// The one implementation is NCCL's (dist/nccl/nccl_link.cpp, --dist-link nccl); MPI moves
// host bytes (comm.h), which is what --dist-link mpi does for every backend.
#pragma once
#include "dist/mpi/comm.h"

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace kinfer::backend {
class Backend;
}

namespace kinfer::dist {

class DeviceLink {
public:
    // One send or receive of `bytes` at p, in the memory of the backend the link was opened on.
    struct Xfer {
        bool send = false;
        void* p = nullptr;
        size_t bytes = 0;
        int peer = 0;      // the other rank
    };
    virtual ~DeviceLink() = default;
    virtual const char* name() const = 0;
    // Runs the transfers as one group (each rank of a pair may list them in any order) and
    // returns once they are complete. `what` names them in errors; a peer that is gone or
    // silent for Comm::timeout_s ends the job (Comm::abort), never hangs it.
    virtual void run(std::span<const Xfer> xs, const char* what) = 0;
};

// True when this kinfer was built with the NCCL link.
bool have_nccl_link();
// What identifies this rank's end of an NCCL link: "host/PCI bus id" of the GPU behind be (two
// ranks with the same one cannot share a communicator), or an empty id and why be cannot take
// the link (not a GPU, libnccl missing). Ranks exchange these in records of kEndpointBytes.
struct LinkEndpoint {
    std::string id, why;
};
LinkEndpoint link_endpoint(backend::Backend& be);
inline constexpr size_t kEndpointBytes = 256;
// The NCCL link of this rank over every rank of comm, on backend be (a GPU; its memory and its
// compute queue). Collective: every rank calls it in the same order. Throws kinfer::Error when
// this kinfer has no NCCL link, libnccl cannot be opened, or be is not a GPU.
std::unique_ptr<DeviceLink> open_nccl_link(Comm& comm, backend::Backend& be);

}  // namespace kinfer::dist
