// Dry runs (--dry-run on sim): tensors are shapes, the host holds no weights and no pixels, and
// yet the run is the same run — every device's ledger (peak per category) and every op's
// simulated interval equal a real sim run's, strategy by strategy. What a dry run leaves out on
// the host (weights, data) is checked here too, and that it reaches hundreds of ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <tuple>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/error.h"
#include "core/nn/model.h"
#include "run/train.h"
#include "support/errors.h"
#include "support/small_config.h"

using namespace scalelab;

namespace {

// What the cost model's clock made of the training steps: every op of every device in a step, as
// (device, lane, op, name, begin, end, bytes), sorted — the ranks' threads emit them in any order.
// (After the last step a real run brings the weights back to evaluate them; a dry run has nothing
// to evaluate. Those downloads count in neither run's time.) A real run draws
// a collective as the backend's steps ("bucket 0 step 3/6"), laid over the modelled interval; a
// dry run moves no data and draws it whole: so a collective counts as its interval, its steps
// merged (bytes aside: the steps count what each moved, the whole what the rank sends).
using Op = std::tuple<int, int, std::string, std::string, int64_t, int64_t, int64_t>;
std::vector<Op> timeline(const EventBus& bus) {
  std::vector<Op> ops;
  std::map<std::tuple<int, int64_t, std::string, std::string>, std::pair<int64_t, int64_t>> collectives;
  for (const Event& e : bus.events()) {
    if (e.step < 0) continue;
    if (e.lane != Lane::comm) {
      ops.emplace_back(e.device, static_cast<int>(e.lane), e.kind, e.name, e.t_begin_ns, e.t_end_ns, e.bytes);
      continue;
    }
    const size_t step = e.name.rfind(" step ");
    const std::string call = step == std::string::npos ? e.name : e.name.substr(0, step);
    auto [it, fresh] = collectives.try_emplace({e.device, e.step, e.kind, call}, e.t_begin_ns, e.t_end_ns);
    if (!fresh) it->second = {std::min(it->second.first, e.t_begin_ns), std::max(it->second.second, e.t_end_ns)};
  }
  for (const auto& [key, span] : collectives)
    ops.emplace_back(std::get<0>(key), static_cast<int>(Lane::comm), std::get<2>(key), std::get<3>(key), span.first,
                     span.second, 0);
  std::sort(ops.begin(), ops.end());
  return ops;
}

std::vector<double> step_rates(const EventBus& bus) {
  std::vector<double> v;
  for (const Metric& m : bus.metrics())
    if (m.name == "samples_per_s") v.push_back(m.value);
  return v;
}

// Runs `c` for real and dry, and holds the dry run to the real one's ledger and clock.
void expect_dry_equals_real(TrainConfig c) {
  SCOPED_TRACE(c.strategy + " on " + std::to_string(c.devices) + " × sim (" + c.hw + ")");
  c.device = DeviceKind::sim;
  c.dry_run = false;
  EventBus real_bus, dry_bus;
  const TrainResult real = train(c, real_bus);
  c.dry_run = true;
  const TrainResult dry = train(c, dry_bus);

  // The ledgers: the same peak per category and in all, on every device.
  ASSERT_EQ(dry.per_device.size(), real.per_device.size());
  for (size_t d = 0; d < real.per_device.size(); ++d) {
    for (int cat = 0; cat < kMemoryCategoryCount; ++cat)
      EXPECT_EQ(dry.per_device[d].peak_bytes[cat], real.per_device[d].peak_bytes[cat])
          << "device " << d << ", " << memory_category_name(static_cast<MemoryCategory>(cat));
    EXPECT_EQ(dry.per_device[d].peak_total, real.per_device[d].peak_total) << "device " << d;
    EXPECT_EQ(dry.per_device[d].capacity, real.per_device[d].capacity) << "device " << d;
  }
  // The clock: the same run time, step times, and every op at the same simulated interval.
  EXPECT_GT(real.time_s, 0);
  EXPECT_EQ(dry.time_s, real.time_s);
  EXPECT_EQ(step_rates(dry_bus), step_rates(real_bus));
  const std::vector<Op> real_ops = timeline(real_bus), dry_ops = timeline(dry_bus);
  std::vector<Op> only_real, only_dry;
  std::set_difference(real_ops.begin(), real_ops.end(), dry_ops.begin(), dry_ops.end(), std::back_inserter(only_real));
  std::set_difference(dry_ops.begin(), dry_ops.end(), real_ops.begin(), real_ops.end(), std::back_inserter(only_dry));
  auto show = [](const std::vector<Op>& v) {
    std::string s;
    for (size_t i = 0; i < std::min<size_t>(v.size(), 5); ++i)
      s += "\n  device " + std::to_string(std::get<0>(v[i])) + " " + std::get<2>(v[i]) + " '" + std::get<3>(v[i]) +
           "' [" + std::to_string(std::get<4>(v[i])) + ", " + std::to_string(std::get<5>(v[i])) + "] ns, " +
           std::to_string(std::get<6>(v[i])) + " B";
    return s;
  };
  EXPECT_TRUE(only_real.empty()) << only_real.size() << " ops of the real run are not in the dry run:" << show(only_real);
  EXPECT_TRUE(only_dry.empty()) << only_dry.size() << " ops of the dry run are not in the real run:" << show(only_dry);
  EXPECT_EQ(dry.metrics.bubble_fraction, real.metrics.bubble_fraction);
  // And it computed nothing.
  EXPECT_TRUE(std::isnan(dry.final_loss));
  EXPECT_TRUE(dry.weights_checksum.empty());
  EXPECT_FALSE(real.weights_checksum.empty());
}

}  // namespace

