// `scalelab tour` (what `make demo` runs): every strategy on the same simulated machine, the same
// model and data, side by side in one table, with a Chrome trace of each in the output folder.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/scalelab/bench.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/memory_ledger.h"
#include "run/train.h"
#include "strategies/strategy.h"

namespace scalelab {

namespace {

// Whether the strategy's check of the model and batch takes `c` on `devices`.
bool shape_fits(const StrategyInfo& info, TrainConfig c, int devices) {
  c.devices = devices;
  try {
    info.check_shape(c);
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

}  // namespace

int run_tour(const TourOptions& o) {
  {
    // The settings every row shares, checked once up front: a bad --batch or --hw is one clear
    // error (exit 2 or 1), not eight failed rows.
    TrainConfig shared;
    shared.device = DeviceKind::sim;
    shared.hw = o.hw;
    shared.model = o.model;
    shared.dataset = o.dataset;
    shared.batch = o.batch;
    shared.steps = o.steps;
    check_config(shared);
    load_profile(o.hw);
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) throw UsageError("tour", "--out " + o.out_dir + ": cannot create it (" + ec.message() + ")");

  std::printf("# scalelab tour: every strategy on %d simulated devices of %s, %s, %s, batch %lld, %lld steps\n",
              o.devices, o.hw.c_str(), o.model.c_str(), o.dataset.c_str(), static_cast<long long>(o.batch),
              static_cast<long long>(o.steps));
  std::printf("# times are the cost model's (simulated); max_rel_diff: weights vs single after 5 steps on the same batches\n");
  // A GPT's throughput is counted in tokens (T a sample), as the lectures and papers count it.
  const bool tokens = o.model.rfind("gpt:", 0) == 0;
  std::printf("%-16s %4s %10s %11s %8s %6s %7s %8s %11s %12s %8s\n", "strategy", "dev", "ms/step", tokens ? "tokens/s" : "samples/s",
              "compute%", "comm%", "bubble%", "overlap%", "peak/dev", "max_rel_diff", "test_acc");
  std::fflush(stdout);
  nlohmann::json rows = nlohmann::json::array();
  const auto started = std::chrono::steady_clock::now();
  int failures = 0;
  // Every registered strategy, in the registry's order, on the devices its rule allows (single:
  // one), with what it needs to show itself (a pipeline's micro-batches, zero's stage).
  for (const StrategyInfo& info : strategy_registry()) {
    TrainConfig c;
    c.strategy = info.name;
    c.device = DeviceKind::sim;
    c.hw = o.hw;
    c.model = o.model;
    c.dataset = o.dataset;
    c.batch = o.batch;
    c.steps = o.steps;
    c.seed = o.seed;
    // single is the yardstick itself; an asynchronous strategy is held to accuracy instead.
    const bool compared = info.synchronous && info.name != kReferenceStrategy;
    c.trace_path = o.out_dir + "/" + info.name + ".trace.json";
    c.json_path = o.out_dir + "/" + info.name + ".json";
    if (info.showcase) info.showcase(c);
    // A strategy written for another family (tensor-parallel: a transformer's blocks) shows itself
    // on a model of its own; its row says so.
    const std::string own_model = c.model != o.model ? c.model : "";
    // A strategy that gives each device layers of its own (model-parallel, pipeline) takes no more
    // devices than the model has layers: the tour runs it on as many as it can take (its `dev`
    // column says so) rather than showing only the refusal.
    int devices = devices_allowed(info, o.devices);
    while (info.check_shape && devices > info.device_count.min && !shape_fits(info, c, devices))
      devices = devices_allowed(info, devices - 1);
    c.devices = devices;
    EventBus bus;
    TrainResult r;
    double max_rel_diff = -1;
    try {
      r = train(c, bus);
      if (compared) {
        // The equivalence contract, checked where it is stated: after 5 steps, weights equal to
        // single's within fp32 round-off. (Over hundreds of steps the round-off of summing in
        // another order grows wherever a ReLU input sits near zero; the accuracy shows both
        // still learn the same.)
        TrainConfig check = c;
        check.steps = 5;
        check.check_equivalence = true;
        check.trace_path.clear();
        check.json_path.clear();
        EventBus check_bus;
        max_rel_diff = train(check, check_bus).max_rel_diff;
      }
    } catch (const std::exception& e) {
      std::printf("%-16s failed: %s\n", info.name.c_str(), e.what());
      std::fflush(stdout);
      rows.push_back({{"strategy", info.name}, {"error", e.what()}});
      ++failures;
      continue;
    }
    double compute = 0, comm = 0;
    int64_t peak = 0;
    for (const DeviceSummary& d : r.per_device) {
      compute += d.busy_pct;
      comm += d.comm_pct;
      peak = std::max(peak, d.peak_total);
    }
    const double n = static_cast<double>(std::max<size_t>(1, r.per_device.size()));
    char diff[32] = "—";
    if (max_rel_diff >= 0) std::snprintf(diff, sizeof diff, "%.2e", max_rel_diff);
    std::printf("%-16s %4d %10.4f %11.0f %8.1f %6.1f %7.1f %8.1f %11s %12s %8.4f\n", info.name.c_str(), devices, r.steps ? 1e3 * r.time_s / static_cast<double>(r.steps) : 0.0, tokens ? r.tokens_per_s : r.samples_per_s,
                compute / n, comm / n, 100 * r.metrics.bubble_fraction, r.metrics.overlap_pct,
                format_bytes(peak).c_str(), diff, r.test_accuracy);
    if (!own_model.empty())
      std::printf("                 (this row: %s, on %s, its samples its sequences — the strategy is written for a "
                  "transformer's blocks)\n",
                  info.name.c_str(), own_model.c_str());
    std::fflush(stdout);
    nlohmann::json row = to_json(r);
    row["equivalence"] = max_rel_diff >= 0 ? nlohmann::json{{"max_rel_diff", max_rel_diff}, {"steps", 5}} : nlohmann::json(nullptr);
    rows.push_back(row);
  }
  write_file_atomically(o.out_dir + "/tour.json", nlohmann::json{{"rows", rows}}.dump(2) + "\n", "tour");
  std::printf("# traces and summaries in %s/ (open a .trace.json in https://ui.perfetto.dev); %.1f s\n",
              o.out_dir.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (failures > 0) {
    std::fprintf(stderr, "[tour] %d of %zu strategies failed (their rows above say why)\n", failures,
                 strategy_registry().size());
    return 1;
  }
  return 0;
}

}  // namespace scalelab
