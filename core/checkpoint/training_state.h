#pragma once
// What a checkpoint holds besides the step: weights and optimizer state, on the host, in the
// model's parameter order (fc1.weight, fc1.bias, fc2.weight, …), whatever the strategy sharded or
// split — so a run can resume under another strategy or number of devices.
#include <cstdint>
#include <string>
#include <vector>

#include "core/nn/model.h"
#include "core/nn/optimizer.h"

namespace scalelab {

struct TrainingState {
  HostWeights weights;
  int64_t optimizer_steps = 0;
  // Per parameter, its state tensors: none (plain sgd), one (sgd momentum) or two (adam m, v).
  std::vector<std::vector<std::vector<float>>> optimizer;
  double loss_scale = 0;  // fp16 dynamic loss scaler (0: none)
  int64_t scaler_good_steps = 0;
};

// The one check that a state fits the model and optimizer it is about to be loaded into: the same
// layer sizes, a state per parameter, each with the optimizer's number of tensors of the
// parameter's size. Throws UsageError("checkpoint", …) naming `source` (the file) and the option to
// fix. Strategies may then take the state apart without checking it again.
void validate_resume(const TrainingState& state, const ModelSpec& model, const OptimizerConfig& optimizer,
                     const std::string& source);

}  // namespace scalelab
