// Predicted next to measured (issue 15): a run on the cpu device, and the same run priced by the
// cost model on a profile of this machine (`scalelab calibrate`), side by side with the error —
// `scalelab train --device cpu --predict PROFILE` for one run, `scalelab bench predict` for every
// strategy on three models.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "calibration/calibration.h"
#include "calibration/host_turns.h"
#include "core/device/host_cores.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/nn/model.h"
#include "core/trace/chrome_trace.h"
#include "core/trace/metrics.h"
#include "run/train.h"
#include "strategies/strategy.h"

namespace scalelab {

namespace {

using nlohmann::json;

constexpr int kClassCount = 5;
const char* const kClassNames[kClassCount] = {"gemm", "elementwise", "copy", "comm", "host"};

// The op classes the cost model prices differently: GEMMs, other compute (bytes / mem_bw +
// launch), copies, collectives, and what the host lane records.
int op_class(const Event& e) {
  switch (e.lane) {
    case Lane::comm: return 3;
    case Lane::copy: return 2;
    case Lane::host: return 4;
    default: return e.kind == "gemm" ? 0 : 1;
  }
}

// What is compared, for one run. Steps from the second on (the first warms caches and threads up).
struct RunFigures {
  double step_s = 0;  // median over steps of one step's first op to the next step's first op
  std::array<double, kClassCount> class_s{};  // seconds per step, summed over devices
  std::vector<DeviceSummary> devices;
};

RunFigures figures_of(const std::vector<Event>& events, const TrainResult& r) {
  RunFigures f;
  f.devices = r.per_device;
  std::map<int64_t, int64_t> step_begin;
  for (const Event& e : events)
    if (e.step >= 0) {
      auto [it, fresh] = step_begin.try_emplace(e.step, e.t_begin_ns);
      if (!fresh) it->second = std::min(it->second, e.t_begin_ns);
    }
  std::vector<double> lengths;
  for (auto it = step_begin.begin(); it != step_begin.end(); ++it) {
    auto next = std::next(it);
    if (it == step_begin.begin() || next == step_begin.end()) continue;
    lengths.push_back(static_cast<double>(next->second - it->second) * 1e-9);
  }
  if (lengths.empty()) {  // fewer than 3 steps: the whole run's time per step
    f.step_s = r.steps > 0 ? r.time_s / static_cast<double>(r.steps) : 0;
  } else {
    std::sort(lengths.begin(), lengths.end());
    f.step_s = lengths[lengths.size() / 2];
  }
  const int64_t first = step_begin.empty() ? 0 : step_begin.begin()->first;
  const int64_t counted = std::max<int64_t>(1, static_cast<int64_t>(step_begin.size()) - 1);
  const std::vector<int64_t> counts = moving_time_ns(events);
  for (size_t i = 0; i < events.size(); ++i)
    if (events[i].step > first) f.class_s[static_cast<size_t>(op_class(events[i]))] += static_cast<double>(counts[i]) * 1e-9;
  for (double& s : f.class_s) s /= static_cast<double>(counted);
  return f;
}

double error_of(double predicted, double measured) { return measured > 0 ? (predicted - measured) / measured : 0; }

// The class whose time per step is furthest from the measurement, in seconds.
int worst_class(const RunFigures& p, const RunFigures& m) {
  int worst = 0;
  for (int i = 1; i < kClassCount; ++i)
    if (std::abs(p.class_s[i] - m.class_s[i]) > std::abs(p.class_s[worst] - m.class_s[worst])) worst = i;
  return worst;
}

// The same run priced by the cost model: sim devices of the profile, a dry run (times do not
// depend on the values), nothing written.
TrainConfig priced_twin(const TrainConfig& c, const std::string& profile) {
  TrainConfig s = c;
  s.device = DeviceKind::sim;
  s.hw = profile;
  s.dry_run = true;
  s.launch = Launch::threads;
  s.comm = CommBackend::automatic;
  s.trace_path.clear();
  s.trace_first_step = s.trace_last_step = -1;  // no trace, so no steps of one (train refuses steps without a file)
  s.json_path.clear();
  s.checkpoint_path.clear();
  s.checkpoint_every = 0;
  s.resume_path.clear();
  s.init_weights_path.clear();
  s.check_equivalence = false;
  return s;
}

// Where `train --predict … --trace T` writes the prediction's trace: T with ".predicted" before
// its ".json" (or ".json.gz"), else after it.
std::string predicted_trace_path(const std::string& trace_path) {
  for (const char* ext : {".json.gz", ".json"}) {
    const std::string e = ext;
    if (trace_path.size() > e.size() && trace_path.compare(trace_path.size() - e.size(), e.size(), e) == 0)
      return trace_path.substr(0, trace_path.size() - e.size()) + ".predicted" + e;
  }
  return trace_path + ".predicted.json";
}

// The prediction as a trace beside the measured run's: the sim's events as this host serves them
// (take_turns_on_host), the same steps kept, so the two open side by side in Perfetto or the dashboard.
void write_predicted_trace(const TrainConfig& c, const std::string& profile, const std::vector<Event>& served,
                           const EventBus& sim_bus) {
  TraceInfo ti;
  ti.devices = sim_bus.devices();
  ti.simulated = true;
  ti.title = "scalelab train --strategy " + c.strategy + " --model " + c.model + ", predicted on " + profile +
             " as this host's cores serve it";
  std::vector<Event> kept;
  for (const Event& e : served)
    if (c.trace_first_step < 0 || (e.step >= c.trace_first_step && e.step <= c.trace_last_step)) kept.push_back(e);
  if (c.trace_first_step >= 0)
    ti.title += " (steps " + std::to_string(c.trace_first_step) + "–" + std::to_string(c.trace_last_step) + ")";
  write_chrome_trace(predicted_trace_path(c.trace_path), kept, {}, {}, ti);
}

// A run measured, and priced on one or more profiles.
struct Prediction {
  std::string profile;
  RunFigures figures;
  TrainResult run;
};
struct Comparison {
  RunFigures measured;                 // the run of median step time
  std::vector<double> measured_steps;  // every measured run's step time, sorted
  std::vector<Prediction> predicted;
  double error(size_t i = 0) const { return error_of(predicted[i].figures.step_s, measured.step_s); }
};

using MeasuredRun = std::pair<RunFigures, TrainResult>;

// A prediction is of a measured run: the cpu or the cuda device. A bad profile is refused before anything runs.
void check_comparable(const TrainConfig& c, const std::vector<std::string>& profiles) {
  if (c.device != DeviceKind::cpu && c.device != DeviceKind::cuda)
    throw UsageError("predict", "--predict compares a measured run with its prediction: it needs --device cpu or cuda, got --device " +
                                    std::string(device_kind_name(c.device)) + " — drop --predict, or pass --device cpu");
  for (const std::string& p : profiles) load_profile(p);
}

// One measured run of the config. Its trace names what its prediction is priced with (the first profile).
MeasuredRun measure(const TrainConfig& c, const std::vector<std::string>& profiles, const ProgressFn& progress) {
  EventBus bus;
  TrainConfig measured = c;
  if (!profiles.empty()) measured.trace_predicted_with = profile_to_json(load_profile(profiles.front()));
  TrainResult run = train(measured, bus, progress);
  RunFigures figures = figures_of(bus.events(), run);
  return {std::move(figures), std::move(run)};
}

// The config's measured runs (this machine's times move from one run to the next by several per
// cent) next to its prediction on each profile: the run of median step time is compared, and the
// spread is kept.
Comparison compare(const TrainConfig& c, const std::vector<std::string>& profiles, std::vector<MeasuredRun> runs,
                   TrainResult& measured_run) {
  Comparison out;
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first.step_s < b.first.step_s; });
  for (const auto& run : runs) out.measured_steps.push_back(run.first.step_s);
  out.measured = runs[runs.size() / 2].first;
  measured_run = std::move(runs[runs.size() / 2].second);
  for (const std::string& p : profiles) {
    EventBus sim_bus;
    Prediction pr{p, {}, train(priced_twin(c, p), sim_bus)};
    std::vector<Event> served;
    if (c.device == DeviceKind::cpu) {
    // The cpu devices measured took turns on this host's cores, passing them from thread to thread;
    // the sim priced each alone. Hogwild's workers are processes: they share the cores without turns.
    const int cores = static_cast<int>(usable_cores().size());
    const HostCalibration host = load_profile(p).calibration.value_or(HostCalibration{});
    HostShare share = find_strategy(c.strategy).workers_are_processes
                          ? processes_share(c.devices, cores)
                          : HostShare{1, 1, seconds_to_ns(host.turn_handoff_s), seconds_to_ns(host.turn_gemm_extra_s)};
    // The devices' data together within the cache in effect: a collective and an element-wise op
    // then each run on a core of their own, not one after the other — unless the turns keep to one
    // core, where the collective's ranks are too.
    int64_t footprint = 0;
    for (const DeviceSummary& d : pr.run.per_device) footprint += d.peak_total;
    share.collectives_beside_one_thread_ops = !host.turns_on_one_core && host.host_cache_bytes > 0 && static_cast<double>(footprint) <= host.host_cache_bytes;
    if (host.turns_on_one_core) share.one_core_yield_gemm_mnk = kBlasOneThreadMaxMnk;
    served = take_turns_on_host(sim_bus.events(), share);
    } else {
      // cuda: each device's ops run on its own stream, as the sim prices them; nothing takes turns on
      // the host's cores (the re-timing is the cpu device's only).
      served = sim_bus.events();
    }
    if (!c.trace_path.empty() && &p == &profiles.front()) write_predicted_trace(c, p, served, sim_bus);
    pr.figures = figures_of(served, pr.run);
    const RunMetrics turns = compute_metrics(served, {}, static_cast<int>(pr.figures.devices.size()));
    for (size_t d = 0; d < pr.figures.devices.size() && d < turns.per_device.size(); ++d) {
      pr.figures.devices[d].busy_pct = turns.per_device[d].busy_pct;
      pr.figures.devices[d].comm_pct = turns.per_device[d].comm_pct;
      pr.figures.devices[d].idle_pct = turns.per_device[d].idle_pct;
    }
    out.predicted.push_back(std::move(pr));
  }
  return out;
}

