#pragma once
// A strategy is one way of spreading training over devices. Each lives in its own file here and
// reads like the lecture it accompanies. All of them take the same global batch and must produce
// the same weights as `single` (the equivalence contract in ../shared/DESIGN.md).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/loss_scaler.h"
#include "core/nn/mlp.h"
#include "core/run/config.h"
#include "core/trace/events.h"

namespace scalelab {

class RankSet;

struct StrategyContext {
  const TrainConfig& config;
  std::vector<Device*> devices;  // this process's devices (every device with --launch threads)
  EventBus& bus;
  HostWeights initial_weights;  // the same for every strategy: drawn from the seed
  RankSet* ranks = nullptr;     // strategies with ranks (devices_per_rank > 0); null otherwise
};

// Everything a checkpoint holds besides the step: weights and optimizer state, on the host, in
// the model's parameter order (fc1.weight, fc1.bias, fc2.weight, …), whatever the strategy
// sharded or split — so a run can resume under another strategy or number of devices.
struct TrainingState {
  HostWeights weights;
  int64_t optimizer_steps = 0;
  // Per parameter, its state tensors: none (plain sgd), one (sgd momentum) or two (adam m, v).
  std::vector<std::vector<std::vector<float>>> optimizer;
  double loss_scale = 0;       // fp16 dynamic loss scaler (0: none)
  int64_t scaler_good_steps = 0;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // One optimizer step on a global batch (host memory); returns the mean loss over the batch.
  // Strategies with ranks return the same value on every rank.
  virtual double train_step(const HostBatch& batch, int64_t step) = 0;
  // The current weights, copied to the host (on every rank, whole).
  virtual HostWeights weights() = 0;
  // For checkpoints: the state to save, and to continue from.
  virtual TrainingState state() = 0;
  virtual void load_state(const TrainingState& state) = 0;
  // Mixed precision: the loss scale now and the steps the fp16 scaler skipped (scale 1, none
  // skipped without one).
  virtual AmpReport amp_report() const { return {}; }
};

// The loss scaler --amp asks for (core/nn/loss_scaler.h): fp16's, or one that does nothing.
LossScaler make_loss_scaler(const TrainConfig& config);

class Optimizer;
// The state of a model kept whole with its optimizer and loss scaler (single, data-parallel,
// model-parallel).
TrainingState whole_model_state(Mlp& model, Optimizer& optimizer, const LossScaler& scaler);
void load_whole_model_state(Mlp& model, Optimizer& optimizer, LossScaler& scaler, const TrainingState& state);

struct StrategyInfo {
  std::string name;
  std::string summary;  // one line for `scalelab strategies`
  std::function<std::unique_ptr<Strategy>(StrategyContext&)> make;
  // 0: one controller drives every device (single, data-parallel, model-parallel); k ≥ 1: ranks,
  // each with k devices (ddp, pipeline, zero: 1; ddp-mp: 2), launched as threads, procs or mpi.
  int devices_per_rank = 0;
};

const std::vector<StrategyInfo>& strategy_registry();
// Throws UsageError listing the known strategies.
const StrategyInfo& find_strategy(const std::string& name);

}  // namespace scalelab
