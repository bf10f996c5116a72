// The cpu devices of a run take turns on the host's cores (issue 15): HostCores lets one op in at a
// time in the order asked, and take_turns_on_host re-times a priced run as that host serves it —
// closed forms on small timelines.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "calibration/host_turns.h"
#include "core/device/clock.h"
#include "core/device/device.h"
#include "core/device/host_cores.h"

using namespace scalelab;

namespace {

Event op(int device, Lane lane, int64_t begin, int64_t end, int64_t step = 0, int64_t flow = -1, Role role = Role::none) {
  Event e;
  e.device = device;
  e.lane = lane;
  e.kind = lane == Lane::comm ? "all_reduce" : "gemm";
  e.t_begin_ns = begin;
  e.t_end_ns = end;
  e.step = step;
  e.flow_id = flow;
  e.role = role;
  return e;
}

// `count` cpu devices recording on `bus`.
std::vector<std::unique_ptr<Device>> cpu_devices(int count, EventBus& bus) {
  DeviceOptions o;
  o.count = count;
  o.bus = &bus;
  return make_devices(o);
}

void expect_at(const Event& e, int64_t begin, int64_t end) {
  EXPECT_EQ(e.t_begin_ns, begin) << "device " << e.device << " lane " << lane_name(e.lane);
  EXPECT_EQ(e.t_end_ns, end) << "device " << e.device << " lane " << lane_name(e.lane);
}

}  // namespace

TEST(HostTurns, TwoDevicesComputingAtOnceTakeTurns) {
  const auto t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(1, Lane::compute, 0, 10)});
  expect_at(t[0], 0, 10);
  expect_at(t[1], 10, 20);
}

TEST(HostTurns, TheOrderTheDevicesThreadsEmittedInDoesNotMatter) {
  // The bus holds the devices' events in whatever order their threads ran; a tie goes by device.
  const auto t = take_turns_on_host({op(1, Lane::compute, 0, 10), op(0, Lane::compute, 0, 10)});
  expect_at(t[1], 0, 10);
  expect_at(t[0], 10, 20);
  // The same run, its devices' events interleaved two ways, with a collective and handoffs.
  auto run = [](bool device_1_first) {
    std::vector<Event> a = {op(0, Lane::compute, 0, 10), op(0, Lane::comm, 10, 15, 0, 3), op(0, Lane::compute, 15, 20)};
    std::vector<Event> b = {op(1, Lane::compute, 0, 10), op(1, Lane::comm, 10, 15, 0, 3), op(1, Lane::compute, 15, 20)};
    std::vector<Event> events;
    for (size_t i = 0; i < a.size(); ++i) {
      events.push_back(device_1_first ? b[i] : a[i]);
      events.push_back(device_1_first ? a[i] : b[i]);
    }
    std::vector<Event> t = take_turns_on_host(events, HostShare{1, 1, 2});
    std::stable_sort(t.begin(), t.end(), [](const Event& x, const Event& y) { return x.device < y.device; });
    return t;
  };
  const auto x = run(false), y = run(true);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) expect_at(y[i], x[i].t_begin_ns, x[i].t_end_ns);
}

TEST(HostTurns, ADelayCarriesAlongTheLaneAndToWhatWaitedForIt) {
  // Device 1: two ops, a copy later, and (host lane) one that began when the second op ended.
  const auto t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(1, Lane::compute, 1, 6), op(1, Lane::compute, 6, 9),
                                     op(1, Lane::copy, 20, 22), op(1, Lane::host, 9, 10)});
  expect_at(t[1], 10, 15);
  expect_at(t[2], 15, 18);
  expect_at(t[3], 20, 22);  // a copy that did not wait for them keeps its place: the cores are free by then
  expect_at(t[4], 18, 19);  // the host lane waited for the second op: it moves with it
}

TEST(HostTurns, ACollectiveStartsWhenItsLastMemberCan) {
  const auto t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(1, Lane::compute, 0, 10),
                                     op(0, Lane::comm, 10, 15, 0, 7), op(1, Lane::comm, 10, 15, 0, 7),
                                     op(0, Lane::compute, 15, 17)});
  expect_at(t[1], 10, 20);
  expect_at(t[2], 20, 25);  // device 0 was ready at 10, device 1 only at 20
  expect_at(t[3], 20, 25);
  expect_at(t[4], 25, 27);  // the update waited for the all-reduce
}

