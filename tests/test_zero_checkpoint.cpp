// zero (ZeroRedundancyOptimizer, stages 1–3) and checkpoints (core/checkpoint/checkpoint.h).
//
// zero: the same training as single (max relative weight difference ≤ 1e-5 after 5 steps) for
// stages 1, 2 and 3 × 2 and 4 ranks × cpu and sim × sgd (momentum) and adam; and the memory it is
// for, in closed form from the ledger: optimizer state per rank = k·4·⌈P/N⌉ bytes (k state
// tensors per parameter, P parameters) where data parallel keeps k·4·P; gradients per rank
// 4·⌈P/N⌉·N in stage 1 and 4·⌈P/N⌉ in stage 2. Stage 3 pads each layer on its own: S = Σ ⌈P_l/N⌉,
// and keeps 4·S of weights, gradients and k·4·S of state, plus both layers whole while in use.
//
// Checkpoints: a run interrupted and resumed ends bit-identical to one that never stopped (single,
// zero, ddp); a checkpoint resumes under another strategy and number of ranks; truncated, corrupt
// and foreign files and mismatched options give errors that say what to do; a process killed
// while saving leaves the previous checkpoint whole.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/training_state.h"
#include "core/error.h"
#include "core/nn/model.h"
#include "run/run_parts.h"
#include "run/train.h"
#include "strategies/registry.h"
#include "support/errors.h"
#include "support/small_config.h"

using namespace scalelab;
namespace fs = std::filesystem;

namespace {

// 16-13-4: P = 16·13 + 13 + 13·4 + 4 = 277 parameters, which neither 2 nor 4 divides: the
// padding is exercised. 256 samples, batch 32: 8 steps an epoch, so resuming at step 6 is mid-epoch
// and the run to 10 crosses into the next epoch.
constexpr int64_t kParams = 277;

// A smaller run still (checkpoint files stay tiny), on cpu.
TrainConfig small_config(const std::string& strategy, int devices, const std::string& optimizer = "sgd") {
  TrainConfig c = test::small_config(strategy, devices, DeviceKind::cpu, optimizer);
  c.model = "mlp:16-13-4";
  c.synthetic_train = 256;
  c.synthetic_test = 64;
  c.seed = 11;
  if (optimizer == "adam") c.optimizer.lr = 1e-3f;
  return c;
}

TrainResult run(const TrainConfig& c, const ProgressFn& progress = {}) {
  EventBus bus;
  return train(c, bus, progress);
}

int64_t peak(const DeviceSummary& d, MemoryCategory c) { return d.peak_bytes[static_cast<int>(c)]; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A fresh folder per test, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& ch : test)
      if (ch == '/') ch = '_';  // parametrized tests are named "Test/case"
    path_ = fs::temp_directory_path() / ("scalelab-test-zero-ckpt-" + std::to_string(::getpid()) + "-" + test);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The message of what `f` throws as E ("" if it throws nothing).

struct Interrupted {};

}  // namespace

// ---------------------------------------------------------------------------------------------
// zero: equivalence to single and the memory it saves, every combination of the brief.

struct ZeroCase {
  int stage;
  int ranks;
  DeviceKind device;
  std::string optimizer;
};

class ZeroMatrix : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(ZeroMatrix, TrainsLikeSingleWithOneNthOfTheOptimizerState) {
  const ZeroCase z = GetParam();
  TrainConfig c = small_config("zero", z.ranks, z.optimizer);
  c.zero_stage = z.stage;
  c.device = z.device;
  if (z.device == DeviceKind::sim) c.hw = "a100-nvlink-8";
  c.check_equivalence = true;
  const TrainResult r = run(c);

  // 1. The same training as single, to round-off.
  ASSERT_GE(r.max_rel_diff, 0.0) << "the equivalence check did not run";
  EXPECT_LE(r.max_rel_diff, 1e-5);
  std::printf("    zero stage %d, %d ranks, %s, %s: max_rel_diff %.3g\n", z.stage, z.ranks, device_kind_name(z.device),
              z.optimizer.c_str(), r.max_rel_diff);

