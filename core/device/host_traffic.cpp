#include "core/device/host_traffic.h"

#include <map>

#include "core/trace/events.h"

namespace scalelab {

namespace {

uint64_t next_meter_serial() {
  static std::atomic<uint64_t> serial{0};
  return serial++;
}

// What the calling thread has seen of the devices it drives: per meter (serial), its step bytes,
// peak memory and memory shared with the run's other devices as of the thread's last op on it —
// the devices of one run (`run`). Only the calling thread's own record is read, so the sums do not
// depend on how other threads race.
struct ThreadDevices {
  uint64_t run = UINT64_MAX;
  std::map<uint64_t, HostTraffic> seen;
};
thread_local ThreadDevices t_devices;

}  // namespace

HostTrafficMeter::HostTrafficMeter() : serial_(next_meter_serial()), run_(serial_) {}

HostTraffic HostTrafficMeter::traffic(int64_t held) const {
  ThreadDevices& mine = t_devices;
  if (mine.run != run_) {
    mine.seen.clear();
    mine.run = run_;
  }
  const HostTraffic own{step_bytes(), static_cast<double>(held), 1, shared_with_run_bytes_.load()};
  // A device that more than one thread drives in a step (data parallel's: the controller's copies,
  // the replica's compute) stands alone.
  if (driven_by_several_) {
    mine.seen.erase(serial_);
    return own;
  }
  mine.seen[serial_] = own;
  HostTraffic t;
  for (const auto& [serial, bytes] : mine.seen) {
    t.moved += bytes.moved;
    t.held += bytes.held;
    t.shared += bytes.shared;
  }
  t.devices = static_cast<int>(mine.seen.size());
  return t;
}

HostTraffic HostTrafficMeter::before_op(double bytes, int64_t held, bool in_step) {
  if (in_step) {
    int driver = -1;
    const int me = host_thread_index();
    if (!driver_thread_.compare_exchange_strong(driver, me) && driver != me) driven_by_several_ = true;
  }
  const HostTraffic t = traffic(held);
  step_bytes_ = step_bytes_.load() + bytes;
  return t;
}

}  // namespace scalelab
