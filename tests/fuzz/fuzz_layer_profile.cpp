// libFuzzer target for layer profiles (`--layer-profile FILE`, written by `kinfer bench
// --layer-times`): any file must either load or throw kinfer::Error. One that loads must save
// and load back to the same numbers, check against the shipped tiny model (pass or throw
// kinfer::Error), and, when its layer count is the model's, balance every pipeline plan by
// either column without a crash, each layer owned by one stage. Crashes, hangs, sanitizer
// reports, other exceptions and broken round trips are bugs.
#include "dist/layer_profile.h"

#include "fuzz_util.h"

using namespace kinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string in = fuzz::scratch_path("layers.in"), out = fuzz::scratch_path("layers.out");
    static const auto model = model::Model::load(std::string(KINFER_TEST_DATA_DIR) + "/models/k3-tiny-a-Q4_K_M.gguf");
    fuzz::write_file(in, data, size);
    dist::LayerProfile p;
    if (!fuzz::tolerate([&] { p = dist::LayerProfile::load(in); })) return 0;
    if (p.decode_ns.size() != size_t(p.n_layer) + 1 || p.prefill_ns.size() != p.decode_ns.size()) __builtin_trap();
    p.save(out);
    const auto q = dist::LayerProfile::load(out);
    if (q.text() != p.text() || q.decode_ns != p.decode_ns || q.prefill_ns != p.prefill_ns || q.fingerprint != p.fingerprint)
        __builtin_trap();
    fuzz::tolerate([&] { p.check(*model, in); });
    if (p.n_layer != model->hparams().n_layer) return 0;
    for (const auto by : {dist::Balance::decode, dist::Balance::prefill}) {
        const dist::StageCosts c = p.costs(by);
        for (int ranks = 1; ranks <= p.n_layer; ++ranks) {
            const auto plan = dist::Plan::make(*model, dist::SplitKind::pipeline, ranks, 0, &c);
            for (int il = 0; il < p.n_layer; ++il)
                if (plan.layer_stage(il) < 0) __builtin_trap();
            fuzz::sink(dist::format_plan(plan, *model, &p));
        }
    }
    return 0;
}