  // 2. Memory per rank, in closed form. k state tensors per parameter: momentum (1) or m, v (2).
  const int64_t k = z.optimizer == "adam" ? 2 : 1;
  const int64_t shard = ceil_div(kParams, z.ranks);  // S = ⌈P/N⌉; padded P' = S·N
  ASSERT_EQ(r.per_device.size(), static_cast<size_t>(z.ranks));
  if (z.stage == 3) {
    // fc1 (16·13 + 13 = 221) and fc2 (13·4 + 4 = 56), each padded: S = ⌈221/N⌉ + ⌈56/N⌉; the two
    // layers whole at once (fc2's gradient reduce-scattered while fc1's backward runs).
    const int64_t pieces = ceil_div(221, z.ranks) + ceil_div(56, z.ranks), both = pieces * z.ranks;
    for (const DeviceSummary& d : r.per_device) {
      EXPECT_EQ(peak(d, MemoryCategory::optimizer), k * 4 * pieces) << d.name;
      EXPECT_EQ(peak(d, MemoryCategory::params), 4 * (pieces + both)) << d.name;
      EXPECT_EQ(peak(d, MemoryCategory::grads), 4 * pieces) << d.name;
      EXPECT_EQ(peak(d, MemoryCategory::comm_buffers), 4 * both) << d.name;
    }
    return;
  }
  for (const DeviceSummary& d : r.per_device) {
    EXPECT_EQ(peak(d, MemoryCategory::optimizer), k * 4 * shard) << d.name;
    EXPECT_EQ(peak(d, MemoryCategory::params), 4 * shard * z.ranks) << d.name;  // every weight, padded
    EXPECT_EQ(peak(d, MemoryCategory::grads), z.stage == 1 ? 4 * shard * z.ranks : 4 * shard) << d.name;
  }
}

std::string zero_case_name(const ::testing::TestParamInfo<ZeroCase>& info) {
  const ZeroCase& z = info.param;
  return "stage" + std::to_string(z.stage) + "_" + std::to_string(z.ranks) + "ranks_" + device_kind_name(z.device) +
         "_" + z.optimizer;
}

std::vector<ZeroCase> all_zero_cases() {
  std::vector<ZeroCase> cases;
  for (int stage : {1, 2, 3})
    for (int ranks : {2, 4})
      for (DeviceKind device : {DeviceKind::cpu, DeviceKind::sim})
        for (const char* optimizer : {"sgd", "adam"}) cases.push_back({stage, ranks, device, optimizer});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Zero, ZeroMatrix, ::testing::ValuesIn(all_zero_cases()), zero_case_name);

TEST(Zero, SingleKeepsTheWholeOptimizerStateThatZeroShards) {
  // The yardstick of the figures above: one device holds k·4·P bytes of optimizer state.
  for (const char* optimizer : {"sgd", "adam"}) {
    const TrainResult r = run(small_config("single", 1, optimizer));
    const int64_t k = std::string(optimizer) == "adam" ? 2 : 1;
    EXPECT_EQ(peak(r.per_device[0], MemoryCategory::optimizer), k * 4 * kParams) << optimizer;
  }
}

TEST(Zero, TheLectureModelOnFourSimulatedDevices) {
  // The Fashion-MNIST model (P = 235 146) with Adam, shapes only: the figures a student sees.
  TrainConfig c = small_config("zero", 4, "adam");
  c.model = "mlp:784-256-128-10";
  c.synthetic_train = 1024;
  c.synthetic_test = 128;
  c.batch = 128;
  c.steps = 2;
  c.device = DeviceKind::sim;
  c.hw = "a100-nvlink-8";
  c.dry_run = true;
  const int64_t P = ModelSpec::parse(c.model).parameter_count(), S = ceil_div(P, 4);
  ASSERT_EQ(P, 235146);
  for (int stage : {1, 2}) {
    c.zero_stage = stage;
    const TrainResult r = run(c);
    for (const DeviceSummary& d : r.per_device) {
      EXPECT_EQ(peak(d, MemoryCategory::optimizer), 2 * 4 * S);  // 470 296 bytes, where single has 1 881 168
      EXPECT_EQ(peak(d, MemoryCategory::grads), stage == 1 ? 4 * S * 4 : 4 * S);
    }
    std::printf("    stage %d: per rank optimizer %lld B (single: %lld B), grads %lld B, comm buffers %lld B\n", stage,
                static_cast<long long>(peak(r.per_device[0], MemoryCategory::optimizer)),
                static_cast<long long>(2 * 4 * P), static_cast<long long>(peak(r.per_device[0], MemoryCategory::grads)),
                static_cast<long long>(peak(r.per_device[0], MemoryCategory::comm_buffers)));
  }
}

