#pragma once
// The wire codec: what a process recorded (events, memory samples, metrics, its devices' ledgers),
// as bytes another process turns back into the same records. A Hogwild worker ships each round's
// events to its parent with it; a rank of a procs or mpirun launch sends its whole run to rank 0,
// so the summary and the trace hold every device, not just rank 0's.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/trace/events.h"

namespace scalelab {

// A device's memory ledger at the end of a run: what the summary's memory columns show.
struct DeviceRecord {
  int index = 0;
  DeviceDescription description;  // name, label, hardware profile
  int64_t capacity = 0;
  std::array<int64_t, kMemoryCategoryCount> peak{};  // by category
  int64_t peak_total = 0;
};

struct Records {
  std::vector<Event> events;
  std::vector<MemorySample> memory;
  std::vector<Metric> metrics;
  std::vector<DeviceRecord> devices;
  // The devices the bus tallied (EventBus::tally_devices). Only a threads launch tallies, so they
  // never cross processes: encode_records refuses them.
  std::vector<DeviceTally> tallies;
};

// Little-endian, versioned, strings length-prefixed; the layout is this file's business only.
std::vector<uint8_t> encode_records(const Records& records);
// Throws Error("trace", ...) naming what is malformed (truncated, wrong version, a bad enum).
Records decode_records(const uint8_t* data, size_t size);

}  // namespace scalelab
