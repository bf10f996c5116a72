// The strategy registry is the one source of what a strategy takes: its options, launches, device
// kinds and counts. Validation refuses what a strategy would silently ignore, naming the fix.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "run/train.h"
#include "strategies/strategy.h"
#include "support/errors.h"
#include "support/small_config.h"

using namespace scalelab;

namespace {

std::string usage_error(const TrainConfig& c) {
  return test::message_of([&] { check_config(c); });
}

TEST(Registry, NamesAreUniqueAndTheReferenceIsRegistered) {
  std::set<std::string> names;
  for (const StrategyInfo& s : strategy_registry()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_FALSE(s.summary.empty()) << s.name;
    EXPECT_TRUE(s.make) << s.name;
    EXPECT_TRUE(s.supports(Launch::threads)) << s.name << ": every strategy runs with --launch threads";
  }
  EXPECT_TRUE(names.count(kReferenceStrategy));
  EXPECT_TRUE(find_strategy(kReferenceStrategy).synchronous);
}

TEST(Registry, EveryOptionHasAStrategyThatTakesIt) {
  using O = StrategyOption;
  for (O o : {O::no_sync, O::buckets, O::micro_batches, O::schedule, O::zero_stage, O::amp, O::comm,
              O::sequence_parallel, O::data_parallel}) {
    bool taken = false;
    for (const StrategyInfo& s : strategy_registry()) taken = taken || s.takes(o);
    EXPECT_TRUE(taken) << strategy_option_flags(o);
  }
}

TEST(Registry, EachStrategysShowcaseIsValidOnTheTourMachine) {
  // What the tour runs: the strategy on 4 simulated devices (or what its rule allows) with its
  // showcase settings. Validation must accept it, or the demo would fail.
  for (const StrategyInfo& s : strategy_registry()) {
    TrainConfig c = test::small_config(s.name, s.device_count.max == 1 ? 1 : 4, DeviceKind::sim);
    if (s.showcase) s.showcase(c);
    EXPECT_EQ(usage_error(c), "no error") << s.name;
  }
}

TEST(Registry, AnOptionAStrategyDoesNotTakeIsRefusedNamingThoseThatDo) {
  TrainConfig c = test::small_config("ddp", 2);
  c.micro_batches = 4;
  std::string e = usage_error(c);
  EXPECT_NE(e.find("[pipeline] --micro-batches 4 does not apply to --strategy ddp (it would be ignored) — use "
                   "--strategy pipeline | tensor-parallel, or drop --micro-batches"),
            std::string::npos)
      << e;

  c = test::small_config("pipeline", 2);
  c.bucket_mb = 5;
  e = usage_error(c);
  EXPECT_NE(e.find("[ddp] --bucket-mb 5 does not apply to --strategy pipeline"), std::string::npos) << e;
  EXPECT_NE(e.find("use --strategy ddp | ddp-mp"), std::string::npos) << e;

  // single accumulates gradients too (--no-sync K), as the launch panel now shows.
  c = test::small_config("single", 1);
  c.no_sync = 2;
  EXPECT_EQ(usage_error(c), "no error");
  c = test::small_config("data-parallel", 2);
  c.no_sync = 2;
  EXPECT_NE(usage_error(c).find("--no-sync 2 does not apply to --strategy data-parallel"), std::string::npos);

  // --comm belongs to the strategies with ranks.
  c = test::small_config("model-parallel", 2);
  c.comm = CommBackend::threads;
  EXPECT_NE(usage_error(c).find("[comm] --comm threads does not apply to --strategy model-parallel"), std::string::npos);
}

TEST(Registry, LaunchesDeviceKindsAndCountsFollowTheEntry) {
  TrainConfig c = test::small_config("data-parallel", 2);
  c.launch = Launch::procs;
  EXPECT_NE(usage_error(c).find("--launch procs starts one process per rank, but data-parallel drives every device "
                                "from one controller — drop --launch"),
            std::string::npos);
  c = test::small_config("multiprocessing", 2);
  c.launch = Launch::mpi;
  EXPECT_NE(usage_error(c).find("multiprocessing forks its own worker processes"), std::string::npos);

  c = test::small_config("multiprocessing", 2);
  c.device = DeviceKind::cuda;
  std::string e = usage_error(c);
  EXPECT_NE(e.find("[multiprocessing] --device cuda: multiprocessing runs on cpu or sim"), std::string::npos) << e;
  EXPECT_NE(e.find("CUDA does not survive a fork"), std::string::npos) << e;

  c = test::small_config("single", 3);
  EXPECT_NE(usage_error(c).find("[single] --devices 3: single takes exactly 1 device — pass --devices 1"),
            std::string::npos);
  c = test::small_config("ddp-mp", 3);
  EXPECT_NE(usage_error(c).find("[ddp-mp] --devices 3 must be a multiple of 2 (2 devices per rank) — pass --devices 2"),
            std::string::npos);
  c = test::small_config("multiprocessing", 65);
  EXPECT_NE(usage_error(c).find("multiprocessing takes 1–64 devices — pass --devices 64"), std::string::npos);
}

TEST(Registry, OnlySynchronousStrategiesCompareWithSingle) {
  for (const StrategyInfo& s : strategy_registry()) {
    TrainConfig c = test::small_config(s.name, s.device_count.max == 1 ? 1 : 2);
    if (s.showcase) s.showcase(c);
    c.check_equivalence = true;
    const std::string e = usage_error(c);
    if (s.synchronous) EXPECT_EQ(e, "no error") << s.name;
    else EXPECT_NE(e.find("--check-equivalence"), std::string::npos) << s.name << ": " << e;
  }
}

TEST(Registry, DescribeListsEveryStrategyWithWhatItTakes) {
  const std::string d = describe_strategies();
  for (const StrategyInfo& s : strategy_registry()) EXPECT_NE(d.find(s.name + " "), std::string::npos) << s.name;
  EXPECT_NE(d.find("takes --micro-batches, --schedule"), std::string::npos) << d;
  EXPECT_NE(d.find("asynchronous: held to accuracy"), std::string::npos) << d;
}

TEST(Choices, WordsParseToTheirEnumAndBack) {
  for (Launch l : {Launch::threads, Launch::procs, Launch::mpi}) EXPECT_EQ(parse_launch(launch_name(l)), l);
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved})
    EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  for (Amp a : {Amp::off, Amp::fp16, Amp::bf16}) EXPECT_EQ(parse_amp(amp_name(a)), a);
  EXPECT_EQ(parse_comm_backend(""), CommBackend::automatic);
  EXPECT_EQ(parse_comm_backend("shm"), CommBackend::shm);
  try {
    parse_launch("slurm");
    FAIL() << "slurm parsed";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--launch 'slurm' is unknown — use threads, procs or mpi"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_comm_backend("carrier-pigeon"), UsageError);
}

}  // namespace
