// ddp and ddp-mp: the bucket assignment in closed form, the DistributedSampler shards, the
// equivalence with `single` (cpu and sim, sgd and adam, 2 and 4 ranks, with and without no_sync),
// the overlap of bucket all-reduces with backward on sim, and the configurations that are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "core/comm/threads/threads_group.h"
#include "core/data/dataset.h"
#include "core/error.h"
#include "run/train.h"
#include "support/small_config.h"
#include "support/errors.h"
#include "strategies/ddp_buckets.h"
#include "strategies/ddp_common.h"
#include "strategies/distributed_sampler.h"

using namespace scalelab;

// ---------------------------------------------------------------------------------------------
// Bucket assignment: a pure function of sizes and caps.

using Buckets = std::vector<std::vector<int>>;

TEST(DdpBuckets, TheHeaderExample) {
  // fc1.w 400, fc1.b 40, fc2.w 300, fc2.b 30; first cap 100, then 500.
  EXPECT_EQ(compute_bucket_assignment_by_size({400, 40, 300, 30}, 500, 100), (Buckets{{3}, {2, 1}, {0}}));
}

TEST(DdpBuckets, EverythingFitsInOneBucketInReverseOrder) {
  EXPECT_EQ(compute_bucket_assignment_by_size({10, 20, 30}, 1000, 1000), (Buckets{{2, 1, 0}}));
  // PyTorch's defaults (25 MiB, first 1 MiB) on mlp:784-256-128-10 (940 584 bytes): one bucket.
  const std::vector<int64_t> mlp = {4 * 784 * 256, 4 * 256, 4 * 256 * 128, 4 * 128, 4 * 128 * 10, 4 * 10};
  EXPECT_EQ(compute_bucket_assignment_by_size(mlp, 25 << 20, 1 << 20), (Buckets{{5, 4, 3, 2, 1, 0}}));
}

TEST(DdpBuckets, AParameterLargerThanTheCapSitsAlone) {
  // Reversed: 100 + 100 = 200; + 5000 > 1000 closes it; 5000 alone; then 100 starts the last.
  EXPECT_EQ(compute_bucket_assignment_by_size({100, 5000, 100, 100}, 1000, 1000), (Buckets{{3, 2}, {1}, {0}}));
  // The first parameter taken is larger than the first cap: it still gets the first bucket.
  EXPECT_EQ(compute_bucket_assignment_by_size({10, 10, 900}, 1000, 100), (Buckets{{2}, {1, 0}}));
}

TEST(DdpBuckets, TheFirstBucketIsSmall) {
  // mlp:32-24-16-12-8 in bytes: fc1.w 3072, fc1.b 96, fc2.w 1536, fc2.b 64, fc3.w 768, fc3.b 48,
  // fc4.w 384, fc4.b 32. First cap 600: 32 + 384 + 48 = 464, + 768 > 600. Then cap 2000:
  // 768 + 64 = 832, + 1536 > 2000; 1536 + 96 = 1632, + 3072 > 2000; 3072 alone.
  const std::vector<int64_t> sizes = {3072, 96, 1536, 64, 768, 48, 384, 32};
  EXPECT_EQ(compute_bucket_assignment_by_size(sizes, 2000, 600), (Buckets{{7, 6, 5}, {4, 3}, {2, 1}, {0}}));
  // With the small cap for every bucket instead, the same sizes make more buckets.
  EXPECT_EQ(compute_bucket_assignment_by_size(sizes, 600, 600), (Buckets{{7, 6, 5}, {4}, {3}, {2}, {1}, {0}}));
}

TEST(DdpBuckets, ExactlyTheCapFitsOneMoreByteDoesNot) {
  EXPECT_EQ(compute_bucket_assignment_by_size({50, 50}, 100, 100), (Buckets{{1, 0}}));
  EXPECT_EQ(compute_bucket_assignment_by_size({51, 50}, 100, 100), (Buckets{{1}, {0}}));
}

TEST(DdpBuckets, EdgeCases) {
  EXPECT_TRUE(compute_bucket_assignment_by_size({}, 100, 10).empty());
  EXPECT_THROW(compute_bucket_assignment_by_size({10}, 0, 10), UsageError);
  EXPECT_THROW(compute_bucket_assignment_by_size({10}, 100, -1), UsageError);
  EXPECT_THROW(compute_bucket_assignment_by_size({10, -5}, 100, 10), UsageError);
}

