#include "core/comm/parallel_layout.h"

#include <string>

#include "core/error.h"

namespace scalelab {

namespace {
std::string sizes(int dp, int tp, int pp) {
  return "--dp " + std::to_string(dp) + " × --tp " + std::to_string(tp) + " × --pp " + std::to_string(pp);
}
}  // namespace

ParallelLayout::ParallelLayout(int dp, int tp, int pp) : dp_(dp), tp_(tp), pp_(pp) {
  if (dp < 1 || tp < 1 || pp < 1)
    throw UsageError("layout", sizes(dp, tp, pp) + ": each must be ≥ 1");
}

void ParallelLayout::check_rank(int rank) const {
  if (rank < 0 || rank >= world_size())
    throw Error("layout", "rank " + std::to_string(rank) + " is outside the " + std::to_string(world_size()) +
                              " ranks of " + sizes(dp_, tp_, pp_));
}

ParallelCoords ParallelLayout::coords(int rank) const {
  check_rank(rank);
  return {rank % (dp_ * tp_) / tp_, rank % tp_, rank / (dp_ * tp_)};
}

int ParallelLayout::rank(ParallelCoords c) const {
  if (c.dp < 0 || c.dp >= dp_ || c.tp < 0 || c.tp >= tp_ || c.pp < 0 || c.pp >= pp_)
    throw Error("layout", "coordinates (dp " + std::to_string(c.dp) + ", tp " + std::to_string(c.tp) + ", pp " +
                              std::to_string(c.pp) + ") are outside " + sizes(dp_, tp_, pp_));
  return c.pp * dp_ * tp_ + c.dp * tp_ + c.tp;
}

// Each group: the ranks whose coordinates differ from this rank's in its own coordinate alone.
std::vector<int> ParallelLayout::tp_group(int r) const {
  ParallelCoords c = coords(r);
  std::vector<int> members;
  for (c.tp = 0; c.tp < tp_; ++c.tp) members.push_back(rank(c));
  return members;
}

std::vector<int> ParallelLayout::pp_group(int r) const {
  ParallelCoords c = coords(r);
  std::vector<int> members;
  for (c.pp = 0; c.pp < pp_; ++c.pp) members.push_back(rank(c));
  return members;
}

std::vector<int> ParallelLayout::dp_group(int r) const {
  ParallelCoords c = coords(r);
  std::vector<int> members;
  for (c.dp = 0; c.dp < dp_; ++c.dp) members.push_back(rank(c));
  return members;
}

void ParallelLayout::check_world(int world_size) const {
  if (world_size != this->world_size())
    throw UsageError("layout", sizes(dp_, tp_, pp_) + " = " + std::to_string(this->world_size()) +
                                   " ranks, but the run has " + std::to_string(world_size) +
                                   " — make the product the number of devices (--devices)");
}

void ParallelLayout::check_node(int devices_per_node, const std::string& profile_name) const {
  if (devices_per_node > 0 && devices_per_node % tp_ != 0)
    throw UsageError("layout", "--tp " + std::to_string(tp_) + " does not divide the " +
                                   std::to_string(devices_per_node) + " devices of a node of " + profile_name +
                                   ": a tensor-parallel group would straddle two nodes, its every-layer all-reduces "
                                   "on the network — use a --tp that divides " + std::to_string(devices_per_node));
}

ParallelLayout::Groups ParallelLayout::split(ProcessGroup& world) const {
  check_world(world.size());
  const int r = world.rank();
  Groups g;
  g.tp = world.split(tp_group(r), "tp");
  g.pp = world.split(pp_group(r), "pp");
  g.dp = world.split(dp_group(r), "dp");
  return g;
}

}  // namespace scalelab