TEST(Zero, StageTwoKeepsFewerGradientBytesThanStageOne) {
  TrainConfig c = small_config("zero", 4, "adam");
  c.zero_stage = 1;
  const TrainResult one = run(c);
  c.zero_stage = 2;
  const TrainResult two = run(c);
  for (size_t i = 0; i < one.per_device.size(); ++i) {
    EXPECT_LT(peak(two.per_device[i], MemoryCategory::grads), peak(one.per_device[i], MemoryCategory::grads));
    EXPECT_EQ(peak(two.per_device[i], MemoryCategory::optimizer), peak(one.per_device[i], MemoryCategory::optimizer));
  }
  // The same training (each is checked against single above); not bit-identical: the ring
  // all-reduce and the reduce-scatter add the ranks' gradients in different orders.
  ASSERT_FALSE(two.weights_checksum.empty());
}

TEST(Zero, WithoutAStageIsStageOne) {
  TrainConfig c = small_config("zero", 2, "adam");
  c.zero_stage = 0;  // --strategy zero without --zero-stage
  const TrainResult dflt = run(c);
  c.zero_stage = 1;
  const TrainResult one = run(c);
  EXPECT_EQ(dflt.weights_checksum, one.weights_checksum);
  EXPECT_EQ(peak(dflt.per_device[0], MemoryCategory::grads), peak(one.per_device[0], MemoryCategory::grads));
}

TEST(Zero, ABatchTheRanksCannotShareIsAUsageError) {
  TrainConfig c = small_config("zero", 4);
  c.batch = 30;
  const std::string m = test::message_of<UsageError>([&] { run(c); });
  EXPECT_NE(m.find("multiple of the number of ranks"), std::string::npos) << m;
}

TEST(Zero, ZeroStageWithAnotherStrategyIsAUsageError) {
  for (const char* strategy : {"ddp", "single"}) {
    TrainConfig c = small_config(strategy, 1);
    c.zero_stage = 1;
    const std::string m = test::message_of<UsageError>([&] { check_config(c); });
    EXPECT_NE(m.find("[zero] --zero-stage 1 does not apply to --strategy " + std::string(strategy)), std::string::npos) << m;
    EXPECT_NE(m.find("--strategy zero"), std::string::npos) << m;
  }
}

