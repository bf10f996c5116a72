// data-parallel, model-parallel and pipeline: the equivalence with `single` (cpu and sim, sgd and
// adam, 2 and 4 devices; pipelines with GPipe, 1F1B and interleaved 1F1B and 1, 2, 4
// micro-batches), the schedules as lists and as programs of sends and receives, the closed forms on
// sim (model parallel's idle share 1 − 1/p, the pipeline bubble (p − 1)/(m + p − 1), 1F1B's smaller
// activation peak, the interleaved bubble (p − 1)/(V·m + p − 1) and its 2m(pV − 1) messages),
// pipelines under --launch procs, the events' micro-batch tags, and the configurations that are
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "run/train.h"
#include "strategies/pipeline_schedule.h"
#include "support/errors.h"
#include "support/small_config.h"
#include "core/trace/metrics.h"

using namespace scalelab;

namespace {

// Small enough to be quick, deep enough for 4 stages (4 layers).
// The shared small run, compared with single step by step.
TrainConfig small_config(const std::string& strategy, int devices, DeviceKind kind, const std::string& optimizer) {
  TrainConfig c = test::small_config(strategy, devices, kind, optimizer);
  c.check_equivalence = true;
  return c;
}

// The contract (DESIGN.md): fp32 weights within relative 1e-5 of single's, for sgd and adam.
//
// Why every equivalence test trains the same small model on the default 8192 synthetic samples:
// round-off stays round-off only where no gradient sits near a cliff. Adam's first update is
// lr · g / (|g| + eps); where a gradient's per-sample terms nearly cancel, down to |g| ≈ eps =
// 1e-8, the update hangs on g's last bits, and summing the batch in slices (replicas,
// micro-batches) rather than in one GEMM changes them. On mlp:784-64-64-32-10 with 1024 samples
// one fc1.weight gradient is 2.98e-9 in single and 2.92e-9 summed in two halves, and the weights
// end 4e-5 to 8e-5 apart — for every strategy that splits the batch, not a bug in one of them.
double tolerance(const std::string&) { return 1e-5; }

std::string kind_name(DeviceKind k) { return device_kind_name(k); }

// A model of `layers` equal square layers of width `width`: mlp:W-W-...-W.
std::string square_model(int layers, int width) {
  std::string m = "mlp:" + std::to_string(width);
  for (int l = 0; l < layers; ++l) m += "-" + std::to_string(width);
  return m;
}

// A dry run on a100-nvlink-8 of `layers` equal square layers of `width`, the batch of `batch`
// synthetic samples, for `steps` steps: compute dwarfs the launches and the copies.
TrainConfig equal_layers_config(const std::string& strategy, int devices, int layers, int width, int64_t batch,
                                int64_t steps) {
  TrainConfig c;
  c.strategy = strategy;
  c.devices = devices;
  c.device = DeviceKind::sim;
  c.hw = "a100-nvlink-8";
  c.dry_run = true;
  c.model = square_model(layers, width);
  c.dataset = "synthetic";
  c.synthetic_train = batch;
  c.synthetic_test = 16;
  c.batch = batch;
  c.steps = steps;
  return c;
}

// The metrics of the training steps only: setting up (the weights' first upload) and the final
// download of the weights are not part of a step, and would dilute its shares.
RunMetrics training_metrics(const EventBus& bus, int devices) {
  std::vector<Event> steps;
  for (const Event& e : bus.events())
    if (e.step >= 0) steps.push_back(e);
  return compute_metrics(steps, bus.memory(), devices);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Equivalence with single.

struct EquivalenceCase {
  std::string strategy;
  int devices;
  DeviceKind kind;
  std::string optimizer;
  std::string schedule = "gpipe";
  int micro_batches = 1;
  int virtual_stages = 1;
};

std::string case_name(const testing::TestParamInfo<EquivalenceCase>& info) {
  const EquivalenceCase& c = info.param;
  std::string name = c.strategy + "_" + std::to_string(c.devices) + "_" + kind_name(c.kind) + "_" + c.optimizer;
  if (c.strategy == "pipeline") name += "_" + c.schedule + "_m" + std::to_string(c.micro_batches);
  if (c.virtual_stages > 1) name += "_v" + std::to_string(c.virtual_stages);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class Equivalence : public testing::TestWithParam<EquivalenceCase> {};

TEST_P(Equivalence, SameWeightsAsSingleAfterFiveSteps) {
  const EquivalenceCase& p = GetParam();
  TrainConfig c = small_config(p.strategy, p.devices, p.kind, p.optimizer);
  c.schedule = parse_schedule(p.schedule);
  c.micro_batches = p.micro_batches;
  c.virtual_stages = p.virtual_stages;
  EventBus bus;
  TrainResult r = train(c, bus);
  ASSERT_EQ(r.losses.size(), 5u);
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
  ASSERT_GE(r.max_rel_diff, 0.0);
  EXPECT_LE(r.max_rel_diff, tolerance(p.optimizer)) << case_name({p, 0});
  std::printf("    %-40s max_rel_diff %.3g\n", case_name({p, 0}).c_str(), r.max_rel_diff);
}

std::vector<EquivalenceCase> equivalence_cases() {
  std::vector<EquivalenceCase> cases;
  for (const char* strategy : {"data-parallel", "model-parallel", "pipeline"})
    for (int devices : {2, 4})
      for (DeviceKind kind : {DeviceKind::cpu, DeviceKind::sim})
        for (const char* optimizer : {"sgd", "adam"}) {
          if (std::string(strategy) != "pipeline") {
            cases.push_back({strategy, devices, kind, optimizer});
            continue;
          }
          for (const char* schedule : {"gpipe", "1f1b", "zero-bubble"})
            for (int m : {1, 2, 4}) cases.push_back({strategy, devices, kind, optimizer, schedule, m});
          // Interleaved: 2 chunks a device, 2 × 2 virtual stages of the model's 4 layers.
          if (devices == 2)
            for (int m : {2, 4}) cases.push_back({strategy, devices, kind, optimizer, "interleaved", m, 2});
        }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Parallel, Equivalence, testing::ValuesIn(equivalence_cases()), case_name);

TEST(Pipeline, ProcsLaunchGivesTheSameWeightsAsThreads) {
  // Every rank a forked process talking through shared memory: the same numbers as threads, and
  // rank 0 (stage 0, which holds none of the later layers) reports the whole model.
  for (const char* schedule : {"gpipe", "1f1b"}) {
    TrainConfig c = small_config("pipeline", 4, DeviceKind::cpu, "sgd");
    c.schedule = parse_schedule(schedule);
    c.micro_batches = 4;
    EventBus a, b;
    TrainResult threads = train(c, a);
    c.launch = Launch::procs;
    TrainResult procs = train(c, b);
    ASSERT_EQ(threads.weights_checksum.size(), 16u);
    EXPECT_EQ(threads.weights_checksum, procs.weights_checksum) << schedule;
    EXPECT_EQ(threads.losses, procs.losses) << schedule;
    EXPECT_LE(procs.max_rel_diff, 1e-5) << schedule;
  }
  // Interleaved: each process orders the sends and receives of its stage from every stage's list,
  // and the orders fit together across the processes.
  TrainConfig c = small_config("pipeline", 2, DeviceKind::cpu, "sgd");
  c.schedule = Schedule::interleaved;
  c.virtual_stages = 2;
  c.micro_batches = 4;
  EventBus a, b;
  TrainResult threads = train(c, a);
  c.launch = Launch::procs;
  TrainResult procs = train(c, b);
  EXPECT_EQ(threads.weights_checksum, procs.weights_checksum);
  EXPECT_EQ(threads.losses, procs.losses);
  EXPECT_LE(procs.max_rel_diff, 1e-5);
}

TEST(Pipeline, EventsCarryTheirMicroBatch) {
  TrainConfig c = small_config("pipeline", 2, DeviceKind::sim, "sgd");
  c.micro_batches = 4;
  c.schedule = Schedule::one_f_one_b;
  c.check_equivalence = false;
  c.steps = 1;
  EventBus bus;
  train(c, bus);
  // Every forward and backward op of a layer is tagged with its micro-batch; each stage ran each
  // micro-batch's forward and backward.
  std::set<std::pair<int, int>> seen;  // (device, micro-batch)
  for (const Event& e : bus.events()) {
    if (e.step != 0 || e.lane != Lane::compute || e.layer < 0) continue;
    if (e.phase != Phase::fwd && e.phase != Phase::bwd) continue;
    EXPECT_GE(e.micro_batch, 0) << e.name;
    EXPECT_LT(e.micro_batch, 4) << e.name;
    seen.insert({e.device, e.micro_batch});
  }
  EXPECT_EQ(seen.size(), 8u);  // 2 stages × 4 micro-batches
}

TEST(Pipeline, ZeroBubbleGivesTheBitsOf1F1BAndRunsEachWAfterItsB) {
  // Splitting each backward in B and W moves the weights' GEMMs, not their sums: each gradient
  // still adds the micro-batches in order, so the weights are 1F1B's to the bit — an MLP in f32, a
  // GPT under bf16 with recompute (its blocks' Linears keep older Bs' inputs while a recompute
  // frees its forward's), a ConvNet (whose convolutions compute their weights' gradients in B).
  struct Case {
    std::string model;
    Amp amp;
    bool recompute;
    int devices, micro_batches;
    int64_t batch;
  };
  for (const Case& k : {Case{"mlp:32-24-16-12-8", Amp::off, false, 4, 4, 32},
                        Case{"gpt:2-32-2-8-96", Amp::bf16, true, 4, 4, 16},
                        Case{"convnet", Amp::off, false, 2, 4, 16}}) {
    std::string checksum[2];
    for (int zb : {0, 1}) {
      TrainConfig c = small_config("pipeline", k.devices, DeviceKind::cpu, "adam");
      c.model = k.model;
      c.amp = k.amp;
      c.recompute = k.recompute;
      c.micro_batches = k.micro_batches;
      c.batch = k.batch;
      c.steps = 3;
      c.check_equivalence = false;
      c.schedule = zb ? Schedule::zero_bubble : Schedule::one_f_one_b;
      EventBus bus;
      checksum[zb] = train(c, bus).weights_checksum;
      if (!zb) continue;
      // Each W: its micro-batch's Linear weight GEMMs, after that micro-batch's B on its device.
      std::set<std::pair<int, int>> backward_done;  // (device, micro-batch)
      int weight_ops = 0;
      for (const Event& e : bus.events()) {
        if (e.step != 0 || e.lane != Lane::compute) continue;
        if (e.phase == Phase::bwd) backward_done.insert({e.device, e.micro_batch});
        if (e.phase != Phase::wgrad) continue;
        ++weight_ops;
        EXPECT_TRUE(backward_done.count({e.device, e.micro_batch})) << k.model << ": " << e.name << " before its B";
      }
      EXPECT_GT(weight_ops, 0) << k.model;
    }
    EXPECT_EQ(checksum[1], checksum[0]) << k.model;
  }
}

TEST(Pipeline, InterleavedStagesHoldEveryPthVirtualStage) {
  // 2 devices × 2 chunks of mlp:32-24-16-12-8's 4 layers: device 0 holds layers 0 and 2, device 1
  // layers 1 and 3; each device runs each (layer, micro-batch) forward and backward, and the
  // activations of layer 1's output go round from device 1 to device 0.
  TrainConfig c = small_config("pipeline", 2, DeviceKind::sim, "sgd");
  c.micro_batches = 4;
  c.schedule = Schedule::interleaved;
  c.virtual_stages = 2;
  c.check_equivalence = false;
  c.steps = 1;
  EventBus bus;
  train(c, bus);
  std::set<std::tuple<int, int, int, Phase>> seen;  // (device, layer, micro-batch, pass)
  int round_trips = 0;
  for (const Event& e : bus.events()) {
    if (e.step != 0) continue;
    if (e.lane == Lane::comm && e.kind == "send" && e.device == 1 && e.peer == 0 &&
        e.name.rfind("activations", 0) == 0)
      ++round_trips;
    if (e.lane != Lane::compute || e.layer < 0 || (e.phase != Phase::fwd && e.phase != Phase::bwd)) continue;
    EXPECT_EQ(e.layer % 2, e.device) << e.name;
    seen.insert({e.device, e.layer, e.micro_batch, e.phase});
  }
  EXPECT_EQ(seen.size(), 4u * 4 * 2);  // 4 layers × 4 micro-batches × F and B
  EXPECT_EQ(round_trips, 4);           // one per micro-batch
}

// ---------------------------------------------------------------------------------------------
// Closed forms on sim. Dry runs: the clock is the cost model's, no numerics are needed, so the
// models can be large enough that compute dwarfs the kernel launches and the copies.

TEST(ModelParallelSim, EachDeviceIsIdleAllButItsShareOfTheStep) {
  // 64 equal layers of width 1024, batch 4096: each of the p devices holds 64/p of them and does
  // 1/p of the compute. Model parallel runs them one device after another ("blocking"), so with
  //   F_i  device i's forward + backward compute per step,   O  one device's optimizer step,
  //   K    one copy of the activations (or of their gradient) to the neighbouring device,
  // a step lasts T = Σ F_i + 2(p − 1)·K + O (only the first device's optimizer step is in the
  // way: the others update while it is still in backward), and device i is idle
  //     idle_i = 1 − (F_i + O + k_i·K) / T          (k_i: the copies it receives, 1 or 2)
  // which is 1 − 1/p when the F_i are equal and O and K vanish. On a100-nvlink-8, per layer
  // 3 GEMMs of 2·4096·1024·1024 flop at 19.5 TFLOP/s × 0.8 + 5 µs launch = 3 × 556 µs, plus the
  // bias/ReLU forward and backward: F_i ≈ 1.73 ms × 64/p, so T ≈ 111 ms; a copy of 4096 × 1024
  // fp32 (16 MiB) over NVLink is K = 2 µs + 16 MiB / 300 GB/s = 58 µs (≤ 0.1 % of T); the
  // optimizer (sgd with momentum: 5 passes over each 4 MiB weight at 1.555 TB/s + 5 µs, and the
  // bias) is O ≈ 24 µs × 64/p, ≤ 0.7 % of T, of which (p − 1)/p moves each busy share up; and
  // the first device skips its first layer's dx GEMM (556 µs, 0.5 % of T) while the last adds
  // the loss. Together they move each share by less than one point from 1 − 1/p (busy: 1/p).
  for (int p : {2, 4}) {
    TrainConfig c = equal_layers_config("model-parallel", p, 64, 1024, 4096, 6);
    EventBus bus;
    train(c, bus);
    RunMetrics m = training_metrics(bus, p);
    const double expected_idle = 100.0 * (1.0 - 1.0 / p);
    for (int d = 0; d < p; ++d) {
      const DeviceMetrics& dm = m.per_device[static_cast<size_t>(d)];
      std::printf("    model-parallel p=%d device %d: idle %.2f%% (1 − 1/p = %.2f%%), busy %.2f%%\n", p, d, dm.idle_pct,
                  expected_idle, dm.busy_pct);
      EXPECT_NEAR(dm.idle_pct, expected_idle, 1.0) << "p " << p << " device " << d;
      EXPECT_NEAR(dm.busy_pct, 100.0 / p, 1.0) << "p " << p << " device " << d;
    }
  }
}

namespace {

struct PipelineRun {
  double bubble = 0;
  int64_t stage0_activation_peak = 0;
};

// 4 stages of 16 equal layers (width 1024), batch 1024, on a100-nvlink-8: every stage does the
// same work, forward and backward (the loss on the last stage is one element-wise op over 1024
// classes, a few µs against its ≈ 0.8 ms per micro-batch).
PipelineRun run_equal_stages(const std::string& schedule, int micro_batches) {
  TrainConfig c = equal_layers_config("pipeline", 4, 64, 1024, 1024, 6);
  c.schedule = parse_schedule(schedule);
  c.micro_batches = micro_batches;
  EventBus bus;
  TrainResult r = train(c, bus);
  return {r.metrics.bubble_fraction, r.per_device[0].peak_bytes[static_cast<int>(MemoryCategory::activations)]};
}

}  // namespace

TEST(PipelineSim, GpipeBubbleIsTheClosedForm) {
  // GPipe on p equal stages with m micro-batches, each taking t = f + b of a stage's compute: the
  // last forward leaves stage p − 1 after (m + p − 1) f, the last backward reaches stage 0 after
  // (m + p − 1) b more, and each stage computed m·t of that:
  //     bubble = 1 − m / (m + p − 1) = (p − 1) / (m + p − 1)      (3/7 for m = 4, 3/11 for m = 8)
  // What the formula leaves out, on a100-nvlink-8 with r = 1024/m rows per micro-batch:
  //   t: 16 layers × (3 GEMMs of 2·r·1024·1024 flop at 15.6 TFLOP/s + 5 µs, and the bias/ReLU
  //      forward and backward at 1.555 TB/s + 5 µs each) = 2.11 ms at r = 256, 1.25 ms at r = 128
  //   c: each micro-batch passes 4 blocking point-to-point transfers per stage (activation in
  //      and out, gradient in and out) of r × 1024 fp32, 2 µs + r·4 KiB / 300 GB/s: 5.5 µs at
  //      r = 256, 3.7 µs at r = 128; they stretch every slot to t + 4c
  //   O: the optimizer step, 16 × (18.5 + 5) µs ≈ 0.38 ms on every stage, only stage 0's exposed
  // which gives bubble ≈ 1 − (m·t + O) / ((m + p − 1)(t + 4c) + O) = 0.424 (m = 4), 0.274 (m = 8):
  // within 0.01 of the formula.
  const int p = 4;
  for (int m : {4, 8}) {
    const double expected = static_cast<double>(p - 1) / (m + p - 1);
    PipelineRun r = run_equal_stages("gpipe", m);
    std::printf("    gpipe p=%d m=%d: bubble %.4f, (p − 1)/(m + p − 1) = %.4f\n", p, m, r.bubble, expected);
    EXPECT_NEAR(r.bubble, expected, 0.01) << "m " << m;
  }
}

TEST(PipelineSim, OneFOneBHasTheSameBubbleAndALowerActivationPeak) {
  // 1F1B idles the same slots as GPipe, only in other places: same bubble. But stage 0 holds at
  // most p micro-batches' activations (its warm-up p − 1 forwards, plus one) instead of all m:
  // with m = 8 = 2p its saved activations are half of GPipe's, plus the same few buffers in flight.
  const int p = 4;
  for (int m : {4, 8}) {
    const double expected = static_cast<double>(p - 1) / (m + p - 1);
    PipelineRun gpipe = run_equal_stages("gpipe", m);
    PipelineRun one = run_equal_stages("1f1b", m);
    std::printf("    p=%d m=%d: bubble gpipe %.4f 1f1b %.4f (formula %.4f); stage 0 activation peak gpipe %.1f MiB, "
                "1f1b %.1f MiB\n",
                p, m, gpipe.bubble, one.bubble, expected, gpipe.stage0_activation_peak / 1048576.0,
                one.stage0_activation_peak / 1048576.0);
    EXPECT_NEAR(one.bubble, expected, 0.01) << "m " << m;
    EXPECT_NEAR(one.bubble, gpipe.bubble, 0.01) << "m " << m;
    if (m > p) {
      // Saved per micro-batch on stage 0: its input and 16 layer outputs, 17 × r × 4 KiB.
      const int64_t rows = 1024 / m, per_micro_batch = 17 * rows * 1024 * 4;
      EXPECT_GE(gpipe.stage0_activation_peak, m * per_micro_batch);
      EXPECT_GE(one.stage0_activation_peak, p * per_micro_batch);
      EXPECT_LT(one.stage0_activation_peak, (p + 1) * per_micro_batch);
      EXPECT_LT(one.stage0_activation_peak, gpipe.stage0_activation_peak);
    } else {
      EXPECT_LE(one.stage0_activation_peak, gpipe.stage0_activation_peak);  // m ≤ p: both hold all m
    }
  }
}

namespace {

// One interleaved (or 1F1B, V = 1) run of p = 4 stages, m = 8 micro-batches on 32 equal layers of
// width 4096, batch 1024, a100-nvlink-8, and what its events say of a step: the bubble share, each
// device's forward + backward compute per micro-batch (t) and optimizer time (O), the mean time of
// a point-to-point message (c) and the messages per step.
struct InterleavedRun {
  double bubble = 0, t_ns = 0, optimizer_ns = 0, message_ns = 0, messages_per_step = 0;
};

InterleavedRun run_interleaved(int virtual_stages) {
  const int p = 4, m = 8, steps = 4;
  TrainConfig c = equal_layers_config("pipeline", p, 32, 4096, 1024, steps);
  c.micro_batches = m;
  c.schedule = virtual_stages > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  c.virtual_stages = virtual_stages;
  EventBus bus;
  TrainResult r = train(c, bus);
  InterleavedRun run;
  run.bubble = r.metrics.bubble_fraction;
  double compute = 0, optimizer = 0, messages = 0, message_time = 0;
  for (const Event& e : bus.events()) {
    if (e.step < 0) continue;
    const double d = static_cast<double>(e.t_end_ns - e.t_begin_ns);
    if (e.lane == Lane::compute && (e.phase == Phase::fwd || e.phase == Phase::bwd)) compute += d;
    if (e.lane == Lane::compute && e.phase == Phase::optim) optimizer += d;
    if (e.lane == Lane::comm && e.kind == "send") {
      messages += 1;
      message_time += d;
    }
  }
  run.t_ns = compute / (p * steps * m);
  run.optimizer_ns = optimizer / (p * steps);
  run.message_ns = message_time / messages;
  run.messages_per_step = messages / steps;
  return run;
}

}  // namespace

TEST(PipelineSim, InterleavingShrinksTheBubbleVTimesForVTimesTheMessages) {
  // p = 4 equal stages, m = 8, t a stage's forward + backward of one micro-batch. 1F1B fills and
  // drains the pipe in p − 1 slots of t; interleaved with V chunks a device, a task is t/V and the
  // fill and drain take p − 1 tasks: (p − 1)·t/V. So, as a share of the step,
  //     1F1B   (p − 1)/(m + p − 1)     = 3/11 = 27.3 %     (bubble / useful time (p − 1)/m   = 0.375)
  //     V = 2  (p − 1)/(V·m + p − 1)   = 3/19 = 15.8 %     ((p − 1)/(V·m) = 0.1875)
  //     V = 4                            3/35 =  8.6 %     (0.094)
  // What the formula leaves out, from the run's own events: each (F, B) pair of tasks passes 4
  // point-to-point messages of c = 2 µs + 128 rows × 16 KiB / 300 GB/s ≈ 9 µs, which stretch each
  // task pair from t/V to t/V + 4c — (V·m + p − 1) pairs in a step, so V times the stretch of 1F1B
  // — and every stage's optimizer step O (8 layers of 64 MiB, ≈ 1.8 ms) is busy time after the
  // last backward. Hence
  //     bubble ≈ 1 − (m·t + O) / ((V·m + p − 1)(t/V + 4c) + O)
  // which the runs meet within 0.005; the textbook share alone they meet within 0.02 (the 4c
  // stretch adds 1.7 points at V = 4: 35 × 36 µs of a 58 ms step; O takes 0.3 off).
  // And a micro-batch crosses p·V − 1 boundaries each way: 2m(pV − 1) messages a step, 48 for
  // 1F1B, 112 and 240 interleaved.
  const int p = 4, m = 8;
  double previous = 1;
  for (int V : {1, 2, 4}) {
    const InterleavedRun r = run_interleaved(V);
    const double textbook = static_cast<double>(p - 1) / (V * m + p - 1);
    const double with_costs =
        1 - (m * r.t_ns + r.optimizer_ns) / ((V * m + p - 1) * (r.t_ns / V + 4 * r.message_ns) + r.optimizer_ns);
    std::printf("    p=%d m=%d V=%d: bubble %.4f (bubble/useful %.4f), (p − 1)/(V·m + p − 1) = %.4f "
                "((p − 1)/(V·m) = %.4f), with the messages and the optimizer %.4f; %g messages a step\n",
                p, m, V, r.bubble, r.bubble / (1 - r.bubble), textbook, (p - 1.0) / (V * m), with_costs,
                r.messages_per_step);
    EXPECT_NEAR(r.bubble, with_costs, 0.005) << "V " << V;
    EXPECT_NEAR(r.bubble, textbook, 0.02) << "V " << V;
    EXPECT_LT(r.bubble, previous) << "V " << V;
    EXPECT_EQ(r.messages_per_step, 2.0 * m * (p * V - 1)) << "V " << V;
    previous = r.bubble;
  }
}

// ---------------------------------------------------------------------------------------------
// Configurations that cannot work are UsageErrors, naming the option and the fix.

namespace {

std::string usage_error(TrainConfig c) {
  EventBus bus;
  c.check_equivalence = false;
  return test::message_of([&] { train(c, bus); });
}

}  // namespace

TEST(PipelineSchedule, TheLecturesListsAreRunnableAndABrokenListIsNamed) {
  // GPipe and 1F1B pass the check on every stage, p = 1…5, m = 1…9; 1F1B's stage s runs
  // min(p − s, m) forwards before its first backward (its warm-up and one more): it never holds more
  // micro-batches' activations than that.
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 9; ++m)
      for (int s = 0; s < p; ++s) {
        EXPECT_NO_THROW(check_pipeline_schedule(gpipe_schedule(p, s, m), p, s, m));
        const std::vector<PipelineTask> tasks = one_f_one_b_schedule(p, s, m);
        EXPECT_NO_THROW(check_pipeline_schedule(tasks, p, s, m));
        int forwards = 0;
        while (tasks[static_cast<size_t>(forwards)].pass == PipelinePass::forward) ++forwards;
        EXPECT_EQ(forwards, std::min(p - s, m)) << "p " << p << " s " << s << " m " << m;
      }
  const auto F = [](int i) { return PipelineTask{PipelinePass::forward, i}; };
  const auto B = [](int i) { return PipelineTask{PipelinePass::backward, i}; };
  const auto error = [](const std::vector<PipelineTask>& tasks) {
    return test::message_of<Error>([&] { check_pipeline_schedule(tasks, 2, 1, 2); });
  };
  EXPECT_NE(error({F(0), B(0), F(1)}).find("never runs B 1"), std::string::npos);
  EXPECT_NE(error({B(0), F(0), F(1), B(1)}).find("runs B 0 before F 0"), std::string::npos);
  EXPECT_NE(error({F(0), F(1), B(1), B(0)}).find("runs B 1 where B 0 is due"), std::string::npos);
  EXPECT_NE(error({F(0), F(0), B(0), B(1)}).find("runs F 0 a second time"), std::string::npos);
  EXPECT_NE(error({F(0), F(2), B(0), B(2)}).find("the micro-batches are 0 … 1"), std::string::npos);
}

namespace {

// The programs the strategy runs for `tasks` (one list per stage), as it builds them.
std::vector<PipelineProgram> local_programs(const std::vector<std::vector<PipelineTask>>& tasks) {
  std::vector<PipelineProgram> programs;
  const int p = static_cast<int>(tasks.size());
  for (int s = 0; s < p; ++s) programs.push_back(stage_program(tasks[static_cast<size_t>(s)], p, s));
  return programs;
}

}  // namespace

TEST(PipelineSchedule, InterleavedListsRunEveryChunkOnceAndTheirProgramsNeverWaitForEver) {
  for (int p = 2; p <= 5; ++p)
    for (int V = 2; V <= 4; ++V)
      for (int m : {p, 2 * p, 3 * p}) {
        std::vector<std::vector<PipelineTask>> tasks;
        for (int s = 0; s < p; ++s) {
          tasks.push_back(interleaved_schedule(p, V, s, m));
          // Every (chunk, micro-batch) forward and backward once, a chunk's backwards in the order
          // of its forwards; the warm-up is Megatron's, 2(p − s − 1) + (V − 1)p forwards.
          EXPECT_NO_THROW(check_pipeline_schedule(tasks.back(), p, s, m, V)) << "p " << p << " V " << V << " m " << m;
          ASSERT_EQ(tasks.back().size(), static_cast<size_t>(2 * V * m));
          int forwards = 0;
          while (tasks.back()[static_cast<size_t>(forwards)].pass == PipelinePass::forward) ++forwards;
          EXPECT_EQ(forwards, std::min(2 * (p - s - 1) + (V - 1) * p + 1, V * m)) << "p " << p << " s " << s;
        }
        // The programs, sends meeting receives in a pipeline where each waits for the other: they
        // all run to the end, each message received by the task it is for.
        const std::vector<PipelineProgram> programs = timed_programs(tasks, V);
        EXPECT_NO_THROW(check_pipeline_programs(programs, V)) << "p " << p << " V " << V << " m " << m;
        // Each stage's program holds its tasks in its list's order, with 2·V·m − (messages the
        // ends of the model do not pass) sends and as many receives.
        for (int s = 0; s < p; ++s) {
          std::vector<std::tuple<PipelinePass, int, int>> computed, listed;
          int sends = 0, receives = 0;
          for (const PipelineOp& op : programs[static_cast<size_t>(s)]) {
            if (op.kind == PipelineOp::compute) computed.emplace_back(op.task.pass, op.task.micro_batch, op.task.chunk);
            sends += op.kind == PipelineOp::send;
            receives += op.kind == PipelineOp::receive;
          }
          for (const PipelineTask& t : tasks[static_cast<size_t>(s)]) listed.emplace_back(t.pass, t.micro_batch, t.chunk);
          EXPECT_EQ(computed, listed) << "p " << p << " s " << s;
          const int ends = (s == 0 ? m : 0) + (s == p - 1 ? m : 0);  // the batch in, the loss out
          EXPECT_EQ(sends, 2 * V * m - ends);
          EXPECT_EQ(receives, 2 * V * m - ends);
        }
      }
  // Micro-batches not a multiple of the stages: Megatron's rule, refused.
  EXPECT_THROW(interleaved_schedule(4, 2, 0, 6), Error);
}

TEST(PipelineSchedule, TheLecturesProgramsNeverWaitForEverAndAWaitInACircleIsNamed) {
  // GPipe's and 1F1B's lists as each stage orders its sends and receives alone (lab 07's lists run
  // so): no stage waits for ever, p = 1…5, m = 1…9.
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 9; ++m) {
      std::vector<std::vector<PipelineTask>> gpipe, one;
      for (int s = 0; s < p; ++s) {
        gpipe.push_back(gpipe_schedule(p, s, m));
        one.push_back(one_f_one_b_schedule(p, s, m));
      }
      EXPECT_NO_THROW(check_pipeline_programs(local_programs(gpipe), 1)) << "p " << p << " m " << m;
      EXPECT_NO_THROW(check_pipeline_programs(local_programs(one), 1)) << "p " << p << " m " << m;
    }
  const auto op = [](PipelineOp::Kind kind, PipelinePass pass, int i) { return PipelineOp{kind, {pass, i}}; };
  using K = PipelineOp;
  const PipelinePass F = PipelinePass::forward, B = PipelinePass::backward;
  const PipelineProgram stage0 = {op(K::compute, F, 0), op(K::send, F, 0), op(K::compute, F, 1), op(K::send, F, 1),
                                  op(K::receive, B, 0), op(K::compute, B, 0), op(K::receive, B, 1), op(K::compute, B, 1)};
  // 1F1B's stage 1 sending B 0's gradient before it receives F 1's input: both stages send.
  const PipelineProgram stage1 = {op(K::receive, F, 0), op(K::compute, F, 0), op(K::compute, B, 0), op(K::send, B, 0),
                                  op(K::receive, F, 1), op(K::compute, F, 1), op(K::compute, B, 1), op(K::send, B, 1)};
  std::string e = test::message_of<Error>([&] { check_pipeline_programs({stage0, stage1}, 1); });
  EXPECT_NE(e.find("wait on each other for ever: stage 0 sends the output of F 1; stage 1 sends the output of B 0"),
            std::string::npos)
      << e;
  // Receiving F 1 where F 0 comes: the lists cross the link in different orders.
  const PipelineProgram swapped = {op(K::receive, F, 1), op(K::compute, F, 1), op(K::receive, F, 0), op(K::compute, F, 0),
                                   op(K::compute, B, 0), op(K::send, B, 0), op(K::compute, B, 1), op(K::send, B, 1)};
  e = test::message_of<Error>([&] { check_pipeline_programs({stage0, swapped}, 1); });
  EXPECT_NE(e.find("stage 0 sends the output of F 0 while stage 1 receives the input of F 1"), std::string::npos) << e;
  // Lists that wait on each other's tasks cannot be timed.
  const std::vector<std::vector<PipelineTask>> crossed = {
      {{F, 0}, {B, 0}, {F, 1}, {B, 1}}, {{F, 1}, {B, 1}, {F, 0}, {B, 0}}};
  e = test::message_of<Error>([&] { timed_programs(crossed, 2); });
  EXPECT_NE(e.find("waits for an input"), std::string::npos) << e;
}

namespace {

// How long the stages' programs take when F takes `f`, B `b` and W `w` units and a send waits for
// its receive (as the comm backends' do), messages taking no time: each stage runs its ops in
// order; a compute advances its clock; a send and its receive both end at the later of the two
// clocks. The makespan: the last clock.
int64_t unit_makespan(const std::vector<PipelineProgram>& programs, int64_t f, int64_t b, int64_t w) {
  const int p = static_cast<int>(programs.size());
  const PipelineLinks links{p, 1};
  std::vector<size_t> at(static_cast<size_t>(p));
  std::vector<int64_t> clock(static_cast<size_t>(p));
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const PipelineProgram& program = programs[static_cast<size_t>(s)];
      size_t& k = at[static_cast<size_t>(s)];
      for (; k < program.size() && program[k].kind == PipelineOp::compute; ++k, progress = true) {
        const PipelinePass pass = program[k].task.pass;
        clock[static_cast<size_t>(s)] += pass == PipelinePass::forward ? f : pass == PipelinePass::backward ? b : w;
      }
      if (k == program.size() || program[k].kind != PipelineOp::send) continue;
      const int to = links.peer_of_output(s, program[k].task);
      size_t& there = at[static_cast<size_t>(to)];
      if (there == programs[static_cast<size_t>(to)].size() || programs[static_cast<size_t>(to)][there].kind != PipelineOp::receive)
        continue;
      clock[static_cast<size_t>(s)] = clock[static_cast<size_t>(to)] =
          std::max(clock[static_cast<size_t>(s)], clock[static_cast<size_t>(to)]);
      ++k;
      ++there;
      progress = true;
    }
  }
  for (int s = 0; s < p; ++s) EXPECT_EQ(at[static_cast<size_t>(s)], programs[static_cast<size_t>(s)].size()) << "stage " << s;
  return *std::max_element(clock.begin(), clock.end());
}

}  // namespace

