#include "viz/data_source.h"

namespace scalelab::viz {

bool BusSource::update(DashboardModel& model) {
  if (!started_) {
    model.clear();
    model.set_info(info_, "live");
    started_ = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (t0 < next_update_) return false;
  // Devices name themselves on the bus as the run makes them, after this source was made.
  bool renamed = false;
  std::vector<std::string> names = bus_.device_names();
  if (!names.empty() && names != info_.device_names) {
    info_.device_names = std::move(names);
    model.set_info(info_, "live");
    renamed = true;
  }
  std::vector<Event> events = bus_.events_since(events_);
  std::vector<MemorySample> memory = bus_.memory_since(memory_);
  std::vector<Metric> metrics = bus_.metrics_since(metrics_);
  if (events.empty() && memory.empty() && metrics.empty() && !renamed) return false;
  events_ += events.size();
  memory_ += memory.size();
  metrics_ += metrics.size();
  model.append(std::move(events), std::move(memory), std::move(metrics));
  // Everything is derived again, spaced out when that gets slow (next_update_). A very long live
  // run would want rebuild() to extend rows and steps incrementally instead.
  model.rebuild();
  const auto took = std::chrono::steady_clock::now() - t0;
  if (took > std::chrono::milliseconds(2)) next_update_ = t0 + 4 * took;
  return true;
}

}  // namespace scalelab::viz
