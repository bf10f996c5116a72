// multiprocessing (Hogwild) is asynchronous, so it is held to accuracy, not to single's weights:
// on Fashion-MNIST, 4 worker processes reach single's test accuracy (− 0.02) after one epoch, by
// either sharing strategy. The workers really map the segment by the chosen strategy; a worker
// that is killed or hangs is named, never hangs the parent, and leaves no process and nothing in
// /dev/shm behind; bad configurations are UsageErrors; the state round-trips; and core/proc's
// layout and message areas do what the strategy relies on.
//
// GoogleTest and fork: the strategy forks its workers from this (single-threaded) process, and a
// worker never returns into GoogleTest — it _exits.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/comm/shm/shm_segment.h"
#include "core/data/dataset.h"
#include "core/device/host_cores.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/proc/message_area.h"
#include "core/proc/layout.h"
#include "run/train.h"
#include "strategies/strategy.h"
#include "support/small_config.h"

using namespace scalelab;

namespace {

// Entries of /dev/shm this process created (named segments start with shm_name_prefix()).
std::vector<std::string> leftovers() {
  std::vector<std::string> found;
  const std::string prefix = shm_name_prefix().substr(1);
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
    closedir(d);
  }
  return found;
}

struct Child {
  pid_t pid = 0;
  std::string comm;  // the process name: hogwild-<r>
};

// This process's children, found in /proc (the strategy does not publish its workers' pids).
std::vector<Child> children() {
  std::vector<Child> found;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream status("/proc/" + name + "/status");
      std::string line, comm;
      pid_t ppid = -1;
      while (std::getline(status, line)) {
        if (line.rfind("Name:", 0) == 0) comm = line.substr(line.find_first_not_of(" \t", 5));
        if (line.rfind("PPid:", 0) == 0) ppid = std::stoi(line.substr(5));
      }
      if (ppid == getpid()) found.push_back({std::stoi(name), comm});
    }
    closedir(d);
  }
  return found;
}