TEST(DryRun, DdpLedgerAndClockEqualARealRun) {
  expect_dry_equals_real(test::small_config("ddp", 4, DeviceKind::sim));
  // Two nodes of the multi-node profile: the hierarchical all-reduce, small buckets (several per step).
  TrainConfig c = test::small_config("ddp", 16, DeviceKind::sim, "adam");
  c.hw = "h100-ib-16x8";
  c.bucket_mb = 0.001;
  c.first_bucket_mb = 0.0005;
  expect_dry_equals_real(c);
}

TEST(DryRun, ZeroLedgerAndClockEqualARealRun) {
  for (int stage : {1, 2, 3}) {
    TrainConfig c = test::small_config("zero", 4, DeviceKind::sim, "adam");
    c.zero_stage = stage;
    expect_dry_equals_real(c);
  }
  // Stage 3 on a GPT whose blocks rerun their forwards in backward, from the weights gathered
  // for it, on two nodes: its layer-by-layer gathers and reduce-scatters queued behind compute.
  TrainConfig c = test::small_config("zero", 16, DeviceKind::sim, "adam");
  c.zero_stage = 3;
  c.hw = "h100-ib-16x8";
  c.model = "gpt:2-32-4-16-96";
  c.batch = 16;
  c.recompute = true;
  expect_dry_equals_real(c);
}

TEST(DryRun, PipelineLedgerAndClockEqualARealRun) {
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
    TrainConfig c = test::small_config("pipeline", 4, DeviceKind::sim);
    c.micro_batches = 4;
    c.schedule = s;
    expect_dry_equals_real(c);
  }
  // Interleaved: 2 devices × 2 chunks of the 4 layers, with Adam.
  TrainConfig c = test::small_config("pipeline", 2, DeviceKind::sim, "adam");
  c.micro_batches = 4;
  c.schedule = Schedule::interleaved;
  c.virtual_stages = 2;
  expect_dry_equals_real(c);
}

TEST(DryRun, OtherStrategiesLedgerAndClockEqualARealRun) {
  expect_dry_equals_real(test::small_config("single", 1, DeviceKind::sim));
  expect_dry_equals_real(test::small_config("data-parallel", 4, DeviceKind::sim));
  expect_dry_equals_real(test::small_config("model-parallel", 4, DeviceKind::sim));
  expect_dry_equals_real(test::small_config("ddp-mp", 4, DeviceKind::sim));
  TrainConfig amp = test::small_config("ddp", 4, DeviceKind::sim);
  amp.amp = Amp::bf16;
  expect_dry_equals_real(amp);
}

// 2 and 4 ranks with Adam; 2 with the blocks recomputed and in bf16 (half all-reduces, reruns).
TEST(DryRun, TensorParallelLedgerAndClockEqualARealRun) {
  for (const auto& [n, optimizer, rerun_in_half] :
       {std::tuple{2, "adam", false}, std::tuple{4, "adam", false}, std::tuple{2, "sgd", true}}) {
    TrainConfig c = test::small_config("tensor-parallel", n, DeviceKind::sim, optimizer);
    c.model = "gpt:2-32-4-16-96";
    c.batch = 8;
    c.synthetic_train = 64;
    c.synthetic_test = 16;
    c.recompute = rerun_in_half;
    if (rerun_in_half) c.amp = Amp::bf16;
    expect_dry_equals_real(c);
  }
}