TEST(HostTurns, ARecvMovesWithItsSendAndTheSendTakesTheCores) {
  // Device 0 computes then sends (the threads backend's memcpy: the cores' work); device 1 posted
  // its recv early and computes on what came; device 2 computes meanwhile, holding the cores.
  const auto t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(2, Lane::compute, 0, 10),
                                     op(0, Lane::comm, 10, 12, 0, 3, Role::send), op(1, Lane::comm, 0, 12, 0, 3, Role::recv),
                                     op(1, Lane::compute, 12, 20)});
  expect_at(t[1], 10, 20);
  expect_at(t[2], 20, 22);  // the send waits for the cores
  expect_at(t[3], 10, 22);  // the recv, waiting meanwhile, holds none: it moves with its send
  expect_at(t[4], 22, 30);
}

TEST(HostTurns, ACollectiveTakesTheCoresOnceForAllItsMembers) {
  // The ranks' threads move and add the data with the host's cores: while the all-reduce runs,
  // device 2 cannot compute — but its two members are one use of the cores, not two.
  const auto t = take_turns_on_host({op(0, Lane::comm, 0, 10, 0, 5), op(1, Lane::comm, 0, 10, 0, 5), op(2, Lane::compute, 0, 10)});
  expect_at(t[0], 0, 10);
  expect_at(t[1], 0, 10);
  expect_at(t[2], 10, 20);
}

TEST(HostTurns, WhileTheDataFitTheCacheACollectiveRunsBesideAOneThreadOpButNotBesideAGemm) {
  HostShare beside{1, 1, 0};
  beside.collectives_beside_one_thread_ops = true;
  auto with_kind = [](Event e, const char* kind) {
    e.kind = kind;
    return e;
  };
  // Device 2's bias+ReLU runs on one core, the all-reduce's threads on the other: both at once.
  auto t = take_turns_on_host({op(0, Lane::comm, 0, 10, 0, 5), op(1, Lane::comm, 0, 10, 0, 5),
                               with_kind(op(2, Lane::compute, 0, 10), "bias_relu")}, beside);
  expect_at(t[0], 0, 10);
  expect_at(t[2], 0, 10);
  // A GEMM takes every core: it waits for the all-reduce, as without the second track.
  t = take_turns_on_host({op(0, Lane::comm, 0, 10, 0, 5), op(1, Lane::comm, 0, 10, 0, 5), op(2, Lane::compute, 0, 10)}, beside);
  expect_at(t[0], 0, 10);
  expect_at(t[2], 10, 20);
  // A collective waits for a GEMM under way, and a GEMM for a collective.
  t = take_turns_on_host({op(2, Lane::compute, 0, 10), op(0, Lane::comm, 1, 11, 0, 5), op(1, Lane::comm, 1, 11, 0, 5),
                          op(0, Lane::comm, 11, 21, 0, 6), op(1, Lane::comm, 11, 21, 0, 6), op(2, Lane::compute, 10, 20)}, beside);
  expect_at(t[0], 0, 10);
  expect_at(t[1], 10, 20);
  expect_at(t[5], 20, 30);  // device 2's next GEMM was priced to start first: it goes first
  expect_at(t[3], 30, 40);  // the second collective after it, not beside it
  // Two groups' collectives (ddp-mp's) go one after the other: the second track is one.
  t = take_turns_on_host({op(0, Lane::comm, 0, 10, 0, 7), op(1, Lane::comm, 0, 10, 0, 7), op(2, Lane::comm, 0, 10, 0, 8),
                          op(3, Lane::comm, 0, 10, 0, 8)}, beside);
  expect_at(t[0], 0, 10);
  expect_at(t[2], 10, 20);
  // The element-wise ops themselves still take turns with each other.
  t = take_turns_on_host({with_kind(op(0, Lane::compute, 0, 10), "sgd"), with_kind(op(1, Lane::compute, 0, 10), "sgd")}, beside);
  expect_at(t[1], 10, 20);
}