TEST(Zero, ZeroStageWithDdpExitsTwoOnTheCommandLine) {
  const std::string exe = std::string(SCALELAB_BINARY_DIR) + "/scalelab";
  if (::access(exe.c_str(), X_OK) != 0) GTEST_SKIP() << exe << " is not built (build the scalelab target)";
  TempDir dir;
  const std::string out = dir.file("out.txt");
  auto status = [&](const std::string& args) {
    const int s = std::system((exe + " train --quiet --dataset synthetic --steps 1 " + args + " > " + out + " 2>&1").c_str());
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  };
  EXPECT_EQ(status("--strategy ddp --devices 2 --zero-stage 1"), 2) << read_bytes(out);
  EXPECT_NE(read_bytes(out).find("--zero-stage"), std::string::npos) << read_bytes(out);
  EXPECT_EQ(status("--strategy zero --devices 2 --zero-stage 4"), 2) << read_bytes(out);
  EXPECT_EQ(status("--strategy fsdp --devices 2 --zero-stage 2"), 2) << read_bytes(out);
  EXPECT_NE(read_bytes(out).find("fsdp is zero stage 3"), std::string::npos) << read_bytes(out);
  EXPECT_EQ(status("--strategy zero --devices 2 --zero-stage 3 --amp bf16 --model mlp:784-16-10 --batch 32"), 0)
      << read_bytes(out);
  EXPECT_EQ(status("--strategy zero --devices 2 --zero-stage 2 --model mlp:784-16-10 --batch 32"), 0) << read_bytes(out);
  EXPECT_EQ(status("--strategy fsdp --devices 2 --model mlp:784-16-10 --batch 32"), 0) << read_bytes(out);
  EXPECT_NE(read_bytes(out).find("strategy zero"), std::string::npos) << read_bytes(out);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints: exact continuation.

struct ResumeCase {
  std::string strategy;
  int devices;
  int zero_stage;
  std::string optimizer;
};

class ExactResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(ExactResume, AnInterruptedRunEndsBitIdenticalToOneThatNeverStopped) {
  const ResumeCase rc = GetParam();
  bool registered = false;
  for (const auto& s : strategy_registry()) registered = registered || s.name == rc.strategy;
  if (!registered) GTEST_SKIP() << rc.strategy << " is not registered yet";
  TempDir dir;
  TrainConfig c = small_config(rc.strategy, rc.devices, rc.optimizer);
  c.zero_stage = rc.zero_stage;
  c.steps = 10;

  // 1. Ten steps without a stop.
  const TrainResult straight = run(c);

  // 2. A checkpoint every 6 steps; the run dies after step 8 (the checkpoint of step 6 stays).
  TrainConfig first = c;
  first.checkpoint_path = dir.file("run.ckpt");
  first.checkpoint_every = 6;
  EXPECT_THROW(run(first, [](const Progress& p) {
                 if (p.step == 8) throw Interrupted{};
               }),
               Interrupted);
  ASSERT_EQ(load_checkpoint(first.checkpoint_path).header.step, 6);

  // 3. Resumed to step 10: the same weights, bit for bit, and the same losses for steps 7–10.
  TrainConfig second = c;
  second.resume_path = first.checkpoint_path;
  const TrainResult resumed = run(second);
  ASSERT_FALSE(straight.weights_checksum.empty());
  EXPECT_EQ(resumed.weights_checksum, straight.weights_checksum);
  EXPECT_EQ(resumed.steps, 4);
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed.losses[i], straight.losses[6 + i]) << "step " << 7 + i;
}

std::vector<ResumeCase> all_resume_cases() {
  // Every synchronous strategy (those not registered yet are skipped); not multiprocessing, whose
  // Hogwild updates race by design.
  return {{"single", 1, 0, "sgd"},        {"single", 1, 0, "adam"},        {"zero", 2, 1, "sgd"},
          {"zero", 4, 1, "adam"},         {"zero", 2, 2, "adam"},          {"zero", 4, 2, "sgd"},
          {"zero", 2, 3, "adam"},         {"zero", 4, 3, "sgd"},
          {"ddp", 2, 0, "sgd"},           {"ddp", 2, 0, "adam"},           {"ddp-mp", 4, 0, "adam"},
          {"data-parallel", 2, 0, "adam"}, {"model-parallel", 2, 0, "adam"}, {"pipeline", 2, 0, "adam"}};
}

std::string resume_case_name(const ::testing::TestParamInfo<ResumeCase>& info) {
  const ResumeCase& rc = info.param;
  std::string name = rc.strategy;
  for (char& ch : name)
    if (ch == '-') ch = '_';  // test names are identifiers
  return name + (rc.zero_stage ? "_stage" + std::to_string(rc.zero_stage) : "") + "_" +
         std::to_string(rc.devices) + "dev_" + rc.optimizer;
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, ExactResume, ::testing::ValuesIn(all_resume_cases()), resume_case_name);

// Run `c` to step 10 straight, and to step 6 (its checkpoint written at its end to `ckpt`) then
// resumed to 10: the two final weights' checksums.
static std::pair<std::string, std::string> straight_and_resumed(TrainConfig c, const std::string& ckpt) {
  c.steps = 10;
  const TrainResult straight = run(c);
  TrainConfig six = c;
  six.steps = 6;
  six.checkpoint_path = ckpt;
  run(six);
  EXPECT_EQ(load_checkpoint(ckpt).header.step, 6);
  TrainConfig ten = c;
  ten.resume_path = ckpt;
  return {straight.weights_checksum, run(ten).weights_checksum};
}

