#include "viz/data_source.h"

namespace scalelab::viz {

bool BusSource::update(DashboardModel& model) {
  if (!started_) {
    model.clear();
    model.set_info(info_, "live");
    started_ = true;
  }
  // Devices describe themselves on the bus as the run makes them, after this source was made.
  bool renamed = false;
  std::vector<DeviceDescription> devices = bus_.devices();
  if (!devices.empty() && devices != info_.devices) {
    info_.devices = std::move(devices);
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
  // Everything is derived again (the dashboard spaces its calls out when that gets slow). A very
  // long live run would want rebuild() to extend rows and steps incrementally instead.
  model.rebuild();
  return true;
}

}  // namespace scalelab::viz
