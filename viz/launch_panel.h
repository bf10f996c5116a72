#pragma once
// The launch panel: what to run (strategy, devices, hardware profile, model, batch, and the options
// of the strategy at hand: micro-batches and schedule, bucket size, ZeRO stage, AMP; a GPT's
// recompute) and the run's
// controls (Start, Pause, Step, Stop, and on sim the playback speed in simulated seconds per wall
// second). Starting a run gives the dashboard a BusSource on the run's event bus, so every panel
// shows the run as it happens.
#include <memory>
#include <string>
#include <vector>

#include "strategies/train_config.h"
#include "viz/dashboard.h"
#include "viz/model/live_run.h"

namespace scalelab::viz {

class LaunchPanel {
 public:
  static constexpr const char* kTitle = "Launch";

  // `initial`: what the fields start with (the command line's options); `speed`: simulated
  // seconds per wall second (0: as fast as it can).
  LaunchPanel(Dashboard& dashboard, TrainConfig initial, double speed);

  // Draws the panel at (0, 0) with the given size.
  void draw(float width, float height);

  // Starts a run with the panel's settings (what the Start button does). On bad settings it
  // returns false and the panel shows the error; error() says it too.
  bool start(bool paused = false, bool unpaced = false);
  // The same, throwing what the run's constructor threw (UsageError for bad settings): for the
  // command line, which exits 2 on those.
  void start_or_throw(bool paused = false, bool unpaced = false);
  LiveRun* run() { return run_.get(); }
  const std::string& error() const { return error_; }
  // The config Start would run: the fields of the strategy at hand only (a pipeline's
  // micro-batches are not passed to ddp, which would refuse them).
  TrainConfig config() const;
  double speed() const { return speed_; }

 private:
  Dashboard& dash_;
  TrainConfig fields_;  // what the widgets edit
  double speed_;
  bool paced_ = true;   // false: as fast as it can
  // What the machine offers, read once (a directory scan and a CUDA query are not per-frame work).
  std::vector<std::string> device_kinds_, profiles_;
  std::unique_ptr<LiveRun> run_;
  std::string error_;
  char model_text_[128] = {};

  void draw_settings(bool locked);
  void draw_controls();
  void draw_status();
};

}  // namespace scalelab::viz