TEST(Checkpoint, SixStepsAndAResumeToTenEqualTenSteps) {
  // The other way to stop: a run of 6 steps writes its checkpoint at its end.
  TempDir dir;
  for (const char* optimizer : {"sgd", "adam"}) {
    const auto [straight, resumed] = straight_and_resumed(small_config("single", 1, optimizer), dir.file("six.ckpt"));
    EXPECT_EQ(resumed, straight) << optimizer;
  }
}

// The weights that run `c` ends with, as its checkpoint `file` (in `dir`) holds them.
static HostWeights checkpointed_end(const TempDir& dir, TrainConfig c, const std::string& file) {
  c.checkpoint_path = dir.file(file);
  run(c);
  return load_checkpoint(c.checkpoint_path).state.weights;
}

TEST(Checkpoint, ResumesUnderAnotherStrategyAndNumberOfRanks) {
  // The state is whole in the file: zero on 4 ranks → single, and single → zero on 2 ranks (stage 2);
  // the same with stage 3's shards of each layer.
  TempDir dir;
  TrainConfig c = small_config("single", 1, "adam");
  c.steps = 10;
  const HostWeights reference = checkpointed_end(dir, c, "single-end.ckpt");

  struct Leg {
    std::string strategy;
    int devices, stage;
  };
  for (const auto& [from, to] : {std::pair<Leg, Leg>{{"zero", 4, 1}, {"single", 1, 0}},
                                 std::pair<Leg, Leg>{{"single", 1, 0}, {"zero", 2, 2}},
                                 std::pair<Leg, Leg>{{"zero", 4, 3}, {"single", 1, 0}},
                                 std::pair<Leg, Leg>{{"single", 1, 0}, {"zero", 2, 3}}}) {
    TrainConfig a = small_config(from.strategy, from.devices, "adam");
    a.zero_stage = from.stage;
    a.steps = 6;
    a.checkpoint_path = dir.file("mid.ckpt");
    run(a);
    TrainConfig b = small_config(to.strategy, to.devices, "adam");
    b.zero_stage = to.stage;
    b.steps = 10;
    b.resume_path = a.checkpoint_path;
    b.checkpoint_path = dir.file("end.ckpt");
    run(b);
    const Checkpoint end = load_checkpoint(b.checkpoint_path);
    EXPECT_EQ(end.header.step, 10);
    EXPECT_EQ(end.header.strategy, to.strategy);
    EXPECT_LE(max_relative_difference(end.state.weights, reference), 1e-5) << from.strategy << " → " << to.strategy;
  }
}

TEST(Checkpoint, ZeroShardsAndPipelineStagesHandTheStateOnWhole) {
  // strategies/sharded_state.h both ways, on a 3-layer model (P = 387: 4 ranks pad it by 1):
  // zero on 4 ranks → pipeline on 3 stages → zero on 2 ranks (stage 2) ends where single does.
  TempDir dir;
  auto config = [](const std::string& strategy, int devices, int stage, int64_t steps) {
    TrainConfig c = small_config(strategy, devices, "adam");
    c.model = "mlp:16-13-9-4";
    c.zero_stage = stage;
    c.steps = steps;
    return c;
  };
  const HostWeights reference = checkpointed_end(dir, config("single", 1, 0, 9), "single.ckpt");
  TrainConfig leg = config("zero", 4, 1, 3);  // steps 1–3
  checkpointed_end(dir, leg, "a.ckpt");
  leg = config("pipeline", 3, 0, 6);  // 4–6
  leg.resume_path = dir.file("a.ckpt");
  checkpointed_end(dir, leg, "b.ckpt");
  leg = config("zero", 2, 2, 9);  // 7–9
  leg.resume_path = dir.file("b.ckpt");
  EXPECT_LE(max_relative_difference(checkpointed_end(dir, leg, "c.ckpt"), reference), 1e-5);
}

