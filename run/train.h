#pragma once
// A training run from start to end: data, devices, strategy, the step loop, evaluation, the
// summary and its JSON, the trace. The CLI, the dashboard and the grader all call this.
#include <array>
#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/trace/events.h"
#include "core/trace/metrics.h"
#include "strategies/train_config.h"

namespace scalelab {

struct DeviceSummary {
  std::string name;
  double busy_pct = 0, comm_pct = 0, idle_pct = 0;
  std::array<int64_t, kMemoryCategoryCount> peak_bytes{};  // by category, from the ledger
  int64_t peak_total = 0;
  int64_t capacity = 0;
};

struct TrainResult {
  TrainConfig config;
  std::string hw_name;  // the profile's name on sim, empty otherwise
  // cuda: where the devices run, e.g. "4 logical devices on 1 GPU (NVIDIA H100 80GB HBM3)"; empty otherwise
  std::string placement;
  int64_t steps = 0;
  int64_t samples = 0;
  double final_loss = 0;              // the last step's training loss (NaN: no step run, or a dry run)
  double mean_loss = 0;               // the mean training loss over the last mean_loss_steps (≤ 100) steps
  int64_t mean_loss_steps = 0;
  double test_accuracy = -1;          // < 0: not measured (dry run)
  double time_s = 0;                  // of the training steps, evaluation excluded
  bool simulated = false;             // time_s is modelled (sim) rather than measured
  double samples_per_s = 0;
  double tokens_per_s = 0;            // a GPT: samples_per_s × T (0 for the image models)
  // Model FLOPs utilisation: the model's training FLOPs per second (ModelSpec::train_flops_per_sample)
  // over the devices' peak for the dtype the GEMMs run in; sim only (< 0: not known).
  double mfu = -1;
  std::string weights_checksum;
  std::vector<DeviceSummary> per_device;
  RunMetrics metrics;
  std::vector<double> losses;         // per step
  double max_rel_diff = -1;           // --check-equivalence: vs single (< 0: not checked)
  double roundoff_rel_diff = -1;      // … and how far float32 round-off alone moves single
  double loss_scale = 1;              // --amp: the fp16 loss scale at the end (1 without a scaler)
  int64_t skipped_steps = 0;          // --amp fp16: optimizer steps skipped on overflow
  bool stopped = false;               // ended early at the caller's request (steps: those run)
  // From this device on the bus kept a tally, not every op (TrainConfig::detailed_devices); -1: none.
  int first_tallied_device = -1;
  // A sim dry run of alike ranks ran devices 0 … devices_run − 1 and counted each of the others as
  // a copy of the last (RunSetup::devices_run); 0: every device ran.
  int devices_run = 0;
};

// --check-equivalence's verdict on a run's weights against single's (max_rel_diff), given how far
// single moves when only its float32 round-off changes (roundoff_rel_diff: single trained on the
// same batches, each taken as its two halves with their gradients accumulated — the same mean
// gradient in exact arithmetic):
//   equal      max_rel_diff ≤ kEquivalenceTolerance (the tests' bound after 5 steps);
//   round-off  max_rel_diff ≤ kRoundoffFactor × roundoff_rel_diff: the run is as far from single as
//              round-off alone takes it, amplified over the steps (a ReLU input near zero flips);
//   differs    beyond both: a bug, or another algorithm.
enum class EquivalenceVerdict { equal, roundoff, differs };
inline constexpr double kEquivalenceTolerance = 1e-5;
inline constexpr double kRoundoffFactor = 10;
EquivalenceVerdict equivalence_verdict(double max_rel_diff, double roundoff_rel_diff);
const char* equivalence_verdict_name(EquivalenceVerdict verdict);  // "equal", "round-off", "differs"

// Called after each step (and once with done = total at the end of each evaluation).
struct Progress {
  int64_t step = 0, total = 0, epoch = 0, epochs = 0;
  double loss = 0;
  double accuracy = -1;  // set after an evaluation
};
using ProgressFn = std::function<void(const Progress&)>;

// Besides the summary, the run emits per-step metrics into the bus: loss, samples_per_s (the batch
// over the time from the previous step's end to this one's), accuracy after each evaluation, and
// with --check-equivalence loss_single (the reference's loss), loss_roundoff (the round-off
// yardstick's) and, at the end, max_rel_diff and roundoff_rel_diff.
//
// `stop`: when it reads true after a step, the run ends there as if that had been the last step
// (evaluation, checkpoint, trace and summary included). It is checked on the controller between
// steps, where no collective is in flight, so it is honoured with --launch threads only (a forked
// or mpirun rank cannot see it).
//
// With --launch procs or mpi every rank sends what it recorded to rank 0, so the summary, the
// trace and (procs) the caller's bus hold every device of the run.
TrainResult train(const TrainConfig& config, EventBus& bus, const ProgressFn& progress = {},
                  const std::atomic<bool>* stop = nullptr);

// What train() checks before it starts: the options that hold for every strategy, then those of
// the strategy at hand (its registry entry). Throws UsageError naming the option and the fix.
void check_config(const TrainConfig& config);

// Where the run will write (--checkpoint, --trace, --json): refused before it starts when the path
// is a directory or its directory does not exist, not after the last step; or when two outputs,
// or an output and a file the run reads (--resume, --init-weights, --hw, and those in `more`), are
// one file — except --checkpoint onto --resume, which continues a run in its file.
void check_output_paths(const TrainConfig& config, const std::vector<PathUse>& more = {});

// For a run whose numbers live in host memory (cpu, or sim without --dry-run): the least memory it
// needs — the data set, then the model's parameters, gradients and optimizer state and the
// activations of the global batch, once (a strategy that replicates the model needs more). Throws
// UsageError("memory", …) with the figure when that exceeds the host's physical memory, instead of
// a std::bad_alloc mid-run.
int64_t host_bytes_needed(const TrainConfig& config);
void check_host_memory(const TrainConfig& config, bool suggest_dry_run = true);

// Throws Error("train", …) naming the step and the optimizer settings when `loss` is not finite
// (training diverged), unless config.allow_divergence.
void check_divergence(const TrainConfig& config, int64_t step, double loss);

nlohmann::json to_json(const TrainResult& result);
// The summary back from to_json's output (rank 0 of a --launch procs run reports through it).
TrainResult from_json(const nlohmann::json& j, const TrainConfig& config);
std::string format_summary(const TrainResult& result);

struct StrategyInfo;
// The devices a strategy runs on in a table of every strategy (the tour, bench predict): `wanted`,
// as its device-count rule allows (single: one).
int devices_allowed(const StrategyInfo& info, int wanted);

}  // namespace scalelab
