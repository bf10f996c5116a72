#include "calibration/probes.h"

namespace scalelab {

const std::vector<CalibrationProbe>& calibration_probes() {
  static const std::vector<CalibrationProbe> probes = {
      {"host_cache", "y += x on 8 MiB after touching more and more other memory (three sweeps), and after touching it four times",
       "host_cache_bytes, host_cache_curve, host_cache_retouch", true, false},
      {"turns", "the devices' threads taking turns for a layer's forward (a GEMM, then its bias+ReLU), against one thread",
       "turn_handoff_s, turn_gemm_extra_s, turns_on_one_core", true, false},
      {"gemm", "Device::gemm over a grid of MLP shapes (forward, dW, dx) in rounds: hot, cold (caches flushed), adding to C; "
               "on cuda each dtype (f32, bf16, f16)",
       "peak_flops, gemm_efficiency, gemm_curves, gemm_table", true, true},
      {"elementwise", "each element-wise kind a step makes (sgd, adam, bias+ReLU, axpy, …) over sizes 4× apart, hot and cold",
       "mem_bandwidth_Bps, elementwise_curves, launch_overhead_s (cpu: α of axpy and bias+ReLU)", true, true},
      {"launch", "a tiny op (scale of 256 floats) called back to back", "launch_overhead_s", false, true},
      {"host_gap", "a short run of single: the host's time from one op's end to the next op's start within a step",
       "host_op_gap_s", false, true},
      {"device_memory", "one large copy inside the device", "mem_bandwidth_Bps (the larger of it and the element-wise best)",
       false, true},
      {"host_copy", "Device::upload by size (cuda: also downloads), hot and cold", "links.host", true, true},
      {"peer_copy", "Device::copy between two devices by size, hot and cold", "links.intra_node", true, true},
      {"collectives", "the threads backend's all_reduce, reduce_scatter, all_gather on --devices and 2 ranks and a send between 2, "
                      "as `bench comm` times them (cpu full run: shm's all_reduce too, for the record)",
       "collectives (intra_hop_s, intra_efficiency, measured)", true, true},
      {"core_round_trip", "a cache line from the turn-taker's core to OpenBLAS's helper's and back (start, middle, end)",
       "core_round_trip_s (not priced: bench predict compares it with now)", true, false},
  };
  return probes;
}

std::string format_calibration_probes() {
  std::string out = "# scalelab calibrate: the probes, about in the order they run (fields are device.* unless named)\n";
  for (const CalibrationProbe& p : calibration_probes()) {
    const std::string devices = p.cpu && p.cuda ? "cpu, cuda" : p.cpu ? "cpu" : "cuda";
    const std::string name = p.name;
    out += name + std::string(name.size() < 16 ? 16 - name.size() : 1, ' ') + devices + "\n";
    out += "    measures  " + std::string(p.measures) + "\n";
    out += "    writes    " + std::string(p.writes) + "\n";
  }
  return out;
}

}  // namespace scalelab
