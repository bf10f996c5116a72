// 5.–8. The end of a run: conclude, gather every rank's records, summarise, write the outputs
// (run/run_parts.h); and the summary as JSON and as text (run/train.h).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/trace/chrome_trace.h"
#include "run/run_parts.h"

namespace scalelab {

TrainResult conclude(const RunSetup& run, const LoopResult& loop, EquivalenceProbe* probe) {
  const TrainConfig& c = run.config;
  TrainResult r;
  r.config = c;
  r.hw_name = c.device == DeviceKind::sim ? run.device_options.profile.name : "";
  r.simulated = c.device == DeviceKind::sim;
  if (c.device == DeviceKind::cuda) {
    const int gpus = cuda_device_count();
    const std::string gpu = cuda_device_name(0);
    r.placement = c.devices > gpus ? std::to_string(c.devices) + " logical devices on " + std::to_string(gpus) +
                                         (gpus == 1 ? " GPU" : " GPUs")
                                   : std::to_string(c.devices) + (c.devices == 1 ? " GPU" : " GPUs");
    if (!gpu.empty()) r.placement += " (" + gpu + ")";
    r.placement += c.tf32 ? ", f32 GEMMs as TF32 (--tf32)" : ", f32 GEMMs in full f32";
  }
  r.stopped = loop.last_step < run.total;
  r.steps = loop.last_step - loop.first_step;  // a resumed (or stopped) run reports the steps it ran
  r.samples = r.steps * c.batch;
  r.losses = loop.losses;
  // One batch's loss is noisy; the mean over the last steps says where training stands.
  const size_t tail = std::min<size_t>(100, r.losses.size());
  double sum = 0;
  for (size_t i = r.losses.size() - tail; i < r.losses.size(); ++i) sum += r.losses[i];
  r.final_loss = r.losses.empty() ? std::nan("") : r.losses.back();
  r.mean_loss = tail ? sum / static_cast<double>(tail) : std::nan("");
  r.mean_loss_steps = static_cast<int64_t>(tail);

  const AmpReport amp = run.strategy->amp_report();
  r.loss_scale = amp.loss_scale;
  r.skipped_steps = amp.skipped_steps;

  run.leave_step();
  const HostWeights final_weights = run.strategy->weights();
  if (probe) {
    r.max_rel_diff = probe->max_rel_diff(final_weights);
    r.roundoff_rel_diff = probe->roundoff_rel_diff();
    run.bus.emit(Metric{loop.last_step - 1, "max_rel_diff", r.max_rel_diff});
    run.bus.emit(Metric{loop.last_step - 1, "roundoff_rel_diff", r.roundoff_rel_diff});
  }
  if (run.computes()) {
    const Dataset& test = run.data.test;
    r.test_accuracy = evaluate_accuracy(final_weights, test.images.data(), test.labels.data(), test.count);
    r.weights_checksum = weights_checksum(final_weights);
    if (r.stopped && loop.last_step > loop.first_step)
      run.bus.emit(Metric{loop.last_step - 1, "accuracy", r.test_accuracy});
  }
  return r;
}

namespace {

Records own_records(const RunSetup& run) {
  Records mine;
  mine.events = run.bus.events();
  mine.memory = run.bus.memory();
  mine.metrics = run.bus.metrics();
  mine.tallies = run.bus.tallies();
  for (const auto& d : run.devices) mine.devices.push_back(device_record(*d));
  // A dry run of alike ranks ran the first devices only: each of the others did what the last
  // one did, op for op, so it is counted as a copy of its tally and ledger under its own name.
  if (!run.local_group && run.devices_run < run.config.devices && !mine.tallies.empty()) {
    const DeviceTally last_tally = mine.tallies.back();
    const DeviceRecord last = mine.devices.back();
    const std::string profile = last.description.name.substr(std::min(last.description.name.find(' '), last.description.name.size()));
    for (int d = run.devices_run; d < run.config.devices; ++d) {
      mine.tallies.push_back(last_tally);
      mine.tallies.back().device = d;
      DeviceRecord copy = last;
      copy.index = d;
      copy.description.label = "sim:" + std::to_string(d);
      copy.description.name = copy.description.label + profile;
      mine.devices.push_back(std::move(copy));
    }
  }
  return mine;
}

}  // namespace

Records gather_records(const RunSetup& run) {
  Records all = own_records(run);
  if (!run.local_group) return all;  // --launch threads: every rank recorded on this bus
  std::vector<std::vector<uint8_t>> from = run.local_group->gather_bytes(encode_records(all), 0);
  if (!run.leader) return all;
  for (size_t r = 1; r < from.size(); ++r) {
    Records theirs = decode_records(from[r].data(), from[r].size());
    // Events and memory are of the rank's own devices, under their global indices; its metrics
    // (the same losses) are rank 0's already.
    all.events.insert(all.events.end(), std::make_move_iterator(theirs.events.begin()),
                      std::make_move_iterator(theirs.events.end()));
    all.memory.insert(all.memory.end(), theirs.memory.begin(), theirs.memory.end());
    all.devices.insert(all.devices.end(), std::make_move_iterator(theirs.devices.begin()),
                       std::make_move_iterator(theirs.devices.end()));
  }
  std::stable_sort(all.events.begin(), all.events.end(),
                   [](const Event& a, const Event& b) { return a.t_begin_ns < b.t_begin_ns; });
  std::stable_sort(all.memory.begin(), all.memory.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.t_ns < b.t_ns; });
  std::sort(all.devices.begin(), all.devices.end(),
            [](const DeviceRecord& a, const DeviceRecord& b) { return a.index < b.index; });
  return all;
}

