#pragma once
// A strategy is one way of spreading training over devices. Each lives in its own file here and
// reads like the lecture it accompanies. All of them take the same global batch and must produce
// the same weights as `single` (the equivalence contract in docs/DESIGN.md).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/training_state.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/loss_scaler.h"
#include "core/nn/model.h"
#include "core/trace/events.h"
#include "strategies/train_config.h"

namespace scalelab {

class RankSet;

struct StrategyContext {
  const TrainConfig& config;
  std::vector<Device*> devices;  // this process's devices (every device with --launch threads)
  EventBus& bus;
  HostWeights initial_weights;  // the same for every strategy: drawn from the seed
  RankSet* ranks = nullptr;     // strategies with ranks (devices_per_rank > 0); null otherwise
  // How this run's devices were made (kind, profile, dry run, clock epoch): a strategy that starts
  // processes of its own (multiprocessing) makes their devices with it.
  DeviceOptions device_options;
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
TrainingState whole_model_state(Model& model, Optimizer& optimizer, const LossScaler& scaler);
void load_whole_model_state(Model& model, Optimizer& optimizer, LossScaler& scaler, const TrainingState& state);

// The options only some strategies take (the rest — model, data, optimizer, amp on synchronous
// strategies, checkpoints — apply to every one). Given to a strategy that does not take it, an
// option would be silently ignored, so validation refuses it instead.
enum class StrategyOption : uint8_t {
  no_sync,        // --no-sync K: gradient accumulation
  buckets,        // --bucket-mb, --first-bucket-mb
  micro_batches,  // --micro-batches
  schedule,       // --schedule
  zero_stage,     // --zero-stage
  amp,            // --amp, --amp-initial-scale
  comm,           // --comm, --comm-algo, --comm-timeout: the process group's backend
  sequence_parallel,  // --sequence-parallel
  data_parallel,  // --dp: data-parallel replicas of a tensor-parallel group
  pipeline_parallel,  // --pp: pipeline stages of tensor-parallel groups (3D)
};
const char* strategy_option_flags(StrategyOption option);  // "--bucket-mb / --first-bucket-mb"

// How many devices a strategy can spread over: at least `min`, at most `max` (0: no limit), a
// multiple of `multiple_of`. (Limits that depend on the model or the batch — no more pipeline
// stages than layers — are checked by the strategy when it is made.)
struct DeviceCountRule {
  int min = 1;
  int max = 0;
  int multiple_of = 1;
};

// Everything the rest of scalelab knows about a strategy: config validation, the launch panel,
// the tour and `scalelab strategies` all read this, and nothing else names strategies.
struct StrategyInfo {
  std::string name;
  std::string summary;  // one line for `scalelab strategies`
  std::function<std::unique_ptr<Strategy>(StrategyContext&)> make;
  // 0: one controller drives every device (single, data-parallel, model-parallel, multiprocessing);
  // k ≥ 1: ranks, each with k devices (ddp, pipeline, zero: 1; ddp-mp: 2).
  int devices_per_rank = 0;
  // How a step's global batch is split among the ranks or devices that train on rows of it (what
  // `train --dump-batches` writes): whole (each sees every row: single, model-parallel, pipeline),
  // interleaved (of N, the k-th takes rows k, k+N, …: DistributedSampler's shards — ddp, ddp-mp,
  // zero, Hogwild), contiguous (the k-th takes rows [k·B/N, (k+1)·B/N): DataParallel's scatter).
  enum class BatchShards { whole, interleaved, contiguous } batch_shards = BatchShards::whole;
  // Synchronous strategies compute single's training on the same global batch and are held to its
  // weights (--check-equivalence); the others (Hogwild) are held to test accuracy.
  bool synchronous = true;
  // Its workers are processes of their own (Hogwild's forks), not threads of this one: on the cpu
  // device they share the host's cores without taking turns (`train --predict` prices them so).
  bool workers_are_processes = false;
  // Every rank does the same work: the same ops on the same shapes, the same collectives of the
  // same sizes (ddp, zero, tensor-parallel; not a pipeline, whose stages differ). A sim dry run on
  // many devices then runs the first few ranks only and counts the rest as copies of the last one
  // (RunSetup::devices_run): a thousand alike rank threads would tell nothing the sixteenth did not.
  bool alike_ranks = false;
  std::vector<StrategyOption> options;  // the strategy-specific options it takes
  std::vector<Launch> launches = {Launch::threads};
  std::vector<DeviceKind> device_kinds = {DeviceKind::cpu, DeviceKind::sim, DeviceKind::cuda};
  DeviceCountRule device_count;
  // What the tour (and the launch panel, when this strategy is picked) sets besides the shared
  // settings: a pipeline needs micro-batches to show one, zero a stage.
  std::function<void(TrainConfig&)> showcase;
  // What the strategy needs of the model and batch (a pipeline: a layer per stage, micro-batches
  // that divide the batch), checked by validate() before any device is made, so that a sweep
  // (`scalelab scale`) refuses a bad point before its first row. Throws UsageError.
  std::function<void(const TrainConfig&)> check_shape;

  bool takes(StrategyOption option) const;
  bool supports(Launch launch) const;
  bool supports(DeviceKind kind) const;
  // Throws UsageError naming the option that does not fit this strategy and what to do instead.
  void validate(const TrainConfig& config) const;
  // Throws that UsageError for `option`, given as `given_text` ("--bucket-mb 25"), when this
  // strategy does not take it: the CLI calls it for an option given at its default value, which
  // validate() cannot tell from one left out.
  void check_takes(StrategyOption option, const std::string& given_text) const;
};

const std::vector<StrategyInfo>& strategy_registry();
// The strategy every synchronous one is held to (--check-equivalence trains it alongside).
inline constexpr const char* kReferenceStrategy = "single";
// Throws UsageError listing the known strategies.
const StrategyInfo& find_strategy(const std::string& name);
// --strategy fsdp is zero with --zero-stage 3 under PyTorch's name (FullyShardedDataParallel):
// rewrites `strategy` and `zero_stage` so. fsdp with another stage given throws UsageError.
void resolve_strategy_alias(std::string& strategy, int& zero_stage);
// The lines `scalelab strategies` prints: each strategy, what it shows, and what it takes.
std::string describe_strategies();

}  // namespace scalelab
