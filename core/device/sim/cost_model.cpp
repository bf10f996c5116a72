#include "core/device/sim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace scalelab {

namespace {

// A copy over a link: measured whole copies where the link has a curve, else α + bytes / B.
double copy_seconds(const LinkSpec& link, double bytes, double cold = 0) {
  if (!link.curve.empty() && bytes > 0) return bytes / (link.bandwidth_Bps * link.curve.at(bytes, cold));
  return link.latency_s + bytes / link.bandwidth_Bps;
}

}  // namespace

double CostModel::seconds(const OpCost& c) const {
  const HardwareProfile& p = profile_;
  const double cold = p.cold_share(c.host_bytes);
  switch (c.cls) {
    case OpClass::gemm: return gemm_seconds(c);
    case OpClass::elementwise: {
      // Measured whole calls of this kind where the profile has them (launch included).
      const auto curve = c.kind ? p.elementwise_curves.find(c.kind) : p.elementwise_curves.end();
      if (curve != p.elementwise_curves.end() && c.bytes > 0)
        return c.bytes / (p.mem_bandwidth_Bps * curve->second.at(c.bytes, cold));
      return c.bytes / p.mem_bandwidth_Bps + p.launch_overhead_s;
    }
    case OpClass::copy_host: return copy_seconds(p.host_link, c.bytes, cold);
    case OpClass::copy_peer: return copy_seconds(p.intra_node, c.bytes, cold);
    case OpClass::none: return 0;
  }
  return 0;
}

namespace {

// NCCL's three protocols (its tuning model, src/graph/tuning.cc), as shares of what Simple gets:
//   LL     every 8-byte store carries 4 bytes of data and a 4-byte flag, so no fence is needed: the
//          cheapest step, but NCCL prices its bandwidth at 1/3 of the link (1/4 for all-reduce)
//   LL128  128-byte lines with 8 bytes of flag: 120/128 of the bandwidth, a middling step
//   Simple whole buffers behind a fence: all of the bandwidth, the dearest step
// The step costs are NCCL's NVLink ring latencies (0.6, 1.9, 3.4 µs) relative to Simple's.
double protocol_bandwidth(Protocol p, Collective op) {
  switch (p) {
    case Protocol::ll: return op == Collective::all_reduce ? 1.0 / 4 : 1.0 / 3;
    case Protocol::ll128: return 120.0 / 128;
    case Protocol::simple: return 1.0;
  }
  return 1.0;
}
double protocol_step(Protocol p) {
  switch (p) {
    case Protocol::ll: return 0.6 / 3.4;
    case Protocol::ll128: return 1.9 / 3.4;
    case Protocol::simple: return 1.0;
  }
  return 1.0;
}

}  // namespace

double CostModel::ring_bandwidth(int k, int m) const {
  const HardwareProfile& p = profile_;
  const CollectiveSpec& c = p.collectives;
  // What NCCL achieves of the links inside a node (protocol overhead, synchronisation).
  double bw = p.intra_node.bandwidth_Bps * c.intra_efficiency;
  // Hybrid cube mesh: a ring over k GPUs uses only the links that join them.
  if (!c.ring_links.empty() && c.links_per_device > 0) {
    int links = c.ring_links.front().second;
    for (const auto& [ranks, l] : c.ring_links)
      if (ranks <= k) links = l;
    bw *= static_cast<double>(links) / c.links_per_device;
  }
  // PCIe through the host: the k devices' traffic all crosses the host's root complex at once.
  if (c.shared_host_Bps > 0) bw = std::min(bw, c.shared_host_Bps / k);
  // Across nodes every ring crosses each node boundary, so a node's k NICs carry what each GPU
  // sends; the NVLink steps run meanwhile (overlapped), and the slower of the two sets the pace.
  if (m > 1) bw = std::min(bw, k * p.inter_node.bandwidth_Bps * c.inter_efficiency);
  return bw;
}

