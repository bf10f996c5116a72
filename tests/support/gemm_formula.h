#pragma once
// The cost model's GEMM formula as DESIGN.md writes it ("The cost model"), for tests that price ops
// by hand: with the profile's curve for the dtype, max(flops / (peak × curve(m·n·k)), bytes / mem_bw)
// (the curve's time is the whole call); without one, max(flops / (peak × efficiency), bytes / mem_bw)
// + launch. m·n·k is flops / 2.
#include <algorithm>

#include "core/device/sim/profile.h"

namespace scalelab {

inline double gemm_formula_seconds(const HardwareProfile& p, DType d, double flops, double bytes) {
  const double peak = d == DType::f16 ? p.peak_flops_f16 : d == DType::bf16 ? p.peak_flops_bf16 : p.peak_flops_f32;
  const SizeCurve& curve = d == DType::f16 ? p.gemm_curves.f16 : d == DType::bf16 ? p.gemm_curves.bf16 : p.gemm_curves.f32;
  if (!curve.empty()) return std::max(flops / (peak * curve.at(flops / 2)), bytes / p.mem_bandwidth_Bps);
  return std::max(flops / (peak * p.gemm_efficiency), bytes / p.mem_bandwidth_Bps) + p.launch_overhead_s;
}

}  // namespace scalelab