json comparison_json(const RunFigures& predicted, const RunFigures& measured, const std::string& profile) {
  json devices = json::array();
  for (size_t i = 0; i < measured.devices.size() && i < predicted.devices.size(); ++i) {
    const DeviceSummary &p = predicted.devices[i], &m = measured.devices[i];
    devices.push_back({{"device", m.name},
                       {"predicted", {{"busy_pct", p.busy_pct}, {"comm_pct", p.comm_pct}, {"idle_pct", p.idle_pct}}},
                       {"measured", {{"busy_pct", m.busy_pct}, {"comm_pct", m.comm_pct}, {"idle_pct", m.idle_pct}}}});
  }
  json classes = json::object();
  for (int i = 0; i < kClassCount; ++i)
    classes[kClassNames[i]] = {{"predicted_s", predicted.class_s[i]}, {"measured_s", measured.class_s[i]}};
  return {{"profile", profile},
          {"step_time_s", {{"predicted", predicted.step_s}, {"measured", measured.step_s},
                           {"error", error_of(predicted.step_s, measured.step_s)}}},
          {"per_device", devices},
          {"per_step_by_class", classes},
          {"furthest_class", kClassNames[worst_class(predicted, measured)]}};
}

void print_comparison(const RunFigures& predicted, const RunFigures& measured, const std::string& profile) {
  const double error = error_of(predicted.step_s, measured.step_s);
  std::printf("  predicted vs measured (the cost model on %s, a dry run of the same config)\n", profile.c_str());
  std::printf("    %-22s %11s %11s %8s\n", "", "predicted", "measured", "error");
  std::printf("    %-22s %11.3f %11.3f %+7.1f %%\n", "step time (ms)", predicted.step_s * 1e3,
              measured.step_s * 1e3, 100 * error);
  for (size_t i = 0; i < measured.devices.size() && i < predicted.devices.size(); ++i) {
    const DeviceSummary &p = predicted.devices[i], &m = measured.devices[i];
    std::printf("    %-22s %4.0f/%3.0f/%3.0f %4.0f/%3.0f/%3.0f   busy/comm/idle %%\n", m.name.c_str(), p.busy_pct, p.comm_pct,
                p.idle_pct, m.busy_pct, m.comm_pct, m.idle_pct);
  }
  for (int i = 0; i < kClassCount; ++i) {
    if (predicted.class_s[i] == 0 && measured.class_s[i] == 0) continue;
    std::printf("    %-22s %11.3f %11.3f %+7.1f %%\n", (std::string(kClassNames[i]) + " ms/step (all dev)").c_str(),
                predicted.class_s[i] * 1e3, measured.class_s[i] * 1e3, 100 * error_of(predicted.class_s[i], measured.class_s[i]));
  }
  if (std::abs(error) > 0.03) std::printf("    furthest off: %s\n", kClassNames[worst_class(predicted, measured)]);
}

json speed_now_json(const std::vector<SpeedProbe>& probes) {
  json j = json::array();
  for (const SpeedProbe& p : probes)
    j.push_back({{"op", p.what}, {"calibrated_s", p.calibrated_s}, {"now_s", p.now_s}, {"moved_past", p.moved_past}});
  return j;
}

// A saved table's probes; what is not as written is left out, not trusted (a table of a build
// before the round trip kept only a GEMM, and no moved_past: 1.10 then).
std::vector<SpeedProbe> speed_now_of(const json& saved) {
  std::vector<SpeedProbe> probes;
  if (!saved.is_array()) return probes;
  for (const json& p : saved)
    if (p.is_object() && p.contains("op") && p["op"].is_string() && p.contains("calibrated_s") &&
        p["calibrated_s"].is_number() && p.contains("now_s") && p["now_s"].is_number()) {
      SpeedProbe probe{p["op"].get<std::string>(), p["calibrated_s"].get<double>(), p["now_s"].get<double>()};
      if (p.contains("moved_past")) {
        if (!p["moved_past"].is_number() || !(p["moved_past"].get<double>() > 1)) continue;
        probe.moved_past = p["moved_past"].get<double>();
      }
      probes.push_back(std::move(probe));
    }
  return probes;
}

