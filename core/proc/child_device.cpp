#include "core/proc/child_device.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/error.h"

namespace scalelab {

DeviceOptions with_parent_epoch(DeviceOptions run, Device& parent) {
  if (!run.epoch) run.epoch = std::chrono::steady_clock::now() - std::chrono::nanoseconds(parent.clock().now_ns());
  return run;
}

std::unique_ptr<Device> make_child_device(DeviceOptions run, int index, EventBus& bus) {
  run.first_index = index;
  if (run.run_count == 0) run.run_count = run.count;
  run.count = 1;
  run.bus = &bus;
  return std::move(make_devices(run).front());
}

DeviceMirror::DeviceMirror(DeviceMirror&& other) noexcept
    : device_(other.device_), who_(std::move(other.who_)), mirrored_(std::exchange(other.mirrored_, {})) {}

DeviceMirror::~DeviceMirror() {
  for (int c = 0; c < kMemoryCategoryCount; ++c) device_->memory().release(static_cast<MemoryCategory>(c), mirrored_[c]);
}

int64_t DeviceMirror::take(Records records) {
  int64_t latest = 0;
  for (Event& e : records.events) {
    latest = std::max(latest, e.t_end_ns);
    device_->record(std::move(e));
  }
  for (const DeviceRecord& d : records.devices)
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
      const int64_t more = d.peak[c] - mirrored_[c];
      if (more <= 0) continue;
      try {
        device_->memory().allocate(static_cast<MemoryCategory>(c), more, who_ + " (mirrored)");
        mirrored_[c] += more;
      } catch (const Error&) {
        // Peaks of different categories at different times may add up past the capacity: the
        // child's own ledger, which saw the real total, did not overflow. Skip the mirror.
      }
    }
  return latest;
}

int64_t DeviceMirror::dispatch(int64_t step, int64_t ready_ns, int64_t bytes, const std::string& name,
                               const std::function<void()>& copy) {
  device_->set_step(step);
  const Interval iv =
      device_->clock().run(Lane::host, ready_ns, {OpClass::copy_host, 0, static_cast<double>(bytes), DType::f32}, copy);
  device_->record({.lane = Lane::host, .kind = "dispatch", .name = name, .phase = Phase::data, .t_begin_ns = iv.begin_ns,
                   .t_end_ns = iv.end_ns, .bytes = bytes});
  return iv.end_ns;
}

}  // namespace scalelab
