// The shm backend: forked ranks sharing POSIX shared memory, in both of torch.multiprocessing's
// sharing strategies. Every collective against its closed form; a large all-reduce, exact (and
// its bus bandwidth printed); a rank that throws, one killed by SIGKILL, one that hangs, ranks
// that disagree on the collective: each fails with the ranks named, never hangs, and leaves
// nothing in /dev/shm.
//
// GoogleTest and fork: launch_procs forks before this process starts any thread, and a child
// never returns into GoogleTest — it _exits — so a check in a child throws instead (the parent's
// launch_procs then throws, failing the test).
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm_checks.h"
#include "core/comm/shm/shm_group.h"
#include "core/device/sim/profile.h"
#include "core/error.h"

using namespace scalelab;

namespace {

// Entries of /dev/shm this process created (named segments start with shm_name_prefix()).
std::vector<std::string> leftovers() {
  std::vector<std::string> found;
  const std::string prefix = shm_name_prefix().substr(1);  // "/scalelab-<pid>-" names /dev/shm/scalelab-<pid>-...
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
    closedir(d);
  }
  return found;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// Runs fn with this process's stderr (and so the children's) going to a file; returns the text.
template <typename Fn>
std::string capture_stderr(Fn fn) {
  std::fflush(stderr);
  char path[] = "/tmp/scalelab-test-stderr-XXXXXX";
  const int fd = mkstemp(path);
  const int saved = dup(2);
  dup2(fd, 2);
  close(fd);
  try {
    fn();
  } catch (...) {
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::remove(path);
    throw;
  }
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  return text.str();
}

// launch_procs' error text, or "no error".
std::string launch_error(int n, ShmSharing sharing, CommOptions o, const std::function<void(ProcessGroup&)>& fn) {
  try {
    launch_procs(n, sharing, o, fn);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(ShmSharing, NamesParseAndBadOnesAreUsageErrors) {
  for (ShmSharing s : {ShmSharing::fd_passing, ShmSharing::named_file}) EXPECT_EQ(parse_shm_sharing(shm_sharing_name(s)), s);
  try {
    parse_shm_sharing("carrier_pigeon");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--shm-sharing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(launch_procs(0, ShmSharing::fd_passing, {}, [](ProcessGroup&) {}), UsageError);
  EXPECT_EQ(shm_name_prefix(), "/scalelab-" + std::to_string(getpid()) + "-");
}

class ShmClosedForm : public ::testing::TestWithParam<std::tuple<int, ShmSharing>> {};

TEST_P(ShmClosedForm, EveryCollectiveEveryDtypeAwkwardCounts) {
  const auto [n, sharing] = GetParam();
  EXPECT_NO_THROW(launch_procs(n, sharing, {}, [](ProcessGroup& pg) {
    if (std::string(pg.backend()) != "shm") throw std::runtime_error("backend is " + std::string(pg.backend()));
    auto devices = make_devices(DeviceOptions{});
    comm_test::CollectiveChecker check(pg, *devices[0]);
    const auto failures = check.run_all({0, 1, 7, 1003});
    if (!failures.empty()) throw std::runtime_error(join(failures));
  }));
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

INSTANTIATE_TEST_SUITE_P(
    WorldSizesAndSharing, ShmClosedForm,
    ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(ShmSharing::fd_passing, ShmSharing::named_file)),
    [](const auto& info) {
      return std::to_string(std::get<0>(info.param)) + "_ranks_" + shm_sharing_name(std::get<1>(info.param));
    });

// Counts far larger than a staging slot or a send / recv channel: every collective runs through
// many pipelined pieces (and reduce_scatter through sub-slots), in every dtype.
TEST(Shm, EveryCollectiveOverManyPieces) {
  EXPECT_NO_THROW(launch_procs(3, ShmSharing::named_file, {}, [](ProcessGroup& pg) {
    auto devices = make_devices(DeviceOptions{});
    comm_test::CollectiveChecker check(pg, *devices[0]);
    const auto failures = check.run_all({(int64_t{1} << 20) + 3});
    if (!failures.empty()) throw std::runtime_error(join(failures));
  }));
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

// On sim, the collective starts when the last rank arrives (max_over_ranks) and a recv when both
// sides have (exchange_with): the start-time agreements run between the processes too.
TEST(Shm, SimTimesAgreeAcrossProcesses) {
  EXPECT_NO_THROW(launch_procs(2, ShmSharing::fd_passing, {}, [](ProcessGroup& pg) {
    DeviceOptions o;
    o.kind = DeviceKind::sim;
    o.profile = load_profile(std::string(SCALELAB_TEST_DATA) + "/tiny.json");
    auto devices = make_devices(o);
    Device& dev = *devices[0];
    const int64_t m = 250000;  // 1 MB of f32
    Tensor t = dev.zeros({m}, DType::f32, MemoryCategory::grads, "g");
    if (pg.rank() == 1) t.set_ready_ns(5000);  // rank 1 is late
    pg.all_reduce(t);
    const double S = m * 4.0, alpha = o.profile.intra_node.latency_s, B = o.profile.intra_node.bandwidth_Bps;
    const int64_t want = 5000 + seconds_to_ns(2 * alpha + S / B);  // the ring on 2 ranks
    if (t.ready_ns() != want)
      throw std::runtime_error("all_reduce ends at " + std::to_string(t.ready_ns()) + " ns, expected " + std::to_string(want));
    Tensor x = dev.zeros({16}, DType::f32, MemoryCategory::grads, "x");
    if (pg.rank() == 0) {
      x.set_ready_ns(1'000'000'000);  // the sender is ready only at 1 s
      pg.send(x, 1);
    } else {
      pg.recv(x, 0);
      if (x.ready_ns() < 1'000'000'000)
        throw std::runtime_error("the recv ends at " + std::to_string(x.ready_ns()) + " ns, before its sender was ready");
    }
  }));
}

// Many pieces through the staging buffers, a count not divisible by 4, in place and out of place,
// async; then 64 MiB all-reduces timed, their bus bandwidth printed (as nccl-tests: busbw =
// S/t × 2(n−1)/n).
TEST(Shm, LargeAllReduceIsExactAndItsBandwidthIsPrinted) {
  const int n = 4;
  const int64_t m = (int64_t{1} << 22) + 5;
  const int64_t big = int64_t{1} << 24;  // 64 MiB of f32
  const std::string report = std::string("/tmp/scalelab-test-shm-busbw-") + std::to_string(getpid());
  EXPECT_NO_THROW(launch_procs(n, ShmSharing::fd_passing, {}, [&](ProcessGroup& pg) {
    auto devices = make_devices(DeviceOptions{});
    Device& dev = *devices[0];
    comm_test::CollectiveChecker check(pg, dev);
    Tensor t = comm_test::make_tensor(dev, check.inputs(m, pg.rank()), DType::f32);
    Tensor out = dev.zeros({m}, DType::f32, MemoryCategory::comm_buffers, "out");
    pg.all_reduce(t, out, ReduceOp::avg);
    auto work = pg.all_reduce_async(t, ReduceOp::sum);
    work->wait();
    for (auto [tensor, op] : {std::pair{&t, ReduceOp::sum}, std::pair{&out, ReduceOp::avg}}) {
      const auto got = comm_test::read_tensor(dev, *tensor);
      for (int64_t i = 0; i < m; ++i)
        if (got[static_cast<size_t>(i)] != check.reduced(i, op))
          throw std::runtime_error(std::string(reduce_op_name(op)) + " element " + std::to_string(i) + " is " +
                                   std::to_string(got[static_cast<size_t>(i)]) + ", expected " +
                                   std::to_string(check.reduced(i, op)));
    }

    Tensor g = dev.zeros({big}, DType::f32, MemoryCategory::comm_buffers, "g");
    dev.fill({"fill"}, g, 1.0f);
    pg.all_reduce(g);  // warm-up: pages of g touched, staging in cache
    double best = 1e30, total = 0;
    const int reps = 5;
    for (int rep = 0; rep < reps; ++rep) {
      pg.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      pg.all_reduce(g);
      const float mine = static_cast<float>(seconds_since(t0));
      // The slowest rank's time is the collective's.
      Tensor slowest = comm_test::make_tensor(dev, {mine}, DType::f32);
      pg.all_reduce(slowest, ReduceOp::max);
      const double s = comm_test::read_tensor(dev, slowest)[0];
      best = std::min(best, s);
      total += s;
    }
    // 1 + reps all-reduces of ones over 4 ranks: 4^(1+reps) everywhere, exactly.
    const float want = static_cast<float>(int64_t{1} << (2 * (1 + reps)));
    for (int64_t i : {int64_t{0}, big / 3, big - 1})
      if (g.data<float>()[i] != want)
        throw std::runtime_error("64 MiB all_reduce: element " + std::to_string(i) + " is " +
                                 std::to_string(g.data<float>()[i]) + ", expected " + std::to_string(want));
    if (pg.rank() == 0) {
      const double S = static_cast<double>(big) * 4;
      std::ofstream(report) << S << " " << best << " " << total / reps << "\n";
    }
  }));
  std::ifstream in(report);
  double S = 0, best = 0, avg = 0;
  in >> S >> best >> avg;
  std::remove(report.c_str());
  ASSERT_GT(best, 0);
  const double factor = 2.0 * (n - 1) / n;
  std::printf("[ shm ] all_reduce 64 MiB f32, 4 ranks: best %.2f ms (busbw %.2f GB/s), mean %.2f ms (busbw %.2f GB/s)\n",
              best * 1e3, S / best * factor / 1e9, avg * 1e3, S / avg * factor / 1e9);
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

// Each step of a collective is an event with its bytes: copy-in, reduce of the own slice, copy-out.
TEST(Shm, StepsAreEventsWithTheirBytes) {
  EXPECT_NO_THROW(launch_procs(2, ShmSharing::fd_passing, {}, [](ProcessGroup& pg) {
    EventBus bus;
    auto device = comm_test::traced_cpu_device(bus);
    const int64_t m = 1 << 20;  // 4 MiB: several pieces
    Tensor t = device->zeros({m}, DType::f32, MemoryCategory::grads, "g");
    pg.all_reduce(t, ReduceOp::sum, {.name = "bucket 0", .bucket = 0});
    int64_t steps = 0, bytes = 0;
    for (const Event& e : bus.events()) {
      if (e.kind != "all_reduce") continue;
      ++steps;
      bytes += e.bytes;
      if (e.bucket != 0 || e.lane != Lane::comm || e.t_begin_ns > e.t_end_ns)
        throw std::runtime_error("a step event is malformed: " + e.name);
    }
    // Per rank: copy-in of S/2, reduce of S/2 (one peer's half), copy-out of S.
    if (steps < 3 * 4) throw std::runtime_error("only " + std::to_string(steps) + " step events");
    if (bytes != m * 4 * 2) throw std::runtime_error("the steps move " + std::to_string(bytes) + " bytes, expected " + std::to_string(m * 4 * 2));
  }));
}

// A send and its recv carry the same flow id in each process's own trace, with no word between
// the processes: each counts the messages of its (sender, receiver) pair.
TEST(Shm, ASendAndItsRecvShareAFlowIdAcrossProcesses) {
  EXPECT_NO_THROW(launch_procs(3, ShmSharing::fd_passing, {}, [](ProcessGroup& pg) {
    EventBus bus;
    auto device = comm_test::traced_cpu_device(bus);
    const std::vector<std::string> failures = comm_test::check_flow_ids(pg, *device, bus);
    if (!failures.empty()) throw std::runtime_error(failures.front());
  }));
}

class ShmFailures : public ::testing::TestWithParam<ShmSharing> {};

// A rank that throws: the parent names it and its exit status; the others fail (at once, since
// the parent tells them), naming it; nothing is left behind.
// Sub-groups are the threads and mpi backends': shm says so, naming what to use instead.
TEST(Shm, ASplitIsAClearErrorNamingTheBackendsThatHaveOne) {
  EXPECT_NO_THROW(launch_procs(2, ShmSharing::fd_passing, {}, [](ProcessGroup& pg) {
    try {
      pg.split({pg.rank()}, "tp");
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.find("shm") != std::string::npos && what.find("--launch threads") != std::string::npos &&
          what.find("mpi") != std::string::npos)
        return;
      throw Error("test", "unexpected error: " + what);
    }
    throw Error("test", "split on shm made a group");
  }));
}

TEST_P(ShmFailures, ARankThatThrowsIsNamedByTheParentAndTheOthers) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(500);
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = capture_stderr([&] {
    error = launch_error(3, GetParam(), o, [](ProcessGroup& pg) {
      auto devices = make_devices(DeviceOptions{});
      Tensor t = devices[0]->zeros({100}, DType::f32, MemoryCategory::grads, "g");
      pg.all_reduce(t);
      if (pg.rank() == 1) throw std::runtime_error("rank 1 gave up");
      pg.all_reduce(t);
    });
  });
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_NE(error.find("[comm]"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1 exit status 1"), std::string::npos) << error;
  EXPECT_NE(err.find("[rank 1] rank 1 gave up"), std::string::npos) << err;
  // Each survivor fails on its own (it waited for rank 1, or found the group broken by one that did).
  for (int r : {0, 2})
    EXPECT_NE(err.find("[rank " + std::to_string(r) + "] [comm] shm: rank " + std::to_string(r) + " "), std::string::npos) << err;
  EXPECT_NE(err.find("for rank(s) 1, which never arrived — rank 1 ended first (exit status 1)"), std::string::npos) << err;
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

// A rank killed by SIGKILL (no chance to clean up): the parent says so; the survivors' errors name
// it as missing; no /dev/shm leftovers.
TEST_P(ShmFailures, AKilledRankIsNamedAndNothingIsLeftBehind) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(500);
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = capture_stderr([&] {
    error = launch_error(4, GetParam(), o, [](ProcessGroup& pg) {
      auto devices = make_devices(DeviceOptions{});
      Tensor t = devices[0]->zeros({1 << 20}, DType::f32, MemoryCategory::grads, "g");
      pg.all_reduce(t);
      if (pg.rank() == 2) raise(SIGKILL);
      pg.all_reduce(t);
    });
  });
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_NE(error.find("rank 2 killed by signal 9"), std::string::npos) << error;
  for (int r : {0, 1, 3}) {
    EXPECT_NE(error.find("rank " + std::to_string(r) + " exit status 1"), std::string::npos) << error;
    EXPECT_NE(err.find("[rank " + std::to_string(r) + "] [comm] shm: rank " + std::to_string(r) + " "), std::string::npos) << err;
  }
  EXPECT_NE(err.find("all_reduce"), std::string::npos) << err;
  EXPECT_NE(err.find("for rank(s) 2, which never arrived — rank 2 ended first (killed by signal 9"), std::string::npos) << err;
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

// A rank that hangs (alive, never arriving): the others time out naming it, and the parent kills it.
TEST_P(ShmFailures, AHungRankTimesTheOthersOutAndIsKilled) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(300);
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = capture_stderr([&] {
    error = launch_error(3, GetParam(), o, [](ProcessGroup& pg) {
      pg.barrier();
      if (pg.rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(60));
      pg.barrier();
    });
  });
  const double took = seconds_since(t0);
  EXPECT_LT(took, 10.0);
  EXPECT_GT(took, 1.0);  // the timeout, then a second for the others to report, then the kill
  EXPECT_NE(error.find("rank 0 killed by signal 9"), std::string::npos) << error;
  EXPECT_NE(error.find("by launch_procs"), std::string::npos) << error;
  for (int r : {1, 2})
    EXPECT_NE(err.find("[rank " + std::to_string(r) + "] [comm] shm: rank "), std::string::npos) << err;
  EXPECT_NE(err.find("waited 0.3 s in barrier (arrival) for rank(s) 0, which never arrived"), std::string::npos) << err;
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

// Ranks that disagree on the collective fail at once, naming both sides, instead of mixing data.
TEST_P(ShmFailures, MismatchedCollectivesAreNamed) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(2000);
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = capture_stderr([&] {
    error = launch_error(2, GetParam(), o, [](ProcessGroup& pg) {
      auto devices = make_devices(DeviceOptions{});
      Tensor t = devices[0]->zeros({10}, DType::f32, MemoryCategory::grads, "g");
      if (pg.rank() == 0) pg.broadcast(t, 0);
      else pg.all_reduce(t);
    });
  });
  EXPECT_LT(seconds_since(t0), 1.5);
  EXPECT_NE(error.find("rank 0 exit status 1"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1 exit status 1"), std::string::npos) << error;
  EXPECT_NE(err.find("is in all_reduce of 10 f32 (sum)"), std::string::npos) << err;
  EXPECT_NE(err.find("is in broadcast of 10 f32 with root 0"), std::string::npos) << err;
  EXPECT_TRUE(leftovers().empty()) << join(leftovers());
}

INSTANTIATE_TEST_SUITE_P(BothSharings, ShmFailures, ::testing::Values(ShmSharing::fd_passing, ShmSharing::named_file),
                         [](const auto& info) { return std::string(shm_sharing_name(info.param)); });

// A send and a recv that disagree on the size fail on the receiver, naming both sizes; the sender
// is not left waiting.
TEST(Shm, MismatchedSendRecvSizesAreNamed) {
  std::string error;
  const std::string err = capture_stderr([&] {
    error = launch_error(2, ShmSharing::fd_passing, {}, [](ProcessGroup& pg) {
      auto devices = make_devices(DeviceOptions{});
      if (pg.rank() == 0) pg.send(devices[0]->zeros({7}, DType::f32, MemoryCategory::grads, "a"), 1);
      else pg.recv(devices[0]->zeros({5}, DType::f32, MemoryCategory::grads, "b"), 0);
    });
  });
  EXPECT_NE(error.find("rank 1 exit status 1"), std::string::npos) << error;
  EXPECT_EQ(error.find("rank 0"), std::string::npos) << error;
  EXPECT_NE(err.find("rank 0 sent 28 bytes but rank 1 expects 20"), std::string::npos) << err;
}
