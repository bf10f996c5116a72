// `scalelab scale`: the same strategy, dry-run on simulated clusters of growing size, one row per
// size. What a lecture on large-scale training wants to show, measured by the cost model:
//   - DDP: the ring all-reduce moves 2(n−1)/n of the gradients per device, so its cost flattens as
//     n grows, and the efficiency with it, where the network is what it is;
//   - ZeRO: the optimizer state (stage 1) and the gradients (stage 2) per device fall as 1/N;
//   - a pipeline: the bubble (p−1)/(m+p−1) shrinks with the micro-batches m (`--micro-batches`
//     with several values sweeps m at one device count).
// Weak scaling keeps the batch per device (the global batch grows with N); strong scaling keeps
// the global batch. Efficiency is samples/s per device against the first row's.
#include "apps/scalelab/scale.h"

#include "apps/scalelab/svg_chart.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/device/sim/cost_model.h"
#include "core/io/file_check.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/nn/gpt_memory.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/trace/events.h"
#include "core/trace/metrics.h"
#include "run/train.h"
#include "strategies/strategy.h"

namespace scalelab {
namespace {

struct ScalePoint {
  int devices = 0, micro_batches = 1;
  int64_t global_batch = 0;
  double step_ms = 0, samples_per_s = 0, efficiency = 1;
  double comm_pct = 0, exposed_comm_ms = 0, bubble_pct = 0;
  std::array<int64_t, kMemoryCategoryCount> peak_bytes{};  // the most any one device holds, per category
  int64_t peak_total = 0, capacity = 0;
  int64_t closed_form = -1;  // a GPT under ddp or zero in f32: the memory per device by formula (-1: none)
  double wall_s = 0;  // what the dry run took here
  // One all-reduce of all the gradients (4·P bytes) on this cluster, by the cost model: its time
  // and the algorithm/protocol NCCL's tuner (and so the model) picks for it at this N.
  double grad_all_reduce_ms = 0;
  std::string grad_all_reduce_algorithm;
  bool fits() const { return capacity <= 0 || peak_total <= capacity; }
};

double gib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); }

// One all-reduce of 4·P bytes over `devices` ranks of the profile (more nodes of it if needed).
CollectiveChoice gradient_all_reduce(const HardwareProfile& profile, const std::string& model, int devices) {
  HardwareProfile shaped = profile;
  if (devices > shaped.device_count()) shaped.nodes = (devices + shaped.devices_per_node - 1) / shaped.devices_per_node;
  const double grad_bytes = 4.0 * static_cast<double>(ModelSpec::parse(model).parameter_count());
  return CostModel(shaped).collective_choice(Collective::all_reduce, grad_bytes, devices);
}

std::string algorithm_word(const CollectiveChoice& c) {
  return std::string(c.algorithm) + (*c.protocol ? std::string(" ") + c.protocol : std::string());
}

TrainConfig point_config(const ScaleOptions& o, const HardwareProfile& profile, int devices, int micro_batches) {
  TrainConfig c;
  c.strategy = o.strategy;
  c.device = DeviceKind::sim;
  c.hw = o.hw;
  // A cluster larger than the profile's: more nodes of the same kind.
  if (devices > profile.device_count())
    c.hw_nodes = (devices + profile.devices_per_node - 1) / profile.devices_per_node;
  c.devices = devices;
  c.dry_run = true;
  c.model = o.model;
  c.dataset = "synthetic";
  c.steps = o.steps;
  c.batch = o.weak ? o.batch * devices : o.batch;
  c.synthetic_train = std::max<int64_t>(c.batch, 256);
  c.synthetic_test = 256;
  c.optimizer.kind = o.optimizer;
  if (o.optimizer == "adam") c.optimizer.lr = 1e-3f;
  c.micro_batches = micro_batches;
  c.virtual_stages = o.virtual_stages;
  ChoiceWords words;
  words.schedule = o.schedule;
  words.amp = o.amp;
  words.apply(c);
  if (find_strategy(o.strategy).takes(StrategyOption::zero_stage)) c.zero_stage = o.zero_stage;
  check_config(c);
  ModelSpec::parse(c.model);  // a bad --model is refused before the table starts
  return c;
}