TEST(PipelineSchedule, ZeroBubbleSplitsEveryBackwardAndIdlesAThirdOf1F1B) {
  // ZB-H1's lists pass the check (every F, B and W once, each W after its B, in the Bs' order) and
  // their programs never wait for ever, p = 1…6, m = 1…12. With F, B and W one unit each (1F1B's
  // backward being B and W together, two), a step of m ≥ p micro-batches takes
  //     1F1B  3(m + p − 1) units: each stage idles 3(p − 1)
  //     ZB-H1 3m + p − 1 units:   each stage idles p − 1, the warm-up's wait for the first gradient
  // — with the sends waiting for their receives, as the backends' do.
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 12; ++m) {
      std::vector<std::vector<PipelineTask>> zb, one;
      for (int s = 0; s < p; ++s) {
        zb.push_back(zero_bubble_schedule(p, s, m));
        one.push_back(one_f_one_b_schedule(p, s, m));
        EXPECT_NO_THROW(check_pipeline_schedule(zb.back(), p, s, m)) << "p " << p << " s " << s << " m " << m;
        EXPECT_EQ(zb.back().size(), static_cast<size_t>(3 * m));
        // Stage 0 holds at most p micro-batches between their F and their W (its F x comes after
        // W x − p), as 1F1B holds p between F and B.
        int in_flight = 0, most = 0;
        for (const PipelineTask& t : zb.back()) {
          in_flight += t.pass == PipelinePass::forward ? 1 : t.pass == PipelinePass::weight ? -1 : 0;
          most = std::max(most, in_flight);
        }
        if (s == 0) EXPECT_LE(most, p) << "p " << p << " m " << m;
      }
      const std::vector<PipelineProgram> zb_programs = local_programs(zb);
      EXPECT_NO_THROW(check_pipeline_programs(zb_programs, 1)) << "p " << p << " m " << m;
      if (m < p) continue;
      const int64_t zb_units = unit_makespan(zb_programs, 1, 1, 1), one_units = unit_makespan(local_programs(one), 1, 2, 0);
      EXPECT_EQ(zb_units, 3 * m + p - 1) << "p " << p << " m " << m;
      EXPECT_EQ(one_units, 3 * (m + p - 1)) << "p " << p << " m " << m;
      if (p == 4 && m == 8) std::printf("    p=4 m=8: 1F1B %lld units, ZB-H1 %lld (the drawing's 33 and 27)\n",
                                         static_cast<long long>(one_units), static_cast<long long>(zb_units));
    }
  const auto F = [](int i) { return PipelineTask{PipelinePass::forward, i}; };
  const auto B = [](int i) { return PipelineTask{PipelinePass::backward, i}; };
  const auto W = [](int i) { return PipelineTask{PipelinePass::weight, i}; };
  const auto error = [](const std::vector<PipelineTask>& tasks) {
    return test::message_of<Error>([&] { check_pipeline_schedule(tasks, 2, 1, 2); });
  };
  EXPECT_NE(error({F(0), B(0), W(0), F(1), B(1)}).find("never runs W 1"), std::string::npos);
  EXPECT_NE(error({F(0), W(0), B(0), F(1), B(1), W(1)}).find("runs W 0 before B 0"), std::string::npos);
  EXPECT_NE(error({F(0), B(0), F(1), B(1), W(1), W(0)}).find("runs W 1 where W 0 is due"), std::string::npos);
}

