#pragma once
// Writes events as a Chrome trace (JSON that Perfetto and chrome://tracing open): pid = device,
// tid = lane, "X" slices for ops, "C" counters for memory by category, "s"/"f" flows for events
// that share a flow_id (a send → its recv, one rank's part of a collective → the others'). The
// devices (names, hardware profiles) go in the metadata. The file is written to a temporary name
// and renamed, so a trace is never left half-written; a path ending in .gz is gzip-compressed
// (the reader takes either).
#include <string>
#include <vector>

#include "core/trace/events.h"

namespace scalelab {

struct TraceInfo {
  std::vector<DeviceDescription> devices;  // index = device: EventBus::devices()
  std::string title;                      // e.g. "scalelab train --strategy single ..."
  bool simulated = false;                 // times are modelled, not measured
  // `train --device cpu --predict PROFILE`: the profile (JSON, as DeviceDescription::profile) the
  // prediction beside this measured run was priced with; "" otherwise.
  std::string predicted_with;
};

void write_chrome_trace(const std::string& path, const std::vector<Event>& events,
                        const std::vector<MemorySample>& memory, const std::vector<Metric>& metrics,
                        const TraceInfo& info);

// Reads a trace written by write_chrome_trace back (for replay in the dashboard, and for tests).
struct TraceContents {
  TraceInfo info;
  std::vector<Event> events;
  std::vector<MemorySample> memory;
  std::vector<Metric> metrics;
};
TraceContents read_chrome_trace(const std::string& path);

}  // namespace scalelab
