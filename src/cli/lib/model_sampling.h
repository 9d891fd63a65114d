// The sampling settings a GGUF recommends (llama.cpp's general.sampling.* keys, which `kinfer
// convert` writes from a checkpoint's generation_config.json): used for every setting the command
// line leaves at its default, as llama.cpp does (a flag > the model's value > the built-in default).
#pragma once
#include "gguf/reader.h"
#include "text/sampler.h"

#include <string>

namespace CLI {
class App;
}

namespace kinfer::cli {

// Which sampling flags the command line gave (after parsing).
struct SamplingGiven {
    bool temp = false, top_k = false, top_p = false, min_p = false, repeat_penalty = false, repeat_last_n = false;
};
SamplingGiven sampling_flags_given(const CLI::App& app);

// Applies the model's general.sampling.temp / top_k / top_p / min_p / penalty_repeat /
// penalty_last_n to p where `given` says the flag was not passed. The file is untrusted: a key of
// a non-numeric type or a value outside the flag's range is not used, and named in `warnings`
// (one line each). Returns what was taken ("temp 0.3, top_k 20"), empty when nothing.
std::string apply_model_sampling(const gguf::File& f, const SamplingGiven& given, text::SamplerParams& p,
                                 std::string* warnings);

}  // namespace kinfer::cli