TEST(PipelineSim, ZeroBubbleFillsTheCoolDownWithWeightGradients) {
  // 32 equal layers of 4096 on p = 4 stages, m = 8, a100-nvlink-8: the same dry run under 1F1B
  // and ZB-H1. Every W op is a weight GEMM of 2·r·4096² flop (r = 128 rows a micro-batch), as is
  // every F's and every B's but stage 0's first (no gradient for the batch): F ≈ B ≈ W, so ZB-H1
  // idles about a third of 1F1B's (p − 1)/(m + p − 1) = 27.3 %: (p − 1)/(3m + p − 1) = 11.1 %,
  // plus what the formula leaves out — each slot's sends, the optimizer step after the last W.
  const int p = 4, m = 8;
  double bubble[2], step_s[2];
  for (int zb : {0, 1}) {
    TrainConfig c = equal_layers_config("pipeline", p, 32, 4096, 1024, 4);
    c.micro_batches = m;
    c.schedule = zb ? Schedule::zero_bubble : Schedule::one_f_one_b;
    EventBus bus;
    TrainResult r = train(c, bus);
    bubble[zb] = training_metrics(bus, p).bubble_fraction;
    step_s[zb] = r.time_s / static_cast<double>(r.steps);
  }
  std::printf("    p=%d m=%d: bubble 1F1B %.4f (formula %.4f), ZB-H1 %.4f (formula %.4f); step %.2f ms → %.2f ms\n", p, m,
              bubble[0], (p - 1.0) / (m + p - 1), bubble[1], (p - 1.0) / (3 * m + p - 1), 1e3 * step_s[0], 1e3 * step_s[1]);
  EXPECT_NEAR(bubble[0], (p - 1.0) / (m + p - 1), 0.02);
  EXPECT_NEAR(bubble[1], (p - 1.0) / (3 * m + p - 1), 0.03);
  // The same work in a shorter step: (3m + p − 1) / (3(m + p − 1)) = 27/33 of 1F1B's, within 3 %.
  EXPECT_NEAR(step_s[1] / step_s[0], 27.0 / 33.0, 0.03);
}

