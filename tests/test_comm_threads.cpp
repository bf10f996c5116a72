// The threads backend: every collective against its closed form for world sizes 1–8, awkward
// counts and every dtype; events per ring step; modelled times on sim; the timeout naming the
// rank that never came.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm_checks.h"
#include "core/comm/threads/threads_group.h"
#include "core/device/sim/profile.h"
#include "core/error.h"

using namespace scalelab;
using nlohmann::json;

namespace {

std::vector<std::unique_ptr<Device>> cpu_devices(int n, EventBus* bus = nullptr) {
  DeviceOptions o;
  o.count = n;
  o.bus = bus;
  return make_devices(o);
}

HardwareProfile tiny_profile() { return load_profile(std::string(SCALELAB_TEST_DATA) + "/tiny.json"); }

}  // namespace

class ThreadsClosedForm : public ::testing::TestWithParam<std::tuple<int, CommAlgorithm>> {};

TEST_P(ThreadsClosedForm, EveryCollectiveEveryDtypeAwkwardCounts) {
  const int n = std::get<0>(GetParam());
  CommOptions options;
  options.algorithm = std::get<1>(GetParam());
  auto groups = make_threads_groups(n, options);
  auto devices = cpu_devices(n);
  std::vector<std::vector<std::string>> failures(static_cast<size_t>(n));
  auto errors = comm_test::run_ranks(groups, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    comm_test::CollectiveChecker check(pg, dev);
    failures[static_cast<size_t>(r)] = check.run_all({0, 1, 7, 1000 + 3});
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    for (const auto& f : failures[static_cast<size_t>(r)]) ADD_FAILURE() << f;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ThreadsClosedForm,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(CommAlgorithm::ring, CommAlgorithm::direct)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  comm_algorithm_name(std::get<1>(info.param));
                         });

class ThreadsLarge : public ::testing::TestWithParam<CommAlgorithm> {};

TEST_P(ThreadsLarge, LargeAllReduceIsExactAndAsyncWorks) {
  const int n = 4;
  const int64_t m = (1 << 20) + 5;  // not divisible by 4, many pieces of the direct algorithm
  CommOptions options;
  options.algorithm = GetParam();
  auto groups = make_threads_groups(n, options);
  auto devices = cpu_devices(n);
  std::vector<std::vector<std::string>> failures(n);
  auto errors = comm_test::run_ranks(groups, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    comm_test::CollectiveChecker check(pg, dev);
    Tensor t = comm_test::make_tensor(dev, check.inputs(m, r), DType::f32);
    auto work = pg.all_reduce_async(t, ReduceOp::sum);
    work->wait();
    EXPECT_TRUE(work->is_completed());
    const auto got = comm_test::read_tensor(dev, t);
    for (int64_t i = 0; i < m; i += 4099)
      if (got[static_cast<size_t>(i)] != check.reduced(i, ReduceOp::sum)) failures[r].push_back("element " + std::to_string(i));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "");
    EXPECT_TRUE(failures[r].empty()) << failures[r].front();
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ThreadsLarge, ::testing::Values(CommAlgorithm::ring, CommAlgorithm::direct));

TEST(Threads, RingStepsAreEventsWithPeerAndBytes) {
  const int n = 4;
  const int64_t m = 1000;
  EventBus bus;
  auto groups = make_threads_groups(n);
  auto devices = cpu_devices(n, &bus);
  comm_test::run_ranks(groups, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    Tensor t = comm_test::make_tensor(dev, std::vector<float>(m, 1.0f), DType::f32);
    pg.all_reduce(t, ReduceOp::sum, {.name = "bucket 0", .bucket = 0});
    (void)r;
  });
  int steps = 0;
  int64_t bytes = 0;
  for (const Event& e : bus.events()) {
    if (e.kind != "all_reduce") continue;
    ++steps;
    bytes += e.bytes;
    EXPECT_EQ(e.lane, Lane::comm);
    EXPECT_EQ(e.bucket, 0);
    EXPECT_EQ(e.peer, (e.device + n - 1) % n) << "each rank reads its left neighbour";
    EXPECT_LE(e.t_begin_ns, e.t_end_ns);
  }
  EXPECT_EQ(steps, n * 2 * (n - 1));                   // 2(n−1) ring steps on every rank
  EXPECT_EQ(bytes, n * 2 * (n - 1) * (m / n) * 4);     // each step moves one chunk of m/n floats
}