void summarize(const LoopResult& loop, const Records& records, TrainResult& r) {
  int device_count = 0;
  for (const DeviceRecord& d : records.devices) device_count = std::max(device_count, d.index + 1);
  r.metrics = compute_metrics(records.events, records.memory, device_count, records.tallies);
  r.first_tallied_device = records.tallies.empty() ? -1 : records.tallies.front().device;
  if (r.simulated) {
    // From the first op of the first step to the end of the last op of the last step: setting up
    // (the initial weight upload) and the final download for evaluation are not training.
    int64_t begin = INT64_MAX, end = 0;
    for (const Event& e : records.events)
      if (e.step >= 0) {
        begin = std::min(begin, e.t_begin_ns);
        end = std::max(end, e.t_end_ns);
      }
    for (const DeviceTally& t : records.tallies)
      if (t.step_end_ns > 0) {
        begin = std::min(begin, t.step_begin_ns);
        end = std::max(end, t.step_end_ns);
      }
    r.time_s = end > begin ? static_cast<double>(end - begin) * 1e-9 : 0;
  } else {
    r.time_s = loop.wall_s;
  }
  r.samples_per_s = r.time_s > 0 ? static_cast<double>(r.samples) / r.time_s : 0;
  const ModelSpec spec = ModelSpec::parse(r.config.model);
  r.tokens_per_s = r.samples_per_s * static_cast<double>(spec.tokens_per_sample());
  if (r.config.device == DeviceKind::sim && r.samples_per_s > 0) {
    // The peak of the dtype the GEMMs run in: f32 (TF32 where the profile turns it on) or AMP's half.
    const HardwareProfile profile = load_profile(r.config.hw);
    const double peak = profile.gemm_peak_flops(r.config.amp_dtype()) * static_cast<double>(r.config.devices);
    if (peak > 0) r.mfu = spec.train_flops_per_sample() * r.samples_per_s / peak;
  }
  r.per_device.clear();
  for (const DeviceRecord& d : records.devices) {
    DeviceSummary s;
    s.name = d.description.name;
    const DeviceMetrics& m = r.metrics.per_device[static_cast<size_t>(d.index)];
    s.busy_pct = m.busy_pct;
    s.comm_pct = m.comm_pct;
    s.idle_pct = m.idle_pct;
    s.peak_bytes = d.peak;
    s.peak_total = d.peak_total;
    s.capacity = d.capacity;
    r.per_device.push_back(s);
  }
}

