// A loaded model: the mmap'ed GGUF, its hyper-parameters and weight views. Immutable after
// load, so several sessions (sequences) can share one Model.
#pragma once
#include "gguf/reader.h"
#include "model/hparams.h"
#include "model/weights.h"

#include <memory>
#include <string>

namespace kinfer::model {

class Model {
public:
    // Opens and validates the file (throws kinfer::Error naming the file and the problem).
    static std::unique_ptr<Model> load(const std::string& path);

    const HParams& hparams() const { return hp_; }
    const Weights& weights() const { return w_; }
    const gguf::File& file() const { return *file_; }
    const std::string& path() const { return file_->path(); }

    // "kimi-k3 8L 256d" style one-liner, and the dominant weight type ("Q4_K_M"-like summary).
    std::string describe() const;
    std::string type_summary() const;
    // A hash of the hyper-parameters and the tensor table (names, types, shapes, offsets) and
    // the file size: files that save what a run of this model measured or computed (session
    // states, layer profiles) carry it, so one from another model or quantization is refused.
    uint64_t fingerprint() const;

private:
    std::unique_ptr<gguf::File> file_;
    HParams hp_;
    Weights w_;
};

}  // namespace kinfer::model