TEST(HostTurns, ADelayedSendDelaysItsRecv) {
  // Device 1 waits for device 0's turn, so its send starts late, and device 2's recv ends late.
  const auto t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(1, Lane::compute, 0, 10),
                                     op(1, Lane::comm, 10, 12, 0, 3, Role::send), op(2, Lane::comm, 0, 12, 0, 3, Role::recv)});
  expect_at(t[1], 10, 20);
  expect_at(t[2], 20, 22);
  expect_at(t[3], 10, 22);
}

TEST(HostTurns, AStepStartsWhenThePreviousOneHasEnded) {
  const auto t = take_turns_on_host({op(0, Lane::compute, 0, 10, 0), op(1, Lane::compute, 0, 10, 0), op(0, Lane::compute, 10, 20, 1)});
  expect_at(t[1], 10, 20);
  expect_at(t[2], 20, 30);
}

TEST(HostTurns, AShortOpFillsAGapItFits) {
  // Device 1 waits its turn (20..40), then its thread does 2 ns of host work (no cores), so its
  // next op, priced at 22, can start only at 42; device 2's short op, priced at 23, fits in the gap
  // before it.
  const auto t = take_turns_on_host({op(0, Lane::compute, 0, 20), op(1, Lane::compute, 0, 20), op(1, Lane::host, 20, 22),
                                     op(1, Lane::compute, 22, 30), op(2, Lane::compute, 23, 25)});
  expect_at(t[1], 20, 40);
  expect_at(t[2], 40, 42);
  expect_at(t[3], 42, 50);
  expect_at(t[4], 40, 42);
}

TEST(HostTurns, ACollectiveRecordedInStepsTakesTheCoresForEveryStep) {
  // A backend's ring runs in steps, each recorded as an event; only the first carries the call's
  // flow. Each step of the two ranks is one use of the cores: device 2's op, asking at 0, gets them
  // between the steps, and the second step waits for it.
  const auto t = take_turns_on_host({op(0, Lane::comm, 0, 10, 0, 6, Role::all_reduce), op(0, Lane::comm, 10, 20, 0, -1, Role::all_reduce),
                                     op(1, Lane::comm, 0, 10, 0, 6, Role::all_reduce), op(1, Lane::comm, 10, 20, 0, -1, Role::all_reduce),
                                     op(2, Lane::compute, 0, 10)});
  expect_at(t[0], 0, 10);
  expect_at(t[2], 0, 10);
  expect_at(t[4], 10, 20);
  expect_at(t[1], 20, 30);
  expect_at(t[3], 20, 30);
}

TEST(HostTurns, ALaneIdleBeforeAnOpAbsorbsTheDelayOfTheOpBeforeIt) {
  // Device 1's upload is pushed past step 0's end by the barrier between steps (the sim priced it
  // early, as a GPU's copy engine would run it); its copy lane's next op, priced long after, did
  // not queue behind it and keeps its place. A copy from device 0 waits for what it copies.
  Event from0 = op(2, Lane::copy, 60, 61, 1);
  from0.peer = 0;
  const auto t = take_turns_on_host({op(0, Lane::compute, 0, 50, 0), op(1, Lane::copy, 10, 12, 1),
                                     op(0, Lane::compute, 50, 60, 1), op(1, Lane::copy, 70, 72, 1), from0});
  expect_at(t[1], 50, 52);  // step 1 starts when step 0 has ended
  expect_at(t[2], 52, 62);  // the cores were the upload's
  expect_at(t[3], 70, 72);  // its lane was idle at 70: the upload's delay (40) is not its
  expect_at(t[4], 62, 63);  // it copies device 0's result, 2 late
}

