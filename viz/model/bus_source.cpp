#include "viz/model/data_source.h"

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
  // Asked before the bus is read: a run that has finished has emitted all it will.
  const bool finished = finished_ && finished_();
  std::vector<Event> events = bus_.events_since(events_);
  std::vector<MemorySample> memory = bus_.memory_since(memory_);
  std::vector<Metric> metrics = bus_.metrics_since(metrics_);
  if (events.empty() && memory.empty() && metrics.empty() && !renamed) {
    if (!finished || exact_) return false;
    model.rebuild();  // the run is over: its metrics exact, not a quarter behind
    exact_ = true;
    return true;
  }
  events_ += events.size();
  memory_ += memory.size();
  metrics_ += metrics.size();
  model.append(std::move(events), std::move(memory), std::move(metrics));
  // Only the new events are taken in (rows, levels, steps, gaps extended), so an update costs what
  // arrived, not the whole run; when the run has finished, everything is derived once, exactly.
  if (finished) {
    model.rebuild();
    exact_ = true;
  } else {
    model.extend();
  }
  return true;
}

}  // namespace scalelab::viz
