#pragma once
// The clock of a device stamps each op with a begin and end time in ns since the run began.
// Each lane (stream) runs one op at a time; an op starts when its lane is free and its inputs
// are ready. The wall clock measures (cpu); the sim clock prices the op with a cost model.
#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "core/device/sim/cost_model.h"
#include "core/trace/events.h"

namespace scalelab {

struct Interval {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

class Clock {
 public:
  virtual ~Clock() = default;
  // Runs `work` (the numerics) and returns when the op ran on `lane`, given that its inputs are
  // ready at `ready_ns`.
  virtual Interval run(Lane lane, int64_t ready_ns, const OpCost& cost, const std::function<void()>& work) = 0;
  // The latest time anything on this device has reached: where memory samples are stamped.
  virtual int64_t now_ns() const = 0;
  virtual bool simulated() const = 0;
};

// The host's cores, shared by every cpu device of this process: one op at a time, with all
// the cores (OpenBLAS's threads), in the order the devices asked — as the kernels of N logical
// devices share one GPU. Without it N device threads each start OpenBLAS's threads on the same
// cores, which spin against each other, and how long an op takes would depend on what the other
// devices happen to do: nothing a model can price.
// The thread that holds the turn keeps to one core, OpenBLAS's helpers to the others
// (keep_turns_off_blas_helper_cores, core/device/host_cores.h).
class HostCores {
 public:
  void acquire();
  void release() noexcept;

 private:
  std::mutex mutex_;
  std::condition_variable turn_;
  uint64_t next_ticket_ = 0;
  uint64_t serving_ = 0;
};
HostCores& host_cores();  // this process's

// Measured time: ops run synchronously on the calling thread and are timed with steady_clock. A
// compute or copy op (on the cpu device a copy is a memcpy: the cores' work too) waits for the
// host's cores first (`cores`, when given), and its time is from when it got them. Collectives do
// not: a rank waits in them for the others.
class WallClock : public Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  explicit WallClock(time_point epoch = std::chrono::steady_clock::now(), HostCores* cores = nullptr)
      : epoch_(epoch), cores_(cores) {}
  Interval run(Lane lane, int64_t ready_ns, const OpCost& cost, const std::function<void()>& work) override;
  int64_t now_ns() const override;
  bool simulated() const override { return false; }

 private:
  time_point epoch_;
  HostCores* cores_;
};

// Modelled time: durations come from the cost model, so the same run gives the same times on any
// machine. The numerics still run on the host (or not at all in a dry run).
//
// The device's link (its NVLink port) is shared: a peer copy (copy lane) and a collective or
// point-to-point call inside the node (comm lane) that overlap in simulated time split its
// bandwidth. Each op keeps a share of the link busy (bytes over the link ÷ (B × its duration));
// the op placed second runs, while the first lasts, at min(1, (1 − first's share) ÷ its share) of
// its own speed — two transfers at the full link end after their combined bytes ÷ B. Only this
// device's clock is read (a device's ops are placed by the one thread that drives it, in program
// order), so the same run gives the same times; an op already placed is never moved.
class SimClock : public Clock {
 public:
  // `devices_on_host`: how many devices of the run share this one's host (its node): an op's
  // host_bytes, this device's step, is taken as theirs together (they move about as much each).
  explicit SimClock(std::shared_ptr<const CostModel> model, int devices_on_host = 1)
      : model_(std::move(model)), devices_on_host_(devices_on_host) {}
  Interval run(Lane lane, int64_t ready_ns, const OpCost& cost, const std::function<void()>& work) override;
  int64_t now_ns() const override;
  bool simulated() const override { return true; }
  // Occupies `lane` from `begin_ns` for `duration_ns` (stretched where it shares the link): for
  // collectives, whose start the process group decides. `link_share`: the share of the link the
  // op keeps busy, in [0, 1]; 0 for none.
  Interval occupy(Lane lane, int64_t begin_ns, int64_t duration_ns, double link_share = 0);
  int64_t lane_free_ns(Lane lane) const;
  const CostModel& model() const { return *model_; }
  // What passes through the host's cache between two touches of a tensor used once a step, for
  // the `moved` and `held` bytes of `devices` devices (HardwareProfile::bytes_between_touches: one
  // thread's devices, Device::host_traffic), taken as the same for each such share of the host's —
  // but for the `shared` bytes of them that every device maps, which the host holds once.
  double host_bytes_between_touches(double moved, double held, int devices = 1, double shared = 0) const {
    const double shares = static_cast<double>(devices_on_host_) / std::max(1, devices);
    const double one_share = model_->profile().bytes_between_touches(moved, held);
    return std::max(0.0, one_share * shares - std::min(shared, one_share) * std::max(0.0, shares - 1));
  }

 private:
  struct LinkUse {
    int64_t begin_ns, end_ns;
    double share;
  };
  // Under mutex_: places an op on `lane` and returns when it ran.
  Interval place(Lane lane, int64_t begin_ns, int64_t duration_ns, double link_share);

  std::shared_ptr<const CostModel> model_;
  int devices_on_host_;
  mutable std::mutex mutex_;
  std::array<int64_t, kLaneCount> lane_free_ns_{};
  // Per lane (copy: peer copies; comm: calls), in time order: the link's ops that may still overlap
  // a new op on the other lane — those ending after it is free, at most kLinkHistory of them.
  static constexpr size_t kLinkHistory = 64;
  std::array<std::deque<LinkUse>, kLaneCount> link_uses_;
};

// The sim clock's horizon: 2^62 ns, about 146 years. A duration is held at it, and an op that would
// end past it is refused: int64 ns overflow past 292 years, and the sum of two times under the
// horizon never does.
constexpr int64_t kSimHorizonNs = int64_t{1} << 62;
// Seconds as ns, rounded: a NaN or negative duration is 0, a longer one than the horizon the horizon.
int64_t seconds_to_ns(double s);
// a + b for times and durations ≥ 0, held at the horizon.
int64_t add_ns(int64_t a, int64_t b);

}  // namespace scalelab