TEST(HostTurns, ProcessesShareTheCoresWithoutTurnsEachGemmOnItsShare) {
  // Hogwild: 4 worker processes on 2 cores, one OpenBLAS thread each: two ops at a time, a GEMM at
  // one core's speed (twice what the sim priced with both); 1 worker keeps every core.
  const HostShare four = processes_share(4, 2);
  EXPECT_EQ(four.servers, 2);
  EXPECT_DOUBLE_EQ(four.gemm_stretch, 2.0);
  const HostShare one = processes_share(1, 2);
  EXPECT_EQ(one.servers, 1);
  EXPECT_DOUBLE_EQ(one.gemm_stretch, 1.0);
  const HostShare eight_cores = processes_share(4, 8);  // two threads each
  EXPECT_EQ(eight_cores.servers, 4);
  EXPECT_DOUBLE_EQ(eight_cores.gemm_stretch, 4.0);
  // Three devices' GEMMs priced at [0, 10) each: two run at once for 20, the third after them.
  // An element-wise op of device 0 after its GEMM keeps its priced length and follows it.
  Event ew = op(0, Lane::compute, 10, 13);
  ew.kind = "sgd";
  const auto t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(1, Lane::compute, 0, 10), op(2, Lane::compute, 0, 10), ew},
                                    four);
  expect_at(t[0], 0, 20);
  expect_at(t[1], 0, 20);
  expect_at(t[2], 20, 40);
  expect_at(t[3], 20, 23);
}

TEST(HostTurns, PassingTheCoresToAnotherThreadCostsTheHandoff) {
  // A handoff of 2: device 1 waits for its thread to wake after device 0's op, and device 0's
  // thread after device 1's; an op of the same thread as the one before follows it at once.
  HostShare share;
  share.handoff_ns = 2;
  auto t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(1, Lane::compute, 0, 10), op(0, Lane::compute, 10, 15)}, share);
  expect_at(t[0], 0, 10);
  expect_at(t[1], 12, 22);
  expect_at(t[2], 24, 29);  // its thread woke after device 1's op
  t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(0, Lane::compute, 20, 30), op(1, Lane::compute, 10, 16)}, share);
  expect_at(t[2], 12, 18);
  expect_at(t[1], 20, 30);  // 18 + 2: it keeps its priced start
  t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(0, Lane::compute, 17, 27), op(1, Lane::compute, 10, 16)}, share);
  expect_at(t[1], 20, 30);  // 3 late
  t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(0, Lane::compute, 10, 20)}, share);
  expect_at(t[1], 10, 20);
}

TEST(HostTurns, TheCoresPassBetweenThreadsNotDevices) {
  // One thread driving two devices (model parallel's, a ddp-mp rank's) keeps the cores from one
  // device's op to the other's: no handoff. Two threads pay it. An event that names no thread (read
  // back from a trace) is its device's own thread.
  HostShare share;
  share.handoff_ns = 2;
  auto on_thread = [](Event e, int thread) {
    e.thread = thread;
    return e;
  };
  auto t = take_turns_on_host({on_thread(op(0, Lane::compute, 0, 10), 7), on_thread(op(1, Lane::compute, 10, 20), 7)}, share);
  expect_at(t[1], 10, 20);
  t = take_turns_on_host({on_thread(op(0, Lane::compute, 0, 10), 7), on_thread(op(1, Lane::compute, 10, 20), 8)}, share);
  expect_at(t[1], 12, 22);
  t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(1, Lane::compute, 10, 20)}, share);
  expect_at(t[1], 12, 22);
  t = take_turns_on_host({on_thread(op(0, Lane::compute, 0, 10), 0), op(0, Lane::compute, 10, 20)}, share);
  expect_at(t[1], 12, 22);  // thread 0 is not device 0's unnamed thread
}

TEST(HostTurns, AGemmRightAfterAnotherThreadsOpTakesTheExtra) {
  // Handoff 2, a GEMM after a handoff 3 longer: device 1's GEMM follows device 0's op (another
  // thread): it starts after the handoff and runs 10 + 3. Device 0's next GEMM follows device 1's:
  // the same. A GEMM after its own thread's op, and an element-wise op after another's, take their
  // priced time.
  HostShare share;
  share.handoff_ns = 2;
  share.gemm_after_handoff_ns = 3;
  auto t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(1, Lane::compute, 0, 10), op(0, Lane::compute, 10, 20)}, share);
  expect_at(t[0], 0, 10);   // the first op: nothing held the cores before it
  expect_at(t[1], 12, 25);
  expect_at(t[2], 27, 40);
  t = take_turns_on_host({op(0, Lane::compute, 0, 10), op(0, Lane::compute, 10, 20)}, share);
  expect_at(t[1], 10, 20);
  Event bias = op(1, Lane::compute, 10, 14);
  bias.kind = "bias_relu";
  t = take_turns_on_host({op(0, Lane::compute, 0, 10), bias}, share);
  expect_at(t[1], 12, 16);
}

