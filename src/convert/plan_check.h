// The file convert is about to write, read back through the model loader's rules before a byte
// is written: its metadata must give hyper-parameters model::load_hparams accepts, and the
// planned tensors must be what model/tensor_list.h asks of those hyper-parameters (every
// required tensor there, every shape right). The converter keeps no list of tensor names of its
// own, so a file it writes is one kinfer (and llama.cpp, whose rules the list follows) loads.
#pragma once
#include "convert/hf_config.h"
#include "convert/kv_list.h"
#include "convert/tensor_plan.h"

namespace kinfer::convert {

// Throws kinfer::Error naming plan.source and the checkpoint tensor a missing one comes from.
void check_plan_loads(const Plan& plan, const KvList& kv, const HfConfig& cfg);

}  // namespace kinfer::convert
