#include "core/device/sim/cost_model.h"

#include <algorithm>
#include <cmath>

namespace scalelab {

double CostModel::seconds(const OpCost& c) const {
  const HardwareProfile& p = profile_;
  switch (c.cls) {
    case OpClass::gemm: return gemm_seconds(c);
    case OpClass::elementwise: return c.bytes / p.mem_bandwidth_Bps + p.launch_overhead_s;
    case OpClass::copy_host: return p.host_link.latency_s + c.bytes / p.host_link.bandwidth_Bps;
    case OpClass::copy_peer: return p.intra_node.latency_s + c.bytes / p.intra_node.bandwidth_Bps;
    case OpClass::none: return 0;
  }
  return 0;
}

double CostModel::gemm_seconds(const OpCost& c) const {
  const HardwareProfile& p = profile_;
  const double memory = c.bytes / p.mem_bandwidth_Bps;
  if (const GemmCurve* curve = p.gemm_curve(c.dtype)) {
    // Measured whole calls: the curve already holds the launch and the small-size fall-off.
    const double size = c.m > 0 && c.n > 0 && c.k > 0 ? c.m * c.n * c.k : c.flops / 2;
    return std::max(c.flops / (p.gemm_peak_flops(c.dtype) * curve->at(size)), memory);
  }
  const double compute = c.flops / (p.gemm_peak_flops(c.dtype) * p.gemm_efficiency);
  return std::max(compute, memory) + p.launch_overhead_s;
}

double CostModel::collective_seconds(Collective op, double S, int n, bool crosses_nodes) const {
  const HardwareProfile& p = profile_;
  const LinkSpec& intra = p.intra_node;
  const LinkSpec& inter = p.inter_node;
  if (op == Collective::send || op == Collective::recv) {
    const LinkSpec& l = crosses_nodes ? inter : intra;
    return l.latency_s + S / l.bandwidth_Bps;
  }
  if (n <= 1) return 0;
  // Ranks fill nodes in order: k ranks on each of m nodes.
  const int k = std::min(n, p.devices_per_node);
  const int m = (n + k - 1) / k;
  // One ring level over r participants and a link: the steps and the share of S each step moves.
  auto ring = [](int r, double steps_per_rank, const LinkSpec& l, double bytes) {
    if (r <= 1) return 0.0;
    return steps_per_rank * (r - 1) * l.latency_s + steps_per_rank * (r - 1) / r * bytes / l.bandwidth_Bps;
  };
  switch (op) {
    case Collective::all_reduce:
      // Hierarchical: reduce-scatter inside each node, all-reduce of each 1/k shard across nodes,
      // all-gather inside each node. With one node it is the plain ring 2(n−1)α + 2(n−1)/n · S/B.
      return ring(k, 2, intra, S) + ring(m, 2, inter, S / k);
    case Collective::reduce_scatter:
    case Collective::all_gather: return ring(k, 1, intra, S) + ring(m, 1, inter, S / k);
    case Collective::broadcast:
    case Collective::reduce: {
      // A pipelined chain: every hop's latency, and S once through the slowest link.
      const double bw = m > 1 ? std::min(intra.bandwidth_Bps, inter.bandwidth_Bps) : intra.bandwidth_Bps;
      return (k - 1) * intra.latency_s + (m - 1) * inter.latency_s + S / bw;
    }
    case Collective::scatter:
    case Collective::gather: {
      // The root's link carries everyone else's share.
      const LinkSpec& l = m > 1 ? (inter.bandwidth_Bps < intra.bandwidth_Bps ? inter : intra) : intra;
      return (n - 1) * l.latency_s + static_cast<double>(n - 1) / n * S / l.bandwidth_Bps;
    }
    case Collective::barrier: {
      // Dissemination: ⌈log2 n⌉ rounds of one message.
      const double rounds = std::ceil(std::log2(static_cast<double>(n)));
      return rounds * (m > 1 ? inter.latency_s : intra.latency_s);
    }
    default: return 0;
  }
}

}  // namespace scalelab
