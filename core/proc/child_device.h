#pragma once
// A child process's device. The child computes on a device of its own — its own ledger and event
// bus, in its own process — made as the run's devices are; it ships its records to the parent
// through a message area (core/proc/message_area.h). In the parent a device of the run stands for it, and a
// DeviceMirror puts the child's records there: its events on the run's bus under that device, its
// ledger's peaks into that device's ledger — so the trace and the summary show the child's work.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/device/device.h"
#include "core/trace/wire.h"

namespace scalelab {

// In the parent, before forking: the run's options with the epoch of `parent`'s clock (if unset),
// so that the children's measured clocks count from it and their events land on the run's time
// axis (a modelled clock ignores it).
DeviceOptions with_parent_epoch(DeviceOptions run, Device& parent);

// In the child: device `index` of the run, made by the run's options, recording on `bus`.
std::unique_ptr<Device> make_child_device(DeviceOptions run, int index, EventBus& bus);

class DeviceMirror {
 public:
  // `who` names the child in the ledger ("worker 2").
  DeviceMirror(Device& device, std::string who) : device_(&device), who_(std::move(who)) {}
  ~DeviceMirror();  // releases what it mirrored into the device's ledger; never throws
  DeviceMirror(DeviceMirror&& other) noexcept;
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  DeviceMirror& operator=(DeviceMirror&&) = delete;

  // Records the child's events on the device and raises its ledger to the peaks the child's ledger
  // saw (peaks only grow: only the excess is allocated). Returns the latest end of the events (0: none).
  int64_t take(Records records);

  // The parent's own work for the child in `step` (the device's step from now on) — handing it its
  // input: `copy`, timed on the device's host lane from `ready_ns` as a host copy of `bytes`, and
  // recorded there as a "dispatch" named `name`. Returns when it ends.
  int64_t dispatch(int64_t step, int64_t ready_ns, int64_t bytes, const std::string& name,
                   const std::function<void()>& copy);

 private:
  Device* device_;
  std::string who_;
  std::array<int64_t, kMemoryCategoryCount> mirrored_{};  // bytes allocated for it, by category
};

}  // namespace scalelab