// An asynchronous call belongs to the step its caller was in when it queued it, though it may run
// after the caller has gone on (a bucket's all-reduce, then the next step's set_step): its events
// say that step, and name the thread that ran them — the queue's worker, not the caller.
TEST(Threads, AnAsyncCallKeepsItsCallersStepAndNamesTheThreadThatRanIt) {
  const int n = 2;
  EventBus bus;
  auto groups = make_threads_groups(n);
  auto devices = cpu_devices(n, &bus);
  std::vector<int> callers(n, -1);
  comm_test::run_ranks(groups, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    pg.set_device(&dev);
    callers[static_cast<size_t>(r)] = host_thread_index();
    Tensor t = comm_test::make_tensor(dev, std::vector<float>(300, 1.0f), DType::f32);
    dev.set_step(4);
    std::atomic<bool> stepped{false};
    // Holds the queue until the caller is in step 5: the all-reduce behind it runs there.
    auto work = pg.run_async([&] {
      while (!stepped) std::this_thread::yield();
    });
    auto reduce = pg.all_reduce_async(t, ReduceOp::sum, {.name = "bucket 0", .bucket = 0});
    dev.set_step(5);
    stepped = true;
    work->wait();
    reduce->wait();
    pg.all_reduce(t, ReduceOp::sum, {.name = "blocking"});
  });
  int async_events = 0, blocking_events = 0;
  for (const Event& e : bus.events()) {
    if (e.role != Role::all_reduce) continue;
    EXPECT_GE(e.thread, 0) << e.name;
    if (e.bucket == 0) {
      ++async_events;
      EXPECT_EQ(e.step, 4) << e.name << ": queued in step 4";
      EXPECT_NE(e.thread, callers[static_cast<size_t>(e.device)]) << e.name << ": run by the queue's worker";
    } else {
      ++blocking_events;
      EXPECT_EQ(e.step, 5) << e.name;
      EXPECT_EQ(e.thread, callers[static_cast<size_t>(e.device)]) << e.name << ": run by its caller";
    }
  }
  EXPECT_GE(async_events, n);
  EXPECT_GE(blocking_events, n);
}

// A tag passed with a call tags that call alone: the barrier after a tagged collective carries
// none of its name, bucket or micro-batch. An asynchronous call keeps the tag it was queued with,
// whatever the caller issues while it waits in the queue.
TEST(Threads, ATagTagsItsCallAloneAndAnAsyncCallKeepsItsOwn) {
  const int n = 3;
  EventBus bus;
  auto groups = make_threads_groups(n);
  auto devices = cpu_devices(n, &bus);
  comm_test::run_ranks(groups, devices, [&](int, ProcessGroup& pg, Device& dev) {
    pg.set_device(&dev);
    Tensor t = comm_test::make_tensor(dev, std::vector<float>(300, 1.0f), DType::f32);
    pg.all_reduce(t, ReduceOp::sum, {.name = "grads", .bucket = 3, .micro_batch = 1});
    pg.barrier();
    auto work = pg.all_reduce_async(t, ReduceOp::sum, {.name = "bucket 0", .bucket = 0});
    pg.broadcast(t, 0);  // issued while the tagged all-reduce may still be queued
    work->wait();
  });
  int barriers = 0, broadcasts = 0, tagged = 0, bucket0 = 0;
  for (const Event& e : bus.events()) {
    if (e.lane != Lane::comm) continue;
    switch (e.role) {
      case Role::barrier:
      case Role::broadcast:
        ++(e.role == Role::barrier ? barriers : broadcasts);
        EXPECT_EQ(e.name.rfind(e.kind, 0), 0u) << e.name << ": an untagged call is named after its collective";
        EXPECT_EQ(e.bucket, -1) << e.name;
        EXPECT_EQ(e.micro_batch, -1) << e.name;
        break;
      case Role::all_reduce:
        if (e.bucket == 3) {
          ++tagged;
          EXPECT_EQ(e.micro_batch, 1);
          EXPECT_EQ(e.name.rfind("grads", 0), 0u) << e.name;
        } else {
          ++bucket0;
          EXPECT_EQ(e.bucket, 0) << e.name;
          EXPECT_EQ(e.micro_batch, -1) << e.name;
          EXPECT_EQ(e.name.rfind("bucket 0", 0), 0u) << e.name;
        }
        break;
      default: ADD_FAILURE() << "unexpected role " << role_name(e.role) << " of " << e.name;
    }
  }
  EXPECT_EQ(barriers, n);
  EXPECT_GE(broadcasts, n);
  EXPECT_GE(tagged, n);
  EXPECT_GE(bucket0, n);
}

