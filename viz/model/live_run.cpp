#include "viz/model/live_run.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/limits.h"
#include "strategies/strategy.h"

namespace scalelab::viz {

namespace {

// The timeline draws every device it is given, grouped by node past a few dozen: a live run keeps
// every op of every device, where `scalelab train` tallies those past the first 16.
TrainConfig every_op_kept(TrainConfig config) {
  config.detailed_devices = std::max(config.detailed_devices, config.devices);
  return config;
}

}  // namespace

LiveRun::LiveRun(TrainConfig config, double speed, bool start_paused) : config_(every_op_kept(std::move(config))) {
  if (config_.launch != Launch::threads)
    throw UsageError("dash", "--launch " + std::string(launch_name(config_.launch)) +
                                 ": the dashboard runs every rank as a thread of its own process (--launch threads); "
                                 "to watch a procs or mpirun launch, replay its trace (--trace, then --replay)");
  if (!(speed >= 0) || !std::isfinite(speed))
    throw UsageError("dash", "--speed " + std::to_string(speed) + ": simulated seconds per wall second must be ≥ 0 (0: as fast as it can)");
  config_.validate();
  find_strategy(config_.strategy);  // an unknown name fails here, not on the thread
  speed_ = speed;
  state_ = start_paused ? State::paused : State::running;
  anchor_wall_ = WallClock::now();
  thread_ = start_thread([this] { run(); });
}

LiveRun::~LiveRun() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void LiveRun::run() {
  try {
    TrainResult r = train(config_, bus_, [this](const Progress& p) { after_step(p); }, &stop_requested_);
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = r.stopped ? State::stopped : State::finished;
    result_ = std::move(r);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = State::failed;
    error_ = e.what();
  }
  changed_.notify_all();
}

int64_t LiveRun::playback_locked(WallClock::time_point now) const {
  if (state_ == State::paused || state_ == State::failed || !clock_started_) return anchor_sim_ns_;
  const double wall_ns = std::chrono::duration<double, std::nano>(now - anchor_wall_).count();
  return anchor_sim_ns_ + static_cast<int64_t>(speed_ * wall_ns);
}

void LiveRun::reanchor_locked(WallClock::time_point now) {
  anchor_sim_ns_ = std::min(playback_locked(now), bus_.latest_end_ns());
  anchor_wall_ = now;
}

void LiveRun::after_step(const Progress& p) {
  steps_done_ = p.step;
  total_steps_ = p.total;
  std::unique_lock<std::mutex> lock(mutex_);
  step_end_ns_ = bus_.latest_end_ns();
  if (!clock_started_) {
    // The playback clock starts where the first step's work began, at this moment.
    std::vector<Event> first = bus_.events();
    int64_t begin = step_end_ns_;
    for (const Event& e : first)
      if (e.step >= 0) begin = std::min(begin, e.t_begin_ns);
    anchor_sim_ns_ = begin;
    anchor_wall_ = WallClock::now();
    clock_started_ = true;
  }
  while (!stop_requested_.load()) {
    if (state_ == State::paused) {
      changed_.wait(lock);
      continue;
    }
    if (paced_locked()) {
      const auto now = WallClock::now();
      const int64_t behind_ns = step_end_ns_ - playback_locked(now);
      if (behind_ns > 0) {
        // Sleep until the playback clock reaches the step's end (woken early by any control).
        const auto wait = std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(behind_ns) / speed_));
        changed_.wait_for(lock, std::min<std::chrono::nanoseconds>(wait, std::chrono::milliseconds(100)));
        continue;
      }
    }
    if (pause_at_steps_ >= 0 && steps_done_.load() >= pause_at_steps_) {
      pause_at_steps_ = -1;
      anchor_sim_ns_ = paced_locked() ? step_end_ns_ : bus_.latest_end_ns();
      state_ = State::paused;
      continue;
    }
    break;
  }
}

void LiveRun::pause() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ != State::running) return;
  reanchor_locked(WallClock::now());
  state_ = State::paused;
  changed_.notify_all();
}

void LiveRun::resume() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ != State::paused) return;
  anchor_wall_ = WallClock::now();
  pause_at_steps_ = -1;
  state_ = State::running;
  changed_.notify_all();
}

void LiveRun::step() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == State::running) {
    pause_at_steps_ = steps_done_.load() + 1;
  } else if (state_ == State::paused) {
    // Mid-way through playing a step: finish it. At its end: run the next and play it.
    const bool step_not_played = paced_locked() && anchor_sim_ns_ < step_end_ns_;
    pause_at_steps_ = steps_done_.load() + (step_not_played ? 0 : 1);
    anchor_wall_ = WallClock::now();
    state_ = State::running;
  }
  changed_.notify_all();
}

void LiveRun::stop() {
  stop_requested_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  changed_.notify_all();
}

void LiveRun::set_speed(double sim_s_per_wall_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!(sim_s_per_wall_s >= 0) || !std::isfinite(sim_s_per_wall_s)) return;
  reanchor_locked(WallClock::now());
  speed_ = sim_s_per_wall_s;
  changed_.notify_all();
}

LiveRun::State LiveRun::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

const char* LiveRun::state_name(State s) {
  switch (s) {
    case State::running: return "running";
    case State::paused: return "paused";
    case State::finished: return "finished";
    case State::stopped: return "stopped";
    case State::failed: return "failed";
  }
  return "?";
}

bool LiveRun::done() const {
  const State s = state();
  return s == State::finished || s == State::stopped || s == State::failed;
}

double LiveRun::speed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return speed_;
}

bool LiveRun::paced_locked() const { return config_.device == DeviceKind::sim && speed_ > 0; }
bool LiveRun::paced() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return paced_locked();
}

int64_t LiveRun::playback_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t latest = bus_.latest_end_ns();
  if (!paced_locked()) return latest;
  return std::min(playback_locked(WallClock::now()), latest);
}

TraceInfo LiveRun::info() const {
  TraceInfo ti;
  ti.devices = bus_.devices();
  ti.title = "live: --strategy " + config_.strategy + " --device " + device_kind_name(config_.device) +
             (config_.device == DeviceKind::sim ? " --hw " + config_.hw : "") + " --devices " +
             std::to_string(config_.devices) + " --model " + config_.model + layout_words(config_);
  ti.simulated = config_.device == DeviceKind::sim;
  return ti;
}

std::string LiveRun::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::optional<TrainResult> LiveRun::result() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return result_;
}

}  // namespace scalelab::viz
