#pragma once
// What the devices one host thread drives move through the host's cache in a step: a sim device
// whose profile has a host calibration (HostCalibration::host_cache_bytes) prices each op's data
// hot or cold by it. Only such a device holds a meter; every other device (cpu, cuda, sim on a
// published profile) has none and pays nothing for it.
#include <atomic>
#include <cstdint>

namespace scalelab {

// The bytes a host thread's devices moved in a step and the memory they hold, summed over `devices`
// of them; `shared`: of `held`, what every device of the run maps (Hogwild's shared parameters),
// which the host holds once.
struct HostTraffic {
  double moved = 0, held = 0;
  int devices = 0;
  double shared = 0;
};

class HostTrafficMeter {
 public:
  HostTrafficMeter();
  // One run's devices, made together (make_devices): a thread's record of the devices it drives
  // holds those of one run.
  void same_run_as(const HostTrafficMeter& first) { run_ = first.serial_; }
  // A new step: what the last one moved is the reuse distance of the next.
  void next_step() {
    if (step_bytes_ > 0) last_step_bytes_ = step_bytes_.load();
    step_bytes_ = 0;
  }
  // An op of `bytes` on this meter's device, issued by the calling thread (`in_step`: not set-up,
  // whose weights the main thread places): returns the traffic of the calling thread's devices,
  // this one's as of before the op with them.
  HostTraffic before_op(double bytes, int64_t held, bool in_step);
  // The calling thread's devices' traffic, as of its last op on each (a collective's pricing).
  HostTraffic traffic(int64_t held) const;
  // `bytes` of this device's memory are one segment that every device of the run maps.
  void mark_shared_with_run(double bytes) { shared_with_run_bytes_ = bytes; }

 private:
  double step_bytes() const { return last_step_bytes_.load() > step_bytes_.load() ? last_step_bytes_.load() : step_bytes_.load(); }

  // Unique in this process, never reused; run_: the serial of the first meter of its run.
  uint64_t serial_;
  uint64_t run_;
  // The host thread that runs this device's ops in a step, and whether more than one has (data
  // parallel's controller and a replica's thread): such a device stands alone in the sums.
  std::atomic<int> driver_thread_{-1};
  std::atomic<bool> driven_by_several_{false};
  // Bytes this device's ops read and wrote in this step and in the last one.
  std::atomic<double> step_bytes_{0}, last_step_bytes_{0};
  std::atomic<double> shared_with_run_bytes_{0};
};

}  // namespace scalelab