namespace {

// The comm events that carry a flow id, of a run in which rank r sends `messages` tensors (sized
// by r) to rank r+1 (mod n), then all ranks all-reduce: device by device, in emission order.
std::vector<Event> ring_of_sends(int n, int messages) {
  EventBus bus;
  auto groups = make_threads_groups(n);
  auto devices = cpu_devices(n, &bus);
  const auto errors = comm_test::run_ranks(groups, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    Tensor out = comm_test::make_tensor(dev, std::vector<float>(10 + r, 1.0f), DType::f32);
    Tensor in = dev.zeros({10 + (r + n - 1) % n}, DType::f32, MemoryCategory::comm_buffers, "in");
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int k = 0; k < messages; ++k) {
      // Rank 0 sends first, the others receive first: sends wait for their receiver.
      if (r == 0) pg.send(out, next);
      pg.recv(in, prev);
      if (r != 0) pg.send(out, next);
    }
    Tensor same = dev.zeros({8}, DType::f32, MemoryCategory::comm_buffers, "same");
    pg.all_reduce(same);
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  std::vector<Event> comm;
  for (const Event& e : bus.events())
    if (e.lane == Lane::comm && e.flow_id >= 0) comm.push_back(e);
  std::stable_sort(comm.begin(), comm.end(), [](const Event& a, const Event& b) { return a.device < b.device; });
  return comm;
}

}  // namespace

// A send and its matching recv carry the same flow id — the trace's arrow between them — though
// neither rank asked the other: each pair (sender, receiver) counts its messages. Ids are the same
// from run to run, and collectives' ids (the same on every rank) never collide with them.
TEST(Threads, ASendAndItsRecvShareAFlowIdDeterministically) {
  const int n = 3, messages = 2;
  const std::vector<Event> events = ring_of_sends(n, messages);
  std::map<int64_t, std::vector<const Event*>> flows;
  for (const Event& e : events) flows[e.flow_id].push_back(&e);
  int p2p = 0, collectives = 0;
  for (const auto& [id, members] : flows) {
    if (members.front()->role == Role::all_reduce) {
      ++collectives;
      EXPECT_EQ(members.size(), static_cast<size_t>(n)) << "every rank's first step of the all-reduce";
      for (const Event* e : members) EXPECT_EQ(e->role, Role::all_reduce);
      continue;
    }
    ++p2p;
    ASSERT_EQ(members.size(), 2u) << "flow " << id;
    const Event* send = members[0]->role == Role::send ? members[0] : members[1];
    const Event* recv = members[0]->role == Role::send ? members[1] : members[0];
    EXPECT_EQ(send->role, Role::send);
    EXPECT_EQ(recv->role, Role::recv);
    EXPECT_EQ(send->peer, recv->device);
    EXPECT_EQ(recv->peer, send->device);
    EXPECT_EQ(recv->device, (send->device + 1) % n);
  }
  EXPECT_EQ(p2p, n * messages);
  EXPECT_EQ(collectives, 1);
  // Deterministic: a second run numbers every event alike.
  const std::vector<Event> again = ring_of_sends(n, messages);
  ASSERT_EQ(again.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(again[i].device, events[i].device);
    EXPECT_EQ(again[i].role, events[i].role);
    EXPECT_EQ(again[i].flow_id, events[i].flow_id);
  }
}

// On sim, the collective starts when the last rank arrives and lasts what the α-β model says.
TEST(Threads, SimAllReduceStartsWithTheLastRankAndTakesTheRingFormula) {
  const int n = 2;  // the tiny profile has 2 devices per node: one node, the plain ring
  EventBus bus;
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.count = n;
  o.profile = tiny_profile();
  o.bus = &bus;
  auto devices = make_devices(o);
  auto groups = make_threads_groups(n);
  const int64_t m = 250000;  // 1 MB of f32
  std::vector<int64_t> end(n);
  comm_test::run_ranks(groups, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    Tensor t = dev.zeros({m}, DType::f32, MemoryCategory::grads, "g");
    // Rank 1 is late: its tensor is ready only at 5 µs.
    if (r == 1) t.set_ready_ns(5000);
    pg.all_reduce(t);
    end[r] = t.ready_ns();
  });
  const HardwareProfile p = tiny_profile();
  const double S = m * 4.0, alpha = p.intra_node.latency_s, B = p.intra_node.bandwidth_Bps;
  const int64_t duration = seconds_to_ns(2 * (n - 1) * alpha + 2.0 * (n - 1) / n * S / B);
  EXPECT_EQ(end[0], 5000 + duration);
  EXPECT_EQ(end[1], 5000 + duration);
}

