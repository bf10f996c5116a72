#include "strategies/registry.h"

#include "core/error.h"
#include "core/nn/optimizer.h"

namespace scalelab {

const std::vector<StrategyInfo>& strategy_registry() {
  static const std::vector<StrategyInfo> registry = {
      {"single", "the whole model on one device: the reference every strategy is checked against", make_single},
      {"multiprocessing", "Hogwild: N processes, the parameters in shared memory, lock-free asynchronous updates", make_multiprocessing},
      {"data-parallel", "DataParallel: one controller scatters the batch, replicates the model, gathers outputs and sums gradients on device 0", make_data_parallel},
      {"model-parallel", "layers split over devices, activations copied between them; the waiting devices stand idle", make_model_parallel},
      {"pipeline", "stages on ranks, micro-batches flowing through them; GPipe or 1F1B schedule", make_pipeline, 1},
      {"ddp", "DistributedDataParallel: a replica per rank, bucketed gradient all-reduce overlapping backward", make_ddp, 1},
      {"ddp-mp", "DDP whose replicas each span two devices (model parallel inside, DDP across)", make_ddp_mp, 2},
      {"zero", "ZeroRedundancyOptimizer: data parallel with the optimizer state (stage 2: gradients too) sharded over ranks", make_zero, 1},
  };
  return registry;
}

LossScaler make_loss_scaler(const TrainConfig& config) {
  LossScalerOptions o;
  o.init_scale = config.amp_initial_scale;
  return LossScaler(config.amp_dtype(), o);
}

TrainingState whole_model_state(Mlp& model, Optimizer& optimizer, const LossScaler& scaler) {
  TrainingState s;
  s.weights = model.download();
  s.optimizer_steps = optimizer.steps_taken();
  s.optimizer = optimizer.download_state();
  s.loss_scale = scaler.state_scale();
  s.scaler_good_steps = scaler.good_steps();
  return s;
}

void load_whole_model_state(Mlp& model, Optimizer& optimizer, LossScaler& scaler, const TrainingState& s) {
  model.upload(s.weights);
  optimizer.set_steps_taken(s.optimizer_steps);
  optimizer.upload_state(s.optimizer);
  scaler.load_state(s.loss_scale, s.scaler_good_steps);
}

const StrategyInfo& find_strategy(const std::string& name) {
  std::string known;
  for (const auto& s : strategy_registry()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw UsageError("strategy", "--strategy '" + name + "' is unknown — use one of: " + known);
}

}  // namespace scalelab