double CostModel::gemm_seconds(const OpCost& c) const {
  const HardwareProfile& p = profile_;
  const bool tf32 = p.tf32 && p.peak_flops_tf32 > 0;
  const GemmTable* table = p.calibration ? &p.calibration->gemm_table : nullptr;
  if (c.dtype == DType::f32 && !tf32 && table && !table->empty() && c.m > 0 && c.n > 0 && c.k > 0) {
    const double measured = table->seconds(c.m, c.n, c.k, c.trans_a, c.trans_b, p.cold_share(c.host_bytes),
                                                 c.accumulates);
    if (measured > 0) return measured;  // whole calls, as measured: launch and memory included
  }
  const double memory = c.bytes / p.mem_bandwidth_Bps;
  if (const SizeCurve* curve = p.gemm_curve(c.dtype)) {
    // Measured whole calls: the curve already holds the launch and the small-size fall-off.
    const double size = c.m > 0 && c.n > 0 && c.k > 0 ? c.m * c.n * c.k : c.flops / 2;
    return std::max(c.flops / (p.gemm_peak_flops(c.dtype) * curve->at(size)), memory);
  }
  const double compute = c.flops / (p.gemm_peak_flops(c.dtype) * p.gemm_efficiency);
  return std::max(compute, memory) + p.launch_overhead_s;
}

RankPlacement CostModel::contiguous(int n) const {
  const int k = std::max(1, std::min(n, profile_.devices_per_node));
  return {k, (n + k - 1) / k};
}