void write_outputs(const RunSetup& run, const TrainResult& r, const Records& records) {
  const TrainConfig& c = run.config;
  if (!run.leader) return;  // rank 0 reports for everyone
  if (!c.trace_path.empty()) {
    TraceInfo ti;
    for (const DeviceRecord& d : records.devices) {
      if (ti.devices.size() <= static_cast<size_t>(d.index)) ti.devices.resize(static_cast<size_t>(d.index) + 1);
      ti.devices[static_cast<size_t>(d.index)] = d.description;
    }
    ti.title = "scalelab train --strategy " + c.strategy + " --device " + device_kind_name(c.device) +
               (r.hw_name.empty() ? "" : " --hw " + r.hw_name) + " --devices " + std::to_string(c.devices) +
               " --model " + c.model + layout_words(c);
    ti.simulated = r.simulated;
    ti.predicted_with = c.trace_predicted_with;
    // The metrics are rank 0's, read now: conclude() emitted the run's last ones after the
    // records were taken on the other ranks.
    if (c.trace_first_step < 0) {
      write_chrome_trace(c.trace_path, records.events, records.memory, run.bus.metrics(), ti);
    } else {
      // A window of steps: their events, the memory samples while they ran, their metrics.
      const int64_t a = c.trace_first_step, b = c.trace_last_step;
      std::vector<Event> kept;
      int64_t t0 = INT64_MAX, t1 = INT64_MIN;
      for (const Event& e : records.events)
        if (e.step >= a && e.step <= b) {
          kept.push_back(e);
          t0 = std::min(t0, e.t_begin_ns);
          t1 = std::max(t1, e.t_end_ns);
        }
      // The live bytes at the window's start, per device and category, then the changes inside it.
      std::map<std::pair<int, int>, MemorySample> before;
      std::vector<MemorySample> memory;
      for (const MemorySample& m : records.memory) {
        if (kept.empty()) break;  // no step of the window ran: no time to place its memory at
        if (m.t_ns < t0) before[{m.device, static_cast<int>(m.category)}] = m;
        else if (m.t_ns <= t1) memory.push_back(m);
      }
      std::vector<MemorySample> window;
      for (auto [key, m] : before) {
        m.t_ns = t0;
        window.push_back(m);
      }
      window.insert(window.end(), memory.begin(), memory.end());
      std::vector<Metric> metrics;
      for (const Metric& m : run.bus.metrics())
        if (m.step >= a && m.step <= b) metrics.push_back(m);
      ti.title += " (steps " + std::to_string(a) + "–" + std::to_string(b) + ")";
      write_chrome_trace(c.trace_path, kept, window, metrics, ti);
    }
  }
  if (!c.json_path.empty()) write_file_atomically(c.json_path, to_json(r).dump(2) + "\n", "train");
}

nlohmann::json to_json(const TrainResult& r) {
  using nlohmann::json;
  json j;
  j["strategy"] = r.config.strategy;
  j["device"] = device_kind_name(r.config.device);
  j["hw"] = r.hw_name.empty() ? json(nullptr) : json(r.hw_name);
  j["devices"] = r.config.devices;
  if (!r.placement.empty()) j["placement"] = r.placement;
  j["model"] = r.config.model;
  j["dataset"] = r.config.dataset;
  j["batch"] = r.config.batch;
  j["micro_batches"] = r.config.micro_batches;
  j["optimizer"] = r.config.optimizer.kind;
  j["seed"] = r.config.seed;
  j["steps"] = r.steps;
  j["final_loss"] = std::isfinite(r.final_loss) ? json(r.final_loss) : json(nullptr);  // the last step's
  j["mean_loss"] = r.mean_loss_steps == 0 ? json(nullptr)
                                          : json{{"value", std::isfinite(r.mean_loss) ? json(r.mean_loss) : json(nullptr)},
                                                 {"steps", r.mean_loss_steps}};
  json losses = json::array();  // per step, as a PyTorch loop prints them (null: none computed)
  for (double l : r.losses) losses.push_back(std::isfinite(l) ? json(l) : json(nullptr));
  j["losses"] = losses;
  j["test_accuracy"] = r.test_accuracy >= 0 ? json(r.test_accuracy) : json(nullptr);
  j["time_s"] = r.time_s;
  j["time_kind"] = r.simulated ? "simulated" : "measured";
  j["samples_per_s"] = r.samples_per_s;
  j["tokens_per_s"] = r.tokens_per_s > 0 ? json(r.tokens_per_s) : json(nullptr);
  j["mfu"] = r.mfu >= 0 ? json(r.mfu) : json(nullptr);
  j["weights_checksum"] = r.weights_checksum.empty() ? json(nullptr) : json(r.weights_checksum);
  j["launch"] = launch_name(r.config.launch);
  j["stopped"] = r.stopped;
  j["equivalence"] = r.max_rel_diff >= 0
                         ? json{{"max_rel_diff", r.max_rel_diff},
                                {"roundoff_rel_diff", r.roundoff_rel_diff},
                                {"verdict", equivalence_verdict_name(equivalence_verdict(r.max_rel_diff, r.roundoff_rel_diff))}}
                         : json(nullptr);
  j["amp"] = r.config.amp == Amp::off ? json(nullptr)
                                      : json{{"dtype", amp_name(r.config.amp)},
                                             {"loss_scale", r.loss_scale},
                                             {"skipped_steps", r.skipped_steps}};
  j["bubble_fraction"] = r.metrics.bubble_fraction;
  j["overlap_pct"] = r.metrics.overlap_pct;
  j["bytes_moved"] = r.metrics.bytes_moved;
  // A dry run of alike ranks: the devices that ran; the others are counted as copies of the last.
  j["devices_run"] = r.devices_run > 0 ? json(r.devices_run) : json(nullptr);
  json per = json::array();
  for (const DeviceSummary& s : r.per_device) {
    json peak;
    for (int c = 0; c < kMemoryCategoryCount; ++c) peak[memory_category_name(static_cast<MemoryCategory>(c))] = s.peak_bytes[c];
    peak["total"] = s.peak_total;
    per.push_back({{"device", s.name},
                   {"busy_pct", s.busy_pct},
                   {"comm_pct", s.comm_pct},
                   {"idle_pct", s.idle_pct},
                   {"capacity_bytes", s.capacity},
                   {"peak_bytes", peak}});
  }
  j["per_device"] = per;
  return j;
}