// The ConvNet's and a GPT's layers priced alike with and without numerics: convolutions, pools,
// embeddings, attention, layer norms; a GPT with its blocks recomputed and in bf16 too.
TEST(DryRun, ConvNetAndGptLedgerAndClockEqualARealRun) {
  for (const char* strategy : {"ddp", "pipeline", "zero"})
    for (const char* model : {"convnet", "gpt:2-32-4-16-96"}) {
      TrainConfig c = test::small_config(strategy, 2, DeviceKind::sim);
      c.model = model;
      c.batch = 8;
      c.synthetic_train = 64;
      c.synthetic_test = 16;
      if (std::string(strategy) == "pipeline") c.micro_batches = 2;
      expect_dry_equals_real(c);
    }
  TrainConfig gpt = test::small_config("ddp", 2, DeviceKind::sim);
  gpt.model = "gpt:2-32-4-16-96";
  gpt.batch = 8;
  gpt.recompute = true;
  gpt.amp = Amp::bf16;
  expect_dry_equals_real(gpt);
  TrainConfig convnet = test::small_config("ddp", 2, DeviceKind::sim);  // half convolutions
  convnet.model = "convnet";
  convnet.batch = 8;
  convnet.amp = Amp::fp16;
  expect_dry_equals_real(convnet);
}

