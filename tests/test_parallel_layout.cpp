// The 3D layout (core/comm/parallel_layout.h): Megatron-LM's groups for its docstring's example
// and for every small D × T × P against its loops written out; coordinates round-trip; tensor
// groups stay inside a node; bad sizes are clear errors; and split() gives every rank its three
// groups, whose all-reduces sum over exactly their members.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>

#include "comm_checks.h"
#include "core/comm/parallel_layout.h"
#include "core/comm/threads/threads_group.h"
#include "core/error.h"

using namespace scalelab;

namespace {

using Groups = std::set<std::vector<int>>;

// Every distinct group of one kind, over all ranks.
template <typename Fn>
Groups all_groups(const ParallelLayout& l, Fn group_of) {
  Groups g;
  for (int r = 0; r < l.world_size(); ++r) g.insert(group_of(r));
  return g;
}

std::vector<int> range(int first, int end, int stride = 1) {
  std::vector<int> v;
  for (int r = first; r < end; r += stride) v.push_back(r);
  return v;
}

// Megatron-LM's loops (initialize_model_parallel), as written there.
struct Megatron {
  Groups tp, pp, dp;
  Megatron(int world, int T, int P) {
    const int pipeline_groups = world / P;
    for (int i = 0; i < world / T; ++i) tp.insert(range(i * T, (i + 1) * T));
    for (int i = 0; i < pipeline_groups; ++i) pp.insert(range(i, world, pipeline_groups));
    for (int i = 0; i < P; ++i)
      for (int j = 0; j < T; ++j) dp.insert(range(i * pipeline_groups + j, (i + 1) * pipeline_groups, T));
  }
};

}  // namespace

TEST(ParallelLayout, MegatronsDocstringExample) {
  const ParallelLayout l(2, 2, 4);  // 16 GPUs, tensor 2, pipeline 4
  EXPECT_EQ(all_groups(l, [&](int r) { return l.tp_group(r); }),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(all_groups(l, [&](int r) { return l.pp_group(r); }),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(all_groups(l, [&](int r) { return l.dp_group(r); }),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(l.dp_group(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.coords(5), (ParallelCoords{0, 1, 1}));
}

TEST(ParallelLayout, EveryRanksGroupsAreMegatronsAndCoordinatesRoundTrip) {
  for (int D : {1, 2, 3, 4})
    for (int T : {1, 2, 4, 8})
      for (int P : {1, 2, 3, 4}) {
        const ParallelLayout l(D, T, P);
        const int world = D * T * P;
        const Megatron m(world, T, P);
        SCOPED_TRACE("D " + std::to_string(D) + " T " + std::to_string(T) + " P " + std::to_string(P));
        for (int r = 0; r < world; ++r) {
          EXPECT_TRUE(m.tp.count(l.tp_group(r))) << "rank " << r;
          EXPECT_TRUE(m.pp.count(l.pp_group(r))) << "rank " << r;
          EXPECT_TRUE(m.dp.count(l.dp_group(r))) << "rank " << r;
          const ParallelCoords c = l.coords(r);
          EXPECT_EQ(l.rank(c), r);
          // A rank's place in each group is its coordinate there.
          EXPECT_EQ(l.tp_group(r)[c.tp], r);
          EXPECT_EQ(l.pp_group(r)[c.pp], r);
          EXPECT_EQ(l.dp_group(r)[c.dp], r);
        }
        EXPECT_EQ(all_groups(l, [&](int r) { return l.tp_group(r); }), m.tp);
        EXPECT_EQ(all_groups(l, [&](int r) { return l.pp_group(r); }), m.pp);
        EXPECT_EQ(all_groups(l, [&](int r) { return l.dp_group(r); }), m.dp);
        // With 8 devices a node, a tensor group of T | 8 is inside one node.
        for (int r = 0; r < world; ++r) EXPECT_EQ(l.tp_group(r).front() / 8, l.tp_group(r).back() / 8);
      }
}

TEST(ParallelLayout, BadSizesAreClearErrors) {
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string world = message([] { ParallelLayout(2, 2, 4).check_world(8); });
  EXPECT_NE(world.find("--dp 2 × --tp 2 × --pp 4 = 16 ranks, but the run has 8"), std::string::npos) << world;
  const std::string node = message([] { ParallelLayout(1, 3, 1).check_node(8, "h100-ib-1024x8"); });
  EXPECT_NE(node.find("--tp 3 does not divide the 8 devices of a node of h100-ib-1024x8"), std::string::npos) << node;
  EXPECT_NE(message([] { ParallelLayout(1, 16, 1).check_node(8, "h100-ib-1024x8"); }).find("--tp 16"), std::string::npos);
  EXPECT_NO_THROW(ParallelLayout(2, 8, 2).check_node(8, "h100-ib-1024x8"));
  EXPECT_NE(message([] { ParallelLayout(0, 2, 1); }).find("each must be ≥ 1"), std::string::npos);
  EXPECT_THROW(ParallelLayout(2, 2, 2).coords(8), Error);
}

// 8 threads as D 2 × T 2 × P 2: each rank's three groups are its layout's, and an all_reduce of the
// world rank in each sums exactly the group's members.
TEST(ParallelLayout, SplitGivesEveryRankItsThreeGroups) {
  const ParallelLayout l(2, 2, 2);
  const int n = l.world_size();
  auto world = make_threads_groups(n);
  DeviceOptions o;
  o.count = n;
  auto devices = make_devices(o);
  std::vector<std::array<float, 3>> sums(n);
  std::vector<std::array<int, 3>> ranks(n);
  auto errors = comm_test::run_ranks(world, devices, [&](int r, ProcessGroup& pg, Device& dev) {
    const ParallelLayout::Groups g = l.split(pg);
    int k = 0;
    for (ProcessGroup* group : {g.tp.get(), g.pp.get(), g.dp.get()}) {
      Tensor t = comm_test::make_tensor(dev, {static_cast<float>(r)}, DType::f32);
      group->all_reduce(t);
      sums[r][k] = comm_test::read_tensor(dev, t)[0];
      ranks[r][k++] = group->rank();
    }
  });
  auto sum = [](const std::vector<int>& v) {
    float s = 0;
    for (int r : v) s += static_cast<float>(r);
    return s;
  };
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(sums[r], (std::array<float, 3>{sum(l.tp_group(r)), sum(l.pp_group(r)), sum(l.dp_group(r))})) << r;
    const ParallelCoords c = l.coords(r);
    EXPECT_EQ(ranks[r], (std::array<int, 3>{c.tp, c.pp, c.dp})) << "rank " << r;
  }
  // A world of the wrong size is refused before any group is made.
  auto six = make_threads_groups(6);
  EXPECT_THROW(l.split(*six[0]), UsageError);
}
