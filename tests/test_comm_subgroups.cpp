// Sub-groups (ProcessGroup::split) on the threads backend: every collective against its closed
// form inside each group, async calls, send / recv flow ids that agree and differ between groups,
// events tagged with the group's name and world-rank peers, bad splits refused on every rank, and
// on sim a group priced on where its members sit (NVLink inside a node, InfiniBand across).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "comm_checks.h"
#include "core/comm/threads/threads_group.h"
#include "core/device/sim/cost_model.h"
#include "core/device/sim/profile.h"
#include "core/error.h"

using namespace scalelab;

namespace {

std::vector<int> consecutive(int first, int count) {
  std::vector<int> v;
  for (int i = 0; i < count; ++i) v.push_back(first + i);
  return v;
}
std::vector<int> strided(int first, int count, int stride) {
  std::vector<int> v;
  for (int i = 0; i < count; ++i) v.push_back(first + i * stride);
  return v;
}

}  // namespace

// 8 ranks as 4 groups of 2 consecutive ("tp") and 2 groups of 4 strided by 2 ("dp"): in each, every
// collective, dtype and awkward count gives its closed form over the group's own ranks, and an
// async all_reduce in one group interleaves with a blocking one in the other.
TEST(SubGroups, EveryCollectiveInsideEachGroupGivesItsClosedForm) {
  const int n = 8;
  auto world = make_threads_groups(n);
  DeviceOptions o;
  o.count = n;
  auto devices = make_devices(o);
  std::vector<std::vector<std::string>> failures(n);
  std::vector<std::array<int, 4>> seen(n);  // tp rank, tp size, dp rank, dp size
  auto errors = comm_test::run_ranks(world, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    auto tp = pg.split(consecutive(r / 2 * 2, 2), "tp");
    auto dp = pg.split(strided(r % 2, 4, 2), "dp");
    seen[r] = {tp->rank(), tp->size(), dp->rank(), dp->size()};
    auto& f = failures[r];
    for (ProcessGroup* g : {tp.get(), dp.get()}) {
      comm_test::CollectiveChecker check(*g, dev);
      for (auto& s : check.run_all({0, 1, 7, 1003})) f.push_back(g->name() + ": " + s);
    }
    // Async on tp, blocking on dp meanwhile: each group keeps its own order.
    comm_test::CollectiveChecker tp_check(*tp, dev), dp_check(*dp, dev);
    Tensor a = comm_test::make_tensor(dev, tp_check.inputs(4099, tp->rank()), DType::f32);
    Tensor b = comm_test::make_tensor(dev, dp_check.inputs(4099, dp->rank()), DType::f32);
    auto work = tp->all_reduce_async(a);
    dp->all_reduce(b);
    work->wait();
    const auto got_a = comm_test::read_tensor(dev, a), got_b = comm_test::read_tensor(dev, b);
    for (int64_t i = 0; i < 4099; ++i) {
      if (got_a[i] != tp_check.reduced(i, ReduceOp::sum)) f.push_back("async tp all_reduce at " + std::to_string(i));
      if (got_b[i] != dp_check.reduced(i, ReduceOp::sum)) f.push_back("dp all_reduce at " + std::to_string(i));
      if (f.size() > 4) break;
    }
    pg.barrier();  // the world's group still works beside its sub-groups
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    for (const auto& f : failures[r]) ADD_FAILURE() << "rank " << r << ": " << f;
    EXPECT_EQ(seen[r], (std::array<int, 4>{r % 2, 2, r / 2, 4})) << "rank " << r;
  }
}