CollectiveChoice CostModel::collective_choice(Collective op, double S, int n, RankPlacement where, bool crosses_nodes,
                                              double cold) const {
  const HardwareProfile& p = profile_;
  // A calibrated host's collectives were measured hot, as its copies were: past the cache the part
  // that moves bytes (not the fixed part: the ranks' hand-offs) slows down as a copy of S does.
  // Not a send or a recv: what a pipeline stage sends it has just made. Nor where the turns keep to
  // one core (turns_on_one_core): the ranks copy and add on that core, slower than DRAM serves them.
  const SizeCurve& copies = p.intra_node.curve;
  const bool point_to_point = op == Collective::send || op == Collective::recv;
  if (cold > 0 && S > 0 && !point_to_point && !(p.calibration && p.calibration->turns_on_one_core) && !copies.empty() && !copies.efficiency_cold.empty()) {
    CollectiveChoice hot = collective_choice(op, S, n, where, crosses_nodes);
    const double fixed = collective_seconds(op, 0, n, where, crosses_nodes);
    hot.seconds = fixed + (hot.seconds - fixed) * copies.at(S) / copies.at(S, cold);
    return hot;
  }
  const CollectiveSpec& c = p.collectives;
  // Timed on this host, on these ranks: the measurement, not a closed form. A message is timed
  // between 2 ranks, whatever the group's size: only its two ends take part.
  if (p.calibration && !crosses_nodes) {
    const auto& timed_here = p.calibration->collectives;
    if (point_to_point)
      if (const auto timed = timed_here.find({collective_name(Collective::send), 2}); timed != timed_here.end())
        return {timed->second.at(S), "timed"};
    if (const auto timed = timed_here.find({collective_name(op), n}); timed != timed_here.end() && where.nodes == 1)
      return {timed->second.at(S), "timed"};
  }
  const LinkSpec& intra = p.intra_node;
  const LinkSpec& inter = p.inter_node;
  if (op == Collective::send || op == Collective::recv) {
    // A point-to-point copy: the link's own α and raw bandwidth (or measured curve), like a peer copy.
    return {copy_seconds(crosses_nodes ? inter : intra, S), "p2p"};
  }
  if (n <= 1) return {};
  // k ranks on each of m nodes.
  const int k = std::max(1, where.per_node);
  const int m = std::max(1, where.nodes);
  // The kernel launch, and the network proxy's start when the collective leaves the node.
  const double fixed = c.launch_s + (m > 1 ? c.net_overhead_s : 0.0);
  const double bw = ring_bandwidth(k, m);
  // NCCL prices every (algorithm, protocol) pair and runs the fastest; so does the model.
  CollectiveChoice best{std::numeric_limits<double>::infinity()};
  auto consider = [&](double seconds, const char* algorithm, const char* protocol) {
    if (seconds < best.seconds) best = {seconds, algorithm, protocol};
  };
  // A ring of `steps` steps, `inter_steps` of them between nodes, each rank moving `share` × S.
  auto ring = [&](int steps, int inter_steps, double share, const char* algorithm = "ring") {
    for (Protocol q : c.protocols) {
      const double step_costs = (steps - inter_steps) * c.intra_hop_s + inter_steps * c.inter_hop_s;
      consider(fixed + protocol_step(q) * step_costs + share * S / (bw * protocol_bandwidth(q, op)), algorithm, protocol_name(q));
    }
  };
  switch (op) {
    case Collective::all_reduce:
      // Ring: reduce-scatter then all-gather, 2(n−1) steps moving 2(n−1)/n · S.
      ring(2 * (n - 1), 2 * (m - 1), 2.0 * (n - 1) / n);
      if (c.tree && m > 1) {
        // Tree (NCCL's double binary tree): a chain inside the node and ⌈log2 m⌉ levels across
        // nodes, up to reduce and down to broadcast: few steps, so it wins on small messages.
        // Each tree leaves a node through one NIC (two trees: two NICs), and NCCL rates it at
        // 0.92 of that bandwidth.
        const double levels = std::ceil(std::log2(static_cast<double>(m)));
        const double tree_bw = 0.92 * std::min(bw, 2 * inter.bandwidth_Bps * c.inter_efficiency);
        for (Protocol q : c.protocols)
          consider(fixed + protocol_step(q) * 2 * ((k - 1) * c.intra_hop_s + levels * c.inter_hop_s) +
                       2 * S / (tree_bw * protocol_bandwidth(q, op)),
                   "tree", protocol_name(q));
      }
      if (c.nvls_efficiency > 0 && m == 1)
        // NVLink SHARP: the NVSwitch adds the GPUs' data, so each GPU sends S and reads the sum
        // once (not 2(n−1)/n · S); it has its own, larger, fixed cost.
        consider(fixed + c.nvls_latency_s + S / (intra.bandwidth_Bps * c.nvls_efficiency), "NVLS", "Simple");
      if (c.nvls_efficiency > 0 && m > 1) {
        // NVLS-tree: the NVSwitch reduces inside each node, the nodes' sums go up and down NCCL's
        // double binary tree, the switch broadcasts the result. Every GPU's NICs carry 1/k of the
        // node's sum, so a node sends and receives S (2 nodes) — not 2(n−1)/n · S as in the ring;
        // from 3 nodes an inner tree node also takes its children's halves: 2S each way. Simple only.
        const double levels = std::ceil(std::log2(static_cast<double>(m)));
        const double traffic = m == 2 ? 1.0 : 2.0;
        const double nvls_tree_bw = std::min(intra.bandwidth_Bps * c.nvls_efficiency,
                                             k * inter.bandwidth_Bps * c.inter_efficiency / traffic);
        consider(fixed + c.nvls_latency_s + c.nvls_tree_latency_s + 2 * levels * c.inter_hop_s + S / nvls_tree_bw,
                 "NVLS-tree", "Simple");
      }
      return best;
    case Collective::reduce_scatter:
    case Collective::all_gather: ring(n - 1, m - 1, static_cast<double>(n - 1) / n); return best;
    case Collective::broadcast:
    case Collective::reduce:
      // A pipelined chain: every hop's step, and S once through the ring's bandwidth.
      ring(n - 1, m - 1, 1.0, "chain");
      return best;
    case Collective::scatter:
    case Collective::gather: {
      // The root's link carries everyone else's share, one message after another.
      const bool via_nic = m > 1 && inter.bandwidth_Bps < intra.bandwidth_Bps;
      const double root_bw = via_nic ? inter.bandwidth_Bps * c.inter_efficiency : intra.bandwidth_Bps * c.intra_efficiency;
      const double hop = via_nic ? c.inter_hop_s : c.intra_hop_s;
      return {fixed + (n - 1) * hop + static_cast<double>(n - 1) / n * S / root_bw, "direct"};
    }
    case Collective::barrier: {
      // Dissemination: ⌈log2 n⌉ rounds of one message.
      const double rounds = std::ceil(std::log2(static_cast<double>(n)));
      return {fixed + rounds * (m > 1 ? c.inter_hop_s : c.intra_hop_s), "dissemination"};
    }
    default: return {};
  }
}

}  // namespace scalelab
