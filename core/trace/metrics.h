#pragma once
// The metrics pass: what a teacher asks about a run, computed from its events. The CLI summary,
// the grader, the dashboard and the benchmarks all use this one code.
#include <array>
#include <cstdint>
#include <vector>

#include "core/trace/events.h"

namespace scalelab {

struct DeviceMetrics {
  int device = 0;
  int64_t compute_ns = 0;  // union of compute-lane intervals
  int64_t comm_ns = 0;     // union of comm-lane intervals
  int64_t copy_ns = 0;     // union of copy-lane intervals
  int64_t idle_ns = 0;     // time in the span when no lane of the device was active
  double busy_pct = 0;     // compute_ns / span
  double comm_pct = 0;     // comm_ns / span
  double idle_pct = 0;     // idle_ns / span
  double overlap_pct = 0;  // share of comm time hidden under compute
  int64_t bytes_moved = 0; // bytes of comm and copy events
  double flops = 0;
  std::array<int64_t, kMemoryCategoryCount> peak_bytes{};  // peak by category from memory samples
  int64_t peak_total = 0;                                   // peak of the sum over categories
};

struct RunMetrics {
  int64_t t_begin_ns = 0;  // the span all percentages are of: first event begin to last end
  int64_t t_end_ns = 0;
  std::vector<DeviceMetrics> per_device;
  double overlap_pct = 0;  // over all devices: comm time under compute ÷ comm time
  // The pipeline's bubbles, and every idle device in general: over the training steps, the share
  // of devices × span in which a device's compute lane stood idle.
  double bubble_fraction = 0;
  int64_t bytes_moved = 0;
  double span_s() const { return static_cast<double>(t_end_ns - t_begin_ns) * 1e-9; }
};

// `device_count` sizes per_device even for devices that emitted nothing; `tallies` stand for the
// devices the bus kept no events of (EventBus::tally_devices), each counted as its events would be.
RunMetrics compute_metrics(const std::vector<Event>& events, const std::vector<MemorySample>& memory,
                           int device_count, const std::vector<DeviceTally>& tallies = {});

// Total length of the union of intervals [begin, end) (unsorted input is fine).
// How long each event took, but for communication the time its data moved rather than the time
// its thread waited for the others — what the sim prices, so that a measured run's time per op
// class compares with a priced one's. A measured recv starts when its thread asks and waits there
// for the send (a pipeline stage's recv: 2.9 ms, its data's move 3 µs on a sim), and a backend
// records a collective in steps (ProcessGroup), its ranks waiting for one another between them;
// the sim prices a send and its recv from when both are ready, and a collective's call as one event
// per rank from when every rank is. So a send and its recv (one flow_id) each count from the later
// of their two starts to their own end; a collective's call, on each rank, from the latest first
// step of any rank to its own last step's end, counted on its first step (its other steps count
// nothing). Every other event counts its length.
std::vector<int64_t> moving_time_ns(const std::vector<Event>& events);

int64_t union_length(std::vector<std::pair<int64_t, int64_t>> intervals);
// Length of the intersection of two interval unions.
int64_t intersection_length(std::vector<std::pair<int64_t, int64_t>> a, std::vector<std::pair<int64_t, int64_t>> b);

}  // namespace scalelab
