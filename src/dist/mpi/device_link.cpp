// A kinfer built without NCCL (no CUDA toolkit, or no nccl.h in it): --dist-link nccl says so.
// With NCCL, dist/nccl/nccl_link.cpp provides these instead.
#ifndef KINFER_HAVE_NCCL
#include "dist/mpi/device_link.h"

#include "common/error.h"

namespace kinfer::dist {

bool have_nccl_link() { return false; }

LinkEndpoint link_endpoint(backend::Backend&) { return {"", "this kinfer was built without NCCL"}; }

std::unique_ptr<DeviceLink> open_nccl_link(Comm&, backend::Backend&) {
    fail("--dist-link nccl: this kinfer was built without NCCL (it needs the CUDA toolkit's nccl.h at build time)");
}

}  // namespace kinfer::dist
#endif