// The trace of a sub-group's calls: each event names its group; peers are world ranks (rank 3 of
// the dp group {1, 3, 5, 7} is world rank 7); a send and its recv share a flow id, and no two
// groups' calls do (the two tp groups' first all_reduce, the world's first).
TEST(SubGroups, EventsNameTheirGroupWithWorldPeersAndFlowIdsOfTheirOwn) {
  const int n = 4;
  EventBus bus;
  auto world = make_threads_groups(n);
  DeviceOptions o;
  o.count = n;
  o.bus = &bus;
  auto devices = make_devices(o);
  auto errors = comm_test::run_ranks(world, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    auto tp = pg.split(consecutive(r / 2 * 2, 2), "tp");
    auto pp = pg.split(strided(r % 2, 2, 2), "pp");
    Tensor t = dev.zeros({64}, DType::f32, MemoryCategory::comm_buffers, "t");
    tp->all_reduce(t);
    pg.all_reduce(t);
    // Three messages each way between the pp group's two ranks.
    for (int k = 0; k < 3; ++k) {
      if (pp->rank() == 0) pp->send(t, 1);
      pp->recv(t, 1 - pp->rank());
      if (pp->rank() == 1) pp->send(t, 0);
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  std::map<std::string, std::set<int64_t>> first_ids;  // group → flow ids of its first all_reduce
  std::map<int64_t, std::set<std::string>> groups_of_flow;
  int sends = 0;
  std::map<int64_t, std::vector<const Event*>> by_flow;
  const std::vector<Event> events = bus.events();
  for (const Event& e : events) {
    if (e.role == Role::send || e.role == Role::recv) by_flow[e.flow_id].push_back(&e);
    if (e.lane != Lane::comm) continue;
    if (e.flow_id >= 0) groups_of_flow[e.flow_id].insert(e.group);
    if (e.role == Role::all_reduce && e.flow_id >= 0) first_ids[e.group].insert(e.flow_id);
    if (e.role == Role::send) {
      ++sends;
      EXPECT_EQ(e.group, "pp");
      EXPECT_EQ(e.peer, (e.device + 2) % 4) << "the pp peer as a world rank";
    }
    if (e.group == "tp" && e.peer >= 0) {
      EXPECT_EQ(e.peer / 2, e.device / 2) << "a tp step stays in its pair";
    }
  }
  EXPECT_EQ(sends, 4 * 3);
  // Each message's flow id is its send's and its recv's alone, on the two devices it joins.
  for (const auto& [id, pair] : by_flow) {
    ASSERT_EQ(pair.size(), 2u) << "flow " << id;
    EXPECT_NE(pair[0]->role, pair[1]->role) << "flow " << id;
    EXPECT_EQ(pair[0]->peer, pair[1]->device) << "flow " << id;
    EXPECT_EQ(pair[1]->peer, pair[0]->device) << "flow " << id;
  }
  EXPECT_EQ(first_ids["tp"].size(), 2u) << "two tp groups, one id each";
  EXPECT_EQ(first_ids[""].size(), 1u) << "the world's all_reduce";
  for (const auto& [id, groups] : groups_of_flow) EXPECT_EQ(groups.size(), 1u) << "flow " << id << " spans groups";
}

// A split every rank gets wrong the same way: an error on every rank, naming the members.
TEST(SubGroups, BadSplitsAreClearErrorsOnEveryRank) {
  const int n = 4;
  DeviceOptions o;
  o.count = n;
  auto devices = make_devices(o);
  auto expect_all = [&](const std::function<void(int, ProcessGroup&)>& split, const std::string& want) {
    CommOptions quick;
    quick.timeout = std::chrono::milliseconds(5000);
    auto world = make_threads_groups(n, quick);
    auto errors = comm_test::run_ranks(world, devices, [&](int r, ProcessGroup& pg, Device&) { split(r, pg); });
    for (int r = 0; r < n; ++r) {
      EXPECT_NE(errors[r].find("[comm]"), std::string::npos) << errors[r];
      EXPECT_NE(errors[r].find(want), std::string::npos) << "rank " << r << ": " << errors[r];
    }
  };
  expect_all([](int r, ProcessGroup& pg) { pg.split({r, r == 0 ? 0 : r - 1}, "tp"); }, "ascending");
  expect_all([](int r, ProcessGroup& pg) { pg.split({(r + 1) % 4}, "tp"); }, "leave out this rank");
  expect_all([](int r, ProcessGroup& pg) { pg.split({r, 4}, "tp"); }, "outside the world");
  expect_all([](int r, ProcessGroup& pg) { pg.split({r}, ""); }, "needs a name");
  // Rank 0 names {0, 1, 2}, but ranks 1 and 2 name themselves alone.
  expect_all([](int r, ProcessGroup& pg) { pg.split(r == 0 ? std::vector<int>{0, 1, 2} : std::vector<int>{r}, "tp"); },
             "must name the same members");
  expect_all(
      [](int r, ProcessGroup& pg) {
        auto tp = pg.split(consecutive(r / 2 * 2, 2), "tp");
        tp->split({tp->rank()}, "inner");
      },
      "split the world's group");
}

// On sim (h100-ib-1024x8: 8 GPUs a node on NVLink, nodes on InfiniBand), 16 ranks: a group of the
// 8 ranks of a node and a group of 2 ranks on 2 nodes take what the cost model prices at their
// placement, {8 per node, 1 node} and {1, 2}; a send between the 2 crosses nodes.
TEST(SubGroups, OnSimAGroupIsPricedWhereItsMembersSit) {
  const int n = 16;
  const HardwareProfile profile = load_profile("h100-ib-1024x8");
  const CostModel model(profile);
  EventBus bus;
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.count = n;
  o.profile = profile;
  o.bus = &bus;
  auto devices = make_devices(o);
  auto world = make_threads_groups(n);
  const int64_t m = 1 << 20;  // 4 MiB of f32
  std::vector<int64_t> node_ns(n), across_ns(n), send_ns(n);
  auto errors = comm_test::run_ranks(world, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    auto node = pg.split(consecutive(r / 8 * 8, 8), "tp");
    auto across = pg.split(strided(r % 8, 2, 8), "dp");
    Tensor t = dev.zeros({m}, DType::f32, MemoryCategory::grads, "g");
    int64_t t0 = t.ready_ns();
    node->all_reduce(t);
    node_ns[r] = t.ready_ns() - t0;
    t0 = t.ready_ns();
    across->all_reduce(t);
    across_ns[r] = t.ready_ns() - t0;
    t0 = t.ready_ns();
    if (across->rank() == 0) across->send(t, 1);
    else across->recv(t, 0);
    send_ns[r] = t.ready_ns() - t0;
  });
  const double S = 4.0 * m;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(node_ns[r], seconds_to_ns(model.collective_seconds(Collective::all_reduce, S, 8, {8, 1})));
    EXPECT_EQ(across_ns[r], seconds_to_ns(model.collective_seconds(Collective::all_reduce, S, 2, {1, 2})));
    EXPECT_EQ(send_ns[r], seconds_to_ns(model.collective_seconds(Collective::send, S, 2, {1, 2}, true)));
  }
  // Across nodes the NICs: slower though the group is a quarter the size.
  EXPECT_GT(across_ns[0], node_ns[0]);
}
