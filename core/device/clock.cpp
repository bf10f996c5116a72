#include "core/device/clock.h"

#include <algorithm>
#include <cmath>

namespace scalelab {

int64_t seconds_to_ns(double s) { return static_cast<int64_t>(std::llround(s * 1e9)); }

void HostCores::acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t ticket = next_ticket_++;
  turn_.wait(lock, [&] { return serving_ == ticket; });
}

void HostCores::release() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++serving_;
  }
  turn_.notify_all();
}

HostCores& host_cores() {
  static HostCores cores;
  return cores;
}

Interval WallClock::run(Lane lane, int64_t, const OpCost&, const std::function<void()>& work) {
  struct Turn {  // released even when the op throws
    HostCores* cores;
    explicit Turn(HostCores* c) : cores(c) { if (cores) cores->acquire(); }
    ~Turn() { if (cores) cores->release(); }
  } turn(lane == Lane::compute || lane == Lane::copy ? cores_ : nullptr);
  Interval i;
  i.begin_ns = now_ns();
  if (work) work();
  i.end_ns = now_ns();
  return i;
}

int64_t WallClock::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count();
}

Interval SimClock::run(Lane lane, int64_t ready_ns, const OpCost& cost, const std::function<void()>& work) {
  if (work) work();
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t& free = lane_free_ns_[static_cast<int>(lane)];
  Interval i;
  i.begin_ns = std::max(free, ready_ns);
  i.end_ns = i.begin_ns + seconds_to_ns(model_->seconds(cost));
  free = i.end_ns;
  return i;
}

Interval SimClock::occupy(Lane lane, int64_t begin_ns, int64_t duration_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t& free = lane_free_ns_[static_cast<int>(lane)];
  Interval i;
  i.begin_ns = std::max(free, begin_ns);
  i.end_ns = i.begin_ns + duration_ns;
  free = i.end_ns;
  return i;
}

int64_t SimClock::lane_free_ns(Lane lane) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lane_free_ns_[static_cast<int>(lane)];
}

int64_t SimClock::now_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return *std::max_element(lane_free_ns_.begin(), lane_free_ns_.end());
}

}  // namespace scalelab
