#include "backend/registry.h"

#include "backend/sim_backend.h"
#include "common/error.h"

#include <cstdio>
#include <algorithm>
#include <cstdlib>

#include "backend/cuda/open.h"

namespace kinfer::backend {

Backends::Backends(int n_threads) : cpu_(std::make_unique<CpuBackend>(n_threads)) {}

Backends::~Backends() = default;

namespace {

// This process's rank among the ranks of an MPI job on its machine (0 when not launched so), as
// the launchers put it in the environment: `--device cuda:local` gives each rank its own GPU.
int local_rank() {
    for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"})
        if (const char* s = std::getenv(v)) return std::atoi(s);
    return 0;
}

}  // namespace

Backend& Backends::add_device(const std::string& spec) {
    if (spec.rfind("sim", 0) == 0) {
        const std::string name = "sim" + std::to_string(devices_.size());
        devices_.push_back(std::make_unique<SimBackend>(runtime::parse_sim_device(spec), cpu_->shared_pool(), name));
        specs_.push_back(spec);
        return *devices_.back();
    }
    if (spec.rfind("emu-cuda", 0) == 0) {
        // The CUDA backend's host code on an emulated GPU (backend/cuda/emu/runtime.h): slow,
        // for tests of what a GPU run does beyond the kernels' arithmetic.
        devices_.push_back(cuda_emu::open_device(spec, nullptr));
        specs_.push_back(spec);
        return *devices_.back();
    }
    if (spec.rfind("cuda", 0) == 0) {
#ifdef KINFER_HAVE_CUDA
        std::string why;
        if (auto be = cuda::open_device(spec == "cuda:local" ? "cuda" + std::to_string(local_rank()) : spec, &why)) {
            devices_.push_back(std::move(be));
            specs_.push_back(spec);
            return *devices_.back();
        }
        // No GPU at run time: one line, and the run goes on on the CPU. Unless the caller must
        // have the device (KINFER_REQUIRE_DEVICE=1: tests/gpu's checks, which would otherwise
        // compare the CPU with itself and pass).
        if (const char* r = std::getenv("KINFER_REQUIRE_DEVICE"); r && *r && std::string(r) != "0")
            fail("--device {}: {} (KINFER_REQUIRE_DEVICE is set: no running on the CPU instead)", spec, why);
        std::fprintf(stderr, "kinfer: --device %s: %s; running on the CPU\n", spec.c_str(), why.c_str());
        return *cpu_;
#else
        fail("--device {}: this kinfer was built without the CUDA backend (devices here: sim:SIZE[,GBps])", spec);
#endif
    }
    fail("--device '{}': expected sim:SIZE[,GBps] (a strict simulated device, e.g. sim:2GiB,25), cudaN, or emu-cuda[:SIZE] "
         "(the CUDA backend on an emulated GPU, for tests)", spec);
}

void Backends::add_devices(const std::string& list) {
    std::vector<std::string> specs;
    size_t at = 0;
    while (at <= list.size()) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string piece = list.substr(at, comma - at);
        const bool starts_spec = piece.rfind("sim", 0) == 0 || piece.rfind("cuda", 0) == 0 || piece.rfind("emu-cuda", 0) == 0;
        if (!starts_spec && !specs.empty() && specs.back().rfind("sim", 0) == 0) specs.back() += "," + piece;
        else specs.push_back(piece);
        at = comma + 1;
    }
    for (const std::string& s : specs) add_device(s);
}

void Backends::step_begin(int64_t n_tokens) {
    for (auto& d : devices_) d->step_begin(n_tokens);
}

void Backends::step_end() {
    for (auto& d : devices_) d->step_end();
}

void Backends::step_abort() {
    for (auto& d : devices_) d->step_abort();
}

std::string Backends::specs() const {
    std::string out;
    for (const std::string& s : specs_) out += (out.empty() ? "" : ",") + s;
    return out;
}

Backend* Backends::find(std::string_view name) {
    if (name == "CPU" || name == "cpu") return cpu_.get();
    for (auto& d : devices_)
        if (d->name() == name) return d.get();
    return nullptr;
}

runtime::Device* Backends::expert_device(size_t i) {
    if (i >= devices_.size()) return nullptr;
    if (auto* s = dynamic_cast<SimBackend*>(devices_[i].get())) return &s->device();
#ifdef KINFER_HAVE_CUDA
    if (auto* d = cuda::expert_device(*devices_[i])) return d;
#endif
    return cuda_emu::expert_device(*devices_[i]);
}

Backend* Backends::backend_of(const runtime::Device* d) {
    for (size_t i = 0; i < devices_.size(); ++i)
        if (expert_device(i) == d) return devices_[i].get();
    return nullptr;
}

std::vector<std::string> Backends::list() {
    std::vector<std::string> out{cpu_->describe()};
    for (auto& d : devices_)
        if (d->name().rfind("cuda", 0) != 0) out.push_back(d->describe());
#ifdef KINFER_HAVE_CUDA
    for (std::string& line : cuda::list_devices()) out.push_back(std::move(line));   // every GPU, opened or not
#endif
    return out;
}

}  // namespace kinfer::backend
