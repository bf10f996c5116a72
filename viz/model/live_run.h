#pragma once
// A training run the dashboard started: train() on a background thread, emitting into the run's
// own EventBus, which the dashboard reads every frame (BusSource). No ImGui here: tests drive it.
//
// Between steps the run waits for the viewer, never inside one (no collective is in flight there):
//  - paused, it waits for resume(), step() or stop();
//  - paced (on sim, `speed` simulated seconds per wall second), it waits until the playback clock
//    has reached the end of the step it just ran. The playback clock is where the dashboard puts
//    its cursor, so each step's events are in the bus before the cursor sweeps across them, and
//    the student watches the step unfold at the chosen speed.
// On a measured clock (cpu, cuda) there is nothing to pace: the run goes as fast as it can and the
// playback clock is the latest event's end.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/trace/chrome_trace.h"
#include "run/train.h"

namespace scalelab::viz {

class LiveRun {
 public:
  enum class State { running, paused, finished, stopped, failed };

  // Checks the config (throws UsageError naming the option, before any thread starts) and starts
  // the run. `speed`: simulated seconds per wall second; 0 = as fast as it can.
  LiveRun(TrainConfig config, double speed, bool start_paused = false);
  // Stops the run at its next step boundary and joins the thread. Never throws.
  ~LiveRun();
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;

  void pause();
  void resume();
  // Paused: plays the rest of the step on screen, or runs one more step and plays it, then pauses.
  void step();
  // Ends the run after the step in progress; train() still evaluates and summarises it.
  void stop();
  void set_speed(double sim_s_per_wall_s);

  State state() const;
  static const char* state_name(State s);
  bool done() const;  // finished, stopped or failed
  double speed() const;
  bool paced() const;  // the clock is simulated and speed > 0
  // Where the dashboard's cursor belongs: the playback clock, never past the latest event.
  int64_t playback_ns() const;
  int64_t steps_done() const { return steps_done_.load(); }
  int64_t total_steps() const { return total_steps_.load(); }
  const TrainConfig& config() const { return config_; }
  const EventBus& bus() const { return bus_; }
  // What a trace file's header would say (device names as the devices gave them).
  TraceInfo info() const;
  std::string error() const;                  // failed: what train() threw
  std::optional<TrainResult> result() const;  // finished or stopped

 private:
  using WallClock = std::chrono::steady_clock;

  const TrainConfig config_;
  EventBus bus_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<int64_t> steps_done_{0}, total_steps_{0};

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  State state_ = State::running;
  double speed_ = 0;
  // The playback clock: anchor_sim_ns at anchor_wall, advancing at speed_ while running.
  int64_t anchor_sim_ns_ = 0;
  WallClock::time_point anchor_wall_{};
  bool clock_started_ = false;  // anchored at the first step's begin
  int64_t step_end_ns_ = 0;     // end of the last completed step (latest event then)
  int64_t pause_at_steps_ = -1; // step(): pause once this many steps are done and played
  std::string error_;
  std::optional<TrainResult> result_;
  std::thread thread_;

  bool paced_locked() const;
  int64_t playback_locked(WallClock::time_point now) const;
  void reanchor_locked(WallClock::time_point now);
  void after_step(const Progress& p);  // on the training thread
  void run();
};

}  // namespace scalelab::viz