// On sim, a peer copy that overlaps an all-reduce on the same device waits for the link the
// all-reduce keeps busy: on tiny.json with α = 0 (1e11 B/s), a 100 kB all-reduce over 2 ranks
// sends 100 kB per rank in 1 µs (the whole link), and a 100 kB copy into the device placed after
// it, ready at 0, ends after both transfers' bytes: 200 kB / 1e11 = 2 µs. The all-reduce keeps its time.
TEST(Threads, OnSimAPeerCopyOverlappingAnAllReduceSharesTheLink) {
  const int n = 2;
  json j = json::parse(profile_to_json(tiny_profile()));
  j["links"]["intra_node"]["latency_s"] = 0;
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.count = n;
  o.profile = parse_profile(j.dump(), "link.json");
  auto devices = make_devices(o);
  auto groups = make_threads_groups(n);
  const int64_t m = 25000;  // 100 kB of f32 (tiny devices hold 1 MiB)
  std::vector<Tensor> sources;
  for (int r = 0; r < n; ++r) sources.push_back(devices[static_cast<size_t>(1 - r)]->empty({m}, DType::f32, MemoryCategory::activations, "x"));
  std::vector<int64_t> reduced(n), copied(n);
  const auto errors = comm_test::run_ranks(groups, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    // empty, not zeros: ready at 0, no fill before them.
    Tensor g = dev.empty({m}, DType::f32, MemoryCategory::grads, "g");
    pg.all_reduce(g);
    reduced[r] = g.ready_ns();
    Tensor x = dev.empty({m}, DType::f32, MemoryCategory::activations, "x here");
    dev.copy({.name = "x"}, sources[static_cast<size_t>(r)], x);
    copied[r] = x.ready_ns();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "");
    EXPECT_EQ(reduced[r], 1000) << "rank " << r;
    EXPECT_EQ(copied[r], 2000) << "rank " << r;
  }
}

TEST(CostModel, CollectivesFollowTheAlphaBetaFormulas) {
  const HardwareProfile p = tiny_profile();  // 2 nodes × 2 devices
  CostModel model(p);
  const double S = 8e6;
  const double ai = p.intra_node.latency_s, bi = p.intra_node.bandwidth_Bps;
  const double ae = p.inter_node.latency_s, be = p.inter_node.bandwidth_Bps;
  // One node (2 ranks): the plain ring.
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, S, 2), 2 * ai + S / bi);
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_gather, S, 2), ai + 0.5 * S / bi);
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::reduce_scatter, S, 2), ai + 0.5 * S / bi);
  // Two nodes (4 ranks): one ring of 2(n − 1) = 6 steps, 2 of them between the nodes; each node's
  // 2 NICs carry what each GPU sends (overlapped with NVLink), so the ring runs at min(bi, 2 be).
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, S, 4),
                   (4 * ai + 2 * ae) + 1.5 * S / std::min(bi, 2 * be));
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::send, S, 4, false), ai + S / bi);
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::send, S, 4, true), ae + S / be);
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::broadcast, S, 2), ai + S / bi);
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, S, 1), 0.0);
}

TEST(Threads, ARankThatNeverArrivesFailsEveryOtherRankNamingIt) {
  const int n = 4;
  CommOptions o;
  o.timeout = std::chrono::milliseconds(300);
  auto groups = make_threads_groups(n, o);
  auto devices = cpu_devices(n);
  auto errors = comm_test::run_ranks(groups, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    Tensor t = dev.zeros({16}, DType::f32, MemoryCategory::grads, "g");
    if (r == 2) throw std::runtime_error("rank 2 died");
    pg.all_reduce(t);
  });
  EXPECT_EQ(errors[2], "rank 2 died");
  for (int r : {0, 1, 3}) {
    EXPECT_NE(errors[r].find("[comm]"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("all_reduce"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank(s) 2"), std::string::npos) << errors[r];
  }
}

TEST(Threads, BadArgumentsAreClearErrors) {
  auto groups = make_threads_groups(2);
  auto devices = cpu_devices(1);
  Tensor a = devices[0]->zeros({6}, DType::f32, MemoryCategory::grads, "a");
  Tensor b = devices[0]->zeros({5}, DType::f32, MemoryCategory::grads, "b");
  Tensor h = devices[0]->zeros({6}, DType::f16, MemoryCategory::grads, "h");
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { groups[0]->all_reduce(a, b); }).find("differ in size"), std::string::npos);
  EXPECT_NE(message([&] { groups[0]->all_reduce(a, h); }).find("dtype"), std::string::npos);
  EXPECT_NE(message([&] { groups[0]->all_gather(a, b); }).find("world size × input"), std::string::npos);
  EXPECT_NE(message([&] { groups[0]->broadcast(a, 2); }).find("root 2"), std::string::npos);
  EXPECT_NE(message([&] { groups[0]->send(a, 0); }).find("another rank"), std::string::npos);
  EXPECT_THROW(make_threads_groups(0), UsageError);
}