TEST(DdpBuckets, TheReducerNeverMixesDevices) {
  // ddp-mp's replica: layers 0-1 on one device, 2-3 on another. Each device's parameters are
  // bucketed on their own, the second device's first (backward reaches it first), each starting
  // with the small first bucket: {7,6,5} then {4} on the second; {3}, {2,1}, {0} on the first.
  EventBus bus;
  DeviceOptions o;
  o.count = 2;
  o.bus = &bus;
  auto devices = make_devices(o);
  HostWeights w = init_weights(ModelSpec::parse("mlp:32-24-16-12-8"), 1);
  Model model({devices[0].get(), devices[0].get(), devices[1].get(), devices[1].get()}, w);
  auto groups = make_threads_groups(1);
  GradientReducer reducer(model.parameters(), *groups[0], 2000, 600);
  EXPECT_EQ(reducer.buckets(), (Buckets{{7, 6, 5}, {4}, {3}, {2, 1}, {0}}));
  EXPECT_EQ(devices[1]->memory().peak(MemoryCategory::comm_buffers), 4 * (8 * 12 + 8 + 12 * 16 + 12));
  // finish() before every gradient was marked ready names what is missing.
  reducer.mark_ready(*model.layers()[3].parameters()[1]);
  try {
    reducer.finish();
    FAIL() << "finish() with buckets not ready should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fc4.weight"), std::string::npos) << e.what();
  }
}