bool any_moved(const std::vector<SpeedProbe>& probes) {
  return std::any_of(probes.begin(), probes.end(), [](const SpeedProbe& p) { return p.moved(); });
}

// "GEMM 128×1024×1024 1.02×, core-to-core round trip 0.91× their calibrated times", and a warning
// for each probe that has moved.
void print_speed_now(const std::vector<SpeedProbe>& probes, const char* first, const char* then) {
  if (probes.empty()) return;
  std::string line;
  for (const SpeedProbe& p : probes) {
    char one[160];
    std::snprintf(one, sizeof one, "%s%s %.2f×", line.empty() ? "" : ", ", p.what.c_str(), p.ratio());
    line += one;
  }
  std::printf("%s%s %s\n", first, line.c_str(), probes.size() == 1 ? "its calibrated time" : "their calibrated times");
  for (const SpeedProbe& p : probes) {
    if (!p.moved()) continue;
    if (p.what == "core-to-core round trip")
      std::printf("%sthe host has placed this machine's cores otherwise than when calibrated (a cache line's round trip\n"
                  "%snow %.0f ns, %.0f when calibrated): element-wise ops that read another core's writes run at another speed (2–3× on a\n"
                  "%sVM) — the error is the machine's, not the model's; calibrate again, or wait for the cores to move back\n",
                  then, then, p.now_s * 1e9, p.calibrated_s * 1e9, then);
    else
      std::printf("%s%s more than %.0f %% off: the machine is not as it was calibrated (other load, or another\n"
                  "%smachine) — an error of that size is the machine's, not the model's\n",
                  then, p.what.c_str(), 100 * (p.moved_past - 1), then);
  }
}

}  // namespace

int train_with_prediction(const TrainConfig& config, const std::string& profile, const ProgressFn& progress) {
  check_output_paths(config, {{"--predict", profile_file(profile), false},
                              {"--trace (its .predicted twin)",
                               config.trace_path.empty() ? "" : predicted_trace_path(config.trace_path), true}});
  check_comparable(config, {profile});
  TrainResult r;
  const Comparison cmp = compare(config, {profile}, {measure(config, {profile}, progress)}, r);
  const Prediction& p = cmp.predicted.front();
  std::fputs(format_summary(r).c_str(), stdout);
  print_comparison(p.figures, cmp.measured, profile);
  // Timed after the run, not before: it must not warm or disturb what was measured.
  const std::vector<SpeedProbe> speed = machine_speed_now(load_profile(profile), config.device);
  print_speed_now(speed, "    machine now            ", "                           ");
  if (!config.json_path.empty()) {
    json j = to_json(r);
    j["prediction"] = comparison_json(p.figures, cmp.measured, profile);
    j["prediction"]["summary"] = to_json(p.run);
    j["prediction"]["speed_now"] = speed_now_json(speed);
    write_file_atomically(config.json_path, j.dump(2) + "\n", "predict");
    std::printf("  json            %s\n", config.json_path.c_str());
  }
  if (!config.trace_path.empty())
    std::printf("  trace           %s measured, %s predicted (open both in https://ui.perfetto.dev)\n",
                config.trace_path.c_str(), predicted_trace_path(config.trace_path).c_str());
  return 0;
}

// Where a profile's figures come from: "calibrated on MACHINE, DATE", or "not calibrated" (a
// shipped GPU profile: its cpu prediction means nothing).
std::string calibration_of(const std::string& profile) {
  const std::string path = load_profile(profile).path;  // a name or a path; refused here, with the field, when broken
  const json j = json::parse(read_regular_file(path, "bench", 16 << 20, "pass a profile JSON file"));
  if (!j.contains("calibration") || !j["calibration"].is_object()) return "not calibrated";
  return "calibrated on " + j["calibration"].value("machine", std::string("?")) + ", " + j["calibration"].value("date", std::string("?"));
}

// The device a profile was calibrated on: its calibration's "device" (a cpu calibration has none:
// "cpu"); "" for a profile not calibrated.
std::string calibrated_device(const std::string& profile) {
  const std::string path = load_profile(profile).path;
  const json j = json::parse(read_regular_file(path, "bench", 16 << 20, "pass a profile JSON file"));
  if (!j.contains("calibration") || !j["calibration"].is_object()) return "";
  const json& device = j["calibration"].value("device", json("cpu"));
  return device.is_string() ? device.get<std::string>() : "cpu";
}

namespace {

// Profiles with their GEMMs re-timed, written where the pricing can load them, and removed when
// the model is done.
class RetimedProfiles {
 public:
  RetimedProfiles() = default;
  RetimedProfiles(const RetimedProfiles&) = delete;
  RetimedProfiles& operator=(const RetimedProfiles&) = delete;
  ~RetimedProfiles() {
    for (const std::string& p : paths_) {
      std::error_code ignored;
      std::filesystem::remove(p, ignored);
    }
  }
  // The path of `profile` with the GEMMs `now` timed priced at their times now — each shape its own
  // point of the table, its cold and adding times moved as its hot one — or, for a table of an earlier build
  // that kept only a ratio, every time of the table × the ratio (unchanged where nothing was timed).
  std::string add(const std::string& profile, const GemmSpeedNow& now) {
    HardwareProfile p = load_profile(profile);
    if (!p.calibration) p.calibration.emplace();
    GemmTable& table = p.calibration->gemm_table;
    const GemmTable calibrated = table;
    bool by_shape = false;
    for (const json& s : now.shapes) {
      if (!s.contains("trans_a")) continue;  // an earlier build's probes: not the model's shapes
      GemmPoint g;
      g.m = s.at("m").get<double>();
      g.n = s.at("n").get<double>();
      g.k = s.at("k").get<double>();
      g.trans_a = s.at("trans_a").get<bool>();
      g.trans_b = s.at("trans_b").get<bool>();
      g.seconds = s.at("now_s").get<double>();
      const double hot = calibrated.seconds(g.m, g.n, g.k, g.trans_a, g.trans_b),
                   cold = calibrated.seconds(g.m, g.n, g.k, g.trans_a, g.trans_b, 1.0),
                   adding = calibrated.seconds(g.m, g.n, g.k, g.trans_a, g.trans_b, 0.0, true);
      if (!(hot > 0) || !(g.seconds > 0)) continue;
      g.seconds_cold = cold * g.seconds / hot;
      if (adding != hot) g.seconds_accumulate = adding * g.seconds / hot;
      auto same = std::find_if(table.points.begin(), table.points.end(), [&](const GemmPoint& q) {
        return q.m == g.m && q.n == g.n && q.k == g.k && q.trans_a == g.trans_a && q.trans_b == g.trans_b;
      });
      if (same != table.points.end()) *same = g;
      else table.points.push_back(g);
      by_shape = true;
    }
    if (!by_shape && now.ratio > 0)
      for (GemmPoint& g : table.points) {
        g.seconds *= now.ratio;
        g.seconds_cold *= now.ratio;
      }
    const std::string path = (std::filesystem::temp_directory_path() / ("scalelab-retimed-" + std::to_string(::getpid()) + "-" +
                                                                        std::to_string(paths_.size()) + ".json")).string();
    write_file_atomically(path, profile_to_json(p) + "\n", "bench");
    paths_.push_back(path);
    return path;
  }

