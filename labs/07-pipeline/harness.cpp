// Lab 07's checks (the instructor's test program). The grader builds it with the student's
// schedule.cpp and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed, 1
// failed. Every check but well_formed runs the library's real pipeline strategy
// (make_pipeline_with_schedule, strategies/pipeline.h) with the student's schedule: equivalence
// trains on cpu devices and compares with `single` as `scalelab train --check-equivalence` does;
// bubble and peak are dry runs on simulated A100s, so they measure the cost model's clock and the
// devices' memory ledgers, the same on every machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/ranks.h"
#include "core/comm/threads/threads_group.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/nn/model.h"
#include "core/trace/events.h"
#include "core/trace/metrics.h"
#include "lab.h"
#include "labs/common/verdict.h"
#include "run/train.h"
#include "strategies/registry.h"
#include "strategies/train_config.h"

using namespace scalelab;
using lab::Args;
using lab::str;

namespace {

// A stage that waits for a neighbour that never comes gives up after this long, naming it.
constexpr int64_t kCommTimeoutMs = 2000;

using ScheduleFn = std::vector<lab07::Task> (*)(int, int, int);

struct NamedSchedule {
  std::string name;  // as --schedule spells it
  ScheduleFn fn;
  std::string function;  // as the student's file names it
};

NamedSchedule schedule_named(const std::string& name) {
  if (name == "gpipe") return {"gpipe", lab07::gpipe_schedule, "gpipe_schedule"};
  if (name == "1f1b") return {"1f1b", lab07::one_f_one_b_schedule, "one_f_one_b_schedule"};
  throw std::invalid_argument("harness: --schedule takes gpipe, 1f1b or gpipe,1f1b, not '" + name + "'");
}

// "--schedule gpipe,1f1b": the schedules named.
std::vector<NamedSchedule> schedules(const std::string& all) {
  std::vector<NamedSchedule> out;
  for (size_t start = 0; start <= all.size();) {
    const size_t comma = std::min(all.find(',', start), all.size());
    out.push_back(schedule_named(all.substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}
std::vector<NamedSchedule> schedules(const Args& a, const std::string& fallback) {
  return schedules(a.get("schedule", fallback));
}


// ---------------------------------------------------------------------------------------------
// One run of the pipeline strategy with a student's schedule: what train() does for
// `--strategy pipeline --check-equivalence`, with make_pipeline_with_schedule in place of the
// registry's factory.

struct Outcome {
  std::vector<double> losses;           // the pipeline's loss of each step
  std::vector<double> reference_losses; // single's, on the same batches (runs with numerics)
  double max_rel_diff = -1;           // vs single (runs with numerics)
  double bubble = 0;                  // RunMetrics::bubble_fraction over the training steps
  int64_t stage0_activation_peak = 0; // the most activations device 0 (stage 0) ever held
  std::vector<int64_t> activation_peaks;  // the same, per stage
  std::vector<Event> sends;               // every send of the training steps, in the order each stage made them
};

Outcome run_pipeline(const TrainConfig& c, ScheduleFn fn) {
  check_config(c);  // what train() refuses, this refuses too
  const ModelSpec spec = ModelSpec::parse(c.model);
  const DataSplit data =
      make_synthetic(c.synthetic_train, c.synthetic_test, spec.inputs(), static_cast<int>(spec.outputs()), c.seed);
  Loader loader(data.train, c.batch, c.seed);

  // Declared first, destroyed last: the devices emit on the buses until they are gone.
  EventBus bus, reference_bus;
  DeviceOptions o;
  o.kind = c.device;
  o.count = c.devices;
  o.dry_run = c.dry_run;
  o.bus = &bus;
  if (c.device == DeviceKind::sim) o.profile = load_profile(c.hw);
  std::vector<std::unique_ptr<Device>> devices = make_devices(o);
  std::vector<Device*> device_list;
  for (auto& d : devices) device_list.push_back(d.get());
  CommOptions copt;
  copt.timeout = std::chrono::milliseconds(c.comm_timeout_ms);
  RankSet ranks(device_list, make_threads_groups(c.devices, copt));
  StrategyContext ctx{c, device_list, bus, init_weights(spec, c.seed), &ranks, o};
  std::unique_ptr<Strategy> pipeline = make_pipeline_with_schedule(ctx, fn);

  // The yardstick: `single` on a device of its own, on the same batches.
  TrainConfig rc = c;
  rc.strategy = kReferenceStrategy;
  rc.devices = 1;
  DeviceOptions ro = o;
  ro.count = 1;
  ro.bus = &reference_bus;
  std::vector<std::unique_ptr<Device>> reference_devices;
  std::unique_ptr<Strategy> reference;
  const bool numerics = !c.dry_run;
  if (numerics) {
    reference_devices = make_devices(ro);
    StrategyContext rctx{rc, {reference_devices[0].get()}, reference_bus, init_weights(spec, c.seed), nullptr, ro};
    reference = make_single(rctx);
  }

  Outcome out;
  HostBatch batch;
  const int64_t per_epoch = loader.batches_per_epoch();
  for (int64_t step = 0; step < c.steps; ++step) {
    if (step % per_epoch == 0) loader.set_epoch(step / per_epoch);
    loader.fill(step % per_epoch, batch);
    out.losses.push_back(pipeline->train_step(batch, step));
    if (reference) out.reference_losses.push_back(reference->train_step(batch, step));
  }
  for (auto& d : devices) d->set_step(-1);  // gathering the weights is not part of a step
  if (numerics) out.max_rel_diff = max_relative_difference(pipeline->weights(), reference->weights());

  std::vector<Event> steps;
  for (const Event& e : bus.events())
    if (e.step >= 0) steps.push_back(e);
  for (const Event& e : steps)
    if (e.role == Role::send) out.sends.push_back(e);
  out.bubble = compute_metrics(steps, bus.memory(), c.devices).bubble_fraction;
  for (auto& d : devices) out.activation_peaks.push_back(d->memory().peak(MemoryCategory::activations));
  out.stage0_activation_peak = out.activation_peaks.front();
  return out;
}

// A dry run moves no data, so on `sim` it pairs each stage's sends and receives with its
// neighbour's by their order alone, whatever they are: two lists that would wait for each other
// for ever still finish there. So a dry run is rehearsed first for real: the same stages and
// micro-batches on cpu devices, with as many layers but 8 wide, one step.
TrainConfig rehearsal(const TrainConfig& c) {
  TrainConfig r = c;
  r.device = DeviceKind::cpu;
  r.hw.clear();
  r.dry_run = false;
  const int layers = ModelSpec::parse(c.model).layer_count();
  r.model = "mlp:8";
  for (int l = 0; l < layers; ++l) r.model += "-8";
  r.steps = 1;
  return r;
}

// run_pipeline, with a run that cannot finish said as such: a stage waited for a message that
// never came (the lists of two neighbours disagree on what crosses their link), or the strategy
// refused a list.
Outcome run_or_fail(const TrainConfig& c, const NamedSchedule& s, const std::string& what) {
  try {
    if (c.dry_run) run_pipeline(rehearsal(c), s.fn);
    return run_pipeline(c, s.fn);
  } catch (const lab::Todo&) {
    throw;
  } catch (const std::exception& e) {
    const std::string text = e.what();
    if (text.find("never arrived") != std::string::npos)
      lab::fail(what + ": the pipeline did not finish its step — two stages each waited for the other",
                "every send met by its receive: neighbouring stages agree on the order of the activations and "
                "gradients crossing their link (a backward followed by a forward receives that forward's "
                "activations before it sends its gradient)",
                text);
    lab::fail(what + ": the pipeline strategy stopped", "a run of every step", text);
  }
}

// The small model every equivalence test of scalelab trains (tests/support/small_config.h): four
// layers of different widths, so a transposed or misplaced gradient shows.
TrainConfig small_config(int stages, int micro_batches, int64_t batch, int64_t steps, const std::string& optimizer) {
  TrainConfig c;
  c.strategy = "pipeline";
  c.devices = stages;
  c.device = DeviceKind::cpu;
  c.model = "mlp:32-24-16-12-8";
  c.dataset = "synthetic";
  c.synthetic_test = 128;
  c.batch = batch;
  c.steps = steps;
  c.micro_batches = micro_batches;
  c.optimizer.kind = optimizer;
  if (optimizer == "adam") c.optimizer.lr = 0.01f;
  c.comm_timeout_ms = kCommTimeoutMs;
  return c;
}

// p stages of equal work: 64 square layers of width 1024 (64 / p per stage), `rows` rows per
// micro-batch, a dry run on simulated A100s (no numerics: the cost model's clock and the ledgers).
// The loss on the last stage is one element-wise op, a few µs against a stage's milliseconds.
constexpr int kEqualLayers = 64;
constexpr int64_t kEqualWidth = 1024;

TrainConfig equal_stages(int stages, int micro_batches, int64_t batch, int64_t steps, const std::string& hw) {
  TrainConfig c;
  c.strategy = "pipeline";
  c.devices = stages;
  c.device = DeviceKind::sim;
  c.hw = hw;
  c.dry_run = true;
  c.model = "mlp:" + str(kEqualWidth);
  for (int l = 0; l < kEqualLayers; ++l) c.model += "-" + str(kEqualWidth);
  c.dataset = "synthetic";
  c.synthetic_train = batch;
  c.synthetic_test = 16;
  c.batch = batch;
  c.steps = steps;
  c.micro_batches = micro_batches;
  c.comm_timeout_ms = kCommTimeoutMs;
  return c;
}

// What stage 0 keeps of one micro-batch from its forward to its backward: each layer keeps its input
// (for the weight gradient) and its output (for the ReLU's), and a layer's output is the next one's
// input — the micro-batch's rows of the batch and the layers/p outputs, layers/p + 1 tensors of
// rows × width f32.
int64_t saved_per_micro_batch(int stages, int64_t rows) { return (kEqualLayers / stages + 1) * rows * kEqualWidth * 4; }

// ---------------------------------------------------------------------------------------------

// Calls fn(schedule, p, stage, m, that stage's list) for every stage of every p and m the check's
// --stages and --micro-batches name (p = 1…5, m = 1…9 unless told).
template <typename Fn>
void for_each_list(const Args& a, Fn fn) {
  for (const NamedSchedule& s : schedules(a, "gpipe,1f1b"))
    for (long long p : a.ints("stages", "1-5"))
      for (long long m : a.ints("micro-batches", "1-9"))
        for (int stage = 0; stage < p; ++stage) fn(s, p, stage, m, s.fn(static_cast<int>(p), stage, static_cast<int>(m)));
}

// Tasks 1 and 2, as lists: every stage runs every micro-batch's forward and backward exactly once,
// each backward after its forward, the backwards in the order of the forwards (the strategy's
// check_pipeline_schedule); GPipe runs all its forwards before any backward.
void well_formed(const Args& a) {
  for_each_list(a, [](const NamedSchedule& s, long long p, int stage, long long m, const std::vector<lab07::Task>& tasks) {
          const std::string call = s.function + "(" + str(p) + ", " + str(stage) + ", " + str(m) + ")";
          try {
            check_pipeline_schedule(tasks, static_cast<int>(p), stage, static_cast<int>(m));
          } catch (const Error& e) {
            lab::fail(call + " = " + lab07::text(tasks),
                      "2m = " + str(2 * m) + " tasks: F i and B i once for each micro-batch 0 … " + str(m - 1) +
                          ", each B after its F, the Bs in the order of the Fs",
                      e.what());
          }
          if (s.name == "gpipe") {
            size_t forwards = 0;
            while (forwards < tasks.size() && tasks[forwards].pass == lab07::Pass::forward) ++forwards;
            lab::expect(forwards == static_cast<size_t>(m), call + " = " + lab07::text(tasks),
                        "GPipe: every forward (" + str(m) + ") before any backward",
                        str(forwards) + " forwards before the first backward");
          }
  });
  std::printf("passed: every stage runs each micro-batch's F and B once, B after F, in the order of the Fs "
              "(GPipe: all F first); "
              "p = %s, m = %s\n",
              lab::list_text(a.ints("stages", "1-5")).c_str(), lab::list_text(a.ints("micro-batches", "1-9")).c_str());
}

// The lists the lecture draws (strategies/pipeline_schedule.cpp's diagrams): GPipe's F 0 … F m−1, B 0 … B m−1;
// 1F1B's warm-up of min(p − s − 1, m) forwards, then (F w + i, B i) in turn, then the backwards left.
// The micro-batches go in the order of the batch's rows, 0 first.
std::vector<lab07::Task> lecture_list(const std::string& schedule, int p, int stage, int m) {
  const int warmup = schedule == "gpipe" ? m : std::min(p - stage - 1, m);
  std::vector<lab07::Task> tasks;
  for (int i = 0; i < warmup; ++i) tasks.push_back(lab07::F(i));
  for (int i = 0; i < m - warmup; ++i) {
    tasks.push_back(lab07::F(warmup + i));
    tasks.push_back(lab07::B(i));
  }
  for (int i = m - warmup; i < m; ++i) tasks.push_back(lab07::B(i));
  return tasks;
}

// Order: what each stage launches when. Every stage's list is the lecture's, task for task — a list
// that trains the same weights can still fill the pipe late, hold more, or take the micro-batches
// out of the batch's order.
void order(const Args& a) {
  for_each_list(a, [](const NamedSchedule& s, long long p, int stage, long long m, const std::vector<lab07::Task>& tasks) {
          const std::string got = lab07::text(tasks);
          const std::string want = lab07::text(lecture_list(s.name, static_cast<int>(p), stage, static_cast<int>(m)));
          lab::expect(got == want,
                      s.function + "(" + str(p) + ", " + str(stage) + ", " + str(m) + "): the tasks in the lecture's order" +
                          (s.name == "gpipe" ? " (every forward in micro-batch order, then every backward)"
                                             : " (warm-up of min(p − s − 1, m) forwards, then F and B in turn, then the "
                                               "backwards left; micro-batch 0 first)"),
                      want, got);
  });
  std::printf("passed: every stage's list is the lecture's, p = %s, m = %s\n",
              lab::list_text(a.ints("stages", "1-5")).c_str(), lab::list_text(a.ints("micro-batches", "1-9")).c_str());
}

// Sends: what crosses each link, in which order, and how many bytes. Stage s sends micro-batch 0's
// activations first, then 1, …, m − 1 (each rows × width f32), and the gradients of its input back in
// the same order: per step and link 2·m messages, 2 · batch · width · 4 bytes, whatever the schedule.
void sends(const Args& a) {
  const auto stages = a.ints("stages", "4");
  const auto micro = a.ints("micro-batches", "4");
  const int64_t batch = 32, steps = 2;
  const ModelSpec spec = ModelSpec::parse(small_config(1, 1, batch, steps, "sgd").model);
  std::string report;
  for (const NamedSchedule& s : schedules(a, "gpipe,1f1b"))
    for (long long p : stages)
      for (long long m : micro) {
        const TrainConfig c = small_config(static_cast<int>(p), static_cast<int>(m), batch, steps, "sgd");
        const std::string what = "pipeline with " + s.function + ", " + str(p) + " stages, " + str(m) + " micro-batches";
        const Outcome r = run_or_fail(c, s, what);
        int64_t link_bytes = 0;
        for (int64_t step = 0; step < steps; ++step)
          for (int from = 0; from < p; ++from)
            for (int to : {from + 1, from - 1}) {
              if (to < 0 || to >= p) continue;
              const bool forward = to == from + 1;
              // The width at the link: the input of stage from + 1 going up, of stage `from` coming back.
              const int first_layer = (forward ? from + 1 : from) * spec.layer_count() / static_cast<int>(p);
              const int64_t bytes = batch / m * spec.sizes[static_cast<size_t>(first_layer)] * 4;
              std::string want, got;
              for (int i = 0; i < m; ++i) want += (want.empty() ? "" : " ") + str(i) + ":" + str(bytes);
              for (const Event& e : r.sends)
                if (e.step == step && e.device == from && e.peer == to) {
                  got += (got.empty() ? "" : " ") + str(e.micro_batch) + ":" + str(e.bytes);
                  link_bytes += e.bytes;
                }
              lab::expect(got == want,
                          what + ", step " + str(step) + ": the " + (forward ? "activations" : "gradients") +
                              " stage " + str(from) + " sent to stage " + str(to) + ", as micro-batch:bytes in the order sent",
                          want + " (every micro-batch once, 0 first, rows × width f32)", got.empty() ? "nothing" : got);
            }
        report += "  " + s.name + " p = " + str(p) + " m = " + str(m) + ": " + str(link_bytes / steps) +
                  " bytes sent per step over the " + str(p - 1) + " links, every micro-batch in order\n";
      }
  std::printf("passed: each link carries every micro-batch's activations and gradient once, in order\n%s",
              report.c_str());
}

// Tasks 1 and 2, run: the pipeline with the schedule trains the same weights as single.
void equivalence(const Args& a) {
  const auto stages = a.ints("stages", "4");
  const auto micro = a.ints("micro-batches", "1,4,8");
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const int64_t steps = std::stoll(a.get("steps", "5"));
  const std::string optimizer = a.get("optimizer", "sgd");
  const double tolerance = 1e-5;
  std::string report;
  for (const NamedSchedule& s : schedules(a, "gpipe"))
    for (long long p : stages)
      for (long long m : micro) {
        const std::string what = "pipeline with " + s.function + ", " + str(p) + " stages, " + str(m) +
                                 " micro-batches of " + str(batch / m) + " rows, " + optimizer + ", " + str(steps) +
                                 " steps";
        const Outcome r = run_or_fail(small_config(static_cast<int>(p), static_cast<int>(m), batch, steps, optimizer), s, what);
        // The losses it collects are compared too: each step's loss (the mean over the micro-batches,
        // each micro-batch's mean over its rows) is single's loss of the whole batch.
        for (size_t k = 0; k < r.losses.size(); ++k) {
          const double want = r.reference_losses.at(k), got = r.losses[k];
          lab::expect(std::isfinite(got) && std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want)),
                      what + ": the loss of step " + str(k) + " against single's",
                      str(want) + " (± " + str(tolerance) + " relative: every micro-batch's loss counted once, over m)",
                      str(got));
        }
        char line[200];
        std::snprintf(line, sizeof line, "%s p = %lld m = %lld: max relative difference to single %.3g", s.name.c_str(),
                      p, m, r.max_rel_diff);
        lab::expect(r.max_rel_diff >= 0 && r.max_rel_diff <= tolerance, what + ": the weights against single's",
                    "a relative difference ≤ " + str(tolerance) + " (round-off: the same training, the batch's "
                    "gradient summed over its micro-batches)",
                    line);
        report += std::string("  ") + line + "\n";
      }
  std::printf("passed: the same weights as single\n%s", report.c_str());
}

// The bubble of one schedule on p equal stages with m micro-batches: (p − 1) / (m + p − 1) ± 0.02.
// A line for the report.
std::string check_bubble(const NamedSchedule& s, long long p, long long m, int64_t batch, int64_t steps,
                         const std::string& hw) {
  const double tolerance = 0.02;
  const std::string what = "pipeline with " + s.function + " on " + str(p) + " equal stages (" + str(kEqualLayers / p) +
                           " layers of width " + str(kEqualWidth) + " each, " + hw + "), " + str(m) +
                           " micro-batches of " + str(batch / m) + " rows";
  const Outcome r = run_or_fail(equal_stages(static_cast<int>(p), static_cast<int>(m), batch, steps, hw), s, what);
  const double expected = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
  char line[200];
  std::snprintf(line, sizeof line, "%s p = %lld m = %lld: bubble %.4f, (p − 1)/(m + p − 1) = %.4f", s.name.c_str(), p, m,
                r.bubble, expected);
  lab::expect(std::fabs(r.bubble - expected) <= tolerance, what + ": the bubble (the devices' idle share of the steps)",
              "(p − 1)/(m + p − 1) = " + str(expected) + " ± " + str(tolerance), line);
  return line;
}

// Task 1 (and 2): the bubble on equal stages is (p − 1) / (m + p − 1).
void bubble(const Args& a) {
  const auto stages = a.ints("stages", "4");
  const auto micro = a.ints("micro-batches", "4,8");
  const int64_t batch = std::stoll(a.get("batch", "1024"));
  const int64_t steps = std::stoll(a.get("steps", "2"));
  const std::string hw = a.get("hw", "a100-nvlink-8");
  std::string report;
  for (const NamedSchedule& s : schedules(a, "gpipe"))
    for (long long p : stages)
      for (long long m : micro) report += "  " + check_bubble(s, p, m, batch, steps, hw) + "\n";
  std::printf("passed: bubble within 0.02 of (p − 1)/(m + p − 1)\n%s", report.c_str());
}

// Memory held: 1F1B's stage s holds at most min(p − s, m) micro-batches' activations (`--schedule
// 1f1b`, the default); GPipe's stage 0 holds all m at once (`--schedule gpipe`). The other schedule
// is run too, for the comparison in the report. `--bubble gpipe,1f1b` also checks those bubbles.
void peak(const Args& a) {
  const auto stages = a.ints("stages", "4");
  const auto micro = a.ints("micro-batches", "8");
  const int64_t batch = std::stoll(a.get("batch", "1024"));
  const std::string hw = a.get("hw", "a100-nvlink-8");
  const NamedSchedule checked = schedule_named(a.get("schedule", "1f1b"));
  const NamedSchedule other = schedule_named(checked.name == "gpipe" ? "1f1b" : "gpipe");
  const bool gpipe = checked.name == "gpipe";
  std::string report;
  for (long long p : stages)
    for (long long m : micro) {
      const int64_t rows = batch / m, per = saved_per_micro_batch(static_cast<int>(p), rows);
      const TrainConfig c = equal_stages(static_cast<int>(p), static_cast<int>(m), batch, 1, hw);
      const std::string what = "pipeline with " + checked.function + " on " + str(p) + " equal stages (" + hw + "), " +
                               str(m) + " micro-batches of " + str(rows) + " rows";
      const Outcome r = run_or_fail(c, checked, what);
      auto worth = [&](int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(per); };
      std::string other_held = other.name + "'s did not run";
      try {
        char buf[80];
        std::snprintf(buf, sizeof buf, "%s's %.2f", other.name.c_str(), worth(run_pipeline(c, other.fn).stage0_activation_peak));
        other_held = buf;
      } catch (const std::exception&) {
      }
      char line[300];
      std::snprintf(line, sizeof line,
                    "%s p = %lld m = %lld: stage 0's activation peak %.1f MiB = %.2f micro-batches' worth (%s; one "
                    "micro-batch: %lld tensors of %lld × %lld f32 = %.2f MiB)",
                    checked.name.c_str(), p, m, static_cast<double>(r.stage0_activation_peak) / 1048576.0,
                    worth(r.stage0_activation_peak), other_held.c_str(), static_cast<long long>(kEqualLayers / p + 1),
                    static_cast<long long>(rows), static_cast<long long>(kEqualWidth), static_cast<double>(per) / 1048576.0);
      // The saved tensors of the micro-batches in flight, and the buffers in flight (a received
      // gradient, a layer's scratch): less than one micro-batch more.
      if (gpipe) {
        const double held = worth(r.stage0_activation_peak);
        lab::expect(held >= static_cast<double>(m) && held < static_cast<double>(m) + 1,
                    what + ": the most activations stage 0 held at once",
                    "m = " + str(m) + " micro-batches' worth (every forward runs before the first backward)", line);
      } else {
        for (long long s = 0; s < p; ++s) {
          const long long bound = std::min(p - s, m);
          char got[120];
          std::snprintf(got, sizeof got, "stage %lld: %.2f micro-batches' worth", s,
                        worth(r.activation_peaks[static_cast<size_t>(s)]));
          lab::expect(worth(r.activation_peaks[static_cast<size_t>(s)]) < static_cast<double>(bound) + 1,
                      what + ": the most activations stage " + str(s) + " held at once",
                      "≤ min(p − s, m) = " + str(bound) + " micro-batches' worth (plus buffers in flight, under one more)",
                      std::string(got) + "; " + line);
        }
      }
      report += std::string("  ") + line + "\n";
      if (!a.get("bubble", "").empty())
        for (const NamedSchedule& s : schedules(a.get("bubble", ""))) report += "  " + check_bubble(s, p, m, batch, 2, hw) + "\n";
    }
  std::printf("passed: %s\n%s",
              gpipe ? "GPipe's stage 0 holds all m micro-batches' activations"
                    : "1F1B's stage s holds at most min(p − s, m) micro-batches' activations (GPipe's stage 0: all m)",
              report.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                          {{"well_formed", well_formed},
                           {"order", order},
                           {"sends", sends},
                           {"equivalence", equivalence},
                           {"bubble", bubble},
                           {"peak", peak}});
}