TrainResult from_json(const nlohmann::json& j, const TrainConfig& config) {
  TrainResult r;
  r.config = config;
  r.hw_name = j["hw"].is_string() ? j["hw"].get<std::string>() : "";
  r.placement = j.value("placement", std::string());
  r.steps = j.value("steps", int64_t{0});
  r.samples = r.steps * config.batch;
  r.final_loss = j["final_loss"].is_number() ? j["final_loss"].get<double>() : std::nan("");
  if (j.contains("mean_loss") && j["mean_loss"].is_object()) {
    const nlohmann::json& m = j["mean_loss"];
    r.mean_loss = m["value"].is_number() ? m["value"].get<double>() : std::nan("");
    r.mean_loss_steps = m.value("steps", int64_t{0});
  }
  r.test_accuracy = j["test_accuracy"].is_number() ? j["test_accuracy"].get<double>() : -1;
  r.time_s = j.value("time_s", 0.0);
  r.simulated = j.value("time_kind", std::string()) == "simulated";
  r.samples_per_s = j.value("samples_per_s", 0.0);
  r.tokens_per_s = j["tokens_per_s"].is_number() ? j["tokens_per_s"].get<double>() : 0;
  r.mfu = j["mfu"].is_number() ? j["mfu"].get<double>() : -1;
  r.weights_checksum = j["weights_checksum"].is_string() ? j["weights_checksum"].get<std::string>() : "";
  r.stopped = j.value("stopped", false);
  if (j["equivalence"].is_object()) {
    r.max_rel_diff = j["equivalence"].value("max_rel_diff", -1.0);
    r.roundoff_rel_diff = j["equivalence"].value("roundoff_rel_diff", -1.0);
  }
  if (j.contains("amp") && j["amp"].is_object()) {
    r.loss_scale = j["amp"].value("loss_scale", 1.0);
    r.skipped_steps = j["amp"].value("skipped_steps", int64_t{0});
  }
  r.metrics.overlap_pct = j.value("overlap_pct", 0.0);
  r.metrics.bubble_fraction = j.value("bubble_fraction", 0.0);
  r.metrics.bytes_moved = j.value("bytes_moved", int64_t{0});
  r.devices_run = j.contains("devices_run") && j["devices_run"].is_number() ? j["devices_run"].get<int>() : 0;
  // JSON has no NaN: a diverged run's (--allow-divergence) non-finite losses were written as null.
  if (j.contains("losses") && j["losses"].is_array())
    for (const auto& v : j["losses"]) r.losses.push_back(v.is_number() ? v.get<double>() : std::nan(""));
  for (const auto& d : j["per_device"]) {
    DeviceSummary s;
    s.name = d.value("device", std::string());
    s.busy_pct = d.value("busy_pct", 0.0);
    s.comm_pct = d.value("comm_pct", 0.0);
    s.idle_pct = d.value("idle_pct", 0.0);
    s.capacity = d.value("capacity_bytes", int64_t{0});
    for (int c = 0; c < kMemoryCategoryCount; ++c)
      s.peak_bytes[c] = d["peak_bytes"].value(memory_category_name(static_cast<MemoryCategory>(c)), int64_t{0});
    s.peak_total = d["peak_bytes"].value("total", int64_t{0});
    r.per_device.push_back(s);
  }
  return r;
}