 private:
  std::vector<std::string> paths_;
};

// A table `bench predict --json` wrote: its measured runs, priced again by `--measured`.
struct SavedTable {
  json rows = json::array();
  int64_t batch = 0, steps = 0;  // 0: not recorded (a table of an earlier build)
  std::vector<std::string> models;
  std::string device = "cpu";  // what the runs were measured on: priced again as on that device
};

// Every measured figure of a table's rows, checked as a profile's are: a time of −1, 0 or NaN, or
// one missing, would be compared as if measured (an error of 0: "within ±3 %"). A row that failed
// when measured (its "error", no runs) is skipped by the pricing, and here. `what`: the option and
// the file, for the message.
void check_measured_figures(const json& rows, const std::string& what) {
  for (size_t r = 0; r < rows.size(); ++r) {
    const json& row = rows[r];
    std::string here = "rows[" + std::to_string(r) + "]";
    auto refuse = [&](const std::string& name, const std::string& problem) {
      throw UsageError("bench", what + ": " + here + (name.empty() ? "" : ", field '" + name + "'") + " " + problem +
                                    " — pass a table written by `scalelab bench predict --json`");
    };
    auto member = [&](const json& parent, const char* key, const std::string& name) -> const json& {
      if (!parent.is_object() || !parent.contains(key)) refuse(name, "is missing");
      return parent[key];
    };
    // A time is seconds > 0 (at most an hour: a step, an op class's share of one, a GEMM), or ≥ 0
    // where a step may have none of it (comm on one device); a share of a step is 0 … 100 %.
    auto number = [&](const json& v, const std::string& name, double min, bool zero_allowed, double max) {
      const double d = v.is_number() ? v.get<double>() : std::nan("");
      if (!(zero_allowed ? d >= min : d > min) || !(d <= max)) {
        char range[64];
        std::snprintf(range, sizeof range, "%s %g and ≤ %g", zero_allowed ? "≥" : ">", min, max);
        refuse(name, "is " + v.dump() + ": it must be a number " + range);
      }
    };
    if (!row.is_object()) refuse("", "is not an object");
    if (row.contains("error") && !row.contains("measured_runs_step_s")) continue;  // failed when measured: not priced
    for (const char* key : {"model", "strategy"})
      if (!member(row, key, key).is_string()) refuse(key, "is not a string");
    here += " (" + row["model"].get<std::string>() + " / " + row["strategy"].get<std::string>() + ")";
    if (row.contains("measured_step_s")) number(row["measured_step_s"], "measured_step_s", 0, false, 3600);
    const json& runs = member(row, "measured_runs_step_s", "measured_runs_step_s");
    if (!runs.is_array() || runs.empty()) refuse("measured_runs_step_s", "must be a list of step times, at least one");
    for (size_t i = 0; i < runs.size(); ++i) number(runs[i], "measured_runs_step_s[" + std::to_string(i) + "]", 0, false, 3600);
    const json& predictions = row.contains("predictions") ? row["predictions"] : json::array();
    if (!predictions.is_array()) refuse("predictions", "must be a list");
    for (size_t k = 0; k < predictions.size(); ++k) {
      const std::string at = "predictions[" + std::to_string(k) + "]";
      const json& classes = member(predictions[k], "per_step_by_class", at + ".per_step_by_class");
      for (const char* name : kClassNames) {
        const std::string c = at + ".per_step_by_class." + name;
        number(member(member(classes, name, c), "measured_s", c + ".measured_s"), c + ".measured_s", 0, true, 3600);
      }
      const json& devices = member(predictions[k], "per_device", at + ".per_device");
      if (!devices.is_array()) refuse(at + ".per_device", "must be a list");
      for (size_t d = 0; d < devices.size(); ++d) {
        const std::string dev = at + ".per_device[" + std::to_string(d) + "]";
        if (!member(devices[d], "device", dev + ".device").is_string()) refuse(dev + ".device", "is not a string");
        const json& m = member(devices[d], "measured", dev + ".measured");
        for (const char* share : {"busy_pct", "comm_pct", "idle_pct"})
          number(member(m, share, dev + ".measured." + share), dev + ".measured." + share, 0, true, 100);
      }
    }
    // The probes timed around the runs (a GEMM, the cores' round trip): [[probe, …], …].
    for (const char* key : {"speed_now", "speed_after"}) {
      if (!row.contains(key) || !row[key].is_array()) continue;
      for (size_t k = 0; k < row[key].size(); ++k) {
        const json& probes = row[key][k];
        for (size_t q = 0; probes.is_array() && q < probes.size(); ++q)
          for (const char* time : {"calibrated_s", "now_s"})
            if (probes[q].is_object() && probes[q].contains(time))
              number(probes[q][time], std::string(key) + "[" + std::to_string(k) + "][" + std::to_string(q) + "]." + time, 0, false,
                     3600);
      }
    }
    if (!row.contains("gemm_speed_now")) continue;
    const json& speeds = row["gemm_speed_now"];
    if (!speeds.is_array()) refuse("gemm_speed_now", "must be a list");
    for (size_t k = 0; k < speeds.size(); ++k) {
      const std::string at = "gemm_speed_now[" + std::to_string(k) + "]";
      if (speeds[k].contains("ratio")) number(speeds[k]["ratio"], at + ".ratio", 0, true, 1e6);
      if (!speeds[k].contains("shapes")) continue;
      if (!speeds[k]["shapes"].is_array()) refuse(at + ".shapes", "must be a list");
      for (size_t g = 0; g < speeds[k]["shapes"].size(); ++g) {
        const json& shape = speeds[k]["shapes"][g];
        const std::string sh = at + ".shapes[" + std::to_string(g) + "]";
        if (!shape.contains("trans_a")) continue;  // an earlier build's probe: not priced
        for (const char* key : {"m", "n", "k"}) number(member(shape, key, sh + "." + key), sh + "." + key, 1, true, 1e6);
        number(member(shape, "now_s", sh + ".now_s"), sh + ".now_s", 0, false, 3600);
      }
    }
  }
}

// `option`: how the user named the table ("--measured", "bench repeat"), for the errors.
SavedTable read_saved_table(const std::string& path, const std::string& option = "--measured") {
  const std::string what = option + " " + path;
  SavedTable t;
  std::string text;
  try {
    text = read_regular_file(path, "bench", 64 << 20, "pass a table written by `scalelab bench predict --json`");
  } catch (const std::exception& e) {
    // Not there, not a file, too large: the user's to fix (exit 2), in the reader's words.
    std::string why = e.what();
    if (why.rfind("[bench] ", 0) == 0) why.erase(0, 8);
    throw UsageError("bench", option + ": " + why);
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError("bench", what + ": not JSON (" + json_reason(e) + ") — pass a table written by `scalelab bench predict --json`");
  }
  if (!j.is_object() || !j.contains("rows") || !j["rows"].is_array() || j["rows"].empty())
    throw UsageError("bench", what + ": no \"rows\" — pass a table written by `scalelab bench predict --json`");
  t.rows = j["rows"];
  check_measured_figures(t.rows, what);
  try {
    t.batch = j.value("batch", int64_t{0});
    t.steps = j.value("steps", int64_t{0});
    t.device = j.value("device", std::string("cpu"));
  } catch (const json::exception& e) {
    throw UsageError("bench", what + ": \"batch\" and \"steps\" are counts (" + json_reason(e) +
                                  ") — pass a table written by `scalelab bench predict --json`");
  }
  for (const json& row : t.rows)
    if (row.is_object() && row.contains("model") && row["model"].is_string() &&
        std::find(t.models.begin(), t.models.end(), row["model"].get<std::string>()) == t.models.end())
      t.models.push_back(row["model"].get<std::string>());
  return t;
}

// The saved row of (model, strategy); null when the table has none or it failed then.
const json* saved_row(const SavedTable& t, const std::string& model, const std::string& strategy) {
  for (const json& row : t.rows)
    if (row.is_object() && row.value("model", std::string()) == model && row.value("strategy", std::string()) == strategy)
      return row.contains("measured_runs_step_s") ? &row : nullptr;
  return nullptr;
}

// The measured runs a saved row kept: every run's step time, and the median run's time per op
// class and per-device shares (what the table kept of it, from its first prediction); `devices`
// becomes the row's.
std::vector<MeasuredRun> saved_runs(const json& row, const std::string& path, int& devices) {
  try {
    devices = row.value("devices", devices);
    RunFigures median;
    if (row.contains("predictions") && !row["predictions"].empty()) {
      const json& p = row["predictions"].at(0);
      for (int i = 0; i < kClassCount; ++i)
        median.class_s[static_cast<size_t>(i)] = p.at("per_step_by_class").at(kClassNames[i]).at("measured_s").get<double>();
      for (const json& d : p.at("per_device")) {
        DeviceSummary s;
        s.name = d.at("device").get<std::string>();
        s.busy_pct = d.at("measured").at("busy_pct").get<double>();
        s.comm_pct = d.at("measured").at("comm_pct").get<double>();
        s.idle_pct = d.at("measured").at("idle_pct").get<double>();
        median.devices.push_back(std::move(s));
      }
    }
    std::vector<MeasuredRun> runs;
    for (const json& step : row.at("measured_runs_step_s")) {
      runs.emplace_back();
      runs.back().first = median;
      runs.back().first.step_s = step.get<double>();
    }
    if (runs.empty()) throw std::runtime_error("no measured runs");
    return runs;
  } catch (const std::exception& e) {
    throw UsageError("bench", "--measured " + path + ": the row of " + row.value("model", std::string("?")) + " / " +
                                  row.value("strategy", std::string("?")) + " is broken (" + json_reason(e) +
                                  ") — pass a table written by `scalelab bench predict --json`");
  }
}

// The GEMM speed a saved table measured before a model's runs, for profile `index` (ratio 0: none kept).
GemmSpeedNow saved_gemm_speed(const SavedTable& t, const std::string& path, const std::string& model, size_t index) {
  GemmSpeedNow now;
  for (const json& row : t.rows)
    if (row.is_object() && row.value("model", std::string()) == model && row.contains("gemm_speed_now") &&
        row["gemm_speed_now"].is_array() && index < row["gemm_speed_now"].size()) {
      try {
        const json& s = row["gemm_speed_now"][index];
        now.ratio = s.value("ratio", 0.0);
        if (s.contains("shapes") && s["shapes"].is_array()) now.shapes = s["shapes"];
        for (const json& g : now.shapes)
          if (g.contains("trans_a") && !(g.at("m").is_number() && g.at("n").is_number() && g.at("k").is_number() &&
                                         g.at("trans_a").is_boolean() && g.at("trans_b").is_boolean() && g.at("now_s").is_number()))
            throw std::runtime_error("a shape is not {m, n, k, trans_a, trans_b, now_s}: " + g.dump());
      } catch (const std::exception& e) {
        throw UsageError("bench", "--measured " + path + ": the GEMM re-timing of " + model + " is broken (" + json_reason(e) +
                                      ") — pass a table written by `scalelab bench predict --json`");
      }
      return now;
    }
  return now;
}

// The GEMM shapes a model's runs make, as the sim prices them (every strategy's dry run on
// `profile`): for each layer and each number of rows its GEMMs have there — the batch, a replica's
// or a micro-batch's share — the forward x·Wᵀ, dW = dyᵀ·x and (past the first layer) dx = dy·W.
std::vector<GemmPoint> gemm_shapes_of(const std::vector<std::pair<std::string, TrainConfig>>& configs,
                                      const std::string& profile) {
  std::set<std::pair<int, int64_t>> layer_rows;
  ModelSpec spec;
  for (const auto& [strategy, c] : configs) {
    spec = ModelSpec::parse(c.model);
    TrainConfig dry = priced_twin(c, profile);
    dry.steps = 2;
    EventBus bus;
    train(dry, bus);
    for (const Event& e : bus.events()) {
      if (e.kind != "gemm" || e.layer < 0 || e.layer >= spec.layer_count()) continue;
      const double in = static_cast<double>(spec.sizes[static_cast<size_t>(e.layer)]),
                   out = static_cast<double>(spec.sizes[static_cast<size_t>(e.layer) + 1]);
      layer_rows.insert({e.layer, std::llround(e.flops / (2 * in * out))});
    }
  }
  std::vector<GemmPoint> shapes;
  for (const auto& [layer, rows] : layer_rows) {
    const double r = static_cast<double>(rows), in = static_cast<double>(spec.sizes[static_cast<size_t>(layer)]),
                 out = static_cast<double>(spec.sizes[static_cast<size_t>(layer) + 1]);
    shapes.push_back({r, out, in, false, true});  // forward
    shapes.push_back({out, in, r, true, false});  // dW
    if (layer > 0) shapes.push_back({r, in, out, false, false});  // dx
  }
  return shapes;
}

}  // namespace