TEST(Checkpoint, ZeroAsForkedProcessesRankZeroWritesTheOthersWait) {
  // --launch procs: each rank a process; rank 0 writes, rank 1 waits at the barrier.
  for (int stage : {2, 3}) {
    SCOPED_TRACE(stage);
    TempDir dir;
    TrainConfig c = small_config("zero", 2, "adam");
    c.zero_stage = stage;
    c.launch = Launch::procs;
    const auto [straight, resumed] = straight_and_resumed(c, dir.file("procs.ckpt"));
    EXPECT_EQ(resumed, straight);
    // No temporary file is left beside it.
    for (const auto& entry : fs::directory_iterator(dir.path()))
      EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints: damaged, foreign and mismatched files.

namespace {

// A checkpoint of a few steps of the small model, and its bytes.
std::string small_checkpoint(const TempDir& dir, const std::string& name = "good.ckpt") {
  TrainConfig c = small_config("single", 1, "adam");
  c.steps = 3;
  c.checkpoint_path = dir.file(name);
  run(c);
  return c.checkpoint_path;
}

}  // namespace

TEST(Checkpoint, RoundTripKeepsEveryField) {
  Checkpoint ck;
  ck.header = checkpoint_header(small_config("zero", 4, "adam"), 256, 7);
  ck.state.weights = init_weights(ModelSpec::parse("mlp:16-13-4"), 3);
  ck.state.optimizer_steps = 7;
  ck.state.optimizer = {{{1, 2}, {3, 4}}, {{5}, {6}}};
  ck.state.loss_scale = 32768;
  ck.state.scaler_good_steps = 123;
  const Checkpoint back = decode_checkpoint(encode_checkpoint(ck), "mem");
  EXPECT_EQ(back.header.model, "mlp:16-13-4");
  EXPECT_EQ(back.header.optimizer.kind, "adam");
  EXPECT_EQ(back.header.optimizer.lr, 1e-3f);
  EXPECT_EQ(back.header.step, 7);
  EXPECT_EQ(back.header.train_count, 256);
  EXPECT_EQ(back.header.batch, 32);
  EXPECT_EQ(back.header.seed, 11u);
  EXPECT_EQ(back.header.strategy, "zero");
  EXPECT_EQ(back.header.devices, 4);
  EXPECT_EQ(weights_checksum(back.state.weights), weights_checksum(ck.state.weights));
  EXPECT_EQ(back.state.optimizer, ck.state.optimizer);
  EXPECT_EQ(back.state.optimizer_steps, 7);
  EXPECT_EQ(back.state.loss_scale, 32768);
  EXPECT_EQ(back.state.scaler_good_steps, 123);
}

TEST(Checkpoint, ATruncatedFileSaysItIsIncomplete) {
  TempDir dir;
  const std::string good = small_checkpoint(dir);
  const std::string bytes = read_bytes(good);
  const std::string cut = dir.file("cut.ckpt");
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{100}}) {
    write_bytes(cut, bytes.substr(0, keep));
    const std::string m = test::message_of<Error>([&] { load_checkpoint(cut); });
    EXPECT_NE(m.find("[checkpoint] " + cut + ": truncated (" + std::to_string(keep) + " of " +
                     std::to_string(bytes.size()) + " bytes) — the file is incomplete; use an earlier checkpoint"),
              std::string::npos)
        << m;
  }
  write_bytes(cut, bytes.substr(0, 10));
  EXPECT_NE(test::message_of<Error>([&] { load_checkpoint(cut); }).find("truncated (10 bytes"), std::string::npos);
  // Through the trainer: --resume of it fails the run (exit 1), with the same words.
  TrainConfig c = small_config("single", 1, "adam");
  c.resume_path = cut;
  write_bytes(cut, bytes.substr(0, bytes.size() / 2));
  EXPECT_NE(test::message_of<Error>([&] { run(c); }).find("truncated"), std::string::npos);
}

