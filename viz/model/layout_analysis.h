#pragma once
// What the Layout panel and the Topology panel's per-group table read: a tensor-parallel run's 3D
// layout (pipeline stage × data-parallel replica × tensor shard, Megatron's rank = pp·(D·T) + dp·T
// + tp, core/comm/parallel_layout.h) and the traffic of each process sub-group ("tp", "pp", "dp").
// No ImGui: tests/test_dash_model.cpp checks both on hand-built traces.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/trace/events.h"
#include "viz/model/dashboard_model.h"

namespace scalelab::viz {

// The run's shape, read from the trace's title ("--strategy tensor-parallel … --devices N --dp D
// --pp P"): T = N / (D·P). Empty for other strategies, or a title that does not say.
struct Layout3D {
  int dp = 1, tp = 1, pp = 1;
  int per_node = 0;  // devices per node from the profile; 0: not known
  int blocks = 0;    // the GPT's transformer blocks, width and heads (--model gpt:L-C-H-…); 0: not known
  int hidden = 0, heads = 0;
  int world() const { return dp * tp * pp; }
};
std::optional<Layout3D> layout_from_title(const std::string& title, int devices);
std::optional<Layout3D> layout_of(const DashboardModel& model);

// Where rank r sits, and the groups it is in (world ranks, ascending), as ParallelLayout says.
struct RankCell {
  int rank = 0, dp = 0, tp = 0, pp = 0;
  std::vector<int> tp_group, pp_group, dp_group;
};
RankCell rank_cell(const Layout3D& l, int rank);
// What the rank holds, in words, counting from 0 as the rank formula does: "stage 1: blocks 3–5,
// LM head · shard 2: heads 4–5, MLP features 512–767 · replica 1" (no stage with one).
std::string rank_holds(const Layout3D& l, int rank);

// Per sub-group: the bytes its calls moved and the device-time they took (summed over devices),
// "" (the world's group) apart. Ordered tp, pp, dp, then any other, then "".
struct GroupTraffic {
  std::string group;
  int64_t bytes = 0;
  int64_t busy_ns = 0;
  int64_t events = 0;
  std::vector<int64_t> begins, cum_bytes;  // the sends' begin times, ascending, and bytes up to each
  int64_t bytes_until(int64_t t) const;     // bytes of sends begun at or before t
};
std::vector<GroupTraffic> group_traffic(const std::vector<Event>& events);
// "TP inside a node", "PP across stages", "DP across replicas", or the name itself.
std::string group_words(const std::string& group);

}  // namespace scalelab::viz