EquivalenceVerdict equivalence_verdict(double max_rel_diff, double roundoff_rel_diff) {
  if (max_rel_diff <= kEquivalenceTolerance) return EquivalenceVerdict::equal;
  if (max_rel_diff <= kRoundoffFactor * roundoff_rel_diff) return EquivalenceVerdict::roundoff;
  return EquivalenceVerdict::differs;
}

const char* equivalence_verdict_name(EquivalenceVerdict verdict) {
  switch (verdict) {
    case EquivalenceVerdict::equal: return "equal";
    case EquivalenceVerdict::roundoff: return "round-off";
    case EquivalenceVerdict::differs: return "differs";
  }
  return "?";
}

namespace {

// The summary's equivalence lines: the difference, the yardstick, and what they mean together.
std::string format_equivalence(double max_rel_diff, double roundoff_rel_diff) {
  char tolerance[16], factor[16];
  std::snprintf(tolerance, sizeof tolerance, "%g", kEquivalenceTolerance);
  std::snprintf(factor, sizeof factor, "%gx", kRoundoffFactor);
  std::string meaning;
  switch (equivalence_verdict(max_rel_diff, roundoff_rel_diff)) {
    case EquivalenceVerdict::equal:
      meaning = std::string("equal: the same training as single (within ") + tolerance + ")";
      break;
    case EquivalenceVerdict::roundoff:
      meaning = std::string("amplified round-off, not a difference in the algorithm (within ") + factor +
                " round-off; fewer steps, e.g. --steps 5, keep round-off small enough to show a bug)";
      break;
    case EquivalenceVerdict::differs:
      meaning = std::string("DIFFERS: beyond ") + tolerance + " and beyond " + factor +
                " round-off: a bug, or not the algorithm single runs — or, over many steps, round-off amplified past this "
                "one yardstick (Adam amplifies it most): at --steps 5 a bug still differs";
      break;
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "  equivalence     max relative weight difference to single %.2g; float32 round-off alone (single "
                "taking each batch in two halves) moves single %.2g here:\n",
                max_rel_diff, roundoff_rel_diff);
  return buf + ("                  " + meaning + "\n");
}

}  // namespace