TEST(ParallelConfig, InvalidConfigurationsAreUsageErrors) {
  TrainConfig c = small_config("pipeline", 5, DeviceKind::cpu, "sgd");  // 5 stages, 4 layers
  std::string e = usage_error(c);
  EXPECT_NE(e.find("[pipeline]"), std::string::npos) << e;
  EXPECT_NE(e.find("--devices 5"), std::string::npos) << e;
  EXPECT_NE(e.find("4 layers"), std::string::npos) << e;

  c = small_config("pipeline", 2, DeviceKind::cpu, "sgd");
  c.micro_batches = 3;  // 32 rows do not cut into 3
  e = usage_error(c);
  EXPECT_NE(e.find("[pipeline]"), std::string::npos) << e;
  EXPECT_NE(e.find("--batch 32"), std::string::npos) << e;
  EXPECT_NE(e.find("--micro-batches 3"), std::string::npos) << e;

  c.micro_batches = 256;  // more micro-batches than rows
  EXPECT_NE(usage_error(c).find("[pipeline]"), std::string::npos);

  c.micro_batches = 0;
  EXPECT_NE(usage_error(c).find("--micro-batches must be"), std::string::npos);

  c.micro_batches = 2;
  EXPECT_THROW(parse_schedule("zb-h2"), UsageError);
  EXPECT_NE(test::message_of([] { parse_schedule("zb-h2"); }).find("gpipe, 1f1b, interleaved or zero-bubble"),
            std::string::npos);

  // Interleaved: m a multiple of p, a layer per virtual stage, V ≥ 2 only with it, 2 devices.
  c = small_config("pipeline", 2, DeviceKind::cpu, "sgd");
  c.schedule = Schedule::interleaved;
  c.virtual_stages = 2;
  c.micro_batches = 1;
  c.batch = 36;
  c.micro_batches = 3;
  e = usage_error(c);
  EXPECT_NE(e.find("--micro-batches 3"), std::string::npos) << e;
  EXPECT_NE(e.find("multiple of --devices 2"), std::string::npos) << e;
  EXPECT_NE(e.find("use --micro-batches 2 or 4"), std::string::npos) << e;
  c.batch = 32;
  c.micro_batches = 2;
  c.virtual_stages = 4;  // 2 × 4 = 8 virtual stages, 4 layers
  e = usage_error(c);
  EXPECT_NE(e.find("8 virtual stages"), std::string::npos) << e;
  EXPECT_NE(e.find("use --virtual-stages ≤ 2, or a model with at least 8 layers"), std::string::npos) << e;
  c.virtual_stages = 1;
  e = usage_error(c);
  EXPECT_NE(e.find("--schedule interleaved needs --virtual-stages V ≥ 2"), std::string::npos) << e;
  c.schedule = Schedule::one_f_one_b;
  c.virtual_stages = 2;
  e = usage_error(c);
  EXPECT_NE(e.find("add --schedule interleaved, or drop --virtual-stages"), std::string::npos) << e;
  c = small_config("pipeline", 1, DeviceKind::cpu, "sgd");
  c.schedule = Schedule::interleaved;
  c.virtual_stages = 2;
  e = usage_error(c);
  EXPECT_NE(e.find("--devices 1 has none"), std::string::npos) << e;
  c = small_config("ddp", 2, DeviceKind::cpu, "sgd");
  c.virtual_stages = 2;
  c.schedule = Schedule::interleaved;
  e = usage_error(c);
  EXPECT_NE(e.find("does not apply to --strategy ddp"), std::string::npos) << e;

  c = small_config("model-parallel", 5, DeviceKind::cpu, "sgd");
  e = usage_error(c);
  EXPECT_NE(e.find("[model-parallel]"), std::string::npos) << e;
  EXPECT_NE(e.find("--devices 5"), std::string::npos) << e;

  c = small_config("data-parallel", 3, DeviceKind::cpu, "sgd");  // 128 rows over 3 devices
  e = usage_error(c);
  EXPECT_NE(e.find("[data-parallel]"), std::string::npos) << e;
  EXPECT_NE(e.find("--batch 32"), std::string::npos) << e;
  EXPECT_NE(e.find("--devices 3"), std::string::npos) << e;

  c = small_config("data-parallel", 2, DeviceKind::cpu, "sgd");
  c.launch = Launch::procs;  // one controller: no ranks to launch
  EXPECT_NE(usage_error(c).find("--launch procs"), std::string::npos);
}
