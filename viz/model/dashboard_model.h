#pragma once
// The dashboard's one model: the events, memory samples and metrics of a run, and what every panel
// derives from them (rows of the timeline, training steps, idle gaps, memory at a time, the run's
// metrics). A source fills it: a replayed trace does so once, a live run (later: the EventBus)
// appends as it goes. Panels only read it; what the user changes (cursor, zoom) is in ViewState.
//
// This header needs no ImGui, so tests and `--describe` use it without a window.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/device/sim/profile.h"
#include "core/trace/chrome_trace.h"
#include "core/trace/events.h"
#include "core/trace/metrics.h"

namespace scalelab::viz {

// A piece of a row's coverage at one level of detail: a single event, or a run of events each
// narrower than the level's width with gaps narrower than it, merged. It keeps which events it
// holds (a range of the row) and their time per phase, so it is drawn as they would be.
struct CoveragePiece {
  int64_t begin_ns = 0, end_ns = 0;
  uint32_t first = 0, count = 0;  // the row's events [first, first + count)
  std::array<float, kPhaseCount> phase_ns{};
};

// The row seen at `width_ns` resolution: drawn when a pixel is at least that wide, every gap it
// bridged is narrower than a pixel, so it covers the same pixel columns as the events themselves,
// and it has a few pieces per pixel however many events there are.
struct CoverageLevel {
  int64_t width_ns = 0;
  std::vector<CoveragePiece> pieces;    // by begin
  std::vector<int64_t> end_prefix_max;  // as TimelineRow's, for the first visible piece
};

// One row of the timeline: the events of one device on one lane, sorted by begin time. The running
// maximum of end times makes "first event that ends after t" a binary search even when events of
// a lane overlap (they may: a measured clock is not a perfect stream).
struct TimelineRow {
  int device = 0;
  Lane lane = Lane::compute;
  std::vector<uint32_t> events;         // indices into DashboardModel::events()
  std::vector<int64_t> begin_ns;        // begin of each, sorted
  std::vector<int64_t> end_prefix_max;  // max end of events[0..i]
  // What drawing needs, stored contiguously: an Event is ~150 bytes with two strings, and reaching
  // 100 000 of them through `events` every frame is mostly cache misses.
  std::vector<int64_t> end_ns;
  std::vector<Phase> phase;

  // Coarser and coarser coverage (width doubling; a level is kept when it has at most half the
  // pieces of the finer one), built with the row.
  std::vector<CoverageLevel> levels;
  // How many of the row's events (the first ones) the levels hold. A live row's new events are
  // coarsened onto them (extend_levels); a row that had too few events for levels draws the ones
  // past this count one by one until it has enough.
  size_t levels_events = 0;
  size_t levels_built_events = 0;  // of which build_levels() saw (the rest came by extend_levels())

  // Index of the first event that may be visible in [t0, t1): ends after t0.
  size_t first_ending_after(int64_t t0) const;
  // One past the last event that begins before t1.
  size_t last_beginning_before(int64_t t1) const;
  // The coarsest level whose width is at most `ns_per_px` (nullptr: draw the events themselves).
  const CoverageLevel* level_for(double ns_per_px) const;
  // Fills `levels` from the events (begin_ns, end_ns, phase).
  void build_levels();
  // Appends to each level the pieces of the events after levels_events (a live row that grew by
  // events beginning after its last): O(new events). A piece does not merge across the seam, which
  // costs a piece a level, not a pixel of coverage.
  void extend_levels();
};

// A training step: every event with that step number (steps overlap a little: the next batch is
// uploaded while the last optimizer step runs).
struct StepSpan {
  int64_t step = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  std::vector<uint32_t> events;  // indices into events(), sorted by begin
};

struct DeviceInfo {
  std::string name;              // as the trace names it: "sim:0 (a100-nvlink-8)"
  std::string label;             // short, for row labels: "sim:0"
  std::optional<HardwareProfile> profile;  // sim: the hardware profile the trace carries
  int64_t capacity_bytes = 0;    // 0 when unknown (cpu, or a trace without profiles)
};

using Interval = std::pair<int64_t, int64_t>;

class DashboardModel {
 public:
  // --- filling (a source calls these) ---
  void clear();
  void set_info(TraceInfo info, std::string origin);
  void append(std::vector<Event> events, std::vector<MemorySample> memory, std::vector<Metric> metrics);
  // Derives everything below from what was appended; call once after a batch of appends.
  void rebuild();
  // As rebuild(), from the events appended since the last rebuild() or extend() alone (a live
  // run's new events): rows, levels of detail, steps, idle gaps and memory are extended, not made
  // again. The run's metrics (compute_metrics) are redone when the events have grown by a quarter,
  // so they may lag a live run a little; rebuild() makes everything exact. Falls back to rebuild()
  // where new data changes the layout (a new device or lane, an event before the run's start).
  void extend();

