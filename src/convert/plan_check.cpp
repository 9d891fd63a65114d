#include "convert/plan_check.h"

#include "common/error.h"
#include "convert/hf_names.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/hparams.h"
#include "model/tensor_list.h"

#include <map>
#include <memory>

namespace kinfer::convert {

void check_plan_loads(const Plan& plan, const KvList& kv, const HfConfig& cfg) {
    // The metadata as the file will carry it, parsed by the reader and the loader. The Writer
    // only holds it: nothing is created on disk without a tensor byte or finish().
    gguf::Writer w(plan.source + ".planned.gguf");
    kv.apply(w);
    const std::vector<uint8_t> img = w.metadata_image();
    model::HParams hp;
    try {
        const auto f = gguf::File::from_memory(img.data(), img.size(), "the planned GGUF metadata");
        hp = model::load_hparams(*f);
    } catch (const Error& e) {
        fail("{}: the GGUF metadata convert would write does not load: {}", plan.source, e.what());
    }

    std::map<std::string, const PlanTensor*> planned;
    for (const auto& t : plan.tensors) planned[t.name] = &t;
    const std::string prefix = cfg.arch == ModelArch::KimiK3 ? "language_model." : "";
    auto has = [&](const std::string& n) { return planned.count(n) != 0; };
    model::for_each_tensor(hp, has, [&](const model::TensorSpec& s) {
        const auto it = planned.find(s.name);
        if (it == planned.end()) {
            if (s.required)
                fail("{}: tensor '{}' is missing (needed for GGUF tensor '{}')", plan.source,
                     prefix + hf_source_hint(s.name), s.name);
            return;
        }
        const PlanTensor& t = *it->second;
        if (!model::shape_matches(s, t.ne, t.n_dims))
            fail("{}: GGUF tensor '{}' would have shape {}; the model's hyper-parameters need {}", plan.source, s.name,
                 t.shape_str(), model::shape_str(s.shape));
    });
}

}  // namespace kinfer::convert
