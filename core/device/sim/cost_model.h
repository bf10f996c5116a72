#pragma once
// Prices an op on a hardware profile (see docs/DESIGN.md, "The cost model"):
//   GEMM         max(flops / (peak × efficiency), bytes / mem_bw) + launch; with a GEMM curve
//                max(flops / (peak × curve(m·n·k)), bytes / mem_bw) — the curve's time is the whole call;
//                f32 with a gemm_table (a calibrated host): by the nearest measured shapes
//   element-wise bytes / mem_bw + launch; with a curve for its kind bytes / (mem_bw × curve(bytes))
//   copy         α + bytes / B over the link it crosses; with the link's curve bytes / (B × curve(bytes))
//   collectives  NCCL's way: the cheapest of ring / tree / NVLS / NVLS-tree × LL / LL128 / Simple, each
//                launch + steps × step cost + bytes moved / achieved bandwidth; a node's NICs
//                overlapped with its NVLink (profile "collectives"; without it the textbook ring
//                2(n−1)α + 2(n−1)/n · S/B)
#include "core/collective.h"
#include "core/device/sim/profile.h"
#include "core/tensor.h"

namespace scalelab {

enum class OpClass : uint8_t { gemm, elementwise, copy_host, copy_peer, none };

// What the model prices a collective at, and how: the algorithm and protocol NCCL's tuner would
// pick ("ring" / "tree" / "NVLS" / "NVLS-tree" × "LL" / "LL128" / "Simple"; a calibrated host's
// timed collective: "timed", ""; scatter, gather, barrier, send and recv: their one way, "").
struct CollectiveChoice {
  double seconds = 0;
  const char* algorithm = "";
  const char* protocol = "";
};

// What an op costs, in the terms the cost model reads. `bytes` is the memory traffic
// (reads + writes) for compute ops, and the payload for copies.
struct OpCost {
  OpClass cls = OpClass::elementwise;
  double flops = 0;
  double bytes = 0;
  DType dtype = DType::f32;
  double m = 0, n = 0, k = 0;  // a GEMM's shape (0: unknown, its size is taken as flops / 2)
  bool trans_a = false, trans_b = false;  // … and its transposition (a gemm_table's key)
  bool accumulates = false;  // … and whether it adds to C (beta ≠ 0) rather than writing it
  const char* kind = nullptr;  // the op's kind ("sgd", "bias_relu", …): an element-wise curve's key
  // The bytes the devices sharing the op's host move in a step (the device and the sim clock fill
  // it in): what passes through the caches between two touches of a tensor used once a step. Past
  // the profile's host_cache_bytes, a share of the op's data comes from DRAM.
  double host_bytes = 0;
  double held_bytes = 0;  // … and the memory the op's device holds (its peak so far)
  // How many devices host_bytes and held_bytes are the sum of: those the op's host thread drives
  // (Device::host_traffic), which stand for that share of the host's devices.
  int host_devices = 1;
  // Of held_bytes, what every device on the host maps (Hogwild's shared parameters): the host holds
  // it once, however many devices stand for it.
  double shared_bytes = 0;
};

// Where a collective's ranks sit: `per_node` of them on each of `nodes` nodes.
struct RankPlacement {
  int per_node = 1;
  int nodes = 1;
};

class CostModel {
 public:
  explicit CostModel(HardwareProfile profile) : profile_(std::move(profile)) {}
  double seconds(const OpCost& cost) const;
  // A GEMM: by the profile's curve for its dtype and size where it has one, else its single
  // efficiency (see HardwareProfile::gemm_curve).
  double gemm_seconds(const OpCost& cost) const;
  // A collective over ranks 0..world_size−1, rank i on device i of the profile (so the ring spans
  // ⌈n / devices_per_node⌉ nodes). `bytes` is S: the tensor of all_reduce, broadcast, reduce,
  // send and recv; the whole (size × piece) buffer of all_gather, reduce_scatter, scatter, gather.
  // For send / recv, `crosses_nodes` says the peer is on another node.
  // `cold`: the share of the data past the host's cache (HardwareProfile::cold_share) — on a
  // calibrated host a collective is the ranks' threads copying and adding, slowed as its copies
  // are (not a send or recv: a pipeline stage sends what it has just made).
  double collective_seconds(Collective op, double bytes, int world_size, bool crosses_nodes = false,
                            double cold = 0) const {
    return collective_choice(op, bytes, world_size, contiguous(world_size), crosses_nodes, cold).seconds;
  }
  // The same price, with the algorithm and protocol that give it (bench comm's table, scale's plot).
  CollectiveChoice collective_choice(Collective op, double bytes, int world_size, bool crosses_nodes = false,
                                     double cold = 0) const {
    return collective_choice(op, bytes, world_size, contiguous(world_size), crosses_nodes, cold);
  }
  // A collective of n ranks that sit `where`: a sub-group's, priced on its members' nodes — a
  // tensor-parallel group of 8 inside a node {8, 1} on NVLink, a data-parallel group of 64 with
  // one rank per node {1, 64} on the NICs. (Uneven: the fullest node's count, and the nodes.)
  double collective_seconds(Collective op, double bytes, int n, RankPlacement where, bool crosses_nodes = false,
                            double cold = 0) const {
    return collective_choice(op, bytes, n, where, crosses_nodes, cold).seconds;
  }
  CollectiveChoice collective_choice(Collective op, double bytes, int n, RankPlacement where,
                                     bool crosses_nodes = false, double cold = 0) const;
  // Ranks 0..n−1 filling nodes in order: min(n, devices_per_node) on each of ⌈n / that⌉ nodes.
  RankPlacement contiguous(int n) const;
  const HardwareProfile& profile() const { return profile_; }
  // The bandwidth a ring over k ranks on each of m nodes moves each rank's share at: the links'
  // achieved bandwidth, capped by the cube mesh, the host's PCIe and the nodes' NICs.
  double ring_bandwidth(int k, int m) const;

 private:
  HardwareProfile profile_;
};

}  // namespace scalelab