TEST(Checkpoint, OneFlippedByteAnywhereIsACorruptFile) {
  TempDir dir;
  const std::string bytes = read_bytes(small_checkpoint(dir));
  const std::string bad = dir.file("bad.ckpt");
  // The version, the size, the prefix's CRC, the header, the weights, the last weight, the CRC.
  for (size_t at : {size_t{8}, size_t{13}, size_t{21}, size_t{30}, bytes.size() / 2, bytes.size() - 5,
                    bytes.size() - 1}) {
    std::string flipped = bytes;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    write_bytes(bad, flipped);
    const std::string m = test::message_of<Error>([&] { load_checkpoint(bad); });
    EXPECT_NE(m.find("[checkpoint] " + bad + ": checksum mismatch — the file is corrupt; use an earlier checkpoint"),
              std::string::npos)
        << "byte " << at << ": " << m;
  }
}

TEST(Checkpoint, AFileThatIsNoCheckpointSaysSo) {
  TempDir dir;
  write_bytes(dir.file("x.json"), "{\"strategy\": \"single\", \"steps\": 10, \"padding\": \"..........\"}");
  const std::string m = test::message_of<Error>([&] { load_checkpoint(dir.file("x.json")); });
  EXPECT_NE(m.find("not a scalelab checkpoint"), std::string::npos) << m;
  const std::string missing = test::message_of<Error>([&] { load_checkpoint(dir.file("nope.ckpt")); });
  EXPECT_NE(missing.find("not found"), std::string::npos) << missing;
  EXPECT_NE(missing.find("--resume"), std::string::npos) << missing;
}

TEST(Checkpoint, AStateThatDoesNotFitTheModelIsRefusedOnceWithTheFix) {
  // validate_resume is the one check every strategy relies on before it takes a state apart.
  const ModelSpec model = ModelSpec::parse("mlp:16-13-4");
  OptimizerConfig momentum;  // sgd with momentum: one state tensor per parameter
  TrainingState s;
  s.weights = init_weights(model, 1);
  for (const std::vector<float>& v : s.weights.values) s.optimizer.push_back({std::vector<float>(v.size())});
  EXPECT_NO_THROW(validate_resume(s, model, momentum, "a.ckpt"));
  std::string m = test::message_of<UsageError>([&] { validate_resume(s, ModelSpec::parse("mlp:16-12-4"), momentum, "a.ckpt"); });
  EXPECT_NE(m.find("[checkpoint] a.ckpt: the weights are for mlp:16-13-4, this run trains mlp:16-12-4 — resume with the same --model"),
            std::string::npos) << m;
  OptimizerConfig adam;
  adam.kind = "adam";
  m = test::message_of<UsageError>([&] { validate_resume(s, model, adam, "a.ckpt"); });
  EXPECT_NE(m.find("fc1.weight has 1 optimizer state tensors, adam keeps 2 — resume with the same --optimizer"),
            std::string::npos) << m;
  s.optimizer[3][0].pop_back();
  m = test::message_of<UsageError>([&] { validate_resume(s, model, momentum, "a.ckpt"); });
  EXPECT_NE(m.find("the optimizer state of fc2.bias has 3 values, expected 4"), std::string::npos) << m;
}