// mark_ready finds a parameter's bucket through a locator computed once with the buckets (c10d's
// VariableLocator), not by searching the parameters; in backward's order every bucket is launched,
// and its all-reduce carries its bucket id. A parameter the reducer was not given, or one marked
// twice in a backward, is an error naming it.
TEST(DdpBuckets, MarkReadyFindsEachParameterThroughItsLocator) {
  EventBus bus;
  DeviceOptions o;
  o.bus = &bus;
  auto devices = make_devices(o);
  const HostWeights w = init_weights(ModelSpec::parse("mlp:32-24-16-12-8"), 1);
  Model model(*devices[0], w);
  auto groups = make_threads_groups(1);
  groups[0]->set_device(devices[0].get());
  GradientReducer reducer(model.parameters(), *groups[0], 2000, 600);
  const std::vector<Parameter*> params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const GradientReducer::Locator& at = reducer.locate(*params[i]);
    EXPECT_EQ(at.param, static_cast<int>(i));
    EXPECT_EQ(reducer.buckets().at(static_cast<size_t>(at.bucket)).at(static_cast<size_t>(at.position)),
              static_cast<int>(i))
        << params[i]->name;
  }
  for (int round = 0; round < 2; ++round) {  // the locators serve every backward
    for (auto p = params.rbegin(); p != params.rend(); ++p) reducer.mark_ready(**p);
    reducer.finish();
  }
  std::map<int, int> all_reduces;  // bucket → all-reduce events
  for (const Event& e : bus.events())
    if (e.role == Role::all_reduce) ++all_reduces[e.bucket];
  ASSERT_EQ(all_reduces.size(), reducer.buckets().size());
  for (const auto& [bucket, count] : all_reduces) EXPECT_EQ(count, 2) << "bucket " << bucket;

  Model other(*devices[0], w);
  try {
    reducer.mark_ready(*other.layers()[0].parameters()[0]);
    FAIL() << "a parameter of another model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("fc1.weight is not one of the reducer's parameters"), std::string::npos) << e.what();
  }
  reducer.mark_ready(*model.layers()[3].parameters()[1]);
  try {
    reducer.mark_ready(*model.layers()[3].parameters()[1]);
    FAIL() << "marking a gradient twice in one backward was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("fc4.bias was marked ready twice"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// DistributedSampler.

TEST(DistributedSampler, ShardsPartitionTheGlobalBatchAndReshuffleEachEpoch) {
  const DataSplit data = make_synthetic(256, 16, 5, 3, 11);
  const int64_t B = 32;
  Loader loader(data.train, B, 11);
  for (int world : {1, 2, 4, 8}) {
    std::map<int, std::set<int64_t>> first_epoch;  // rank → dataset indices of its step-1 shard
    for (int64_t epoch : {0, 1}) {
      loader.set_epoch(epoch);
      for (int64_t step : {0, 1, 5}) {
        HostBatch global, shard;
        loader.fill(step, global);
        std::multiset<int64_t> covered;
        for (int r = 0; r < world; ++r) {
          take_shard(global, r, world, shard);
          ASSERT_EQ(shard.size, B / world);
          std::set<int64_t> mine;
          for (int64_t j = 0; j < shard.size; ++j) {
            // PyTorch's DistributedSampler gives rank r the permutation positions sB + jN + r.
            const int64_t index = loader.order()[static_cast<size_t>(step * B + j * world + r)];
            EXPECT_TRUE(std::equal(shard.x.begin() + j * 5, shard.x.begin() + (j + 1) * 5,
                                   data.train.images.begin() + index * 5));
            EXPECT_EQ(shard.y[static_cast<size_t>(j)], data.train.labels[static_cast<size_t>(index)]);
            covered.insert(index);
            mine.insert(index);
          }
          if (step == 1 && epoch == 0) first_epoch[r] = mine;
          if (step == 1 && epoch == 1 && world < 8) {
            EXPECT_NE(first_epoch[r], mine) << "rank " << r << " of " << world;
          }
        }
        // Disjoint shards whose union is exactly the global batch.
        std::multiset<int64_t> expected(loader.order().begin() + step * B, loader.order().begin() + (step + 1) * B);
        EXPECT_EQ(covered, expected) << world << " ranks, epoch " << epoch << ", step " << step;
      }
    }
  }
  // The strategies refuse a --batch the ranks cannot share (a UsageError, exit 2) before training:
  // a batch that reaches take_shard unshareable is a bug, an internal Error (exit 1).
  HostBatch global, shard;
  loader.fill(0, global);
  auto refused = [&](int rank, int ranks) {
    try {
      take_shard(global, rank, ranks, shard);
    } catch (const UsageError& e) {
      return std::string("a usage error: ") + e.what();
    } catch (const Error& e) {
      return e.component();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused(0, 3), "sampler");  // 32 rows cannot go to 3 ranks
  EXPECT_EQ(refused(4, 4), "sampler");
}

// ---------------------------------------------------------------------------------------------
// Whole runs.

namespace {

// Caps in MB (MiB) that make several buckets out of the small model's 6 KiB of gradients.
constexpr double kSmallCapMb = 2000.0 / (1 << 20);
constexpr double kSmallFirstCapMb = 600.0 / (1 << 20);

// The shared small run on `ranks` ranks (ddp-mp: two devices each), with small buckets so the
// model's gradients fill several; compared with single step by step.
TrainConfig small_config(const std::string& strategy, int ranks, DeviceKind device, const std::string& optimizer) {
  TrainConfig c = test::small_config(strategy, ranks * (strategy == "ddp-mp" ? 2 : 1), device, optimizer);
  c.bucket_mb = kSmallCapMb;
  c.first_bucket_mb = kSmallFirstCapMb;
  c.check_equivalence = true;
  return c;
}

TrainResult run(const TrainConfig& c, EventBus* events = nullptr) {
  EventBus bus;
  return train(c, events ? *events : bus);
}

struct Case {
  std::string strategy;
  int ranks;
  DeviceKind device;
  std::string optimizer;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string s = info.param.strategy + "_" + std::to_string(info.param.ranks) + "ranks_" +
                  device_kind_name(info.param.device) + "_" + info.param.optimizer;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

class DdpEquivalence : public testing::TestWithParam<Case> {};

}  // namespace

TEST_P(DdpEquivalence, SameWeightsAsSingle) {
  const Case& k = GetParam();
  TrainConfig c = small_config(k.strategy, k.ranks, k.device, k.optimizer);
  TrainResult r = run(c);
  ASSERT_EQ(r.losses.size(), 5u);
  EXPECT_GE(r.max_rel_diff, 0.0);
  EXPECT_LE(r.max_rel_diff, 1e-5);
  // The sampler's shards together are the global batch: the loss is single's, to round-off.
  EXPECT_GT(r.losses.front(), 0.0);

  // --no-sync 2: all-reduce and step every 2nd batch, accumulating in between; single does the same.
  TrainConfig ns = c;
  ns.no_sync = 2;
  ns.steps = 6;
  TrainResult a = run(ns);
  EXPECT_GE(a.max_rel_diff, 0.0);
  EXPECT_LE(a.max_rel_diff, 1e-5);
  EXPECT_NE(a.weights_checksum, r.weights_checksum);  // accumulation changed the training
  std::printf("[ max_rel_diff ] %-7s %d ranks %-3s %-4s  %.3g   --no-sync 2: %.3g\n", k.strategy.c_str(), k.ranks,
              device_kind_name(k.device), k.optimizer.c_str(), r.max_rel_diff, a.max_rel_diff);
}

INSTANTIATE_TEST_SUITE_P(
    All, DdpEquivalence,
    testing::Values(Case{"ddp", 2, DeviceKind::cpu, "sgd"}, Case{"ddp", 2, DeviceKind::cpu, "adam"},
                    Case{"ddp", 4, DeviceKind::cpu, "sgd"}, Case{"ddp", 4, DeviceKind::cpu, "adam"},
                    Case{"ddp", 2, DeviceKind::sim, "sgd"}, Case{"ddp", 2, DeviceKind::sim, "adam"},
                    Case{"ddp", 4, DeviceKind::sim, "sgd"}, Case{"ddp", 4, DeviceKind::sim, "adam"},
                    Case{"ddp-mp", 2, DeviceKind::cpu, "sgd"}, Case{"ddp-mp", 2, DeviceKind::cpu, "adam"},
                    Case{"ddp-mp", 4, DeviceKind::cpu, "sgd"}, Case{"ddp-mp", 4, DeviceKind::cpu, "adam"},
                    Case{"ddp-mp", 2, DeviceKind::sim, "sgd"}, Case{"ddp-mp", 2, DeviceKind::sim, "adam"},
                    Case{"ddp-mp", 4, DeviceKind::sim, "sgd"}, Case{"ddp-mp", 4, DeviceKind::sim, "adam"}),
    case_name);

TEST(Ddp, OneRankIsBitwiseSingle) {
  // One rank: the same ops in the same order as single (the all-reduce of one is the identity).
  TrainConfig c = small_config("ddp", 1, DeviceKind::cpu, "sgd");
  EXPECT_EQ(run(c).max_rel_diff, 0.0);
  c.no_sync = 3;
  c.steps = 6;
  EXPECT_EQ(run(c).max_rel_diff, 0.0);
}

TEST(Ddp, SimComputesTheSameWeightsAsCpu) {
  for (const char* strategy : {"ddp", "ddp-mp"}) {
    TrainConfig c = small_config(strategy, 2, DeviceKind::cpu, "sgd");
    c.check_equivalence = false;
    const TrainResult cpu = run(c);
    c.device = DeviceKind::sim;
    c.hw = "a100-nvlink-8";
    const TrainResult sim = run(c);
    EXPECT_EQ(cpu.weights_checksum, sim.weights_checksum) << strategy;
  }
}

TEST(Ddp, ProcsLaunchTrainsTheSameAsThreads) {
  // Two ranks: the average (a + b) / 2 is the same whatever the order of the sum, so the shm
  // backend of --launch procs gives bitwise the weights of --launch threads. With 4 ranks each
  // backend adds the 4 gradients in its own order: round-off apart, still equivalent to single.
  for (const char* strategy : {"ddp", "ddp-mp"}) {
    SCOPED_TRACE(strategy);
    TrainConfig c = small_config(strategy, 2, DeviceKind::cpu, "sgd");
    const TrainResult threads = run(c);
    c.launch = Launch::procs;
    const TrainResult procs = run(c);
    EXPECT_EQ(procs.weights_checksum, threads.weights_checksum);
    EXPECT_EQ(procs.max_rel_diff, threads.max_rel_diff);
    ASSERT_EQ(procs.losses.size(), threads.losses.size());
    for (size_t i = 0; i < procs.losses.size(); ++i)  // all-reduced as a float in procs, averaged in double in threads
      EXPECT_NEAR(procs.losses[i], threads.losses[i], 1e-6 * threads.losses[i]);
  }
  TrainConfig c = small_config("ddp", 4, DeviceKind::cpu, "adam");
  c.launch = Launch::procs;
  const TrainResult procs4 = run(c);
  EXPECT_GE(procs4.max_rel_diff, 0.0);
  EXPECT_LE(procs4.max_rel_diff, 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Overlap on sim: bucket all-reduces run while backward still computes.

namespace {

TrainConfig overlap_config(const std::string& strategy, int ranks) {
  TrainConfig c;
  c.strategy = strategy;
  c.devices = ranks * (strategy == "ddp-mp" ? 2 : 1);
  c.device = DeviceKind::sim;
  c.hw = "a100-nvlink-8";
  c.model = "mlp:784-256-128-10";
  c.dataset = "synthetic";
  c.synthetic_train = 1024;
  c.synthetic_test = 128;
  c.batch = 128;
  c.steps = 3;
  c.bucket_mb = 0.25;       // 256 KiB: fc1.weight (784 KiB) alone, the rest in smaller buckets
  c.first_bucket_mb = 0.05;
  return c;
}

// Per (step, rank): the end of the rank's last backward GEMM (on any of its devices), and the
// begin of its first bucket all-reduce.
struct StepTimes {
  int64_t last_bwd_gemm_end = -1;
  int64_t first_bucket_comm_begin = INT64_MAX;
  std::set<int> buckets;
};

std::map<std::pair<int64_t, int>, StepTimes> step_times(const std::vector<Event>& events, int devices_per_rank) {
  std::map<std::pair<int64_t, int>, StepTimes> t;
  for (const Event& e : events) {
    if (e.step < 0) continue;
    StepTimes& s = t[{e.step, e.device / devices_per_rank}];
    if (e.kind == "gemm" && e.phase == Phase::bwd) s.last_bwd_gemm_end = std::max(s.last_bwd_gemm_end, e.t_end_ns);
    if (e.lane == Lane::comm && e.bucket >= 0) {
      s.first_bucket_comm_begin = std::min(s.first_bucket_comm_begin, e.t_begin_ns);
      s.buckets.insert(e.bucket);
    }
  }
  return t;
}

}  // namespace

TEST(DdpSim, BucketAllReducesOverlapBackward) {
  const std::vector<std::pair<std::string, int>> cases = {{"ddp", 2}, {"ddp", 4}, {"ddp-mp", 2}, {"ddp-mp", 4}};
  for (const auto& [strategy, ranks] : cases) {
    SCOPED_TRACE(strategy + " × " + std::to_string(ranks));
    EventBus bus;
    TrainResult r = run(overlap_config(strategy, ranks), &bus);
    EXPECT_GT(r.metrics.overlap_pct, 0.0);
    const auto times = step_times(bus.events(), strategy == "ddp-mp" ? 2 : 1);
    ASSERT_EQ(times.size(), static_cast<size_t>(3 * ranks));  // 3 steps × ranks
    for (const auto& [key, s] : times) {
      // Every bucket is all-reduced, and the first starts before the rank's backward has finished.
      EXPECT_EQ(s.buckets.size(), strategy == "ddp-mp" ? 4u : 3u);
      EXPECT_LT(s.first_bucket_comm_begin, s.last_bwd_gemm_end) << "step " << key.first << " rank " << key.second;
    }
    std::printf("[ overlap      ] %-7s %d ranks (%d devices) on a100-nvlink-8, caps 0.25 MB / 0.05 MB: %.1f%% of "
                "communication under compute, %.3f ms/step\n",
                strategy.c_str(), ranks, r.config.devices, r.metrics.overlap_pct, 1e3 * r.time_s / r.steps);
  }
}

TEST(DdpSim, TheBucketsAndTheBroadcastAreInTheTrace) {
  EventBus bus;
  TrainConfig c = overlap_config("ddp", 4);
  TrainResult r = run(c, &bus);
  std::set<int> buckets;
  std::set<std::string> broadcast;
  for (const Event& e : bus.events()) {
    if (e.lane == Lane::comm && e.bucket >= 0 && e.step == 0 && e.device == 0) {
      buckets.insert(e.bucket);
      EXPECT_EQ(e.name.rfind("bucket " + std::to_string(e.bucket), 0), 0u) << e.name;
      EXPECT_EQ(e.kind, "all_reduce");
    }
    if (e.kind == "broadcast" && e.step < 0 && e.device == 0) broadcast.insert(e.name.substr(0, e.name.find(" step")));
  }
  // mlp:784-256-128-10 with caps 256 KiB (first 51.2 KiB), reversed: {fc3.b, fc3.w, fc2.b} = 5.6 KiB,
  // + fc2.w (128 KiB) > 51.2 KiB; {fc2.w, fc1.b} = 129 KiB, + fc1.w > 256 KiB; {fc1.w}: 3 buckets.
  EXPECT_EQ(buckets, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(broadcast, (std::set<std::string>{"broadcast fc1.weight", "broadcast fc1.bias", "broadcast fc2.weight",
                                              "broadcast fc2.bias", "broadcast fc3.weight", "broadcast fc3.bias"}));
  // The comm buffers are the buckets: as large as the gradients.
  const int64_t P = ModelSpec::parse(c.model).parameter_count();
  EXPECT_EQ(r.per_device[0].peak_bytes[static_cast<int>(MemoryCategory::comm_buffers)], 4 * P);
}

TEST(DdpSim, NoSyncStepsDoNotCommunicateGradients) {
  EventBus bus;
  TrainConfig c = overlap_config("ddp", 2);
  c.no_sync = 2;
  c.steps = 4;
  run(c, &bus);
  std::map<int64_t, int> bucket_events, optimizer_events;
  for (const Event& e : bus.events()) {
    if (e.lane == Lane::comm && e.bucket >= 0) ++bucket_events[e.step];
    if (e.phase == Phase::optim) ++optimizer_events[e.step];
  }
  EXPECT_EQ(bucket_events.count(0), 0u);
  EXPECT_EQ(bucket_events.count(2), 0u);
  EXPECT_GT(bucket_events[1], 0);
  EXPECT_GT(bucket_events[3], 0);
  EXPECT_EQ(optimizer_events.count(0), 0u);
  EXPECT_EQ(optimizer_events.count(2), 0u);
  EXPECT_GT(optimizer_events[1], 0);
}

// ---------------------------------------------------------------------------------------------
// Configurations that are refused, with the strategy, the value and the fix in the message.

namespace {

std::string usage_error_of(const TrainConfig& c) {
  return test::message_of([&] { run(c); });
}

}  // namespace

TEST(Ddp, BadConfigurationsAreUsageErrors) {
  TrainConfig c = small_config("ddp", 4, DeviceKind::cpu, "sgd");
  c.check_equivalence = false;
  c.batch = 30;
  std::string e = usage_error_of(c);
  EXPECT_NE(e.find("[ddp] --batch 30"), std::string::npos) << e;
  EXPECT_NE(e.find("--batch 32"), std::string::npos) << e;

  c = small_config("ddp", 2, DeviceKind::cpu, "sgd");
  c.no_sync = 8;
  e = usage_error_of(c);
  EXPECT_NE(e.find("[ddp] --no-sync 8"), std::string::npos) << e;

  c = small_config("ddp-mp", 2, DeviceKind::cpu, "sgd");
  c.devices = 3;
  e = usage_error_of(c);
  EXPECT_NE(e.find("[ddp-mp] --devices 3 must be a multiple of 2"), std::string::npos) << e;

  c = small_config("ddp-mp", 2, DeviceKind::cpu, "sgd");
  c.model = "mlp:32-8";
  e = usage_error_of(c);
  EXPECT_NE(e.find("[ddp-mp] --model mlp:32-8 has 1 layer"), std::string::npos) << e;

  c = small_config("ddp-mp", 2, DeviceKind::cpu, "sgd");
  c.batch = 33;
  e = usage_error_of(c);
  EXPECT_NE(e.find("[ddp-mp] --batch 33"), std::string::npos) << e;

  c = small_config("ddp", 16, DeviceKind::sim, "sgd");  // the profile has 8 devices
  e = usage_error_of(c);
  EXPECT_NE(e.find("[device] profile a100-nvlink-8 has 8 devices"), std::string::npos) << e;
}