  // --- reading (panels call these) ---
  const TraceInfo& info() const { return info_; }
  const std::string& origin() const { return origin_; }  // the file replayed, or "live"
  const std::vector<Event>& events() const { return events_; }
  // In time order after rebuild(); extend() appends a live run's newest in the order they came.
  const std::vector<MemorySample>& memory() const { return memory_; }
  const std::vector<Metric>& metrics() const { return metrics_; }
  const RunMetrics& run_metrics() const { return run_metrics_; }
  const std::vector<TimelineRow>& rows() const { return rows_; }
  // With more than kGroupDevicesAbove devices: a row per (group, lane), a group being a node's
  // devices (the profile's devices per node, else 8): device d is in group d / group_size(), and a
  // group row's `device` is the group's index. Empty (and group_size() 0) otherwise.
  static constexpr int kGroupDevicesAbove = 16;
  const std::vector<TimelineRow>& group_rows() const { return group_rows_; }
  int group_size() const { return group_size_; }
  const std::vector<StepSpan>& steps() const { return steps_; }  // in order of begin time
  const std::vector<DeviceInfo>& devices() const { return devices_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  // The first device's hardware profile, if any (every device of a sim run has the same).
  const std::optional<HardwareProfile>& profile() const { return profile_; }
  int64_t t_begin_ns() const { return t_begin_ns_; }
  int64_t t_end_ns() const { return t_end_ns_; }
  // Bumped by rebuild(): panels that cache their analysis redo it when it changes.
  uint64_t version() const { return version_; }
  // Bumped by rebuild() only: what panels derived from all events must be derived again (extend()
  // only appends events, so a panel may take in just the new ones).
  uint64_t layout_version() const { return layout_version_; }

  // Index into steps() of the step running at t: the last that began at or before t (0 before
  // the first); -1 when there are no steps.
  int step_index_at(int64_t t) const;
  // Live bytes of each memory category on `device` at time t (the last sample at or before t).
  std::array<int64_t, kMemoryCategoryCount> memory_at(int device, int64_t t) const;
  // Times when no lane of the device was active, within the run's span (what metrics call idle).
  const std::vector<Interval>& idle_gaps(int device) const;
  // The device's idle gaps in time order, at least those `min_ns` long (and perhaps some shorter):
  // what a zoomed-out timeline can show without walking every tiny gap.
  const std::vector<Interval>& idle_gaps_at_least(int device, double min_ns) const;
  // Metric values by step for one name (loss, accuracy ...), in step order.
  std::vector<std::pair<int64_t, double>> metric_series(const std::string& name) const;

 private:
  void sort_by_begin(std::vector<uint32_t>& idx) const;
  std::vector<TimelineRow> make_rows(const std::function<int(const Event&)>& key_of) const;
  void extend_rows(std::vector<TimelineRow>& rows, const std::vector<int>& row_of, int per, size_t from);
  void build_long_gaps();
  void extend_idle_gaps(int device, int64_t from_ns);

  // What rebuild() or extend() derived from: the first events_ and memory_ entries.
  size_t built_events_ = 0, built_memory_ = 0;
  size_t metrics_events_ = 0;                // events when run_metrics_ was computed
  bool info_changed_ = false;                // set_info since: device names to redo
  int64_t span_end_ns_ = 0;                  // the latest end of any event (t_end_ns_ is at least begin + 1)
  std::vector<int> row_of_;                  // device * kLaneCount + lane → index in rows_, -1: none
  std::map<int64_t, size_t> step_of_;        // step number → index in steps_

  TraceInfo info_;
  std::string origin_;
  std::vector<Event> events_;
  std::vector<MemorySample> memory_;
  std::vector<Metric> metrics_;

  RunMetrics run_metrics_;
  std::vector<TimelineRow> rows_;
  std::vector<TimelineRow> group_rows_;
  int group_size_ = 0;
  std::vector<int> group_row_of_;  // group * kLaneCount + lane → index in group_rows_, -1: none
  std::vector<StepSpan> steps_;
  std::vector<DeviceInfo> devices_;
  std::optional<HardwareProfile> profile_;
  std::vector<std::vector<Interval>> idle_gaps_;  // per device
  // Per device: (minimum length, the gaps at least that long), lengths doubling.
  std::vector<std::vector<std::pair<int64_t, std::vector<Interval>>>> long_gaps_;
  // Per device, per category: (time, live bytes) in time order.
  std::vector<std::array<std::vector<std::pair<int64_t, int64_t>>, kMemoryCategoryCount>> memory_series_;
  int64_t t_begin_ns_ = 0, t_end_ns_ = 0;
  uint64_t version_ = 0;
  uint64_t layout_version_ = 0;
};

// What the user is looking at: shared by all panels, so scrubbing one moves them all.
struct ViewState {
  int64_t cursor_ns = 0;             // the time every panel shows the state at
  double view_begin_ns = 0;          // the timeline's visible range
  double view_end_ns = 1;
  bool playing = false;              // the cursor advances by itself
  double play_steps_per_s = 0.5;     // replay speed: training steps per wall-clock second
  int focus_device = 0;              // the device the Buckets panel follows
  // The step picked (Dashboard::select_step) while the cursor lies in it; -1: none. Steps overlap a
  // little (the next batch's upload starts early), so a cursor at a picked step's end is already
  // past the next one's start: the panels of one step keep showing the step picked.
  int picked_step = -1;
  bool follow_live = true;           // a live run: the cursor follows its playback clock
  // A picture of one panel (--panel, a slide's figure): no controls, hints or window title, only
  // what the figure shows.
  bool picture = false;
  // The timeline shows the rows of these devices and lanes only (empty: all), so that a slide's
  // figure can hold fewer rows at a font size legible from the back of a room.
  std::vector<int> only_devices;
  std::vector<Lane> only_lanes;
  // The Memory panel's axis in bytes (0: the panel's own choice), so that two pictures set side by
  // side share one scale.
  int64_t memory_axis_bytes = 0;
};

// The step the panels of one step show (pipeline, buckets, data parallel, the loss read-out): the
// picked one while the cursor lies in it, else the one the cursor is in (an index into steps()).
int shown_step_index(const DashboardModel& model, const ViewState& view);

// Where the cursor is, for a picture's caption: "at the end of step 12", "at 70% of step 12", or
// "at the cursor" when there are no steps.
std::string cursor_in_words(const DashboardModel& model, const ViewState& view);

// The step span, or the run's span when there are no steps, around which views start.
Interval step_or_run_span(const DashboardModel& model, int step_index);

// What the Run bar says about where the run's figures come from. `summary` (one line): whether the
// times are modelled — by the cost model, and on which profile (a calibrated one with its machine
// and date; whether f32 GEMMs were priced as TF32) — or measured (wall clock, CUDA events), how
// the devices map onto hardware (cpu devices sharing one host's cores), and the profile a
// `--predict` run was priced on. `details` (the tooltip): the profile's figures, line by line.
struct RunProvenance {
  std::string summary;
  std::string details;
};
RunProvenance describe_provenance(const DashboardModel& model);
// A profile as the Run bar names it: "a100-nvlink-8 (published figures)", or for one made by
// `scalelab calibrate` "calibrated-host (calibrated on host, 2026-11-24 01:30 UTC)".
std::string profile_label(const HardwareProfile& profile);

}  // namespace scalelab::viz
