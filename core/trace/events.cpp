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
    case Phase::wgrad: return "wgrad";
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

namespace {

// Appends [b, e), merged into the last interval where it starts inside it or where it ends.
void append_interval(DeviceTally::Intervals& v, int64_t b, int64_t e) {
  if (e <= b) return;
  if (!v.empty() && b >= v.back().first && b <= v.back().second) {
    v.back().second = std::max(v.back().second, e);
    return;
  }
  v.emplace_back(b, e);
}

}  // namespace

void DeviceTally::add(const Event& e) {
  ++events;
  t_begin_ns = std::min(t_begin_ns, e.t_begin_ns);
  t_end_ns = std::max(t_end_ns, e.t_end_ns);
  append_interval(lanes[static_cast<int>(e.lane)], e.t_begin_ns, e.t_end_ns);
  if (e.step >= 0) {
    step_begin_ns = std::min(step_begin_ns, e.t_begin_ns);
    step_end_ns = std::max(step_end_ns, e.t_end_ns);
    if (e.lane == Lane::compute) append_interval(step_compute, e.t_begin_ns, e.t_end_ns);
  }
  flops += e.flops;
  if (e.lane == Lane::comm || e.lane == Lane::copy) bytes_moved += e.bytes;
}

void DeviceTally::add(const MemorySample& m) {
  const int c = static_cast<int>(m.category);
  live[c] = m.bytes;
  peak_bytes[c] = std::max(peak_bytes[c], m.bytes);
  int64_t total = 0;
  for (int64_t v : live) total += v;
  peak_total = std::max(peak_total, total);
}

void EventBus::tally_devices(int first, int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  first_tallied_ = std::max(first, 0);
  tallies_.clear();
  for (int d = first_tallied_; d < count; ++d) {
    tallies_.push_back(std::make_unique<TallySlot>());
    tallies_.back()->tally.device = d;
  }
}

EventBus::TallySlot* EventBus::tally_slot(int device) const {
  if (device < first_tallied_) return nullptr;
  const size_t i = static_cast<size_t>(device - first_tallied_);
  return i < tallies_.size() ? tallies_[i].get() : nullptr;
}

void EventBus::note_end(int64_t t_end_ns) {
  int64_t seen = latest_end_ns_.load(std::memory_order_relaxed);
  while (t_end_ns > seen && !latest_end_ns_.compare_exchange_weak(seen, t_end_ns, std::memory_order_relaxed)) {
  }
}

void EventBus::emit(Event e) {
  note_end(e.t_end_ns);
  if (TallySlot* slot = tally_slot(e.device)) {
    std::lock_guard<std::mutex> lock(slot->mutex);
    slot->tally.add(e);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(e));
}
void EventBus::emit(MemorySample m) {
  if (TallySlot* slot = tally_slot(m.device)) {
    std::lock_guard<std::mutex> lock(slot->mutex);
    slot->tally.add(m);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  memory_.push_back(m);
}
std::vector<DeviceTally> EventBus::tallies() const {
  std::vector<DeviceTally> out;
  out.reserve(tallies_.size());
  for (const auto& slot : tallies_) {
    std::lock_guard<std::mutex> lock(slot->mutex);
    out.push_back(slot->tally);
  }
  return out;
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
int64_t EventBus::latest_end_ns() const { return latest_end_ns_.load(std::memory_order_relaxed); }
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
  first_tallied_ = INT_MAX;
  tallies_.clear();
  devices_.clear();
  events_.clear();
  memory_.clear();
  metrics_.clear();
}

}  // namespace scalelab