// The closed form of a GPT's memory per device (core/nn/gpt_memory.h), where there is one: ddp or
// zero, f32. The ranks' batches differ by at most a sample: the largest is what a device holds.
std::optional<GptMemory> closed_form(const TrainConfig& c) {
  const ModelSpec spec = ModelSpec::parse(c.model);
  if (spec.family != ModelFamily::gpt || (c.strategy != "ddp" && c.strategy != "zero") || c.amp != Amp::off)
    return std::nullopt;
  const int64_t samples = (c.batch + c.devices - 1) / c.devices;
  return gpt_memory_closed_form(spec, c.strategy, c.strategy == "zero" ? std::max(1, c.zero_stage) : 0, c.devices,
                                samples, optimizer_state_tensors(c.optimizer), c.recompute);
}

ScalePoint run_point(TrainConfig c, int micro_batches) {
  const int devices = c.devices;
  // The last step's communication and idle shares are read off every device's events below: none
  // is tallied (a tally sums every step).
  c.detailed_devices = devices;
  const auto t0 = std::chrono::steady_clock::now();
  EventBus bus;
  const TrainResult r = train(c, bus);
  ScalePoint p;
  p.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  p.devices = devices;
  p.micro_batches = micro_batches;
  p.global_batch = c.batch;
  // The last step's time (the first carries what later steps overlap: it is the warm-up).
  double last_sps = 0;
  for (const Metric& m : bus.metrics())
    if (m.name == "samples_per_s") last_sps = m.value;
  p.samples_per_s = last_sps > 0 ? last_sps : r.samples_per_s;
  p.step_ms = p.samples_per_s > 0 ? 1e3 * static_cast<double>(c.batch) / p.samples_per_s : 0;
  // Communication and idle shares of the last step alone: the first carries the start-up
  // (DDP's broadcast of the weights) that later steps do not.
  std::vector<Event> last;
  int64_t last_step = -1;
  const std::vector<Event> events = bus.events();
  for (const Event& e : events) last_step = std::max(last_step, e.step);
  for (const Event& e : events)
    if (e.step == last_step) last.push_back(e);
  const RunMetrics m = compute_metrics(last, {}, c.devices);
  const size_t n = m.per_device.size();
  for (const DeviceMetrics& d : m.per_device) {
    p.comm_pct += d.comm_pct / static_cast<double>(n);
    p.exposed_comm_ms += 1e-6 * static_cast<double>(d.comm_ns) * (1 - d.overlap_pct / 100) / static_cast<double>(n);
  }
  p.bubble_pct = 100 * m.bubble_fraction;
  for (const DeviceSummary& d : r.per_device) {
    for (int k = 0; k < kMemoryCategoryCount; ++k) p.peak_bytes[k] = std::max(p.peak_bytes[k], d.peak_bytes[k]);
    p.peak_total = std::max(p.peak_total, d.peak_total);
    if (d.capacity > 0) p.capacity = p.capacity > 0 ? std::min(p.capacity, d.capacity) : d.capacity;
  }
  if (const auto m = closed_form(c)) p.closed_form = m->total();
  return p;
}

// ---- the plot: three line charts side by side, drawn as SVG (apps/scalelab/svg_chart.h) ----------

