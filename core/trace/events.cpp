#include "core/trace/events.h"

#include <algorithm>
#include <atomic>

namespace scalelab {

int host_thread_index() {
  static std::atomic<int> next{0};
  thread_local const int index = next.fetch_add(1);
  return index;
}

const char* lane_name(Lane lane) {
  switch (lane) {
    case Lane::compute: return "compute";
    case Lane::comm: return "comm";
    case Lane::copy: return "copy";
    case Lane::host: return "host";
  }
  return "?";
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::fwd: return "fwd";
    case Phase::bwd: return "bwd";
    case Phase::optim: return "optim";
    case Phase::comm: return "comm";
    case Phase::data: return "data";
    case Phase::eval: return "eval";
  }
  return "?";
}

const char* role_name(Role role) {
  switch (role) {
    case Role::none: return "none";
    case Role::scatter: return "scatter";
    case Role::replicate: return "replicate";
    case Role::gather: return "gather";
    case Role::reduce: return "reduce";
    case Role::all_reduce: return "all_reduce";
    case Role::broadcast: return "broadcast";
    case Role::all_gather: return "all_gather";
    case Role::reduce_scatter: return "reduce_scatter";
    case Role::send: return "send";
    case Role::recv: return "recv";
    case Role::barrier: return "barrier";
    case Role::upload: return "upload";
    case Role::download: return "download";
  }
  return "?";
}

Role parse_role(const std::string& name) {
  for (int r = 0; r < kRoleCount; ++r)
    if (name == role_name(static_cast<Role>(r))) return static_cast<Role>(r);
  return Role::none;
}

void EventBus::emit(Event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  latest_end_ns_ = std::max(latest_end_ns_, e.t_end_ns);
  events_.push_back(std::move(e));
}
void EventBus::emit(MemorySample m) {
  std::lock_guard<std::mutex> lock(mutex_);
  memory_.push_back(m);
}
void EventBus::emit(Metric m) {
  std::lock_guard<std::mutex> lock(mutex_);
  metrics_.push_back(std::move(m));
}

template <typename T>
static std::vector<T> tail_of(const std::vector<T>& v, size_t first) {
  if (first >= v.size()) return {};
  return std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(first), v.end());
}

std::vector<Event> EventBus::events_since(size_t first) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tail_of(events_, first);
}
std::vector<MemorySample> EventBus::memory_since(size_t first) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tail_of(memory_, first);
}
std::vector<Metric> EventBus::metrics_since(size_t first) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tail_of(metrics_, first);
}
size_t EventBus::event_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}
int64_t EventBus::latest_end_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_end_ns_;
}
void EventBus::describe_device(int index, DeviceDescription description) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (index < 0) return;
  if (static_cast<size_t>(index) >= devices_.size()) devices_.resize(static_cast<size_t>(index) + 1);
  devices_[static_cast<size_t>(index)] = std::move(description);
}
std::vector<DeviceDescription> EventBus::devices() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return devices_;
}
void EventBus::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  latest_end_ns_ = 0;
  devices_.clear();
  events_.clear();
  memory_.clear();
  metrics_.clear();
}

}  // namespace scalelab
