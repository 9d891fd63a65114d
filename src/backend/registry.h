// The backends of one run: the CPU always (it owns the thread pool), and the devices that
// --device names, in order: the strict simulated one ("sim:SIZE[,GBps]", named sim0, sim1, ...)
// or, in a build with nvcc, a GPU ("cudaN", backend/cuda/cuda_backend.h; "cuda:local" is GPU N
// for the process that is rank N of an MPI job on its machine), or the CUDA backend on an
// emulated GPU ("emu-cuda[:SIZE]", named emu-cudaN, backend/cuda/emu/runtime.h: for tests). A
// cudaN on a machine without that GPU prints one line and adds nothing: the run stays on the CPU.
//
//   backend::Backends bk(n_threads);
//   bk.add_device("sim:512MiB");          // what --device sim:512MiB does
//   for (auto& line : bk.list()) puts(line.c_str());   // --list-devices
#pragma once
#include "backend/cpu_backend.h"
#include "runtime/device.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer::backend {

class Backends {
public:
    explicit Backends(int n_threads = 0);
    ~Backends();
    Backends(const Backends&) = delete;
    Backends& operator=(const Backends&) = delete;

    // Adds the device a --device value names; throws kinfer::Error with the accepted forms. A
    // cudaN this machine lacks adds nothing and returns the CPU (after one line on stderr).
    Backend& add_device(const std::string& spec);
    // A comma-separated list of them ("cuda0,cuda1", "sim:1GiB,25,sim:1GiB": a number after a
    // sim spec is its bandwidth), each added in order; what --device takes.
    void add_devices(const std::string& list);
    // The specs of the devices added, comma-separated again (what another rank is told to open).
    std::string specs() const;

    CpuBackend& cpu() { return *cpu_; }
    size_t n_devices() const { return devices_.size(); }
    // Backend::step_begin / step_end / step_abort on every device.
    void step_begin(int64_t n_tokens);
    void step_end();
    void step_abort();
    Backend* device(size_t i = 0) { return i < devices_.size() ? devices_[i].get() : nullptr; }
    // "CPU" / "cpu" or a device name ("sim0"); nullptr when none is called that.
    Backend* find(std::string_view name);
    // The copy-engine view of device i that the expert store carves its slot pool from.
    runtime::Device* expert_device(size_t i = 0);
    // The backend whose memory a runtime::Device is (nullptr for none of ours).
    Backend* backend_of(const runtime::Device* d);
    // One line per backend, for --list-devices (in a CUDA build: every GPU with its free memory).
    std::vector<std::string> list();

private:
    std::unique_ptr<CpuBackend> cpu_;
    std::vector<std::unique_ptr<Backend>> devices_;
    std::vector<std::string> specs_;   // by device
};

}  // namespace kinfer::backend