std::string format_summary(const TrainResult& r) {
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof buf, "strategy %s on %d × %s%s, model %s, %s\n", r.config.strategy.c_str(), r.config.devices,
                device_kind_name(r.config.device), r.hw_name.empty() ? "" : (" (" + r.hw_name + ")").c_str(),
                r.config.model.c_str(), r.config.dataset.c_str());
  s += buf;
  if (!r.placement.empty()) s += "  devices         " + r.placement + "\n";
  if (r.steps == 0) {
    s += r.stopped ? "  final loss      — (no step run: stopped before the first)\n"
                   : "  final loss      — (no step run: --resume's checkpoint is already at the run's last step)\n";
  } else if (std::isfinite(r.final_loss)) {
    std::snprintf(buf, sizeof buf, "  final loss      %.4f (the last step's)\n", r.final_loss);
    s += buf;
    if (std::isfinite(r.mean_loss) && r.mean_loss_steps > 1) {
      std::snprintf(buf, sizeof buf, "  mean loss       %.4f (over the last %lld steps)\n", r.mean_loss,
                    static_cast<long long>(r.mean_loss_steps));
      s += buf;
    }
  } else if (r.config.dry_run) {
    s += "  final loss      — (dry run: no numerics)\n";
  } else {
    s += "  final loss      not finite: training diverged (--allow-divergence kept it going)\n";
  }
  if (r.test_accuracy >= 0) {
    std::snprintf(buf, sizeof buf, "  test accuracy   %.4f\n", r.test_accuracy);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "  time            %.3f s %s for %lld steps (%.3f ms/step)\n", r.time_s,
                r.simulated ? "simulated" : "measured", static_cast<long long>(r.steps),
                r.steps ? 1e3 * r.time_s / static_cast<double>(r.steps) : 0.0);
  s += buf;
  std::snprintf(buf, sizeof buf, "  throughput      %.0f samples/s", r.samples_per_s);
  s += buf;
  if (r.tokens_per_s > 0) {
    std::snprintf(buf, sizeof buf, " (%.0f tokens/s)", r.tokens_per_s);
    s += buf;
  }
  if (r.mfu >= 0) {
    std::snprintf(buf, sizeof buf, "; MFU %.1f%% (model FLOPs over the devices' %s peak)", 100 * r.mfu,
                  r.config.amp == Amp::off ? "f32" : amp_name(r.config.amp));
    s += buf;
  }
  s += "\n";
  if (!r.weights_checksum.empty()) s += "  weights         checksum " + r.weights_checksum + "\n";
  if (r.max_rel_diff >= 0) s += format_equivalence(r.max_rel_diff, r.roundoff_rel_diff);
  if (r.config.amp == Amp::fp16) {
    std::snprintf(buf, sizeof buf,
                  "  mixed precision fp16, f32 master weights; loss scale %g, %lld of %lld steps skipped (overflow)\n",
                  r.loss_scale, static_cast<long long>(r.skipped_steps), static_cast<long long>(r.steps));
    s += buf;
  } else if (r.config.amp == Amp::bf16) {
    s += "  mixed precision bf16, f32 master weights; no loss scaling\n";
  }
  if (r.config.devices > 1) {
    std::snprintf(buf, sizeof buf, "  overlap         %.1f%% of communication hidden under compute; bubbles %.1f%%\n",
                  r.metrics.overlap_pct, 100 * r.metrics.bubble_fraction);
    s += buf;
  }
  s += "  per device      busy%  comm%  idle%   peak memory: params grads optimizer activations comm_buffers workspace = total\n";
  // A run of three or more devices whose rows read alike (a data-parallel run's ranks) is its first
  // row and a line saying how many follow: 1,024 equal rows say nothing the first does not.
  const auto figures = [&](const DeviceSummary& d) {
    std::snprintf(buf, sizeof buf, " %5.1f  %5.1f  %5.1f   ", d.busy_pct, d.comm_pct, d.idle_pct);
    std::string row = buf;
    for (int c = 0; c < kMemoryCategoryCount; ++c) row += format_bytes(d.peak_bytes[c]) + (c + 1 < kMemoryCategoryCount ? " | " : "");
    return row + " = " + format_bytes(d.peak_total) + "\n";
  };
  for (size_t i = 0; i < r.per_device.size();) {
    const std::string row = figures(r.per_device[i]);
    size_t j = i + 1;
    while (j < r.per_device.size() && figures(r.per_device[j]) == row) ++j;
    std::snprintf(buf, sizeof buf, "    %-22s", r.per_device[i].name.c_str());
    s += buf + row;
    if (j - i >= 3) {
      s += "      … and the " + std::to_string(j - i - 1) + " devices after it, to " + r.per_device[j - 1].name + ", alike\n";
    } else {
      for (size_t k = i + 1; k < j; ++k) {
        std::snprintf(buf, sizeof buf, "    %-22s", r.per_device[k].name.c_str());
        s += buf + row;
      }
    }
    i = j;
  }
  const int last_tallied = r.devices_run > 0 ? r.devices_run - 1 : r.config.devices - 1;
  if (r.first_tallied_device >= 0)
    s += (r.first_tallied_device == last_tallied
              ? "  device  " + std::to_string(last_tallied)
              : "  devices " + std::to_string(r.first_tallied_device) + "–" + std::to_string(last_tallied)) +
         "   tallied, not kept op by op: the figures above count them, a --trace and the dashboard's timeline show devices 0–" +
         std::to_string(r.first_tallied_device - 1) + "\n";
  if (r.devices_run > 0)
    s += "  devices " + std::to_string(r.devices_run) + "–" + std::to_string(r.config.devices - 1) + "   not run: in a dry run of " +
         r.config.strategy + " every rank does what the others do, op for op, so each is counted as a copy of sim:" +
         std::to_string(r.devices_run - 1) + "\n";
  // A dry run counts past capacity: the device that needs the most, against what it has.
  const DeviceSummary* worst = nullptr;
  for (const DeviceSummary& d : r.per_device)
    if (!past_capacity_note(d.peak_total, d.capacity, d.peak_bytes.data()).empty() && (!worst || d.peak_total > worst->peak_total))
      worst = &d;
  const bool weights_sharded = r.config.strategy == "zero" && r.config.zero_stage == 3;
  if (worst)
    s += "  memory          " + worst->name + " " + past_capacity_note(worst->peak_total, worst->capacity, worst->peak_bytes.data()) +
         " — a real run runs out of memory: " +
         (weights_sharded ? std::string("its weights are sharded already; use more devices or a smaller batch") +
                                (r.config.recompute ? "\n" : ", or --recompute\n")
                          : "shard the weights across devices too (what --zero-stage 3 / FSDP, tensor and pipeline "
                            "parallelism do), or use a smaller batch or --recompute\n");
  return s;
}

}  // namespace scalelab