pid_t worker_pid(int r) {
  for (const Child& c : children())
    if (c.comm == "hogwild-" + std::to_string(r)) return c.pid;
  return 0;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// The shared small run, on a model of 2 layers (the trace test counts its ops) and 512 samples.
TrainConfig hogwild_config(const std::string& sharing, int workers = 4, DeviceKind kind = DeviceKind::cpu,
                           const std::string& optimizer = "sgd") {
  TrainConfig c = test::small_config("multiprocessing", workers, kind, optimizer);
  c.model = "mlp:16-12-4";
  c.synthetic_train = 512;
  c.synthetic_test = 256;
  c.steps = 20;
  c.shm_sharing = parse_shm_sharing(sharing);
  return c;
}

// A strategy made outside train(), so a test can reach its workers between steps.
struct Made {
  TrainConfig config;
  EventBus bus;
  std::vector<std::unique_ptr<Device>> devices;
  std::unique_ptr<Strategy> strategy;
  DataSplit data;
  std::unique_ptr<Loader> loader;
  HostBatch batch;

  explicit Made(const TrainConfig& c) : config(c) {
    const ModelSpec spec = ModelSpec::parse(c.model);
    DeviceOptions o;
    o.kind = c.device;
    o.count = c.devices;
    o.bus = &bus;
    if (c.device == DeviceKind::sim) o.profile = load_profile(c.hw);
    devices = make_devices(o);
    std::vector<Device*> list;
    for (auto& d : devices) list.push_back(d.get());
    StrategyContext ctx{config, list, bus, init_weights(spec, c.seed), nullptr, o};
    strategy = find_strategy("multiprocessing").make(ctx);
    data = make_synthetic(c.synthetic_train, c.synthetic_test, spec.inputs(), static_cast<int>(spec.outputs()), c.seed);
    loader = std::make_unique<Loader>(data.train, c.batch, c.seed);
    loader->set_epoch(0);
  }
  double step(int64_t k) {
    loader->fill(k % loader->batches_per_epoch(), batch);
    return strategy->train_step(batch, k);
  }
};

std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST(Multiprocessing, BadConfigurationsAreUsageErrors) {
  // Through train() as the CLI calls it: each is refused (by the registry's entry, the config or
  // the strategy) before anything is forked.
  auto expect_usage = [](TrainConfig c, const std::string& fragment) {
    EventBus bus;
    try {
      train(c, bus);
      ADD_FAILURE() << "no UsageError for " << fragment;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_TRUE(children().empty()) << "a refused configuration must fork nothing";
  };
  const TrainConfig c = hogwild_config("fd_passing");
  TrainConfig bad = c;
  bad.check_equivalence = true;  // asynchronous: held to accuracy instead
  expect_usage(bad, "accuracy");
  bad = c;
  bad.device = DeviceKind::cuda;  // CUDA does not survive a fork
  expect_usage(bad, "--device cuda");
  bad = c;
  bad.amp = Amp::fp16;  // the shared weights are fp32
  expect_usage(bad, "--amp");
  bad = c;
  bad.comm = CommBackend::mpi;
  expect_usage(bad, "--comm");
  bad = c;
  bad.batch = 2;
  expect_usage(bad, "--batch");
  EXPECT_THROW(parse_shm_sharing("carrier-pigeon"), UsageError);  // the words are parsed before a config exists
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

// ---------------------------------------------------------------------------------------------

class MultiprocessingSharing : public ::testing::TestWithParam<std::string> {};

// The headline: same epochs, accuracy within 0.02 of single's. Both with momentum 0.5, as
// PyTorch's mnist_hogwild example: each worker steps with --lr on its B/N = 32 rows, so Hogwild
// behaves like SGD with batch 32 (and 4× the updates). With the default momentum 0.9 at lr 0.03,
// batch-32 SGD ends its epoch noisy — single itself at --batch 32 reaches 0.833, against 0.8505 at
// 128 — and Hogwild lands at 0.832–0.841: at the tolerance's edge for a reason that is about the
// hyperparameters, not the races. Measured at momentum 0.5: single 0.834, Hogwild 0.851–0.853.
TEST_P(MultiprocessingSharing, FourWorkersReachSinglesAccuracyOnFashionMnist) {
  const std::string dir = default_fashion_mnist_dir();
  struct stat st {};
  if (stat((dir + "/train-images-idx3-ubyte.gz").c_str(), &st) != 0 &&
      stat((dir + "/train-images-idx3-ubyte").c_str(), &st) != 0)
    GTEST_SKIP() << dir << " has no Fashion-MNIST (apt-get install dataset-fashion-mnist)";
  TrainConfig c;
  c.model = "mlp:784-128-10";
  c.epochs = 1;
  c.batch = 128;
  c.optimizer.momentum = 0.5f;
  static const TrainResult single = [&] {
    TrainConfig s = c;
    s.strategy = "single";
    EventBus bus;
    return train(s, bus);
  }();
  c.strategy = "multiprocessing";
  c.devices = 4;
  c.shm_sharing = parse_shm_sharing(GetParam());
  EventBus bus;
  const TrainResult hog = train(c, bus);
  std::printf("  single:          test accuracy %.4f in %.2f s\n", single.test_accuracy, single.time_s);
  std::printf("  multiprocessing: test accuracy %.4f in %.2f s (4 workers, %s)\n", hog.test_accuracy, hog.time_s,
              GetParam().c_str());
  EXPECT_EQ(hog.steps, single.steps);
  EXPECT_GE(hog.test_accuracy, single.test_accuracy - 0.02);
  EXPECT_TRUE(std::isfinite(hog.final_loss));
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
  EXPECT_TRUE(children().empty()) << "workers left behind";
}

// The workers drop the mapping fork handed down and map the segment by the chosen strategy:
// their /proc/<pid>/maps names the memfd, or the /dev/shm file (already unlinked: "(deleted)").
TEST_P(MultiprocessingSharing, WorkersMapTheSegmentByTheChosenStrategy) {
  const std::string sharing = GetParam();
  {
    Made m(hogwild_config(sharing, 3));
    const std::vector<Child> kids = children();
    ASSERT_EQ(kids.size(), 3u);
    for (const Child& k : kids) {
      EXPECT_EQ(k.comm.rfind("hogwild-", 0), 0u) << k.comm;
      const std::string maps = read_text("/proc/" + std::to_string(k.pid) + "/maps");
      if (sharing == "fd_passing") {
        EXPECT_NE(maps.find("/memfd:scalelab-hogwild"), std::string::npos) << maps;
        EXPECT_EQ(maps.find("/dev/shm/"), std::string::npos) << maps;
      } else {
        const std::string file = "/dev/shm" + shm_name_prefix() + "hogwild-";
        EXPECT_NE(maps.find(file), std::string::npos) << maps;
        EXPECT_NE(maps.find("(deleted)"), std::string::npos) << "the name outlived the start-up\n" << maps;
        EXPECT_EQ(maps.find("memfd:scalelab-hogwild"), std::string::npos) << maps;
      }
    }
    // Every worker has opened the segment, so its name is gone already.
    EXPECT_TRUE(leftovers().empty()) << join(leftovers());
    // It trains: the loss falls, the shared weights move.
    const HostWeights before = m.strategy->weights();
    double first = 0, last = 0;
    for (int k = 0; k < 40; ++k) {
      const double loss = m.step(k);
      ASSERT_TRUE(std::isfinite(loss));
      if (k < 5) first += loss;
      if (k >= 35) last += loss;
    }
    EXPECT_LT(last, first);
    EXPECT_GT(max_relative_difference(m.strategy->weights(), before), 0.0);
    // The parent's trace: each device has the parent's dispatch and the worker's own ops.
    for (int d = 0; d < 3; ++d) {
      int dispatch = 0, gemm = 0, sgd = 0;
      for (const Event& e : m.bus.events())
        if (e.device == d && e.step >= 0) {
          dispatch += e.kind == "dispatch" && e.lane == Lane::host;
          gemm += e.kind == "gemm";
          sgd += e.kind == "sgd";
        }
      EXPECT_EQ(dispatch, 40) << "device " << d;
      EXPECT_EQ(gemm, 40 * 5) << "device " << d;  // 2 layers: 2 forward, 3 backward (no dx for fc1)
      EXPECT_EQ(sgd, 40 * 4) << "device " << d;   // 4 parameters
    }
  }
  EXPECT_TRUE(children().empty()) << "workers left behind";
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

INSTANTIATE_TEST_SUITE_P(BothSharingStrategies, MultiprocessingSharing,
                         ::testing::Values("fd_passing", "named_file"), param_name);

// The deterministic oracle: with one worker, Hogwild is single — the worker steps on the whole
// batch, rows in the batch's order, with the same loss and optimizer — so the weights agree to
// the bit, with momentum SGD and with Adam, on cpu and on sim.
TEST(Multiprocessing, OneWorkerEqualsSingleBitForBit) {
  for (const char* optimizer : {"sgd", "adam"})
    for (DeviceKind device : {DeviceKind::cpu, DeviceKind::sim}) {
      TrainConfig c = hogwild_config("fd_passing", 1, device, optimizer);
      c.model = "mlp:16-24-12-4";
      c.steps = 30;
      c.optimizer.momentum = 0.9f;
      c.optimizer.weight_decay = 1e-4f;
      TrainConfig s = c;
      s.strategy = "single";
      EventBus single_bus, hogwild_bus;
      const TrainResult single = train(s, single_bus);
      const TrainResult hogwild = train(c, hogwild_bus);
      EXPECT_EQ(hogwild.weights_checksum, single.weights_checksum) << optimizer << " on " << device_kind_name(device);
      EXPECT_DOUBLE_EQ(hogwild.final_loss, single.final_loss) << optimizer << " on " << device_kind_name(device);
      EXPECT_EQ(hogwild.test_accuracy, single.test_accuracy) << optimizer << " on " << device_kind_name(device);
      // The oracle can fail: two workers make two updates per batch, and other weights.
      c.devices = 2;
      EventBus two_bus;
      EXPECT_NE(train(c, two_bus).weights_checksum, single.weights_checksum);
    }
  EXPECT_TRUE(children().empty()) << "workers left behind";
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

// ---------------------------------------------------------------------------------------------

TEST(Multiprocessing, AKilledWorkerIsNamedAndEverythingIsCleanedUp) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    Made m(hogwild_config("named_file"));
    m.step(0);
    m.step(1);
    const pid_t victim = worker_pid(2);
    ASSERT_GT(victim, 0);
    ASSERT_EQ(kill(victim, SIGKILL), 0);
    try {
      m.step(2);
      ADD_FAILURE() << "a step with a dead worker succeeded";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("[multiprocessing] worker 2 (pid " + std::to_string(victim) + ")"), std::string::npos) << what;
      EXPECT_NE(what.find("killed by signal 9"), std::string::npos) << what;
      EXPECT_NE(what.find("step 2"), std::string::npos) << what;
    }
    // The strategy refuses further work instead of waiting on a dead worker again.
    try {
      m.step(3);
      ADD_FAILURE() << "a step after the failure succeeded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_TRUE(children().empty()) << "workers left behind";
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

TEST(Multiprocessing, AHungWorkerTimesOutNamedAndIsKilled) {
  TrainConfig c = hogwild_config("fd_passing");
  c.comm_timeout_ms = 300;
  const auto t0 = std::chrono::steady_clock::now();
  {
    Made m(c);
    m.step(0);
    const pid_t stuck = worker_pid(1);
    ASSERT_GT(stuck, 0);
    ASSERT_EQ(kill(stuck, SIGSTOP), 0);  // alive, but never reports
    try {
      m.step(1);
      ADD_FAILURE() << "a step with a stopped worker succeeded";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("worker 1 (pid " + std::to_string(stuck) + ") did not report in step 1"), std::string::npos)
          << what;
      EXPECT_NE(what.find("--comm-timeout 300 ms"), std::string::npos) << what;
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_TRUE(children().empty()) << "workers left behind";
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

// ---------------------------------------------------------------------------------------------

// state(): the shared weights, and the mean of the workers' momentum buffers; load_state() hands
// it to every worker of a fresh run, which then saves the very same state.
TEST(Multiprocessing, StateRoundTripsThroughAFreshRun) {
  TrainConfig c = hogwild_config("fd_passing", 3);
  c.optimizer.momentum = 0.9f;
  TrainingState saved;
  {
    Made m(c);
    for (int k = 0; k < 5; ++k) m.step(k);
    saved = m.strategy->state();
    EXPECT_EQ(weights_checksum(saved.weights), weights_checksum(m.strategy->weights()));
    EXPECT_EQ(saved.optimizer_steps, 5);
    ASSERT_EQ(saved.optimizer.size(), 4u);
    float largest = 0;
    for (const auto& p : saved.optimizer) {
      ASSERT_EQ(p.size(), 1u);
      for (float v : p[0]) largest = std::max(largest, std::fabs(v));
    }
    EXPECT_GT(largest, 0.0f) << "the momentum buffers are all zero";
  }
  {
    Made fresh(c);
    fresh.strategy->load_state(saved);
    const TrainingState again = fresh.strategy->state();
    EXPECT_EQ(weights_checksum(again.weights), weights_checksum(saved.weights));
    EXPECT_EQ(again.optimizer, saved.optimizer);
    EXPECT_EQ(again.optimizer_steps, 5);
    EXPECT_TRUE(std::isfinite(fresh.step(5)));
  }
  {
    // Plain SGD keeps no state: a momentum state does not fit it.
    TrainConfig plain = c;
    plain.optimizer.momentum = 0;
    Made m(plain);
    const TrainingState s = m.strategy->state();
    for (const auto& p : s.optimizer) EXPECT_TRUE(p.empty());
    EXPECT_THROW(m.strategy->load_state(saved), Error);
  }
  EXPECT_TRUE(children().empty());
}

// On sim, the time is modelled: each worker's device runs its ops from the end of the parent's
// dispatch, and the summary shows every device busy.
TEST(Multiprocessing, SimulatedRunHasEveryDeviceBusy) {
  const TrainConfig c = hogwild_config("named_file", 4, DeviceKind::sim);
  EventBus bus;
  const TrainResult r = train(c, bus);
  EXPECT_TRUE(r.simulated);
  EXPECT_GT(r.time_s, 0);
  ASSERT_EQ(r.per_device.size(), 4u);
  for (const DeviceSummary& d : r.per_device) {
    EXPECT_GT(d.busy_pct, 0) << d.name;
    EXPECT_GT(d.peak_bytes[static_cast<int>(MemoryCategory::params)], 0) << d.name;
  }
  EXPECT_GT(r.test_accuracy, 0.5);
  EXPECT_TRUE(children().empty());
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

// ---------------------------------------------------------------------------------------------

// core/proc's pieces the strategy is built on: the layout aligns what it places; buffers go
// through a message area and back unchanged; a message too big for its area is an error naming it; the
// mean of the workers' buffers is element-wise, and refuses buffers of different shapes.
TEST(ProcPlumbing, LayoutAlignsAndBuffersGoThroughAMessageArea) {
  SegmentLayout layout(100);
  EXPECT_EQ(layout.place(10), 128);
  const Areas each = layout.place_each(3, 5000);
  EXPECT_EQ(each.offset, 4096);
  EXPECT_EQ(each.stride, 8192);
  EXPECT_EQ(layout.bytes(), 4096 + 3 * 8192);

  const FloatBuffers one = {{{1, 2, 3}, {4, 5, 6}}, {{7}, {8}}}, two = {{{3, 2, 1}, {0, 1, 2}}, {{1}, {0}}};
  const int64_t bytes = buffers_bytes({3, 1}, 2);
  std::vector<char> memory(static_cast<size_t>(MessageArea::bytes_for(bytes)));
  const MessageArea area(memory.data(), MessageArea::bytes_for(bytes), "the test's area");
  send_buffers(area, one);
  EXPECT_EQ(area.size(), static_cast<size_t>(bytes));
  EXPECT_EQ(receive_buffers(area), one);
  try {
    send_buffers(MessageArea(memory.data(), MessageArea::bytes_for(bytes - 1), "the small area"), one);
    ADD_FAILURE() << "a message larger than its area was put in it";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the small area holds " + std::to_string(bytes - 1)), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(mean_buffers({one, two}), (FloatBuffers{{{2, 2, 2}, {2, 3, 4}}, {{4}, {4}}}));
  EXPECT_THROW(mean_buffers({one, {{{1}}}}), Error);
}

// Hogwild's workers keep to their own cores (core/device/host_cores.h): spread evenly, as many on each
// core as on the others, and each with cores / workers of them where there are enough.
TEST(ProcPlumbing, WorkersSpreadEvenlyOverTheCores) {
  using Cores = std::vector<int>;
  EXPECT_EQ(share_of_cores(0, 2, {0, 1}), Cores{0});
  EXPECT_EQ(share_of_cores(1, 2, {0, 1}), Cores{1});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(share_of_cores(r, 4, {0, 1}), Cores{r % 2}) << "worker " << r;
  EXPECT_EQ(share_of_cores(1, 2, {0, 1, 2, 3, 4, 5, 6, 7}), (Cores{4, 5, 6, 7}));
  EXPECT_EQ(share_of_cores(2, 3, {0, 1, 2, 3, 4, 5, 6, 7}), (Cores{4, 5}));  // 2 each: OpenBLAS's 8 / 3 threads
  EXPECT_EQ(share_of_cores(1, 2, {4, 6}), Cores{6});                          // the cores a mask allows, not 0 … n−1
  EXPECT_EQ(share_of_cores(0, 1, {3}), Cores{3});
  EXPECT_TRUE(share_of_cores(2, 2, {0, 1}).empty());  // no such worker
  EXPECT_TRUE(share_of_cores(0, 2, {}).empty());

  // In a child (the test process keeps its cores): the mask it is left with is its share.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::vector<int> expected = share_of_cores(1, 2, usable_cores());
    const bool ok = keep_to_share_of_cores(1, 2) && usable_cores() == expected;
    const char answer = ok ? 'y' : 'n';
    (void)!write(fds[1], &answer, 1);
    _exit(0);
  }
  char answer = '?';
  ASSERT_EQ(read(fds[0], &answer, 1), 1);
  waitpid(child, nullptr, 0);
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(answer, 'y') << "worker 1 of 2 did not keep to " << ::testing::PrintToString(share_of_cores(1, 2, usable_cores()));
}

// A cache line's round trip between two cores: a time where both can be used, 0 where they cannot,
// and the calling thread's own mask put back either way.
TEST(ProcPlumbing, CoreRoundTripIsTimedBetweenTwoCoresAndLeavesTheCallersMask) {
  cpu_set_t before;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
  const std::vector<int> cores = usable_cores();
  EXPECT_EQ(core_round_trip_s(cores[0], cores[0]), 0.0);       // one core: no trip
  EXPECT_EQ(core_round_trip_s(cores[0], CPU_SETSIZE - 1), 0.0);  // a core this process may not use
  EXPECT_EQ(core_round_trip_s(-1, cores[0]), 0.0);
  if (cores.size() >= 2) {
    const double t = core_round_trip_s(cores[0], cores[1]);
    EXPECT_GT(t, 1e-9);
    EXPECT_LT(t, 1e-3);  // a trip, not a time slice: both threads spin on their own cores
  }
  cpu_set_t after;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}