// The host side of a dry run: weights and data are sizes alone.
TEST(DryRun, WeightsAndDataAreShapesOnly) {
  const ModelSpec spec = ModelSpec::parse("mlp:784-16384-16384-10");  // 281M parameters: 1.1 GB as floats
  const HostWeights w = init_weights(spec, 1, /*values=*/false);
  EXPECT_FALSE(w.has_values());
  EXPECT_EQ(w.data(0), nullptr);
  EXPECT_TRUE(init_weights(ModelSpec::parse("mlp:4-3-2"), 1).has_values());

  const DataSplit d = make_synthetic(100, 10, 4, 3, 1, /*values=*/false);
  EXPECT_FALSE(d.train.has_values());
  EXPECT_EQ(d.train.count, 100);
  EXPECT_EQ(d.train.features, 4);
  EXPECT_TRUE(d.train.images.empty());
  Loader loader(d.train, 10, 1);
  HostBatch batch;
  loader.fill(3, batch);
  EXPECT_EQ(batch.size, 10);
  EXPECT_EQ(batch.x.size(), 40u);  // the batch's shape, zeros
  EXPECT_TRUE(std::all_of(batch.x.begin(), batch.x.end(), [](float v) { return v == 0.0f; }));

  // A model on a dry device takes shape-only weights and gives shape-only weights back …
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile("a100-nvlink-8");
  o.dry_run = true;
  auto dry = make_devices(o);
  Model big(*dry[0], w);
  EXPECT_FALSE(big.download().has_values());
  // … and a device that computes refuses them, naming what to do.
  o.dry_run = false;
  auto real = make_devices(o);
  const std::string msg = test::message_of<Error>([&] { Model m(*real[0], init_weights(ModelSpec::parse("mlp:4-3-2"), 1, false)); });
  EXPECT_NE(msg.find("no values"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--dry-run"), std::string::npos) << msg;
}

// Hundreds of ranks, each a thread, through the same DDP code: every rank's ledger is the same,
// and the step is priced on the large profile's nodes.
TEST(DryRun, HundredsOfRanksRunAndAgree) {
  TrainConfig c;
  c.strategy = "ddp";
  c.device = DeviceKind::sim;
  c.hw = "h100-ib-1024x8";
  c.devices = 512;
  c.dry_run = true;
  c.model = "mlp:784-4096-4096-10";
  c.dataset = "synthetic";
  c.synthetic_train = 1024;
  c.synthetic_test = 1;
  c.batch = 1024;
  c.steps = 2;
  EventBus bus;
  const TrainResult r = train(c, bus);
  ASSERT_EQ(r.per_device.size(), 512u);
  EXPECT_GT(r.time_s, 0);
  for (const DeviceSummary& d : r.per_device) {
    EXPECT_EQ(d.peak_bytes, r.per_device[0].peak_bytes) << d.name;
    EXPECT_GT(d.peak_bytes[static_cast<int>(MemoryCategory::params)], 4 * 784 * 4096) << d.name;
  }
}

// A run on more devices than TrainConfig::detailed_devices keeps every op of the first ones and
// tallies the rest: its summary is the same to the last figure, the trace holds the first devices.
// … and the ranks a dry run of alike ranks (zero, ddp, tensor-parallel) does not run at all, each
// counted as a copy of the last one it ran: the same figures, to the last bit, as running them all.
TEST(DryRun, TalliedDevicesSummariseAsKeptOnesDo) {
  TrainConfig c = test::small_config("zero", 8, DeviceKind::sim, "adam");
  c.zero_stage = 2;
  c.model = "gpt:2-32-2-16-96";
  c.dataset = "synthetic";
  c.batch = 16;
  c.steps = 2;
  c.dry_run = true;
  for (const char* strategy : {"zero", "ddp", "tensor-parallel", "pipeline"}) {
    SCOPED_TRACE(strategy);
    c.strategy = strategy;
    c.zero_stage = c.strategy == "zero" ? 2 : 0;
    c.micro_batches = c.strategy == "pipeline" ? 4 : 1;
    c.model = c.strategy == "tensor-parallel" ? "gpt:2-32-8-16-96" : "gpt:2-32-2-16-96";  // 8 heads for 8 ranks
    if (c.strategy == "pipeline") c.devices = 4;
    const bool alike = c.strategy != "pipeline";
    EventBus kept_bus, tallied_bus;
    const TrainResult kept = train(c, kept_bus);
    TrainConfig t = c;
    t.detailed_devices = 2;
    const TrainResult tallied = train(t, tallied_bus);
    EXPECT_EQ(kept.first_tallied_device, -1);
    EXPECT_EQ(tallied.first_tallied_device, 2);
    EXPECT_EQ(tallied.time_s, kept.time_s);
    EXPECT_EQ(tallied.metrics.overlap_pct, kept.metrics.overlap_pct);
    EXPECT_EQ(tallied.metrics.bubble_fraction, kept.metrics.bubble_fraction);
    EXPECT_EQ(tallied.metrics.bytes_moved, kept.metrics.bytes_moved);
    ASSERT_EQ(tallied.per_device.size(), kept.per_device.size());
    for (size_t d = 0; d < kept.per_device.size(); ++d) {
      EXPECT_EQ(tallied.per_device[d].busy_pct, kept.per_device[d].busy_pct) << d;
      EXPECT_EQ(tallied.per_device[d].comm_pct, kept.per_device[d].comm_pct) << d;
      EXPECT_EQ(tallied.per_device[d].idle_pct, kept.per_device[d].idle_pct) << d;
      EXPECT_EQ(tallied.per_device[d].peak_bytes, kept.per_device[d].peak_bytes) << d;
      EXPECT_EQ(tallied.metrics.per_device[d].peak_total, kept.metrics.per_device[d].peak_total) << d;
    }
    for (const Event& e : tallied_bus.events()) EXPECT_LT(e.device, 2) << e.name;
    const std::string summary = format_summary(tallied);
    EXPECT_EQ(tallied.devices_run, alike ? 3 : 0);
    // --json says so too, and reads back.
    const nlohmann::json j = to_json(tallied);
    EXPECT_EQ(j["devices_run"].is_null(), !alike);
    EXPECT_EQ(from_json(j, tallied.config).devices_run, tallied.devices_run);
    EXPECT_NE(summary.find(alike ? "device  2   tallied" : "devices 2–3   tallied"), std::string::npos) << summary;
    EXPECT_EQ(summary.find("devices 3–7   not run") != std::string::npos, alike) << summary;
  }
}

// cpu devices compute for real: thousands of them are refused, pointing at the dry run.
TEST(DryRun, ThousandsOfCpuDevicesAreRefused) {
  TrainConfig c = test::small_config("ddp", 4096);
  c.batch = 4096;
  EventBus bus;
  const std::string msg = test::message_of([&] { train(c, bus); });
  EXPECT_NE(msg.find("at most " + std::to_string(kMaxCpuDevices)), std::string::npos) << msg;
  EXPECT_NE(msg.find("--dry-run"), std::string::npos) << msg;
}
