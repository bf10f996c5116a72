#pragma once
// A training run from start to end: data, devices, strategy, the step loop, evaluation, the
// summary and its JSON, the trace. The CLI, the dashboard and the grader all call this.
#include <array>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/io/atomic_file.h"
#include "core/run/config.h"
#include "core/trace/events.h"
#include "core/trace/metrics.h"

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
  int64_t steps = 0;
  int64_t samples = 0;
  double final_loss = 0;              // mean training loss over the last ≤100 steps
  double test_accuracy = -1;          // < 0: not measured (dry run)
  double time_s = 0;                  // of the training steps, evaluation excluded
  bool simulated = false;             // time_s is modelled (sim) rather than measured
  double samples_per_s = 0;
  std::string weights_checksum;
  std::vector<DeviceSummary> per_device;
  RunMetrics metrics;
  std::vector<double> losses;         // per step
  double max_rel_diff = -1;           // --check-equivalence: vs single (< 0: not checked)
  double loss_scale = 1;              // --amp: the fp16 loss scale at the end (1 without a scaler)
  int64_t skipped_steps = 0;          // --amp fp16: optimizer steps skipped on overflow
};

// Called after each step (and once with done = total at the end of each evaluation).
struct Progress {
  int64_t step = 0, total = 0, epoch = 0, epochs = 0;
  double loss = 0;
  double accuracy = -1;  // set after an evaluation
};
using ProgressFn = std::function<void(const Progress&)>;

TrainResult train(const TrainConfig& config, EventBus& bus, const ProgressFn& progress = {});

nlohmann::json to_json(const TrainResult& result);
// The summary back from to_json's output (a --launch procs rank reports through it).
TrainResult from_json(const nlohmann::json& j, const TrainConfig& config);
std::string format_summary(const TrainResult& result);

}  // namespace scalelab