std::string plot_svg(const ScaleOptions& o, const std::vector<ScalePoint>& pts, bool over_m) {
  std::vector<double> xs;
  for (const ScalePoint& p : pts) xs.push_back(over_m ? p.micro_batches : p.devices);
  const std::string xlabel = over_m ? "micro-batches m" : "devices N";
  std::ostringstream s;
  const double W = 1470, H = 400, C = W / 3;
  // 1. What the sweep teaches: the bubble against its formula, or the efficiency.
  if (over_m) {
    // A dry run's timeline: the cost model's idle share, not a measurement.
    // Interleaved 1F1B: each device's V chunks cut the fill and drain V-fold, (p−1)/(V·m+p−1).
    const int V = o.virtual_stages;
    Series measured{"idle share (simulated)", "#d62728", {}},
        formula{V > 1 ? "(p−1)/(V·m+p−1), V = " + std::to_string(V) : "(p−1)/(m+p−1)", "#555", {}, true};
    const int p = pts.empty() ? 1 : pts.front().devices;
    for (const ScalePoint& q : pts) {
      measured.y.push_back(q.bubble_pct);
      formula.y.push_back(100.0 * (p - 1) / (V * q.micro_batches + p - 1));
    }
    chart(s, 0, 0, C, H, "Pipeline bubble vs micro-batches", xlabel, "idle share of the step (%)", xs,
          {measured, formula}, 0);
  } else {
    Series eff{"scaling efficiency", "#1f77b4", {}}, comm{"communication % of the step", "#d62728", {}};
    for (const ScalePoint& q : pts) {
      eff.y.push_back(100 * q.efficiency);
      comm.y.push_back(q.comm_pct);
    }
    chart(s, 0, 0, C, H, "Efficiency and communication", xlabel, "%", xs, {eff, comm}, 100);
  }
  // 2. The step, and what one all-reduce of all the gradients (4·P bytes) costs on this cluster by
  //    the cost model: the cheapest of NCCL's algorithms, named where it changes (the ring's steps
  //    grow with n, NVLS-tree's with log2 of the nodes).
  Series step{"step", "#1f77b4", {}}, exposed{"exposed communication", "#d62728", {}};
  Series ring{"one all-reduce of 4·P bytes (its algorithm)", "#555", {}, true};
  bool ring_line = !over_m;
  for (const ScalePoint& q : pts) {
    step.y.push_back(q.step_ms);
    exposed.y.push_back(q.exposed_comm_ms);
    ring.y.push_back(q.grad_all_reduce_ms);
    ring.labels.push_back(q.grad_all_reduce_algorithm);
  }
  std::vector<Series> times{step, exposed};
  if (ring_line) times.push_back(ring);
  chart(s, C, 0, C, H, "Step time", xlabel, "ms", xs, times, 0);
  // 3. Memory per device, by category.
  const std::array<const char*, kMemoryCategoryCount> colors{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f"};
  std::vector<Series> mem;
  Series total{"total", "#000", {}};
  for (int k = 0; k < kMemoryCategoryCount; ++k) {
    Series se{memory_category_name(static_cast<MemoryCategory>(k)), colors[static_cast<size_t>(k)], {}};
    bool any = false;
    for (const ScalePoint& q : pts) {
      se.y.push_back(gib(q.peak_bytes[static_cast<size_t>(k)]));
      any = any || q.peak_bytes[static_cast<size_t>(k)] > 0;
    }
    if (any) mem.push_back(se);
  }
  for (const ScalePoint& q : pts) total.y.push_back(gib(q.peak_total));
  mem.push_back(total);
  // DDP keeps as many bytes of gradients, optimizer state and buckets as of weights: one line,
  // named for all of them, not four drawn on top of each other.
  chart(s, 2 * C, 0, C, H, "Peak memory per device", xlabel, "GiB", xs, merge_coinciding(mem), 0);
  return svg_document(W, H, s.str(),
                      "scalelab scale: " + o.strategy + ", " + o.model + ", " + o.hw + ", " + (o.weak ? "weak" : "strong") +
                          " scaling, batch " + std::to_string(o.batch) + (o.weak ? " per device" : " global") +
                          " (simulated, dry run)");
}

}  // namespace

std::vector<int> parse_sweep(const std::string& text, const std::string& option) {
  std::vector<int> out;
  std::stringstream all(text);
  std::string item;
  auto number = [&](const std::string& t) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size() || t.empty() || v < 1 || v > (1 << 20))
      throw UsageError("scale", option + " " + text + ": '" + t + "' is not a count from 1 to 2^20 — give e.g. 8,16,32 or 8..4096");
    return static_cast<int>(v);
  };
  while (std::getline(all, item, ',')) {
    const size_t dots = item.find("..");
    if (dots == std::string::npos) {
      out.push_back(number(item));
      continue;
    }
    const int a = number(item.substr(0, dots)), b = number(item.substr(dots + 2));
    if (b < a) throw UsageError("scale", option + " " + item + ": the range runs down — write it low..high");
    for (int64_t v = a; v <= b; v *= 2) out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw UsageError("scale", option + " is empty — give e.g. 8,16,32 or 8..4096");
  return out;
}

