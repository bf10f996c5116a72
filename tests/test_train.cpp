// Whole runs through train(): determinism from the seed, learning, the JSON summary, and the
// simulated time of one step of `single` on a100-nvlink-8 checked op by op against the profile's
// figures, worked out here with the same rules as the sim clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <map>
#include <cstdio>
#include <numeric>
#include <set>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/weights_file.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/npz.h"
#include "core/nn/model.h"
#include "core/trace/chrome_trace.h"
#include "run/run_parts.h"
#include "run/train.h"
#include "support/errors.h"
#include "support/gemm_formula.h"
#include "support/small_config.h"

using namespace scalelab;
using nlohmann::json;

namespace {

TrainConfig small_cpu_config(uint64_t seed = 42) {
  TrainConfig c;
  c.strategy = "single";
  c.device = DeviceKind::cpu;
  c.model = "mlp:16-12-4";
  c.dataset = "synthetic";
  c.synthetic_train = 512;
  c.synthetic_test = 256;
  c.batch = 32;
  c.steps = 30;
  c.seed = seed;
  return c;
}

TrainResult run(const TrainConfig& c) {
  EventBus bus;
  return train(c, bus);
}

}  // namespace

TEST(Train, SameSeedSameWeightsOtherSeedOtherWeights) {
  TrainResult a = run(small_cpu_config(42));
  TrainResult b = run(small_cpu_config(42));
  TrainResult c = run(small_cpu_config(43));
  ASSERT_EQ(a.weights_checksum.size(), 16u);
  EXPECT_EQ(a.weights_checksum, b.weights_checksum);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_NE(a.weights_checksum, c.weights_checksum);
  EXPECT_NE(a.losses, c.losses);
}

TEST(Train, SimComputesTheSameNumbersAsCpu) {
  // The sim device runs the numerics on the host: only the clock differs.
  TrainConfig c = small_cpu_config(7);
  TrainResult cpu = run(c);
  c.device = DeviceKind::sim;
  c.hw = "a100-nvlink-8";
  TrainResult sim = run(c);
  EXPECT_EQ(cpu.weights_checksum, sim.weights_checksum);
  EXPECT_FALSE(cpu.simulated);
  EXPECT_TRUE(sim.simulated);
  EXPECT_EQ(sim.hw_name, "a100-nvlink-8");
}

TEST(Train, AShortRunLearns) {
  TrainConfig c = small_cpu_config(5);
  c.steps = 150;
  TrainResult r = run(c);
  ASSERT_EQ(r.losses.size(), 150u);
  ASSERT_EQ(r.steps, 150);
  EXPECT_EQ(r.samples, 150 * 32);
  const double first = std::accumulate(r.losses.begin(), r.losses.begin() + 5, 0.0) / 5;
  const double last = std::accumulate(r.losses.end() - 10, r.losses.end(), 0.0) / 10;
  EXPECT_NEAR(first, std::log(4.0), 0.5);  // about chance at the start: ln(classes)
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
  EXPECT_GT(r.test_accuracy, 0.8);         // 4 classes: chance is 0.25
  EXPECT_LE(r.test_accuracy, 1.0);
  // final_loss is the last step's loss; mean_loss the mean of the last ≤ 100 steps, and says so.
  EXPECT_EQ(r.final_loss, r.losses.back());
  EXPECT_NEAR(r.mean_loss, std::accumulate(r.losses.end() - 100, r.losses.end(), 0.0) / 100, 1e-9);
  EXPECT_EQ(r.mean_loss_steps, 100);
  const std::string summary = format_summary(r);
  char line[96];
  std::snprintf(line, sizeof line, "final loss      %.4f (the last step's)", r.losses.back());
  EXPECT_NE(summary.find(line), std::string::npos) << summary;
  EXPECT_NE(summary.find("mean loss       "), std::string::npos) << summary;
  EXPECT_NE(summary.find("(over the last 100 steps)"), std::string::npos) << summary;
  EXPECT_GT(r.time_s, 0);
  EXPECT_NEAR(r.samples_per_s, static_cast<double>(r.samples) / r.time_s, 1e-6 * r.samples_per_s);
}

