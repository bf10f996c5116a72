#pragma once
// The parts of one process's share of a training run, in the order train() (run/train.cpp) uses
// them: set the run up, probe equivalence, checkpoint, loop over the steps, conclude, gather every
// rank's records, summarise, write the outputs. Internal to run/.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/comm/process_group.h"
#include "core/comm/ranks.h"
#include "core/data/dataset.h"
#include "core/trace/wire.h"
#include "run/train.h"
#include "strategies/strategy.h"

namespace scalelab {

// How the run's process groups wait and all-reduce (--comm-timeout, --comm-algo).
CommOptions comm_options(const TrainConfig& config);
// The model --model names, with --dropout (its seed: --seed).
ModelSpec model_spec(const TrainConfig& config);
// The run's first weights: --init-weights' file, or drawn from the seed (shapes only for a dry run).
HostWeights initial_weights(const TrainConfig& config, const ModelSpec& spec);

// 1. Set-up: this process's devices, the data, the ranks and the strategy. With --launch threads
//    this process is every rank (local_group null); with procs or mpi it is one rank.
struct RunSetup {
  // `epoch`: when the devices' measured clocks start (a procs launch gives every rank the parent's,
  // so their events share one time axis); unset: now.
  RunSetup(const TrainConfig& config, EventBus& bus, ProcessGroup* local_group,
           std::optional<WallClock::time_point> epoch = std::nullopt);

  const TrainConfig& config;
  EventBus& bus;
  const StrategyInfo& info;
  ModelSpec spec;
  DeviceOptions device_options;
  ProcessGroup* local_group;  // procs, mpi: this process's rank; null with threads
  bool leader;                // rank 0 (or the only process): it reports for everyone
  // The devices this process makes and runs. A sim dry run of a strategy whose ranks are alike
  // (StrategyInfo::alike_ranks), threads launch, on more than detailed_devices + 1 devices runs
  // only the first detailed_devices + 1: the kept ones and one tallied; the records count the
  // others as copies of that last one (gather_records). Otherwise all of this process's.
  int devices_run = 0;
  // Members are destroyed in reverse order: the strategy before the ranks, the ranks before the
  // devices they drive, the loader before the data it reads.
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<Device*> device_list;
  DataSplit data;
  std::unique_ptr<Loader> loader;
  int64_t per_epoch = 0, total = 0, epochs = 0;
  std::unique_ptr<RankSet> ranks;
  std::unique_ptr<Strategy> strategy;

  bool computes() const { return devices.front()->computes(); }
  // Ops after this are not part of any step (downloads for evaluation, checkpoints).
  void leave_step() const;
};

// --dump-batches F: the training-set indices of each step's global batch (the Loader's order) and
// of each rank's or device's shard of it, written atomically at the end of the loop — so a
// program outside (the PyTorch cross-check) trains on our batches without re-deriving our order.
class BatchDump {
 public:
  explicit BatchDump(const RunSetup& run) : run_(run) {}
  void record(int64_t step);  // after the loader filled the step's batch
  void write() const;

 private:
  const RunSetup& run_;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> steps_;  // (step, global batch's indices)
};

// 2. --check-equivalence: the reference strategy on its own device and event bus (it is the
//    yardstick, not part of the run), trained on the same global batches; and beside it the
//    round-off yardstick: the reference again, each batch fed as its two halves with the gradient
//    accumulated over them (single's --no-sync) — the same mean gradient in exact arithmetic,
//    float32 sums and GEMM shapes of another order, as a strategy that splits the batch has. How
//    far it lands from the reference is how far float32 round-off alone moves single
//    (equivalence_verdict, run/train.h). An odd batch has no halves: the yardstick is the
//    reference itself (round-off 0).
//
// Reordering the rows is no yardstick: one GEMM over the whole batch computes every activation
// as before, and at seed 42 single with its rows reversed stays 4e-7 from single after 20 steps
// while every strategy that splits the batch is 1e-3 away.
class EquivalenceProbe {
 public:
  explicit EquivalenceProbe(const RunSetup& run);
  // The reference's loss on this batch, emitted as the metric loss_single, and the round-off
  // yardstick's as loss_roundoff.
  void step(const HostBatch& batch, int64_t step, EventBus& bus);
  void load_state(const TrainingState& state);
  // The largest relative difference of `weights` to the reference's.
  double max_rel_diff(const HostWeights& weights);
  // The largest relative difference of the round-off yardstick's weights to the reference's.
  double roundoff_rel_diff();

 private:
  // A reference on a device and bus of its own: the two never share a lane or a ledger.
  struct Single {
    EventBus bus;
    std::vector<std::unique_ptr<Device>> devices;
    std::unique_ptr<Strategy> strategy;
  };
  void make(Single& single, const TrainConfig& config, const RunSetup& run);
  TrainConfig config_;
  bool halves_;  // an even batch: the yardstick takes it in two halves
  Single reference_, split_;
  HostBatch half_;
};

// 3. Checkpoints (core/checkpoint/checkpoint.h). --resume: every process reads and verifies the file,
//    the strategy takes the whole state (sharding it as it likes), and the run goes on at the
//    saved step — the loader's order is a function of (seed, epoch), so that is the same data too.
//    --checkpoint: every --checkpoint-every steps and after the last, every rank gives its part of
//    the state (a strategy may need collectives for it), rank 0 writes, the others wait.
// The header of the run `config` describes, at `step`: what a resumed run must match.
CheckpointHeader checkpoint_header(const TrainConfig& config, int64_t train_count, int64_t step);

class Checkpointer {
 public:
  explicit Checkpointer(RunSetup& run);
  // The step to start from: the checkpoint's (its state loaded into the strategy and the probe),
  // or 0 without --resume.
  int64_t resume(EquivalenceProbe* probe);
  // With a {step} pattern in --checkpoint, every save is kept, the untrained weights (step 0) too.
  void at_start(int64_t first_step);
  void after_step(int64_t steps_done);  // saves every --checkpoint-every steps
  void at_end(int64_t last_step);       // and where the run ended, unless just saved
  std::chrono::steady_clock::duration time_spent() const { return time_; }

 private:
  void save(int64_t steps_done);
  RunSetup& run_;
  int64_t saved_step_ = -1;
  std::chrono::steady_clock::duration time_{};
};

// 4. The loop over the steps.
struct LoopResult {
  int64_t first_step = 0;
  int64_t last_step = 0;  // one past the last step run (earlier than total when stopped)
  std::vector<double> losses;
  double wall_s = 0;      // of the steps alone: evaluation and checkpoints excluded
};
LoopResult run_steps(RunSetup& run, EquivalenceProbe* probe, Checkpointer& checkpointer, const ProgressFn& progress,
                     const std::atomic<bool>* stop);

// 5. The end of the run on every rank (the final weights may take collectives): the losses, the
//    final weights' test accuracy and checksum, the difference to the probe, the loss scaler.
TrainResult conclude(const RunSetup& run, const LoopResult& loop, EquivalenceProbe* probe);

// 6. Every rank's records: with procs and mpi each rank sends what it recorded (events, memory,
//    its devices' ledgers) to rank 0, which gets the whole run; the others get their own.
Records gather_records(const RunSetup& run);

// 7. The summary's times, shares and memory, from the whole run's records; 8. the trace and the
//    JSON (rank 0 writes them).
void summarize(const LoopResult& loop, const Records& records, TrainResult& result);
void write_outputs(const RunSetup& run, const TrainResult& result, const Records& records);

}  // namespace scalelab
