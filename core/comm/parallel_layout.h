#pragma once
// The ranks of a 3D run — D data-parallel replicas × T tensor-parallel shards × P pipeline stages —
// laid out as Megatron-LM lays them (NVIDIA/Megatron-LM, megatron/core/parallel_state.py,
// initialize_model_parallel: tensor groups range(i·T, (i+1)·T); pipeline groups
// range(i, world, world/P); data groups range(s·world/P + j, (s+1)·world/P, T) for stage s, shard j):
//
//   rank = pp · (D·T) + dp · T + tp
//
// so a tensor-parallel group is T consecutive ranks: inside one node, on its fastest links, where
// the two all-reduces of every layer go. A pipeline group is strided by D·T = world / P (a stage's
// activations cross nodes once per micro-batch), and a data-parallel group, strided by T inside a
// stage, all-reduces the gradients once a step. Megatron's own example, 16 ranks with T 2 and P 4:
//   tensor groups   [0,1] [2,3] [4,5] … [14,15]
//   pipeline groups [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
//   data groups     [0,2] [1,3] [4,6] [5,7] … [13,15]
#include <memory>
#include <vector>

#include "core/comm/process_group.h"

namespace scalelab {

// Where one rank sits in the layout: its data-parallel replica, tensor shard and pipeline stage.
struct ParallelCoords {
  int dp = 0, tp = 0, pp = 0;
  bool operator==(const ParallelCoords&) const = default;
};

class ParallelLayout {
 public:
  ParallelLayout(int dp, int tp, int pp);  // each ≥ 1, else UsageError

  int dp() const { return dp_; }
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int world_size() const { return dp_ * tp_ * pp_; }

  ParallelCoords coords(int rank) const;
  int rank(ParallelCoords c) const;
  // The members (world ranks, ascending) of the groups `rank` belongs to.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;

  // A clear UsageError unless the run has D·T·P ranks …
  void check_world(int world_size) const;
  // … and unless T divides a node's devices, so no tensor-parallel group straddles two nodes.
  void check_node(int devices_per_node, const std::string& profile_name) const;

  // This rank's three groups, split from its world group ("tp", "pp", "dp", in that order on every
  // rank): every rank of the world calls it at once.
  struct Groups {
    std::unique_ptr<ProcessGroup> tp, pp, dp;
  };
  Groups split(ProcessGroup& world) const;

 private:
  void check_rank(int rank) const;
  int dp_, tp_, pp_;
};

}  // namespace scalelab