TEST(HostTurns, WithTwoThreadsOnOneCoreTheHolderKeepsTheTurnUntilALargeGemm) {
  // Two threads, each: two element-wise ops, then a GEMM of m·n·k 500 (over the 100 at which its
  // caller yields the core). The first thread holds the cores through all three; the second, which
  // could not ask meanwhile, runs its three after. A GEMM of m·n·k 50 does not end a turn.
  auto kind = [](Event e, const char* k, double mnk = 0) {
    e.kind = k;
    e.flops = 2 * mnk;
    return e;
  };
  auto ops = [&](int gemm_mnk) {
    std::vector<Event> v;
    for (int d = 0; d < 2; ++d) {
      v.push_back(kind(op(d, Lane::compute, 0, 2), "bias_relu"));
      v.push_back(kind(op(d, Lane::compute, 2, 4), "bias_relu"));
      v.push_back(kind(op(d, Lane::compute, 4, 14), "gemm", gemm_mnk));
      v.push_back(kind(op(d, Lane::compute, 14, 16), "bias_relu"));
    }
    return v;
  };
  HostShare share;
  share.one_core_yield_gemm_mnk = 100;
  auto t = take_turns_on_host(ops(500), share);
  expect_at(t[0], 0, 2);
  expect_at(t[1], 2, 4);
  expect_at(t[2], 4, 14);
  expect_at(t[4], 14, 16);
  expect_at(t[5], 16, 18);
  expect_at(t[6], 18, 28);
  expect_at(t[3], 28, 30);  // the first thread asked again while the second's GEMM yielded
  expect_at(t[7], 30, 32);
  t = take_turns_on_host(ops(50), share);  // no GEMM yields: each thread's four ops are one turn
  expect_at(t[3], 14, 16);
  expect_at(t[4], 16, 18);
  expect_at(t[7], 30, 32);
  // Without the rule (threads on cores of their own), or with a third thread asking, the turns
  // pass at every op.
  t = take_turns_on_host(ops(500));
  expect_at(t[4], 2, 4);
  expect_at(t[1], 4, 6);
  std::vector<Event> three = ops(500);
  three.push_back(kind(op(2, Lane::compute, 0, 2), "bias_relu"));
  t = take_turns_on_host(three, share);
  expect_at(t[4], 2, 4);
  expect_at(t[8], 4, 6);
  expect_at(t[1], 6, 8);
}

TEST(HostTurns, ADevicesEventsNameTheThreadThatIssuedThem) {
  // Devices 0 and 1 driven by this thread (as model parallel drives them), device 2 by another:
  // the events of 0 and 1 carry one thread, 2's another — what the re-timing keys handoffs by.
  EventBus bus;
  auto devices = cpu_devices(3, bus);
  auto compute = [](Device& d) {
    Tensor a = d.empty({8, 8}, DType::f32, MemoryCategory::workspace, "a");
    d.fill({"t"}, a, 1.0f);
  };
  compute(*devices[0]);
  compute(*devices[1]);
  std::thread([&] { compute(*devices[2]); }).join();
  std::map<int, std::set<int>> threads;  // device → the threads its events name
  for (const Event& e : bus.events()) threads[e.device].insert(e.thread);
  ASSERT_EQ(threads.size(), 3u);
  ASSERT_EQ(threads[0].size(), 1u);
  EXPECT_GE(*threads[0].begin(), 0);
  EXPECT_EQ(threads[1], threads[0]);
  ASSERT_EQ(threads[2].size(), 1u);
  EXPECT_NE(*threads[2].begin(), *threads[0].begin());
}

TEST(HostCores, OneOpAtATimeInTheOrderAsked) {
  HostCores cores;
  std::atomic<int> inside{0}, most{0}, done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        cores.acquire();
        const int now = ++inside;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {}
        --inside;
        cores.release();
        ++done;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(done.load(), 800);
}

