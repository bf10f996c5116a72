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
#include "core/device/memory.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/run/train.h"
#include "strategies/strategy.h"

namespace scalelab {

namespace {

// How the tour runs each strategy: what it needs beyond the shared settings.
struct TourStop {
  std::string strategy;
  int devices;
  std::function<void(TrainConfig&)> adjust;
};

std::vector<TourStop> tour_stops(int devices) {
  return {
      {"single", 1, {}},
      {"data-parallel", devices, {}},
      {"model-parallel", devices, {}},
      {"ddp", devices, {}},
      {"ddp-mp", devices, {}},
      {"pipeline", devices, [](TrainConfig& c) {
         c.micro_batches = 4;
         c.schedule = "1f1b";
       }},
      {"zero", devices, [](TrainConfig& c) { c.zero_stage = 1; }},
      {"multiprocessing", devices, {}},
  };
}

bool registered(const std::string& name) {
  for (const auto& s : strategy_registry())
    if (s.name == name) return true;
  return false;
}

}  // namespace

int run_tour(const TourOptions& o) {
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) throw UsageError("tour", "--out " + o.out_dir + ": cannot create it (" + ec.message() + ")");

  std::printf("# scalelab tour: every strategy on %d simulated devices of %s, %s, %s, batch %lld, %lld steps\n",
              o.devices, o.hw.c_str(), o.model.c_str(), o.dataset.c_str(), static_cast<long long>(o.batch),
              static_cast<long long>(o.steps));
  std::printf("# times are the cost model's (simulated); max_rel_diff: weights vs single after 5 steps on the same batches\n");
  std::printf("%-16s %4s %10s %11s %8s %6s %7s %8s %11s %12s %8s\n", "strategy", "dev", "ms/step", "samples/s",
              "compute%", "comm%", "bubble%", "overlap%", "peak/dev", "max_rel_diff", "test_acc");
  std::fflush(stdout);
  nlohmann::json rows = nlohmann::json::array();
  const auto started = std::chrono::steady_clock::now();
  for (const TourStop& stop : tour_stops(o.devices)) {
    if (!registered(stop.strategy)) {
      std::printf("%-16s (not built yet)\n", stop.strategy.c_str());
      continue;
    }
    TrainConfig c;
    c.strategy = stop.strategy;
    c.device = DeviceKind::sim;
    c.hw = o.hw;
    c.devices = stop.devices;
    c.model = o.model;
    c.dataset = o.dataset;
    c.batch = o.batch;
    c.steps = o.steps;
    c.seed = o.seed;
    const bool synchronous = stop.strategy != "single" && stop.strategy != "multiprocessing";
    c.trace_path = o.out_dir + "/" + stop.strategy + ".trace.json";
    c.json_path = o.out_dir + "/" + stop.strategy + ".json";
    if (stop.adjust) stop.adjust(c);
    EventBus bus;
    TrainResult r;
    double max_rel_diff = -1;
    try {
      r = train(c, bus);
      if (synchronous) {
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
      std::printf("%-16s failed: %s\n", stop.strategy.c_str(), e.what());
      std::fflush(stdout);
      rows.push_back({{"strategy", stop.strategy}, {"error", e.what()}});
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
    std::printf("%-16s %4d %10.4f %11.0f %8.1f %6.1f %7.1f %8.1f %11s %12s %8.4f\n", stop.strategy.c_str(),
                stop.devices, r.steps ? 1e3 * r.time_s / static_cast<double>(r.steps) : 0.0, r.samples_per_s,
                compute / n, comm / n, 100 * r.metrics.bubble_fraction, r.metrics.overlap_pct,
                format_bytes(peak).c_str(), diff, r.test_accuracy);
    std::fflush(stdout);
    nlohmann::json row = to_json(r);
    row["equivalence"] = max_rel_diff >= 0 ? nlohmann::json{{"max_rel_diff", max_rel_diff}, {"steps", 5}} : nlohmann::json(nullptr);
    rows.push_back(row);
  }
  write_file_atomically(o.out_dir + "/tour.json", nlohmann::json{{"rows", rows}}.dump(2) + "\n", "tour");
  std::printf("# traces and summaries in %s/ (open a .trace.json in https://ui.perfetto.dev); %.1f s\n",
              o.out_dir.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}

}  // namespace scalelab
