#pragma once
// The dashboard: a data source fills the model, the panels draw it, the replay bar moves the
// cursor. It makes ImGui calls only (between ImGui::NewFrame and ImGui::Render); the window
// backend is elsewhere, so the same dashboard can be drawn into any ImGui host.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "viz/model/dashboard_model.h"
#include "viz/model/data_source.h"
#include "viz/panel.h"

namespace scalelab::viz {

class Dashboard {
 public:
  explicit Dashboard(std::unique_ptr<DataSource> source);

  // Replaces what the dashboard shows (a new live run): the model starts empty, the view over.
  void set_source(std::unique_ptr<DataSource> source);
  bool live() const { return source_ && source_->live(); }
  // Pulls what the source has new into the model (frame() does this first).
  void update();

  // One frame: pulls new data, advances the cursor when playing (dt_s: wall seconds since the
  // last frame), lays out and draws the replay bar and every panel that applies, in the area from
  // `left` to `width` (a live dashboard keeps the launch panel on the left).
  void frame(float width, float height, double dt_s, float left = 0);

  // A live run's playback clock: while view().follow_live, the cursor sits there and the
  // timeline shows the step it is in. Scrubbing stops following.
  void follow(int64_t cursor_ns);

  // Puts the cursor in a step (index into model().steps()) at `fraction` of it (0 = its start,
  // 1 = its end), picks the step (ViewState::picked_step) and fits the timeline around it.
  void select_step(int step_index, double fraction = 1.0);
  // The timeline shows the whole run.
  void fit_run();

  const DashboardModel& model() const { return model_; }
  ViewState& view() { return view_; }
  // Titles of the windows drawn in the last frame: the replay bar, then the panels shown.
  std::vector<std::string> shown_windows() const;

  // A picture of one panel (the slides' figures): from now on frame() draws only this panel,
  // filling the whole area, with no replay bar, and view().picture is set. `name` is the title in lower case with '-' for
  // spaces (timeline, buckets, pipeline, data-parallel, topology, memory, training); an unknown
  // name, or a panel that does not apply to the run, is a UsageError naming those that do.
  void show_only(const std::string& name);
  // The names show_only takes, in layout order; check_panel_name throws the UsageError for any other.
  static std::vector<std::string> panel_names();
  static void check_panel_name(const std::string& name);

  static constexpr const char* kReplayTitle = "Replay";
  static constexpr const char* kLiveTitle = "Run";  // the same bar over a live run

 private:
  std::unique_ptr<DataSource> source_;
  DashboardModel model_;
  ViewState view_;
  std::vector<std::unique_ptr<Panel>> panels_;
  std::vector<Panel*> shown_;
  Panel* only_ = nullptr;  // show_only's panel, or none
  uint64_t applies_version_ = 0;  // model version the shown_ list was made for
  // What the shown_ list was made from: a live model that only grew by a little keeps it (each
  // applies() may read every event), a panel shown stays shown.
  uint64_t applies_layout_ = 0;
  size_t applies_events_ = 0;
  float laid_out_w_ = 0, laid_out_h_ = 0;
  size_t laid_out_count_ = 0;
  bool first_data_ = true;
  float laid_out_left_ = 0;
  // What the Run bar says the figures are (modelled on which profile, or measured), remade when the
  // model is: the tooltip's details parse a profile.
  RunProvenance provenance_;
  uint64_t provenance_version_ = UINT64_MAX;
  // A live source's update derives the model again; an unpaced run can emit faster than that is
  // worth doing, so once an update takes over 2 ms the next waits 3 times as long.
  std::chrono::steady_clock::time_point next_live_update_{};

  void draw_replay_bar(bool relayout, float left, float width, float height);
  void advance_cursor(double dt_s);
};

// What --describe prints: the trace's counts (events, steps, buckets, bubbles, transfers) and the
// panels that apply, as "key: value" lines a test or a shell can read.
std::string describe(const DashboardModel& model);

}  // namespace scalelab::viz