TEST(Train, JsonSummaryHasTheDocumentedKeys) {
  TrainConfig c = small_cpu_config();
  c.steps = 3;
  TrainResult r = run(c);
  json j = to_json(r);
  for (const char* key : {"strategy", "device", "hw", "devices", "steps", "final_loss", "test_accuracy", "time_s",
                          "time_kind", "samples_per_s", "weights_checksum", "per_device"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["strategy"], "single");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_TRUE(j["hw"].is_null());
  EXPECT_EQ(j["devices"], 1);
  EXPECT_EQ(j["steps"], 3);
  EXPECT_EQ(j["final_loss"].get<double>(), r.losses.back());
  EXPECT_NEAR(j["mean_loss"]["value"].get<double>(), (r.losses[0] + r.losses[1] + r.losses[2]) / 3, 1e-12);
  EXPECT_EQ(j["mean_loss"]["steps"], 3);
  const TrainResult back = from_json(j, c);  // how a procs launch's rank 0 reports
  EXPECT_EQ(back.final_loss, r.final_loss);
  EXPECT_EQ(back.mean_loss, r.mean_loss);
  EXPECT_EQ(back.mean_loss_steps, 3);
  EXPECT_TRUE(j["test_accuracy"].is_number());
  EXPECT_EQ(j["time_s"].get<double>(), r.time_s);
  EXPECT_EQ(j["time_kind"], "measured");
  EXPECT_TRUE(j["samples_per_s"].is_number());
  EXPECT_EQ(j["weights_checksum"], r.weights_checksum);
  ASSERT_TRUE(j["per_device"].is_array());
  ASSERT_EQ(j["per_device"].size(), 1u);
  const json& d = j["per_device"][0];
  EXPECT_EQ(d["device"], "cpu:0");
  for (const char* key : {"busy_pct", "comm_pct", "idle_pct"}) EXPECT_TRUE(d[key].is_number()) << key;
  const json& peak = d["peak_bytes"];
  for (const char* key : {"params", "grads", "optimizer", "activations", "comm_buffers", "workspace", "total"})
    EXPECT_TRUE(peak.contains(key) && peak[key].is_number_integer()) << key;
  const int64_t P = ModelSpec::parse(c.model).parameter_count();
  EXPECT_EQ(peak["params"], 4 * P);
  // And it survives a round trip through text.
  EXPECT_EQ(json::parse(j.dump()), j);
}

// ---------------------------------------------------------------------------------------------
// One step of `single` on a simulated A100, op by op.

namespace {

// The cost model's formulas with the profile's figures, rounded to ns as the sim clock does.
struct Priced {
  HardwareProfile p;
  static int64_t ns(double s) { return std::llround(s * 1e9); }
  int64_t gemm(double flops, double bytes) const { return ns(gemm_formula_seconds(p, DType::f32, flops, bytes)); }
  int64_t elementwise(double bytes) const { return ns(bytes / p.mem_bandwidth_Bps + p.launch_overhead_s); }
  int64_t host_copy(double bytes) const { return ns(p.host_link.latency_s + bytes / p.host_link.bandwidth_Bps); }
};

// The clock's rule: an op begins when its lane is free and its inputs are ready.
struct HandClock {
  int64_t lane_free[kLaneCount] = {};
  struct Op {
    std::string kind;
    Lane lane;
    int64_t begin, end;
  };
  std::vector<Op> ops;
  int64_t run(const std::string& kind, Lane lane, int64_t ready, int64_t duration) {
    int64_t& free = lane_free[static_cast<int>(lane)];
    const int64_t begin = std::max(free, ready);
    free = begin + duration;
    ops.push_back({kind, lane, begin, free});
    return free;
  }
};

TrainConfig a100_single_step() {
  TrainConfig c;
  c.strategy = "single";
  c.device = DeviceKind::sim;
  c.hw = "a100-nvlink-8";
  c.model = "mlp:784-256-128-10";
  c.dataset = "synthetic";  // 784 features, 10 classes: from the model
  c.synthetic_train = 256;
  c.synthetic_test = 128;
  c.batch = 128;
  c.steps = 1;
  return c;
}

}  // namespace

TEST(TrainSim, OneStepOfSingleOnA100TakesTheHandComputedTime) {
  const TrainConfig c = a100_single_step();
  EventBus bus;
  TrainResult r = train(c, bus);
  ASSERT_TRUE(r.simulated);

  const Priced f{load_profile("a100-nvlink-8")};
  const std::vector<int64_t> S = {784, 256, 128, 10};
  const int L = 3;
  const double B = 128, F = 4;  // batch, bytes per float (and per int32 label)
  HandClock clk;

  // Set-up (step −1): Model's constructor uploads each layer's weight then bias on the copy lane.
  std::vector<int64_t> w_ready(L), b_ready(L);
  for (int l = 0; l < L; ++l) {
    w_ready[l] = clk.run("copy_h2d", Lane::copy, 0, f.host_copy(F * S[l + 1] * S[l]));
    b_ready[l] = clk.run("copy_h2d", Lane::copy, 0, f.host_copy(F * S[l + 1]));
  }
  const size_t first_step_op = clk.ops.size();

  // Step 0. 1. The batch: x then the labels, on the copy lane.
  const int64_t x_ready = clk.run("copy_h2d", Lane::copy, 0, f.host_copy(F * B * S[0]));
  const int64_t labels_ready = clk.run("copy_h2d", Lane::copy, 0, f.host_copy(F * B));
  // 2. Forward: per layer y = x·Wᵀ (gemm) then bias (+ ReLU but on the last layer).
  std::vector<int64_t> act_ready(L + 1);  // act_ready[l] = when layer l's input is ready
  act_ready[0] = x_ready;
  for (int l = 0; l < L; ++l) {
    const double in = static_cast<double>(S[l]), out = static_cast<double>(S[l + 1]);
    int64_t t = clk.run("gemm", Lane::compute, std::max(act_ready[l], w_ready[l]),
                        f.gemm(2 * B * out * in, F * (B * in + out * in + B * out)));
    t = clk.run(l + 1 < L ? "bias_relu" : "bias", Lane::compute, std::max(t, b_ready[l]),
                f.elementwise(F * (2 * B * out + out)));
    act_ready[l + 1] = t;
  }
  // 3. Loss: softmax cross-entropy reads the logits and the labels, writes dlogits.
  int64_t grad_ready = clk.run("softmax_xent", Lane::compute, std::max(act_ready[L], labels_ready),
                               f.elementwise(F * (2 * B * S[L] + B)));
  // 4. Backward, last layer first: bias/ReLU backward, dW = dyᵀ·x, and dx = dy·W but for layer 0.
  std::vector<int64_t> wgrad_ready(L), bgrad_ready(L);
  for (int l = L - 1; l >= 0; --l) {
    const double in = static_cast<double>(S[l]), out = static_cast<double>(S[l + 1]);
    const bool relu = l + 1 < L;
    int64_t t = clk.run(relu ? "bias_relu_bwd" : "bias_bwd", Lane::compute, std::max(grad_ready, act_ready[l + 1]),
                        f.elementwise(F * (2 * B * out + (relu ? B * out : 0) + out)));
    bgrad_ready[l] = t;
    wgrad_ready[l] = clk.run("gemm", Lane::compute, std::max(t, act_ready[l]),
                             f.gemm(2 * out * in * B, F * (B * out + B * in + out * in)));
    if (l > 0)
      grad_ready = clk.run("gemm", Lane::compute, std::max(t, w_ready[l]),
                           f.gemm(2 * B * in * out, F * (B * out + out * in + B * in)));
  }
  // 5. SGD with momentum, per parameter in order: reads w, g, buf; writes w, buf.
  for (int l = 0; l < L; ++l) {
    const double in = static_cast<double>(S[l]), out = static_cast<double>(S[l + 1]);
    clk.run("sgd", Lane::compute, std::max(wgrad_ready[l], w_ready[l]), f.elementwise(5 * F * out * in));
    clk.run("sgd", Lane::compute, std::max(bgrad_ready[l], b_ready[l]), f.elementwise(5 * F * out));
  }

  // The events the run emitted, op by op: same kinds, lanes and times.
  std::vector<Event> events = bus.events();
  std::vector<Event> setup, step;
  for (const Event& e : events) (e.step < 0 ? setup : step).push_back(e);
  ASSERT_GE(setup.size(), first_step_op);
  for (size_t i = 0; i < first_step_op; ++i) {
    EXPECT_EQ(setup[i].kind, clk.ops[i].kind) << "set-up op " << i;
    EXPECT_EQ(setup[i].t_end_ns, clk.ops[i].end) << "set-up op " << i;
  }
  const size_t n_step_ops = clk.ops.size() - first_step_op;  // 2 + 6 + 1 + 8 + 6 = 23
  ASSERT_EQ(n_step_ops, 23u);
  std::vector<Event> step_ops(step.begin(), step.begin() + std::min(step.size(), n_step_ops));
  ASSERT_EQ(step_ops.size(), n_step_ops);
  for (size_t i = 0; i < n_step_ops; ++i) {
    const auto& want = clk.ops[first_step_op + i];
    SCOPED_TRACE("step op " + std::to_string(i) + " " + want.kind + " " + step_ops[i].name);
    EXPECT_EQ(step_ops[i].kind, want.kind);
    EXPECT_EQ(step_ops[i].lane, want.lane);
    EXPECT_NEAR(step_ops[i].t_begin_ns, want.begin, static_cast<double>(i));  // ≤ 1 ns per op before it
    EXPECT_NEAR(step_ops[i].t_end_ns, want.end, static_cast<double>(i + 1));
  }
  // Nothing else ran in the step: the weights downloaded for evaluation are not training.
  for (size_t i = n_step_ops; i < step.size(); ++i)
    ADD_FAILURE() << "an event beyond the training step is stamped step " << step[i].step << ": " << step[i].kind << " "
                  << step[i].name << " [" << step[i].t_begin_ns << ", " << step[i].t_end_ns << ")";

  // time_s: from the first op of the step (upload of x) to the end of the last (the last sgd).
  int64_t last_end = 0;
  for (size_t i = first_step_op; i < clk.ops.size(); ++i) last_end = std::max(last_end, clk.ops[i].end);
  const int64_t hand_ns = last_end - clk.ops[first_step_op].begin;
  EXPECT_NEAR(r.time_s, static_cast<double>(hand_ns) * 1e-9, static_cast<double>(n_step_ops) * 1e-9)
      << "simulated " << r.time_s * 1e9 << " ns, by hand " << hand_ns << " ns";
  EXPECT_NEAR(r.samples_per_s, 128.0 / (static_cast<double>(hand_ns) * 1e-9), 1e-6 * r.samples_per_s);
  json j = to_json(r);
  EXPECT_EQ(j["time_kind"], "simulated");
  EXPECT_EQ(j["hw"], "a100-nvlink-8");
  EXPECT_EQ(j["device"], "sim");
}

TEST(TrainSim, PeakMemoryOfOneStepIsTheClosedForm) {
  EventBus bus;
  TrainResult r = train(a100_single_step(), bus);
  ASSERT_EQ(r.per_device.size(), 1u);
  const auto& peak = r.per_device[0].peak_bytes;
  const int64_t P = ModelSpec::parse("mlp:784-256-128-10").parameter_count();
  ASSERT_EQ(P, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  auto at = [&](MemoryCategory c) { return peak[static_cast<int>(c)]; };
  EXPECT_EQ(at(MemoryCategory::params), 4 * P);
  EXPECT_EQ(at(MemoryCategory::grads), 4 * P);
  EXPECT_EQ(at(MemoryCategory::optimizer), 4 * P);  // one momentum buffer per parameter
  // Activations peak when layer 1's dx is made: the batch (x, labels), every layer's output,
  // dlogits, layer 2's dx and layer 1's dx are all alive then.
  const int64_t B = 128;
  const int64_t acts = 4 * (B * 784 + B + B * 256 + B * 128 + B * 10 + B * 10 + B * 128 + B * 256);
  EXPECT_EQ(at(MemoryCategory::activations), acts);
  EXPECT_EQ(at(MemoryCategory::comm_buffers), 0);
  EXPECT_EQ(at(MemoryCategory::workspace), 0);
  EXPECT_EQ(r.per_device[0].peak_total, 3 * 4 * P + acts);
  EXPECT_EQ(r.per_device[0].capacity, load_profile("a100-nvlink-8").mem_capacity_bytes);
  // The metrics pass, from the memory samples alone, agrees with the ledger.
  ASSERT_EQ(r.metrics.per_device.size(), 1u);
  for (int cat = 0; cat < kMemoryCategoryCount; ++cat)
    EXPECT_EQ(r.metrics.per_device[0].peak_bytes[cat], peak[cat]) << memory_category_name(static_cast<MemoryCategory>(cat));
  EXPECT_EQ(r.metrics.per_device[0].peak_total, r.per_device[0].peak_total);
  const json j = to_json(r);
  EXPECT_EQ(j["per_device"][0]["peak_bytes"]["optimizer"], 4 * P);
  EXPECT_EQ(j["per_device"][0]["peak_bytes"]["total"], 3 * 4 * P + acts);
}

TEST(TrainSim, DryRunGivesTheSameTimeWithoutNumbers) {
  EventBus real_bus, dry_bus;
  TrainConfig c = a100_single_step();
  TrainResult real = train(c, real_bus);
  c.dry_run = true;
  TrainResult dry = train(c, dry_bus);
  EXPECT_EQ(dry.time_s, real.time_s);
  EXPECT_TRUE(dry.weights_checksum.empty());
  EXPECT_LT(dry.test_accuracy, 0);
  EXPECT_TRUE(std::isnan(dry.final_loss));
  json j = to_json(dry);
  EXPECT_TRUE(j["final_loss"].is_null());
  EXPECT_TRUE(j["mean_loss"]["value"].is_null());
  EXPECT_TRUE(j["test_accuracy"].is_null());
  EXPECT_TRUE(j["weights_checksum"].is_null());
  EXPECT_EQ(dry.per_device[0].peak_total, real.per_device[0].peak_total);
}

TEST(TrainSim, TraceStepsKeepsAWindowWithTheLiveMemoryAtItsStart) {
  TrainConfig c = test::small_config("ddp", 2, DeviceKind::sim);
  c.steps = 8;
  const std::string path = ::testing::TempDir() + "window.trace.json.gz";
  c.trace_path = path;
  c.trace_first_step = 3;
  c.trace_last_step = 5;
  EventBus bus;
  train(c, bus);
  const TraceContents t = read_chrome_trace(path);
  std::set<int64_t> steps;
  int64_t t0 = INT64_MAX;
  for (const Event& e : t.events) {
    steps.insert(e.step);
    t0 = std::min(t0, e.t_begin_ns);
  }
  EXPECT_EQ(steps, (std::set<int64_t>{3, 4, 5}));
  // Each device's parameters were allocated before the window: they are there at its start.
  std::set<int> params_at_start;
  for (const MemorySample& m : t.memory)
    if (m.category == MemoryCategory::params && m.t_ns == t0 && m.bytes > 0) params_at_start.insert(m.device);
  EXPECT_EQ(params_at_start, (std::set<int>{0, 1}));
  for (const Metric& m : t.metrics) EXPECT_TRUE(m.step >= 3 && m.step <= 5) << m.name << " " << m.step;
  std::remove(path.c_str());
}

TEST(Train, BadConfigurationsAreUsageErrors) {
  EventBus bus;
  TrainConfig c = small_cpu_config();
  c.strategy = "nope";
  EXPECT_THROW(train(c, bus), UsageError);
  c = small_cpu_config();
  c.device = DeviceKind::sim;  // no --hw
  EXPECT_THROW(train(c, bus), UsageError);
  c = small_cpu_config();
  c.batch = 4096;  // larger than the 512-sample training set
  EXPECT_THROW(train(c, bus), UsageError);
  c = small_cpu_config();
  c.devices = 2;  // single uses one device
  EXPECT_THROW(train(c, bus), UsageError);
}

TEST(Export, StepZeroCheckpointExportedAndReadBackStartsTheSameRun) {
  // A run that keeps every checkpoint ({step}), the first before any step; its step-0 weights,
  // exported with PyTorch's names and read back by --init-weights, start the same run again.
  const std::string dir = ::testing::TempDir() + "export-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  TrainConfig c = test::small_config("single", 1, DeviceKind::cpu, "adam");
  c.checkpoint_path = dir + "/ck-{step}.ckpt";
  c.checkpoint_every = 5;
  EventBus bus;
  const TrainResult seeded = train(c, bus);
  ASSERT_TRUE(std::filesystem::exists(dir + "/ck-0.ckpt"));
  ASSERT_TRUE(std::filesystem::exists(dir + "/ck-5.ckpt"));
  const Checkpoint start = load_checkpoint(dir + "/ck-0.ckpt");
  write_npz(dir + "/init.npz", export_arrays(start));
  std::map<std::string, NpzArray> arrays;
  for (NpzArray& a : read_npz(dir + "/init.npz")) arrays[a.name] = a;
  // nn.Sequential's names and shapes: mlp:32-24-16-12-8 → 0, 2, 4, 6; W is out × in.
  EXPECT_EQ(arrays.at("0.weight").shape, (std::vector<int64_t>{24, 32}));
  EXPECT_EQ(arrays.at("6.bias").shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(arrays.at("optimizer.2.weight.exp_avg").shape, (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(arrays.at("optimizer.step").i64, (std::vector<int64_t>{0}));
  EXPECT_EQ(arrays.at("0.weight").f32, start.state.weights.values[0]);

  TrainConfig again = test::small_config("single", 1, DeviceKind::cpu, "adam");
  again.init_weights_path = dir + "/init.npz";
  EventBus bus2;
  EXPECT_EQ(train(again, bus2).losses, seeded.losses);  // the same weights, the same run
  // And the file's weights, not the seed's, are the ones used: zero a layer, the run changes.
  std::vector<NpzArray> zeroed = export_arrays(start);
  std::fill(zeroed[0].f32.begin(), zeroed[0].f32.end(), 0.0f);
  write_npz(dir + "/zeroed.npz", zeroed);
  again.init_weights_path = dir + "/zeroed.npz";
  EventBus bus3;
  EXPECT_NE(train(again, bus3).losses.front(), seeded.losses.front());
  // A file for another model is refused, naming the array and both shapes.
  again.model = "mlp:32-20-16-12-8";
  const std::string msg = test::message_of([&] {
    EventBus b;
    train(again, b);
  });
  EXPECT_NE(msg.find("'0.weight' has shape (24, 32)"), std::string::npos) << msg;
  // A file of a deeper model is refused too, naming what the model lacks: 32-24-16 has no
  // layers 4 and 6, nor their optimizer state.
  const std::string extra = test::message_of([&] { load_weights_npz(dir + "/init.npz", ModelSpec::parse("mlp:32-24-16")); });
  EXPECT_NE(extra.find("[init-weights] " + dir + "/init.npz: arrays '4.bias', '4.weight', '6.bias', '6.weight', "
                       "'optimizer.4.bias.exp_avg', 'optimizer.4.bias.exp_avg_sq' and 6 more that --model mlp:32-24-16 "
                       "does not have (its parameters are 0.weight … 2.bias)"),
            std::string::npos)
      << extra;
  // One that lacks a layer, and one of integers.
  std::vector<NpzArray> shallow = export_arrays(start);
  shallow.erase(shallow.begin() + 6, shallow.begin() + 8);  // 6.weight, 6.bias
  write_npz(dir + "/shallow.npz", shallow);
  EXPECT_NE(test::message_of([&] { load_weights_npz(dir + "/shallow.npz", ModelSpec::parse(test::kEquivalenceModel)); })
                .find("no array '6.weight'"),
            std::string::npos);
  std::vector<NpzArray> integers = export_arrays(start);
  integers[0].i64.assign(integers[0].f32.size(), 1);
  integers[0].f32.clear();
  integers[0].integer = true;
  write_npz(dir + "/int.npz", integers);
  EXPECT_NE(test::message_of([&] { load_weights_npz(dir + "/int.npz", ModelSpec::parse(test::kEquivalenceModel)); })
                .find("'0.weight' holds integers"),
            std::string::npos);
  std::vector<NpzArray> poisoned = export_arrays(start);
  poisoned[2].f32[5] = NAN;  // 2.weight
  write_npz(dir + "/nan.npz", poisoned);
  EXPECT_NE(test::message_of([&] { load_weights_npz(dir + "/nan.npz", ModelSpec::parse(test::kEquivalenceModel)); })
                .find("'2.weight' holds nan at index 5"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Export, NpzRefusesWhatItCannotRead) {
  const std::string path = ::testing::TempDir() + "bad.npz";
  write_file_atomically(path, "not a zip at all, just text", "test");
  EXPECT_NE(test::message_of<Error>([&] { read_npz(path); }).find("not a zip archive"), std::string::npos);
  write_npz(path, {{"x", {2, 3}, {1, 2, 3, 4, 5, 6}, {}, false}});
  std::string bytes = read_maybe_gzipped(path, "test");
  write_file_atomically(path, bytes.substr(0, bytes.size() / 2), "test");
  EXPECT_NE(test::message_of<Error>([&] { read_npz(path); }).find("[npz]"), std::string::npos);
  std::remove(path.c_str());
}

// ---------------------------------------------------------------------------------------------
// A run that resumes at its last step runs none, and says so rather than reporting a loss.

TEST(Train, AResumeAtTheLastStepRunsNoStepAndSaysSo) {
  const std::string dir = ::testing::TempDir() + "resume-at-end-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  TrainConfig c = test::small_config("single", 1);
  c.steps = 3;
  c.checkpoint_path = dir + "/end.ckpt";
  EventBus bus;
  train(c, bus);
  TrainConfig again = test::small_config("single", 1);
  again.steps = 3;
  again.resume_path = c.checkpoint_path;
  EventBus bus2;
  const TrainResult r = train(again, bus2);
  EXPECT_EQ(r.steps, 0);
  EXPECT_TRUE(std::isnan(r.final_loss));
  const std::string summary = format_summary(r);
  EXPECT_NE(summary.find("final loss      — (no step run: --resume's checkpoint is already at the run's last step)"),
            std::string::npos)
      << summary;
  EXPECT_EQ(summary.find("mean of"), std::string::npos) << summary;
  const json j = to_json(r);
  EXPECT_TRUE(j["final_loss"].is_null());
  EXPECT_TRUE(j["mean_loss"].is_null());
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// --check-equivalence's verdict: equal, amplified round-off, or differs (run/train.h).

TEST(Equivalence, TheVerdictFollowsTheDocumentedRule) {
  EXPECT_EQ(equivalence_verdict(0, 0), EquivalenceVerdict::equal);
  EXPECT_EQ(equivalence_verdict(kEquivalenceTolerance, 0), EquivalenceVerdict::equal);
  EXPECT_EQ(equivalence_verdict(0.08, 0.26), EquivalenceVerdict::roundoff);
  EXPECT_EQ(equivalence_verdict(kRoundoffFactor * 1e-4, 1e-4), EquivalenceVerdict::roundoff);
  EXPECT_EQ(equivalence_verdict(kRoundoffFactor * 1e-4 * 1.01, 1e-4), EquivalenceVerdict::differs);
  EXPECT_EQ(equivalence_verdict(0.08, 1e-7), EquivalenceVerdict::differs);
  EXPECT_EQ(equivalence_verdict(2e-5, 0), EquivalenceVerdict::differs);  // round-off left single where it was
  EXPECT_STREQ(equivalence_verdict_name(EquivalenceVerdict::equal), "equal");
  EXPECT_STREQ(equivalence_verdict_name(EquivalenceVerdict::roundoff), "round-off");
  EXPECT_STREQ(equivalence_verdict_name(EquivalenceVerdict::differs), "differs");
}

namespace {

// The defaults a student runs: the lecture model on Fashion-MNIST, seed 42, ddp on 4 simulated A100s.
TrainConfig default_ddp(int64_t steps) {
  TrainConfig c;
  c.strategy = "ddp";
  c.devices = 4;
  c.device = DeviceKind::sim;
  c.hw = "a100-nvlink-8";
  c.steps = steps;
  c.check_equivalence = true;
  return c;
}

bool have_fashion_mnist() {
  return std::filesystem::exists(default_fashion_mnist_dir() + "/train-images-idx3-ubyte.gz") ||
         std::filesystem::exists(default_fashion_mnist_dir() + "/train-images-idx3-ubyte");
}

}  // namespace

TEST(Equivalence, AtTheDefaultSeedDdpEndsFarFromSingleByAmplifiedRoundOffNotADifference) {
  if (!have_fashion_mnist()) GTEST_SKIP() << default_fashion_mnist_dir() << " has no Fashion-MNIST";
  // Seed 42 puts a ReLU input on the edge: splitting the batch (ddp's ranks; the yardstick's two
  // halves) rounds the sums otherwise, and over the steps the difference grows.
  EventBus bus;
  const TrainResult r = train(default_ddp(100), bus);
  std::printf("    100 steps: max_rel_diff %.3g, roundoff_rel_diff %.3g\n", r.max_rel_diff, r.roundoff_rel_diff);
  EXPECT_GT(r.max_rel_diff, kEquivalenceTolerance);
  EXPECT_GT(r.roundoff_rel_diff, kEquivalenceTolerance);
  EXPECT_EQ(equivalence_verdict(r.max_rel_diff, r.roundoff_rel_diff), EquivalenceVerdict::roundoff);
  const json j = to_json(r);
  EXPECT_EQ(j["equivalence"]["verdict"], "round-off");
  EXPECT_EQ(j["equivalence"]["max_rel_diff"].get<double>(), r.max_rel_diff);
  EXPECT_EQ(j["equivalence"]["roundoff_rel_diff"].get<double>(), r.roundoff_rel_diff);
  const std::string summary = format_summary(r);
  EXPECT_NE(summary.find("amplified round-off, not a difference in the algorithm"), std::string::npos) << summary;
  // The dashboard reads the same figures from the run's metrics.
  bool roundoff_metric = false;
  for (const Metric& m : bus.metrics()) roundoff_metric |= m.name == "roundoff_rel_diff" && m.value == r.roundoff_rel_diff;
  EXPECT_TRUE(roundoff_metric);

  // Five steps in, round-off has not grown yet: the same weights.
  EventBus bus5;
  const TrainResult five = train(default_ddp(5), bus5);
  std::printf("    5 steps: max_rel_diff %.3g, roundoff_rel_diff %.3g\n", five.max_rel_diff, five.roundoff_rel_diff);
  EXPECT_EQ(equivalence_verdict(five.max_rel_diff, five.roundoff_rel_diff), EquivalenceVerdict::equal);
  EXPECT_EQ(to_json(five)["equivalence"]["verdict"], "equal");
}

namespace {

// A strategy with a bug the size a student's might have: one row of each global batch trains
// with the wrong label (a shard that reads one row of its neighbour's labels). Everything else
// is the strategy it wraps.
class OneWrongLabel : public Strategy {
 public:
  explicit OneWrongLabel(std::unique_ptr<Strategy> inner) : inner_(std::move(inner)) {}
  double train_step(const HostBatch& batch, int64_t step) override {
    HostBatch b = batch;
    b.y[0] = (b.y[0] + 1) % 8;  // kEquivalenceModel's 8 classes
    return inner_->train_step(b, step);
  }
  HostWeights weights() override { return inner_->weights(); }
  TrainingState state() override { return inner_->state(); }
  void load_state(const TrainingState& state) override { inner_->load_state(state); }

 private:
  std::unique_ptr<Strategy> inner_;
};

}  // namespace

TEST(Equivalence, AStrategyThatComputesSomethingElseDiffers) {
  // train()'s parts (run/run_parts.h), with ddp's strategy wrapped in the bug.
  TrainConfig c = test::small_config("ddp", 4);
  c.check_equivalence = true;
  EventBus bus;
  RunSetup run(c, bus, nullptr);
  run.strategy = std::make_unique<OneWrongLabel>(std::move(run.strategy));
  EquivalenceProbe probe(run);
  Checkpointer checkpointer(run);
  const LoopResult loop = run_steps(run, &probe, checkpointer, {}, nullptr);
  const TrainResult r = conclude(run, loop, &probe);
  std::printf("    one wrong label a batch, 5 steps: max_rel_diff %.3g, roundoff_rel_diff %.3g\n", r.max_rel_diff,
              r.roundoff_rel_diff);
  EXPECT_EQ(equivalence_verdict(r.max_rel_diff, r.roundoff_rel_diff), EquivalenceVerdict::differs);
  EXPECT_EQ(to_json(r)["equivalence"]["verdict"], "differs");
  EXPECT_NE(format_summary(r).find("DIFFERS"), std::string::npos) << format_summary(r);

  // Without the bug, the same parts say equal.
  EventBus bus2;
  const TrainResult right = train(c, bus2);
  EXPECT_EQ(equivalence_verdict(right.max_rel_diff, right.roundoff_rel_diff), EquivalenceVerdict::equal);
}

TEST(Equivalence, AnOddBatchHasNoHalvesAndItsYardstickIsSingleItself) {
  TrainConfig c = test::small_config("model-parallel", 2);
  c.batch = 33;
  c.check_equivalence = true;
  EventBus bus;
  const TrainResult r = train(c, bus);
  EXPECT_EQ(r.roundoff_rel_diff, 0.0);
  EXPECT_EQ(equivalence_verdict(r.max_rel_diff, r.roundoff_rel_diff), EquivalenceVerdict::equal);
}