int run_scale(const ScaleOptions& o) {
  const std::vector<int> devices = parse_sweep(o.devices, "--devices");
  const std::vector<int> micro_batches = o.micro_batches.empty() ? std::vector<int>{} : parse_sweep(o.micro_batches, "--micro-batches");
  const bool over_m = micro_batches.size() > 1;
  if (over_m && devices.size() != 1)
    throw UsageError("scale", "--micro-batches with several values sweeps m at ONE device count — give one --devices value");
  if (!o.json_path.empty()) check_output_path(o.json_path, "scale");  // before the sweep, not after
  if (!o.plot_path.empty()) check_output_path(o.plot_path, "scale");
  check_distinct_paths({{"--json", o.json_path, true}, {"--plot", o.plot_path, true}, {"--hw", profile_file(o.hw), false}},
                       "scale");
  if (o.steps < 2) throw UsageError("scale", "--steps " + std::to_string(o.steps) + ": at least 2 (the first is the warm-up)");

  std::vector<std::pair<int, int>> plan;  // (devices, micro-batches)
  if (over_m) {
    for (int m : micro_batches) plan.emplace_back(devices.front(), m);
  } else {
    for (int n : devices) plan.emplace_back(n, micro_batches.empty() ? 1 : micro_batches.front());
  }
  const HardwareProfile profile = load_profile(o.hw);
  const int largest = *std::max_element(devices.begin(), devices.end());
  if (largest > profile.device_count()) {
    (void)reshaped(profile, (largest + profile.devices_per_node - 1) / profile.devices_per_node, 0);  // can it be?
    std::printf("# %s has %d devices (%d × %d): the larger clusters are it with more nodes\n", profile.name.c_str(),
                profile.device_count(), profile.nodes, profile.devices_per_node);
  }
  std::vector<TrainConfig> configs;  // every point checked before the first runs
  for (const auto& [n, m] : plan) configs.push_back(point_config(o, profile, n, m));
  std::printf("# scalelab scale: %s on %s, %s, %s scaling (batch %lld %s), dry run — simulated times\n",
              o.strategy.c_str(), o.hw.c_str(), o.model.c_str(), o.weak ? "weak" : "strong",
              static_cast<long long>(o.batch), o.weak ? "per device" : "global");
  std::printf("# efficiency: samples/s per device against the first row's; exposed comm: communication not hidden "
              "under compute, per step; idle: the compute lanes' idle share (a pipeline's bubble); memory: the most any one device holds\n");
  const bool gpt_closed = closed_form(configs.front()).has_value();
  if (gpt_closed) {
    const GptMemory m = *closed_form(configs.front());
    std::printf("# closed form: a GPT's memory per device (params, grads, optimizer by ZeRO stage and N, activations "
                "as our blocks keep them); one block keeps %s at the first row's batch — Korthikanti et al.'s count "
                "(16-bit, dropout masks) would be %s\n",
                format_bytes(m.block_activations).c_str(),
                format_bytes(static_cast<int64_t>(m.korthikanti_block_bytes)).c_str());
  }
  std::printf("%6s %4s %8s %10s %12s %6s %7s %9s %8s", "devices", "m", "batch", "ms/step", "samples/s", "eff%", "comm%",
              "exposed", "idle%");
  for (int k = 0; k < kMemoryCategoryCount; ++k) std::printf(" %9.9s", memory_category_name(static_cast<MemoryCategory>(k)));
  std::printf(" %9s %9s %9s %4s %7s  %s\n", "peak GiB", gpt_closed ? "closed" : "", "of GiB", "fits", "wall s",
              "all-reduce of 4·P B");
  std::fflush(stdout);

  std::vector<ScalePoint> pts;
  for (size_t i = 0; i < plan.size(); ++i) {
    ScalePoint p = run_point(configs[i], plan[i].second);
    const CollectiveChoice ar = gradient_all_reduce(profile, o.model, p.devices);
    p.grad_all_reduce_ms = 1e3 * ar.seconds;
    p.grad_all_reduce_algorithm = algorithm_word(ar);
    const double per_device = p.samples_per_s / p.devices;
    if (pts.empty()) p.efficiency = 1;
    else {
      const double first = pts.front().samples_per_s / pts.front().devices;
      p.efficiency = first > 0 ? per_device / first : 0;
    }
    std::printf("%7d %4d %8lld %10.3f %12.0f %6.1f %7.1f %8.3fms %8.1f", p.devices, p.micro_batches,
                static_cast<long long>(p.global_batch), p.step_ms, p.samples_per_s, 100 * p.efficiency, p.comm_pct,
                p.exposed_comm_ms, p.bubble_pct);
    for (int k = 0; k < kMemoryCategoryCount; ++k) std::printf(" %9.3f", gib(p.peak_bytes[static_cast<size_t>(k)]));
    char closed[16] = "";
    if (p.closed_form >= 0) std::snprintf(closed, sizeof closed, "%.3f", gib(p.closed_form));
    std::printf(" %9.3f %9s %9.1f %4s %7.1f  %.3fms %s\n", gib(p.peak_total), closed, gib(p.capacity), p.fits() ? "yes" : "NO",
                p.wall_s, p.grad_all_reduce_ms, p.grad_all_reduce_algorithm.c_str());
    std::fflush(stdout);
    pts.push_back(p);
  }

  if (!o.json_path.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const ScalePoint& p : pts) {
      nlohmann::json mem = nlohmann::json::object();
      for (int k = 0; k < kMemoryCategoryCount; ++k)
        mem[memory_category_name(static_cast<MemoryCategory>(k))] = p.peak_bytes[static_cast<size_t>(k)];
      rows.push_back({{"devices", p.devices}, {"micro_batches", p.micro_batches}, {"global_batch", p.global_batch},
                      {"step_ms", p.step_ms}, {"samples_per_s", p.samples_per_s}, {"efficiency", p.efficiency},
                      {"comm_pct", p.comm_pct}, {"exposed_comm_ms", p.exposed_comm_ms}, {"bubble_pct", p.bubble_pct},
                      {"peak_bytes", mem}, {"peak_total_bytes", p.peak_total}, {"capacity_bytes", p.capacity},
                      {"closed_form_bytes", p.closed_form >= 0 ? nlohmann::json(p.closed_form) : nlohmann::json()},
                      {"fits", p.fits()}, {"wall_s", p.wall_s}, {"grad_all_reduce_ms", p.grad_all_reduce_ms},
                      {"grad_all_reduce_algorithm", p.grad_all_reduce_algorithm}});
    }
    nlohmann::json j = {{"strategy", o.strategy}, {"hw", o.hw}, {"model", o.model}, {"scaling", o.weak ? "weak" : "strong"},
                        {"batch", o.batch}, {"steps", o.steps}, {"optimizer", o.optimizer},
                        {"zero_stage", find_strategy(o.strategy).takes(StrategyOption::zero_stage) ? o.zero_stage : 0},
                        {"schedule", o.schedule}, {"virtual_stages", o.virtual_stages},
                        {"parameters", ModelSpec::parse(o.model).parameter_count()}, {"simulated", true}, {"rows", rows}};
    write_file_atomically(o.json_path, j.dump(2) + "\n", "scale");
    std::printf("  json  %s\n", o.json_path.c_str());
  }
  if (!o.plot_path.empty()) {
    write_file_atomically(o.plot_path, plot_svg(o, pts, over_m), "scale");
    std::printf("  plot  %s\n", o.plot_path.c_str());
  }
  return 0;
}

}  // namespace scalelab