TEST(Checkpoint, ResumingWithOtherOptionsNamesTheOptionAndTheFix) {
  TempDir dir;
  const std::string good = small_checkpoint(dir);
  auto resume_with = [&](const std::function<void(TrainConfig&)>& change) {
    TrainConfig c = small_config("single", 1, "adam");
    c.resume_path = good;
    change(c);
    return test::message_of<UsageError>([&] { run(c); });
  };
  std::string m = resume_with([](TrainConfig& c) { c.model = "mlp:16-12-4"; });
  EXPECT_NE(m.find("[checkpoint] " + good + ": was written for --model mlp:16-13-4, this run has mlp:16-12-4"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("pass --model mlp:16-13-4"), std::string::npos) << m;
  m = resume_with([](TrainConfig& c) { c.optimizer.kind = "sgd"; c.optimizer.lr = 0.03f; });
  EXPECT_NE(m.find("--optimizer adam, this run has sgd"), std::string::npos) << m;
  m = resume_with([](TrainConfig& c) { c.batch = 64; });
  EXPECT_NE(m.find("--batch 32, this run has 64"), std::string::npos) << m;
  m = resume_with([](TrainConfig& c) { c.seed = 12; });
  EXPECT_NE(m.find("--seed 11, this run has 12"), std::string::npos) << m;
  m = resume_with([](TrainConfig& c) { c.synthetic_train = 512; });
  EXPECT_NE(m.find("training set of 256 samples"), std::string::npos) << m;
  m = resume_with([](TrainConfig& c) { c.steps = 2; });
  EXPECT_NE(m.find("is at step 3, past this run's 2 steps"), std::string::npos) << m;
}

TEST(Checkpoint, OptionsThatCannotContinueExactlyAreUsageErrors) {
  TempDir dir;
  TrainConfig c = small_config("single", 1);
  c.device = DeviceKind::sim;
  c.hw = "a100-nvlink-8";
  c.dry_run = true;
  c.checkpoint_path = dir.file("dry.ckpt");
  EXPECT_NE(test::message_of<UsageError>([&] { run(c); }).find("--dry-run computes no weights"), std::string::npos);
  // --no-sync K: the gradients accumulated inside a window are not in a checkpoint.
  c = small_config("single", 1);
  c.no_sync = 2;
  c.steps = 6;
  c.checkpoint_path = dir.file("nosync.ckpt");
  c.checkpoint_every = 3;
  EXPECT_NE(test::message_of<UsageError>([&] { run(c); }).find("multiples of 2"), std::string::npos);
  c.checkpoint_every = 2;
  EXPECT_NO_THROW(run(c));
  // zero steps every batch: --no-sync is not for it.
  c = small_config("zero", 2);
  c.no_sync = 2;
  c.steps = 4;
  EXPECT_NE(test::message_of<UsageError>([&] { run(c); }).find("[ddp] --no-sync 2 does not apply to --strategy zero (it would be ignored) — use --strategy single | ddp | ddp-mp"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints: a process killed while saving.

TEST(Checkpoint, AProcessKilledWhileSavingLeavesThePreviousCheckpointWhole) {
  TempDir dir;
  const std::string path = small_checkpoint(dir, "run.ckpt");
  const std::string before = read_bytes(path);

  // 1. A child process saves a big checkpoint (≈ 270 MB: a model of 33 M parameters and its
  //    momentum) over the same path; we kill it once its temporary file is growing.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Checkpoint big;
    big.header = checkpoint_header(small_config("single", 1), 256, 99);
    big.header.model = "mlp:2048-8192-2048-10";
    big.state.weights.spec = ModelSpec::parse(big.header.model);
    for (const TensorSpec& t : big.state.weights.spec.tensors()) {
      big.state.weights.values.emplace_back(static_cast<size_t>(t.numel()), t.shape.size() == 2 ? 0.25f : 0.5f);
      big.state.optimizer.push_back({big.state.weights.values.back()});
    }
    save_checkpoint(path, big);
    ::_exit(0);
  }
  std::string temp;
  bool caught_mid_write = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!caught_mid_write && std::chrono::steady_clock::now() < deadline) {
    for (const auto& entry : fs::directory_iterator(dir.path())) {
      const std::string name = entry.path().filename().string();
      struct stat st{};
      if (name.rfind("run.ckpt.tmp", 0) == 0 && ::stat(entry.path().c_str(), &st) == 0 && st.st_size >= (1 << 20)) {
        temp = entry.path().string();
        ::kill(child, SIGKILL);
        caught_mid_write = true;
        break;
      }
    }
    if (!caught_mid_write) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!caught_mid_write) ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(caught_mid_write) << "the child's temporary file never appeared";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child finished before it was killed";

  // 2. The checkpoint is the previous one, byte for byte, and a run resumes from it.
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(load_checkpoint(path).header.step, 3);
  TrainConfig c = small_config("single", 1, "adam");
  c.resume_path = path;
  EXPECT_EQ(run(c).steps, 2);

  // 3. What the killed process left is only its temporary file, which nothing reads unless asked
  //    to — and which, asked, says it is incomplete rather than passing for a checkpoint.
  ASSERT_TRUE(fs::exists(temp));
  const std::string m = test::message_of<Error>([&] { load_checkpoint(temp); });
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
}