TEST(HostCores, TheComputeOfCpuDevicesNeverOverlaps) {
  EventBus bus;
  auto devices = cpu_devices(2, bus);
  std::vector<std::thread> threads;
  for (auto& d : devices)
    threads.emplace_back([&d] {
      Tensor a = d->empty({64, 64}, DType::f32, MemoryCategory::workspace, "a");
      Tensor c = d->empty({64, 64}, DType::f32, MemoryCategory::workspace, "c");
      d->fill({"t"}, a, 1.0f);
      for (int k = 0; k < 50; ++k) d->gemm({"t"}, false, false, a, a, c);
    });
  for (auto& t : threads) t.join();
  std::vector<Event> ops;
  for (const Event& e : bus.events())
    if (e.lane == Lane::compute) ops.push_back(e);
  ASSERT_EQ(ops.size(), 2u * 51u);
  std::sort(ops.begin(), ops.end(), [](const Event& x, const Event& y) { return x.t_begin_ns < y.t_begin_ns; });
  for (size_t i = 1; i < ops.size(); ++i) EXPECT_GE(ops[i].t_begin_ns, ops[i - 1].t_end_ns) << "ops " << i - 1 << " and " << i;
}

TEST(HostCores, AForkedChildStartsWithTheCoresFree) {
  // A thread holds the cores while the process forks: the child must still get its turn.
  HostCores& cores = host_cores();
  std::atomic<bool> holding{false}, done{false};
  std::thread holder([&] {
    cores.acquire();
    holding = true;
    while (!done) std::this_thread::yield();
    cores.release();
  });
  while (!holding) std::this_thread::yield();
  const pid_t pid = ::fork();
  if (pid == 0) {
    alarm(10);  // a child stuck waiting for a turn is killed, and the test fails below
    host_cores().acquire();
    host_cores().release();
    _exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  done = true;
  holder.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// The thread that takes a turn keeps to the first core, OpenBLAS's helpers to the others: a GEMM's
// caller never shares a core with its helper (every GEMM of a step had run at twice its time).
TEST(HostCores, TheTurnTakerKeepsToTheFirstCoreAndTheBlasHelpersToTheOthers) {
  const std::vector<int> cores = usable_cores();
  if (!turns_kept_on_one_core()) GTEST_SKIP() << "one core, one BLAS thread, or no openblas_setaffinity here: nothing to keep apart";
  auto mask_of = [](pthread_t t) {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<int> on;
    if (::pthread_getaffinity_np(t, sizeof set, &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) on.push_back(c);
    return on;
  };
  std::vector<int> after;
  std::thread taker([&] {
    host_cores().acquire();
    host_cores().release();
    after = mask_of(::pthread_self());
  });
  taker.join();
  EXPECT_EQ(after, std::vector<int>{cores.front()});
  using GetAffinity = int (*)(int, size_t, cpu_set_t*);
  const auto get = reinterpret_cast<GetAffinity>(::dlsym(RTLD_DEFAULT, "openblas_getaffinity"));
  ASSERT_NE(get, nullptr);
  cpu_set_t helper;
  CPU_ZERO(&helper);
  ASSERT_EQ(get(0, sizeof helper, &helper), 0);
  EXPECT_TRUE(CPU_ISSET(cores[1], &helper));
  EXPECT_FALSE(CPU_ISSET(cores.front(), &helper));
  // The process still offers every core: a worker forked now shares out all of them.
  EXPECT_EQ(usable_cores(), cores);
}

// A forked child (a Hogwild worker) shares the cores with its siblings: its turns keep to nothing.
TEST(HostCores, AForkedChildDoesNotKeepItsTurnsToOneCore) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    alarm(10);
    cpu_set_t before, after;
    CPU_ZERO(&before);
    CPU_ZERO(&after);
    ::sched_getaffinity(0, sizeof before, &before);
    host_cores().acquire();
    host_cores().release();
    ::sched_getaffinity(0, sizeof after, &after);
    _exit(!turns_kept_on_one_core() && CPU_EQUAL(&before, &after) ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}
