#pragma once
// Where the dashboard's model gets its data. A replayed trace fills it once; a live run will fill
// it from the EventBus each frame (a BusSource calling events_since(n) and DashboardModel::append),
// and the panels, which read only the model, will not know the difference.
#include <functional>
#include <memory>
#include <string>

#include "viz/model/dashboard_model.h"

namespace scalelab::viz {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Brings new data into the model; returns true when something arrived (the model was rebuilt).
  virtual bool update(DashboardModel& model) = 0;
  // True while more data may come (a live run); a replay is complete from the start.
  virtual bool live() const = 0;
};

// A trace written by `scalelab train --trace FILE`, read once.
class ReplaySource : public DataSource {
 public:
  // Reads the file now, so a bad file is reported before any window opens. Throws Error("dash", ...)
  // naming the file and what to do.
  // `copies` > 1 (benchmarks only) lays the run that many times end to end, as a longer run.
  explicit ReplaySource(std::string path, int copies = 1);
  bool update(DashboardModel& model) override;
  bool live() const override { return false; }

 private:
  std::string path_;
  TraceContents contents_;
  bool delivered_ = false;
};

// A run in progress: each update() takes what the EventBus received since the last one. This is
// the seam for the live launch panel (training on a background thread emits into the bus; the
// dashboard's frame loop calls update()).
class BusSource : public DataSource {
 public:
  // `finished` (optional) says the run has ended: the update after it derives the model exactly.
  BusSource(const EventBus& bus, TraceInfo info, std::function<bool()> finished = {})
      : bus_(bus), info_(std::move(info)), finished_(std::move(finished)) {}
  bool update(DashboardModel& model) override;
  bool live() const override { return true; }

 private:
  const EventBus& bus_;
  TraceInfo info_;
  std::function<bool()> finished_;
  size_t events_ = 0, memory_ = 0, metrics_ = 0;  // how much of the bus the model already holds
  bool started_ = false;
  bool exact_ = false;  // rebuilt after the run finished
};

// The trace's run `copies` times end to end (each copy later by the run's span, its steps and
// flows numbered after the previous copy's): a long run for benchmarks without a file that size.
void tile_trace(TraceContents& t, int copies);

// Loads a trace into a fresh model (for --describe, tests, and the replay source).
void load_replay(const std::string& path, DashboardModel& model);

}  // namespace scalelab::viz