namespace {

// The name of bench predict's prediction column i, of `given` profiles (--hw): "P1" … "Pn", column i
// priced on the i-th profile as calibrated; with --retime-gemms also "P1*" … "Pn*", the same profiles
// with the model's GEMMs priced at their times just before its runs (gemm_speed_now).
std::string prediction_column(size_t i, size_t given) {
  return "P" + std::to_string(i % given + 1) + (i < given ? "" : "*");
}

}  // namespace

int bench_predict(const BenchPredictOptions& options) {
  BenchPredictOptions o = options;
  SavedTable saved;
  const bool from_table = !o.measured_path.empty();
  std::vector<PathUse> paths = {{"--json", o.json_path, true}, {"--measured", o.measured_path, false}};
  for (const std::string& hw : o.hw) paths.push_back({"--hw", profile_file(hw), false});
  check_distinct_paths(paths, "bench");
  if (from_table) {
    saved = read_saved_table(o.measured_path);
    if (o.models.empty()) o.models = saved.models;
    if (saved.batch > 0) o.batch = saved.batch;
    if (saved.steps > 0) o.steps = saved.steps;
    for (const json& row : saved.rows)
      if (row.is_object() && row.contains("measured_runs_step_s") && row["measured_runs_step_s"].is_array()) {
        o.repeats = static_cast<int>(row["measured_runs_step_s"].size());
        break;
      }
    // A value given that the table's replaces would be ignored: refused.
    const BenchPredictOptions defaults;
    const std::tuple<const char*, int64_t, int64_t, int64_t> taken[] = {
        {"--batch", options.batch, defaults.batch, o.batch},
        {"--steps", options.steps, defaults.steps, o.steps},
        {"--repeat", options.repeats, defaults.repeats, o.repeats}};
    for (const auto& [flag, given, fallback, table] : taken)
      if (given != fallback && given != table)
        throw UsageError("bench", std::string(flag) + " " + std::to_string(given) + " with --measured " + o.measured_path +
                                      ": its runs were measured with " + flag + " " + std::to_string(table) +
                                      " and are priced as they were (it would be ignored) — drop " + flag);
  }
  if (from_table && options.device == BenchPredictOptions{}.device) o.device = saved.device;  // not named: the table's
  if (o.models.empty()) o.models = BenchPredictOptions{}.models;
  if (o.hw.empty())
    throw UsageError("bench", "bench predict needs --hw PROFILE: a profile of this machine — make one with `scalelab calibrate`");
  if (!o.json_path.empty()) check_output_path(o.json_path, "bench");
  if (o.device != "cpu" && o.device != "cuda")
    throw UsageError("bench", "bench predict --device " + o.device + ": the strategies are measured on cpu or cuda — pass --device cpu or --device cuda");
  const DeviceKind kind = parse_device_kind(o.device);
  const bool cuda = kind == DeviceKind::cuda;
  if (from_table && o.device != saved.device)
    throw UsageError("bench", "bench predict --device " + o.device + " --measured " + o.measured_path + ": that table was measured on " +
                                  saved.device + ", and is priced as it was measured — pass --device " + saved.device);
  if (cuda && !from_table && cuda_device_count() < 1)
    throw UsageError("bench", "bench predict --device cuda: no CUDA device is visible (or scalelab was built without CUDA) — run it on the "
                              "machine with the GPU (check nvidia-smi), with build/cuda's scalelab, or pass --device cpu");
  if (cuda)
    std::printf("# bench predict: each strategy on the cuda device (%d devices: logical devices of the GPU where there are fewer GPUs; "
                "collectives over the threads backend in device memory), measured, next to the cost model's prediction on each "
                "profile (no turns on the host's cores: GPUs do not take them)\n",
                o.devices);
  else
  std::printf("# bench predict: each strategy on the cpu device, measured, next to the cost model's prediction on each profile\n");
  if (from_table)
    std::printf("# measured runs: those of %s, priced again (batch %lld, %lld steps%s)\n", o.measured_path.c_str(),
                static_cast<long long>(o.batch), static_cast<long long>(o.steps),
                saved.steps > 0 ? "" : ", as given: the table does not say");
  std::string header;
  const size_t given = o.hw.size(), columns = o.retime_gemms ? 2 * given : given;
  for (size_t i = 0; i < columns; ++i) {
    const std::string name = prediction_column(i, given);
    if (i < given) {
      std::printf("#   %s = %s (%s)\n", name.c_str(), o.hw[i].c_str(), calibration_of(o.hw[i]).c_str());
      if (cuda && calibrated_device(o.hw[i]) != "cuda")
        std::printf("#   %s was not calibrated on the cuda device (`scalelab calibrate --device cuda`): its error is the profile's\n",
                    name.c_str());
    }
    else
      std::printf("#   %s = P%zu with the model's GEMMs priced at their times now: each shape its runs make, timed "
                  "again just before them\n", name.c_str(), i % given + 1);
    char col[64];
    std::snprintf(col, sizeof col, " %9s %7s", (name + " ms").c_str(), "error");
    header += col;
  }
  std::printf("# step time = median over steps 2… of one step's start to the next; measured: the median of %d runs, and\n"
              "# their spread (slowest − fastest, of the median); bound: how far this machine's own runs repeat\n"
              "# (`bench repeat` over tables of the same runs; docs/accuracy.md)\n",
              o.repeats);
  // Whatever else runs on these cores is in the measured times and not in the predicted ones.
  auto print_load = [](const char* when) {
    double load[1] = {0};
    if (::getloadavg(load, 1) == 1)
      std::printf("# load average %s: %.1f on %u cores\n", when, load[0], std::max(1u, std::thread::hardware_concurrency()));
  };
  for (const StrategyInfo& info : strategy_registry())
    if (!info.supports(kind))
      std::printf("# %s: not on %s (%s) — left out\n", info.name.c_str(), o.device.c_str(),
                  info.synchronous ? "the strategy does not run there" : "its workers are forked processes, and CUDA does not survive a fork");
  if (!from_table) print_load("before");
  std::printf("%-26s %-15s %3s %11s %7s%s  %s\n", "model", "strategy", "dev", "measured ms", "spread", header.c_str(),
              "closest: furthest-off class (pred/meas ms per step)");
  json rows = json::array();
  std::vector<int> within(columns, 0), among(columns, 0);
  int total = 0;
  // The rows measured with the machine as each profile was calibrated: no probe moved, before or
  // after the model's runs.
  std::vector<int> within_as_calibrated(columns, 0), total_as_calibrated(columns, 0);
  const bool on_terminal = ::isatty(STDERR_FILENO) != 0;
  for (const std::string& model : o.models) {
    std::vector<std::pair<std::string, TrainConfig>> configs;  // strategy → its config
    for (const StrategyInfo& info : strategy_registry()) {
      if (!info.supports(kind)) continue;  // said above the table
      TrainConfig c;
      c.strategy = info.name;
      c.device = kind;
      // Ranks of one process on cuda devices: the threads backend, in device memory, as calibrate
      // --device cuda measured it (nccl needs a GPU per rank).
      if (cuda && info.takes(StrategyOption::comm)) c.comm = CommBackend::threads;
      c.devices = devices_allowed(info, o.devices);
      c.detailed_devices = c.devices;  // every device's ops are read below, measured and priced
      c.model = model;
      c.dataset = "synthetic";
      c.synthetic_train = o.batch * (o.steps + 1);
      c.synthetic_test = 16;
      c.batch = o.batch;
      c.steps = o.steps;
      if (info.showcase) info.showcase(c);
      // A strategy written for another family (tensor-parallel splits a transformer's blocks)
      // shows itself on a model of its own: not this model's run, so not priced beside it.
      if (c.model != model) {
        std::printf("# %s: %s is not for %s (it shows itself on %s) — left out\n", model.c_str(), info.name.c_str(),
                    model.c_str(), c.model.c_str());
        continue;
      }
      configs.emplace_back(info.name, c);
    }
    // The profiles this model's runs are priced on: those given, and (--retime-gemms) each with its
    // GEMMs re-timed now — a shared machine's speed moves between a calibration and the runs a
    // minute later.
    std::vector<std::string> profiles = o.hw;
    RetimedProfiles retimed;
    json speeds = json::array();
    // The GEMM shapes are read off an MLP's layer sizes; a ConvNet's or a GPT's are not re-timed.
    const bool mlp = ModelSpec::parse(model).family == ModelFamily::mlp;
    if (o.retime_gemms)
      for (size_t i = 0; i < given; ++i) {
        GemmSpeedNow now;
        if (from_table) now = saved_gemm_speed(saved, o.measured_path, model, i);  // the speed then: the past cannot be re-timed
        else if (mlp) now = gemm_speed_now(load_profile(o.hw[i]), gemm_shapes_of(configs, o.hw[i]), kind);
        profiles.push_back(retimed.add(o.hw[i], now));
        speeds.push_back({{"profile", o.hw[i]}, {"ratio", now.ratio}, {"shapes", now.shapes}});
        if (now.ratio > 0)
          std::printf("# %s: P%zu's GEMMs %s %.3f× their calibrated times (%zu shapes, geometric mean)\n", model.c_str(), i + 1,
                      from_table ? "took, when the table was measured," : "now take", now.ratio, now.shapes.size());
        else if (from_table)
          std::printf("# %s: %s kept no GEMM re-timing for P%zu: P%zu* is P%zu\n", model.c_str(), o.measured_path.c_str(), i + 1,
                      i + 1, i + 1);
        else if (!mlp)
          std::printf("# %s: --retime-gemms re-times an MLP's GEMMs only: P%zu* is P%zu\n", model.c_str(), i + 1, i + 1);
        else
          std::printf("# %s: P%zu has no GEMM table to re-time: P%zu* is P%zu\n", model.c_str(), i + 1, i + 1, i + 1);
      }
    // How the machine runs now what each profile's calibration measured, before the model's runs
    // (a table measured before: as it was then, where it kept it).
    // Again after them (speed_after): the host can move a VM's cores within a model's runs.
    const auto probe_machine = [&](const char* key, const char* when) {
      json out = json::array();
      std::vector<bool> moved(given, false);
      for (size_t i = 0; i < given; ++i) {
        std::vector<SpeedProbe> probes;
        if (from_table) {
          const json* row = saved_row(saved, model, "single");
          if (row && row->contains(key) && (*row)[key].is_array() && i < (*row)[key].size())
            probes = speed_now_of((*row)[key][i]);
        } else {
          probes = machine_speed_now(load_profile(o.hw[i]), kind);
        }
        moved[i] = any_moved(probes);
        out.push_back(speed_now_json(probes));
        const std::string first = "# " + model + ": P" + std::to_string(i + 1) + when;
        print_speed_now(probes, first.c_str(), "#   ");
      }
      return std::pair{out, moved};
    };
    const auto [speed_now, moved_before] = probe_machine("speed_now", from_table ? ", when measured: " : " now: ");
    // The repeats go round the strategies (each strategy once, then again): the machine's slow and
    // fast minutes then fall on every strategy alike, not on whichever ran in them.
    std::vector<std::vector<MeasuredRun>> runs(configs.size());
    std::vector<std::string> failed(configs.size());
    if (from_table)
      for (size_t k = 0; k < configs.size(); ++k) {
        const json* row = saved_row(saved, model, configs[k].first);
        if (row == nullptr) {
          failed[k] = "not measured in " + o.measured_path;
          continue;
        }
        runs[k] = saved_runs(*row, o.measured_path, configs[k].second.devices);
      }
    for (int r = 0; r < (from_table ? 0 : o.repeats); ++r)
      for (size_t k = 0; k < configs.size(); ++k) {
        if (!failed[k].empty()) continue;
        // Progress: redrawn in place on a terminal, a plain line a round otherwise (a log).
        if (on_terminal)
          std::fprintf(stderr, "\r[bench predict] %s: %-15s run %d of %d   ", model.c_str(), configs[k].first.c_str(), r + 1,
                       o.repeats);
        else if (k == 0)
          std::fprintf(stderr, "[bench predict] %s: run %d of %d of every strategy\n", model.c_str(), r + 1, o.repeats);
        std::fflush(stderr);
        try {
          check_comparable(configs[k].second, o.hw);
          runs[k].push_back(measure(configs[k].second, o.hw, {}));
        } catch (const std::exception& e) {
          failed[k] = e.what();
        }
      }
    if (on_terminal) std::fprintf(stderr, "\r%80s\r", "");
    const auto [speed_after, moved_after] = probe_machine("speed_after", from_table ? ", after its runs: " : " after its runs: ");
    for (size_t k = 0; k < configs.size(); ++k) {
      const std::string& strategy = configs[k].first;
      const TrainConfig& c = configs[k].second;
      const int devices = c.devices;
      if (!failed[k].empty()) {
        std::printf("%-26s %-15s failed: %s\n", model.c_str(), strategy.c_str(), failed[k].c_str());
        rows.push_back({{"model", model}, {"strategy", strategy}, {"error", failed[k]}});
        continue;
      }
      try {
        TrainResult r;
        const Comparison cmp = compare(c, profiles, std::move(runs[k]), r);
        const double fastest = cmp.measured_steps.front(), slowest = cmp.measured_steps.back();
        const double spread = error_of(slowest, cmp.measured.step_s) - error_of(fastest, cmp.measured.step_s);
        std::string cols;
        size_t closest = 0;
        json predictions = json::array();
        for (size_t i = 0; i < cmp.predicted.size(); ++i) {
          char col[64];
          std::snprintf(col, sizeof col, " %9.2f %+6.1f%%", cmp.predicted[i].figures.step_s * 1e3, 100 * cmp.error(i));
          cols += col;
          if (std::abs(cmp.error(i)) < std::abs(cmp.error(closest))) closest = i;
          within[i] += std::abs(cmp.error(i)) <= 0.03;
          if (!moved_before[i % given] && !moved_after[i % given]) {
            ++total_as_calibrated[i];
            within_as_calibrated[i] += std::abs(cmp.error(i)) <= 0.03;
          }
          const double predicted = cmp.predicted[i].figures.step_s;
          among[i] += predicted >= fastest && predicted <= slowest;
          predictions.push_back(comparison_json(cmp.predicted[i].figures, cmp.measured,
                                                i < given ? cmp.predicted[i].profile : o.hw[i % given] + " (GEMMs re-timed)"));
        }
        const RunFigures& best = cmp.predicted[closest].figures;
        const int w = worst_class(best, cmp.measured);
        char off[96] = "";
        if (std::abs(cmp.error(closest)) > 0.03)
          std::snprintf(off, sizeof off, "%s: %s (%.2f/%.2f)", prediction_column(closest, given).c_str(),
                        kClassNames[w], best.class_s[w] * 1e3, cmp.measured.class_s[w] * 1e3);
        std::printf("%-26s %-15s %3d %11.2f %6.1f%%%s  %s\n", model.c_str(), strategy.c_str(), devices,
                    cmp.measured.step_s * 1e3, 100 * spread, cols.c_str(), off);
        std::fflush(stdout);
        rows.push_back({{"model", model}, {"strategy", strategy}, {"devices", devices},
                        {"measured_step_s", cmp.measured.step_s}, {"measured_runs_step_s", cmp.measured_steps},
                        {"predictions", predictions}});
        if (o.retime_gemms) rows.back()["gemm_speed_now"] = speeds;
        rows.back()["speed_now"] = speed_now;
        rows.back()["speed_after"] = speed_after;
        ++total;
      } catch (const std::exception& e) {
        std::printf("%-26s %-15s failed: %s\n", model.c_str(), strategy.c_str(), e.what());
        rows.push_back({{"model", model}, {"strategy", strategy}, {"error", e.what()}});
      }
    }
  }
  if (!from_table) print_load("after");
  for (size_t i = 0; i < columns; ++i) {
    std::printf("# %s: %d of %d within ±3 %%; %d of %d between the fastest and the slowest measured run\n",
                prediction_column(i, given).c_str(), within[i], total, among[i], total);
    if (total_as_calibrated[i] == 0 && total > 0)
      std::printf("#   every model had a probe move (before or after its runs): no row was measured as the machine was calibrated\n");
    else if (total_as_calibrated[i] < total)
      std::printf("#   with the machine as calibrated (no probe moved, before or after the model's runs): %d of %d within ±3 %%\n",
                  within_as_calibrated[i], total_as_calibrated[i]);
  }
  if (!o.json_path.empty()) {
    json table{{"profiles", o.hw}, {"batch", o.batch}, {"steps", o.steps}, {"rows", rows}};
    if (cuda) table["device"] = "cuda";
    write_file_atomically(o.json_path, table.dump(2) + "\n", "bench");
  }
  return 0;
}

int bench_repeat(const std::vector<std::string>& tables) {
  if (tables.size() < 2)
    throw UsageError("bench", "bench repeat needs two tables or more (`bench predict --json`), got " + std::to_string(tables.size()) +
                                  " — measure the same configs again, minutes apart, and pass every table");
  std::vector<SavedTable> saved;
  for (const std::string& path : tables) {
    saved.push_back(read_saved_table(path, "bench repeat"));
    const SavedTable &first = saved.front(), &t = saved.back();
    if (t.batch != first.batch || t.steps != first.steps || t.device != first.device)
      throw UsageError("bench", "bench repeat: " + path + " measured batch " + std::to_string(t.batch) + ", " + std::to_string(t.steps) +
                                    " steps on " + t.device + ", but " + tables.front() + " batch " + std::to_string(first.batch) + ", " +
                                    std::to_string(first.steps) + " steps on " + first.device +
                                    " — compare tables of the same runs (bench predict with the same --batch, --steps and --device)");
  }
  // Every (model, strategy) that each table measured, in the first table's order.
  struct Config {
    std::string model, strategy;
    std::vector<double> step_s;  // one per table
  };
  std::vector<Config> configs;
  for (const json& row : saved.front().rows) {
    if (!row.is_object() || !row.contains("model") || !row.contains("strategy")) continue;
    Config c{row.value("model", std::string()), row.value("strategy", std::string()), {}};
    for (size_t i = 0; i < saved.size(); ++i) {
      const json* r = saved_row(saved[i], c.model, c.strategy);
      const double s = r && r->contains("measured_step_s") && r->at("measured_step_s").is_number() ? r->at("measured_step_s").get<double>() : 0.0;
      if (!(s > 0)) break;
      c.step_s.push_back(s);
    }
    if (c.step_s.size() == saved.size()) configs.push_back(std::move(c));
  }
  if (configs.empty())
    throw UsageError("bench", "bench repeat: no model and strategy was measured in every table — pass tables of the same models");

  std::printf("# bench repeat: the same runs measured in %zu tables; each table's measured step time taken as the\n"
              "# prediction of every other's — the error a model that priced one moment of this machine exactly\n"
              "# would still have at another: the floor under any prediction's error on this machine\n", saved.size());
  for (size_t i = 0; i < tables.size(); ++i) std::printf("#   T%zu = %s\n", i + 1, tables[i].c_str());
  std::printf("%-26s %-15s", "model", "strategy");
  for (size_t i = 0; i < saved.size(); ++i) std::printf(" %8s", ("T" + std::to_string(i + 1) + " ms").c_str());
  std::printf("   range\n");
  for (const Config& c : configs) {
    std::printf("%-26s %-15s", c.model.c_str(), c.strategy.c_str());
    for (double s : c.step_s) std::printf(" %8.2f", s * 1e3);
    const auto [lo, hi] = std::minmax_element(c.step_s.begin(), c.step_s.end());
    std::printf("  %5.1f %%\n", 100 * (*hi - *lo) / median(c.step_s));
  }
  // Each ordered pair of tables: one the prediction, the other the measurement. Then the same with
  // each run as a multiple of single's in its table (where both have single): the moment's speed
  // of the whole machine divided out, what is left is each strategy's own spread.
  const auto summarize = [&](const char* what, bool relative_to_single) {
    std::vector<double> errors;
    for (const Config& c : configs) {
      const Config* single = nullptr;
      if (relative_to_single) {
        if (c.strategy == "single") continue;
        for (const Config& s : configs)
          if (s.model == c.model && s.strategy == "single") single = &s;
        if (!single) continue;
      }
      for (size_t a = 0; a < saved.size(); ++a)
        for (size_t b = 0; b < saved.size(); ++b) {
          if (a == b) continue;
          double predicted = c.step_s[a], measured = c.step_s[b];
          if (single) {
            predicted /= single->step_s[a];
            measured /= single->step_s[b];
          }
          errors.push_back(std::abs(predicted / measured - 1));
        }
    }
    if (errors.empty()) return;
    const auto within = [&](double bound) { return std::count_if(errors.begin(), errors.end(), [&](double e) { return e <= bound; }); };
    double sum = 0;
    for (double e : errors) sum += e;
    std::printf("# %s: %td of %zu within ±3 %% (%.0f %%), %td within ±5 %%, %td within ±10 %%; mean |error| %.1f %%, median %.1f %%\n", what,
                within(0.03), errors.size(), 100.0 * static_cast<double>(within(0.03)) / static_cast<double>(errors.size()), within(0.05),
                within(0.10), 100 * sum / static_cast<double>(errors.size()), 100 * median(errors));
  };
  summarize("another table's measurement as the prediction", false);
  summarize("the same, each run as a multiple of its table's single", true);
  return 0;
}

}  // namespace scalelab
