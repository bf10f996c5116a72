#include "viz/model/dashboard_model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "viz/model/format.h"

namespace scalelab::viz {

size_t TimelineRow::first_ending_after(int64_t t0) const {
  // end_prefix_max is non-decreasing, so the first index whose running max passes t0 is the first
  // event that can still be on screen; everything before it ended earlier.
  return static_cast<size_t>(std::upper_bound(end_prefix_max.begin(), end_prefix_max.end(), t0) -
                             end_prefix_max.begin());
}

size_t TimelineRow::last_beginning_before(int64_t t1) const {
  return static_cast<size_t>(std::lower_bound(begin_ns.begin(), begin_ns.end(), t1) - begin_ns.begin());
}

const CoverageLevel* TimelineRow::level_for(double ns_per_px) const {
  const CoverageLevel* best = nullptr;
  for (const CoverageLevel& l : levels)
    if (static_cast<double>(l.width_ns) <= ns_per_px) best = &l;
  return best;
}

namespace {

// One level from the next finer one: a piece narrower than `width` takes in the following ones
// while they are narrower too, the gap to them is narrower, and it has not grown to `width` itself.
// So only gaps under `width` are bridged, and a zoomed-out row becomes a few pieces per `width`.
std::vector<CoveragePiece> coarsen(const std::vector<CoveragePiece>& finer, int64_t width) {
  std::vector<CoveragePiece> out;
  out.reserve(finer.size() / 2);
  bool open = false, thin = false;
  CoveragePiece cur;
  for (const CoveragePiece& p : finer) {
    const bool p_thin = p.end_ns - p.begin_ns < width;
    if (open && thin && p_thin && p.begin_ns - cur.end_ns < width && cur.end_ns - cur.begin_ns < width) {
      cur.end_ns = std::max(cur.end_ns, p.end_ns);
      cur.count += p.count;
      for (int k = 0; k < kPhaseCount; ++k) cur.phase_ns[static_cast<size_t>(k)] += p.phase_ns[static_cast<size_t>(k)];
      continue;
    }
    if (open) out.push_back(cur);
    cur = p;
    thin = p_thin;
    open = true;
  }
  if (open) out.push_back(cur);
  return out;
}

}  // namespace

void TimelineRow::extend_levels() {
  const size_t n = begin_ns.size();
  if (levels.empty() || levels_events >= n) return;
  std::vector<CoveragePiece> pieces;
  pieces.reserve(n - levels_events);
  for (size_t i = levels_events; i < n; ++i) {
    CoveragePiece p;
    p.begin_ns = begin_ns[i];
    p.end_ns = std::max(end_ns[i], begin_ns[i]);
    p.first = static_cast<uint32_t>(i);
    p.count = 1;
    p.phase_ns[static_cast<size_t>(phase[i])] = static_cast<float>(std::max<int64_t>(p.end_ns - p.begin_ns, 1));
    pieces.push_back(p);
  }
  // Each level from the one finer: any finer list coarsened to a width gives a valid level of it.
  for (CoverageLevel& level : levels) {
    pieces = coarsen(pieces, level.width_ns);
    int64_t max_end = level.end_prefix_max.empty() ? INT64_MIN : level.end_prefix_max.back();
    for (const CoveragePiece& p : pieces) {
      level.pieces.push_back(p);
      level.end_prefix_max.push_back(max_end = std::max(max_end, p.end_ns));
    }
  }
  levels_events = n;
}

void TimelineRow::build_levels() {
  levels.clear();
  const size_t n = begin_ns.size();
  levels_events = n;
  levels_built_events = n;
  if (n < 64) return;  // drawn event by event at any zoom
  std::vector<CoveragePiece> pieces(n);
  int64_t min_dur = INT64_MAX, lo = INT64_MAX, hi = INT64_MIN;
  for (size_t i = 0; i < n; ++i) {
    CoveragePiece& p = pieces[i];
    p.begin_ns = begin_ns[i];
    p.end_ns = std::max(end_ns[i], begin_ns[i]);
    p.first = static_cast<uint32_t>(i);
    p.count = 1;
    p.phase_ns[static_cast<size_t>(phase[i])] = static_cast<float>(std::max<int64_t>(p.end_ns - p.begin_ns, 1));
    if (p.end_ns > p.begin_ns) min_dur = std::min(min_dur, p.end_ns - p.begin_ns);
    lo = std::min(lo, p.begin_ns);
    hi = std::max(hi, p.end_ns);
  }
  // Below the shortest event nothing but zero-length ones would merge: start there.
  int64_t width = 1;
  while (min_dur != INT64_MAX && width * 2 <= min_dur) width *= 2;
  size_t kept = n;
  while (pieces.size() > 8 && width <= std::max<int64_t>(hi - lo, 1)) {
    pieces = coarsen(pieces, width);
    if (pieces.size() * 2 <= kept) {
      CoverageLevel level;
      level.width_ns = width;
      level.pieces = pieces;
      level.end_prefix_max.reserve(pieces.size());
      int64_t max_end = INT64_MIN;
      for (const CoveragePiece& p : pieces) level.end_prefix_max.push_back(max_end = std::max(max_end, p.end_ns));
      kept = pieces.size();
      levels.push_back(std::move(level));
    }
    width *= 2;
  }
}

void DashboardModel::clear() { *this = DashboardModel{}; }

void DashboardModel::set_info(TraceInfo info, std::string origin) {
  info_ = std::move(info);
  origin_ = std::move(origin);
  info_changed_ = true;
}

void DashboardModel::append(std::vector<Event> events, std::vector<MemorySample> memory,
                            std::vector<Metric> metrics) {
  if (events_.empty()) events_ = std::move(events);  // a replay: the whole trace at once, no copy
  else events_.insert(events_.end(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
  memory_.insert(memory_.end(), memory.begin(), memory.end());
  metrics_.insert(metrics_.end(), std::make_move_iterator(metrics.begin()), std::make_move_iterator(metrics.end()));
}

std::vector<TimelineRow> DashboardModel::make_rows(const std::function<int(const Event&)>& key_of) const {
  std::map<std::pair<int, int>, std::vector<uint32_t>> by_row;
  for (uint32_t i = 0; i < events_.size(); ++i) by_row[{key_of(events_[i]), static_cast<int>(events_[i].lane)}].push_back(i);
  std::vector<TimelineRow> rows;
  for (auto& [key, idx] : by_row) {
    TimelineRow row;
    row.device = key.first;
    row.lane = static_cast<Lane>(key.second);
    sort_by_begin(idx);
    row.events = std::move(idx);
    row.begin_ns.reserve(row.events.size());
    row.end_prefix_max.reserve(row.events.size());
    row.end_ns.reserve(row.events.size());
    row.phase.reserve(row.events.size());
    int64_t max_end = INT64_MIN;
    for (uint32_t i : row.events) {
      row.begin_ns.push_back(events_[i].t_begin_ns);
      row.end_ns.push_back(events_[i].t_end_ns);
      row.phase.push_back(events_[i].phase);
      max_end = std::max(max_end, events_[i].t_end_ns);
      row.end_prefix_max.push_back(max_end);
    }
    row.build_levels();
    rows.push_back(std::move(row));
  }
  return rows;
}

// Sorts event indices by begin time, keeping equal ones in order; most arrive sorted already.
void DashboardModel::sort_by_begin(std::vector<uint32_t>& idx) const {
  auto earlier = [&](uint32_t a, uint32_t b) { return events_[a].t_begin_ns < events_[b].t_begin_ns; };
  if (!std::is_sorted(idx.begin(), idx.end(), earlier)) std::stable_sort(idx.begin(), idx.end(), earlier);
}

void DashboardModel::rebuild() {
  // Memory in time order; equal stamps keep emission order, as compute_metrics reads them.
  std::stable_sort(memory_.begin(), memory_.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.t_ns < b.t_ns; });

  int n_devices = static_cast<int>(info_.devices.size());
  for (const Event& e : events_) n_devices = std::max(n_devices, e.device + 1);
  for (const MemorySample& m : memory_) n_devices = std::max(n_devices, m.device + 1);

  // The figures every panel shows come from the one metrics pass.
  run_metrics_ = compute_metrics(events_, memory_, n_devices);
  t_begin_ns_ = run_metrics_.t_begin_ns;
  t_end_ns_ = std::max(run_metrics_.t_end_ns, t_begin_ns_ + 1);

  // Devices, and their capacity from the hardware profile the trace (or the bus) carries (sim only).
  devices_.assign(static_cast<size_t>(n_devices), DeviceInfo{});
  profile_.reset();
  std::map<std::string, std::optional<HardwareProfile>> parsed;  // by JSON text: a profile is parsed once
  for (int d = 0; d < n_devices; ++d) {
    DeviceInfo& info = devices_[static_cast<size_t>(d)];
    const DeviceDescription described =
        d < static_cast<int>(info_.devices.size()) ? info_.devices[static_cast<size_t>(d)] : DeviceDescription{};
    info.name = described.name.empty() ? "device " + std::to_string(d) : described.name;
    info.label = described.label.empty() ? info.name : described.label;
    info.capacity_bytes = described.capacity_bytes;  // a measured device's (cuda: its share of the GPU)
    if (described.profile.empty()) continue;
    auto it = parsed.find(described.profile);
    if (it == parsed.end()) {
      std::optional<HardwareProfile> p;
      try {
        p = parse_profile(described.profile, info.name + "'s profile");
      } catch (const Error&) {
        // A profile this build cannot read (a later format): capacity unknown, and the memory
        // panel says so rather than failing the replay.
      }
      it = parsed.emplace(described.profile, std::move(p)).first;
    }
    info.profile = it->second;
    if (!info.profile) continue;
    info.capacity_bytes = info.profile->mem_capacity_bytes;
    if (!profile_) profile_ = info.profile;
  }

  // Timeline rows: one per (device, lane) that has events, devices in order, lanes in enum order;
  // with many devices, also one per (group of a node's devices, lane), for a timeline that cannot
  // show every device's rows.
  rows_ = make_rows([](const Event& e) { return e.device; });
  group_size_ = 0;
  group_rows_.clear();
  if (n_devices > kGroupDevicesAbove) {
    group_size_ = profile_ && profile_->devices_per_node > 1 && profile_->devices_per_node < n_devices ? profile_->devices_per_node : 8;
    const int per = group_size_;
    group_rows_ = make_rows([per](const Event& e) { return e.device / per; });
  }

  // Steps: events with step ≥ 0, grouped; ordered by when they began.
  std::map<int64_t, StepSpan> by_step;
  StepSpan* last = nullptr;  // events come mostly step by step: look the map up on a change only
  for (uint32_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    if (e.step < 0) continue;
    bool fresh = false;
    if (!last || last->step != e.step) {
      auto [it, inserted] = by_step.try_emplace(e.step);
      fresh = inserted;
      last = &it->second;
    }
    StepSpan& s = *last;
    if (fresh) {
      s.step = e.step;
      s.begin_ns = e.t_begin_ns;
      s.end_ns = e.t_end_ns;
    }
    s.begin_ns = std::min(s.begin_ns, e.t_begin_ns);
    s.end_ns = std::max(s.end_ns, e.t_end_ns);
    s.events.push_back(i);
  }
  steps_.clear();
  for (auto& [step, span] : by_step) {
    sort_by_begin(span.events);
    steps_.push_back(std::move(span));
  }
  std::stable_sort(steps_.begin(), steps_.end(),
                   [](const StepSpan& a, const StepSpan& b) { return a.begin_ns < b.begin_ns; });

  // Idle gaps per device: the complement of all its lanes within the run's span — the same
  // definition as DeviceMetrics::idle_ns, so the shaded gaps add up to the idle share shown.
  idle_gaps_.assign(static_cast<size_t>(n_devices), {});
  {
    // Each row is sorted by begin already: a device's busy intervals are its rows merged.
    std::vector<std::vector<Interval>> busy(static_cast<size_t>(n_devices));
    for (const TimelineRow& row : rows_) {
      if (row.device < 0) continue;
      auto& v = busy[static_cast<size_t>(row.device)];
      const size_t mid = v.size();
      for (size_t k = 0; k < row.begin_ns.size(); ++k)
        if (row.end_ns[k] > row.begin_ns[k]) v.emplace_back(row.begin_ns[k], row.end_ns[k]);
      std::inplace_merge(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end(),
                         [](const Interval& a, const Interval& b) { return a.first < b.first; });
    }
    for (size_t d = 0; d < busy.size(); ++d) {
      auto& v = busy[d];
      int64_t t = run_metrics_.t_begin_ns;
      for (const auto& [b, e] : v) {
        if (b > t) idle_gaps_[d].emplace_back(t, b);
        t = std::max(t, e);
      }
      if (!events_.empty() && run_metrics_.t_end_ns > t) idle_gaps_[d].emplace_back(t, run_metrics_.t_end_ns);
    }
  }
  build_long_gaps();

  // Memory series per device and category, for "live bytes at t" by binary search.
  memory_series_.assign(static_cast<size_t>(n_devices), {});
  for (const MemorySample& m : memory_)
    if (m.device >= 0)
      memory_series_[static_cast<size_t>(m.device)][static_cast<int>(m.category)].emplace_back(m.t_ns, m.bytes);

  built_events_ = events_.size();
  built_memory_ = memory_.size();
  metrics_events_ = events_.size();
  info_changed_ = false;
  span_end_ns_ = run_metrics_.t_end_ns;
  row_of_.assign(static_cast<size_t>(n_devices) * kLaneCount, -1);
  for (size_t r = 0; r < rows_.size(); ++r)
    if (rows_[r].device >= 0) row_of_[static_cast<size_t>(rows_[r].device) * kLaneCount + static_cast<size_t>(rows_[r].lane)] = static_cast<int>(r);
  group_row_of_.assign(group_size_ > 0 ? static_cast<size_t>((n_devices + group_size_ - 1) / group_size_) * kLaneCount : 0, -1);
  for (size_t r = 0; r < group_rows_.size(); ++r)
    group_row_of_[static_cast<size_t>(group_rows_[r].device) * kLaneCount + static_cast<size_t>(group_rows_[r].lane)] = static_cast<int>(r);
  step_of_.clear();
  for (size_t i = 0; i < steps_.size(); ++i) step_of_[steps_[i].step] = i;
  ++version_;
  ++layout_version_;
}

void DashboardModel::build_long_gaps() {
  long_gaps_.assign(idle_gaps_.size(), {});
  for (size_t d = 0; d < idle_gaps_.size(); ++d) {
    long_gaps_[d].reserve(64);  // `finer` points into it: no reallocation
    const std::vector<Interval>* finer = &idle_gaps_[d];
    for (int64_t min_len = 2; finer->size() > 16 && min_len < (int64_t{1} << 60); min_len *= 2) {
      std::vector<Interval> longer;
      for (const Interval& g : *finer)
        if (g.second - g.first >= min_len) longer.push_back(g);
      if (longer.size() * 2 > finer->size()) continue;
      long_gaps_[d].emplace_back(min_len, std::move(longer));
      finer = &long_gaps_[d].back().second;
    }
  }
}

// The device's idle gaps from `from_ns` on made again (nothing before it changed): those that
// began there or later dropped, the one across it cut, then the device's busy intervals that end
// after it swept, up to the run's end.
void DashboardModel::extend_idle_gaps(int device, int64_t from_ns) {
  auto& gaps = idle_gaps_[static_cast<size_t>(device)];
  while (!gaps.empty() && gaps.back().first >= from_ns) gaps.pop_back();
  if (!gaps.empty() && gaps.back().second > from_ns) gaps.back().second = from_ns;
  auto add = [&](int64_t a, int64_t b) {
    if (!gaps.empty() && gaps.back().second == a) gaps.back().second = b;
    else gaps.emplace_back(a, b);
  };
  std::vector<Interval> busy;
  for (const TimelineRow& row : rows_) {
    if (row.device != device) continue;
    for (size_t k = row.first_ending_after(from_ns); k < row.begin_ns.size(); ++k)
      if (row.end_ns[k] > row.begin_ns[k] && row.end_ns[k] > from_ns) busy.emplace_back(row.begin_ns[k], row.end_ns[k]);
  }
  std::sort(busy.begin(), busy.end());
  int64_t t = from_ns;
  for (const auto& [b, e] : busy) {
    if (b > t) add(t, b);
    t = std::max(t, e);
  }
  if (span_end_ns_ > t) add(t, span_end_ns_);
}

void DashboardModel::extend_rows(std::vector<TimelineRow>& rows, const std::vector<int>& row_of, int per, size_t from) {
  std::vector<char> unsorted(rows.size(), 0);
  for (size_t i = from; i < events_.size(); ++i) {
    const Event& e = events_[i];
    const size_t r = static_cast<size_t>(row_of[static_cast<size_t>(e.device / per) * kLaneCount + static_cast<size_t>(e.lane)]);
    TimelineRow& row = rows[r];
    if (!row.begin_ns.empty() && e.t_begin_ns < row.begin_ns.back()) unsorted[r] = 1;
    row.events.push_back(static_cast<uint32_t>(i));
    row.begin_ns.push_back(e.t_begin_ns);
    row.end_ns.push_back(e.t_end_ns);
    row.phase.push_back(e.phase);
    row.end_prefix_max.push_back(std::max(row.end_prefix_max.empty() ? INT64_MIN : row.end_prefix_max.back(), e.t_end_ns));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    TimelineRow& row = rows[r];
    if (unsorted[r]) {
      sort_by_begin(row.events);
      int64_t max_end = INT64_MIN;
      for (size_t k = 0; k < row.events.size(); ++k) {
        const Event& e = events_[row.events[k]];
        row.begin_ns[k] = e.t_begin_ns;
        row.end_ns[k] = e.t_end_ns;
        row.phase[k] = e.phase;
        row.end_prefix_max[k] = max_end = std::max(max_end, e.t_end_ns);
      }
    }
    // Built again when out of order or twice as long (a longer row wants coarser levels on top);
    // otherwise the new events are coarsened onto the levels.
    if (unsorted[r] || row.events.size() >= 2 * row.levels_built_events + 64) row.build_levels();
    else row.extend_levels();
  }
}

void DashboardModel::extend() {
  const size_t from = built_events_, n = events_.size();
  const int n_devices = static_cast<int>(devices_.size());
  bool layout_changed = from == 0 || info_changed_ || static_cast<int>(info_.devices.size()) > n_devices;
  for (size_t i = from; i < n && !layout_changed; ++i) {
    const Event& e = events_[i];
    layout_changed = e.device < 0 || e.device >= n_devices || e.t_begin_ns < t_begin_ns_ ||
                     row_of_[static_cast<size_t>(e.device) * kLaneCount + static_cast<size_t>(e.lane)] < 0 ||
                     (group_size_ > 0 && group_row_of_[static_cast<size_t>(e.device / group_size_) * kLaneCount + static_cast<size_t>(e.lane)] < 0);
  }
  for (size_t i = built_memory_; i < memory_.size() && !layout_changed; ++i)
    layout_changed = memory_[i].device < 0 || memory_[i].device >= n_devices;
  if (layout_changed) {
    rebuild();
    return;
  }

  // Memory: appended to each device's series, a series merged in time order only where one came
  // late (devices interleave on the bus; one device's samples come in its own order). memory_
  // keeps the arrival order until the next rebuild().
  for (size_t i = built_memory_; i < memory_.size(); ++i) {
    const MemorySample& m = memory_[i];
    auto& series = memory_series_[static_cast<size_t>(m.device)][static_cast<int>(m.category)];
    series.emplace_back(m.t_ns, m.bytes);
    for (size_t k = series.size() - 1; k > 0 && series[k - 1].first > series[k].first; --k) std::swap(series[k - 1], series[k]);
  }

  // Rows (and group rows): the new events appended; a row that got one out of order is sorted again.
  std::vector<int64_t> device_from(static_cast<size_t>(n_devices), INT64_MAX);
  for (size_t i = from; i < n; ++i) {
    const Event& e = events_[i];
    device_from[static_cast<size_t>(e.device)] = std::min(device_from[static_cast<size_t>(e.device)], e.t_begin_ns);
    span_end_ns_ = std::max(span_end_ns_, e.t_end_ns);
  }
  extend_rows(rows_, row_of_, 1, from);
  if (group_size_ > 0) extend_rows(group_rows_, group_row_of_, group_size_, from);

  // Steps: new events join their step (a new step is added), each step's events kept by begin.
  bool steps_moved = false;
  std::vector<size_t> resort;
  for (size_t i = from; i < n; ++i) {
    const Event& e = events_[i];
    if (e.step < 0) continue;
    auto it = step_of_.find(e.step);
    if (it == step_of_.end()) {
      StepSpan s;
      s.step = e.step;
      s.begin_ns = e.t_begin_ns;
      s.end_ns = e.t_end_ns;
      if (!steps_.empty() && steps_.back().begin_ns > s.begin_ns) steps_moved = true;
      it = step_of_.emplace(e.step, steps_.size()).first;
      steps_.push_back(std::move(s));
    }
    StepSpan& s = steps_[it->second];
    if (e.t_begin_ns < s.begin_ns) steps_moved = true;
    s.begin_ns = std::min(s.begin_ns, e.t_begin_ns);
    s.end_ns = std::max(s.end_ns, e.t_end_ns);
    if (!s.events.empty() && events_[s.events.back()].t_begin_ns > e.t_begin_ns) resort.push_back(it->second);
    s.events.push_back(static_cast<uint32_t>(i));
  }
  for (size_t k : resort) sort_by_begin(steps_[k].events);
  const auto by_begin = [](const StepSpan& a, const StepSpan& b) { return a.begin_ns < b.begin_ns; };
  if (steps_moved && !std::is_sorted(steps_.begin(), steps_.end(), by_begin)) {
    std::stable_sort(steps_.begin(), steps_.end(), by_begin);
    for (size_t i = 0; i < steps_.size(); ++i) step_of_[steps_[i].step] = i;
  }

  // The run's span, then each device's idle gaps from its first new event (or the old end, where
  // the last gap ran to) on.
  const int64_t old_end = run_metrics_.t_end_ns;
  run_metrics_.t_end_ns = span_end_ns_;
  t_end_ns_ = std::max(span_end_ns_, t_begin_ns_ + 1);
  for (int d = 0; d < n_devices; ++d) extend_idle_gaps(d, std::min(device_from[static_cast<size_t>(d)], old_end));
  build_long_gaps();

  // The metrics pass reads every event: done again when they have grown by a quarter.
  if (n >= metrics_events_ + metrics_events_ / 4 + 1024) {
    run_metrics_ = compute_metrics(events_, memory_, n_devices);
    metrics_events_ = n;
  }
  built_events_ = n;
  built_memory_ = memory_.size();
  ++version_;
}

int shown_step_index(const DashboardModel& model, const ViewState& view) {
  const auto& steps = model.steps();
  if (view.picked_step >= 0 && view.picked_step < static_cast<int>(steps.size())) {
    const StepSpan& s = steps[static_cast<size_t>(view.picked_step)];
    if (view.cursor_ns >= s.begin_ns && view.cursor_ns <= s.end_ns) return view.picked_step;
  }
  return model.step_index_at(view.cursor_ns);
}

std::string cursor_in_words(const DashboardModel& model, const ViewState& view) {
  const int si = shown_step_index(model, view);
  if (si < 0) return "at the cursor";
  const StepSpan& s = model.steps()[static_cast<size_t>(si)];
  const double f = static_cast<double>(view.cursor_ns - s.begin_ns) / static_cast<double>(std::max<int64_t>(s.end_ns - s.begin_ns, 1));
  if (f >= 0.995) return "at the end of step " + std::to_string(s.step);
  return "at " + std::to_string(static_cast<int>(std::lround(100 * std::clamp(f, 0.0, 1.0)))) + "% of step " + std::to_string(s.step);
}

int DashboardModel::step_index_at(int64_t t) const {
  if (steps_.empty()) return -1;
  auto it = std::upper_bound(steps_.begin(), steps_.end(), t,
                             [](int64_t v, const StepSpan& s) { return v < s.begin_ns; });
  if (it == steps_.begin()) return 0;
  return static_cast<int>(it - steps_.begin()) - 1;
}

std::array<int64_t, kMemoryCategoryCount> DashboardModel::memory_at(int device, int64_t t) const {
  std::array<int64_t, kMemoryCategoryCount> live{};
  if (device < 0 || device >= static_cast<int>(memory_series_.size())) return live;
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    const auto& s = memory_series_[static_cast<size_t>(device)][c];
    auto it = std::upper_bound(s.begin(), s.end(), t,
                               [](int64_t v, const std::pair<int64_t, int64_t>& p) { return v < p.first; });
    if (it != s.begin()) live[c] = std::prev(it)->second;
  }
  return live;
}

const std::vector<Interval>& DashboardModel::idle_gaps(int device) const {
  static const std::vector<Interval> none;
  if (device < 0 || device >= static_cast<int>(idle_gaps_.size())) return none;
  return idle_gaps_[static_cast<size_t>(device)];
}

const std::vector<Interval>& DashboardModel::idle_gaps_at_least(int device, double min_ns) const {
  const std::vector<Interval>* best = &idle_gaps(device);
  if (device >= 0 && device < static_cast<int>(long_gaps_.size()))
    for (const auto& [min_len, gaps] : long_gaps_[static_cast<size_t>(device)])
      if (static_cast<double>(min_len) <= min_ns) best = &gaps;
  return *best;
}

std::vector<std::pair<int64_t, double>> DashboardModel::metric_series(const std::string& name) const {
  std::vector<std::pair<int64_t, double>> out;
  for (const Metric& m : metrics_)
    if (m.name == name) out.emplace_back(m.step, m.value);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

Interval step_or_run_span(const DashboardModel& model, int step_index) {
  if (step_index >= 0 && step_index < static_cast<int>(model.steps().size())) {
    const StepSpan& s = model.steps()[static_cast<size_t>(step_index)];
    return {s.begin_ns, std::max(s.end_ns, s.begin_ns + 1)};
  }
  return {model.t_begin_ns(), model.t_end_ns()};
}

namespace {

// calibrate's date, 2026-11-24T01:30:12Z, as people read it: 2026-11-24 01:30 UTC.
std::string readable_date(const std::string& iso) {
  if (iso.size() >= 17 && iso[10] == 'T' && iso.back() == 'Z') return iso.substr(0, 10) + " " + iso.substr(11, 5) + " UTC";
  return iso;
}

std::string seconds_text(double s) { return format_duration(s * 1e9); }

// The profile's figures, a line each, for the tooltip.
std::string profile_details(const HardwareProfile& p) {
  std::string out = "profile " + p.name + (p.description.empty() ? "" : " — " + p.description) + "\n";
  out += "  device " + p.device_model + ", " + std::to_string(p.nodes) + " node" + (p.nodes == 1 ? "" : "s") + " × " +
         std::to_string(p.devices_per_node) + " devices\n";
  out += "  GEMM peak f32 " + format_rate(p.peak_flops_f32, "FLOP");
  if (p.peak_flops_tf32 > 0) out += ", tf32 " + format_rate(p.peak_flops_tf32, "FLOP");
  if (p.peak_flops_bf16 > 0) out += ", bf16 " + format_rate(p.peak_flops_bf16, "FLOP");
  out += "\n";
  std::string curves;
  for (const auto& [name, curve] : {std::pair("f32", &p.gemm_curves.f32), std::pair("tf32", &p.gemm_curves.tf32),
                                    std::pair("f16", &p.gemm_curves.f16), std::pair("bf16", &p.gemm_curves.bf16)})
    if (!curve->empty()) curves += (curves.empty() ? "" : ", ") + std::string(name) + " (" + std::to_string(curve->sizes.size()) + " sizes)";
  char share[32];
  std::snprintf(share, sizeof share, "%.2f", p.gemm_efficiency);
  out += curves.empty() ? "  GEMM efficiency " + std::string(share) + " of peak at every size\n"
                        : "  GEMM efficiency by m·n·k: " + curves + (p.gemm_curves.source.empty() ? "" : " — " + p.gemm_curves.source) + "\n";
  if (p.peak_flops_tf32 > 0)
    out += p.tf32 ? "  TF32 on (--tf32): f32 GEMMs priced at the TF32 peak\n"
                  : "  TF32 off: f32 GEMMs priced at the f32 peak (PyTorch's default; --tf32 turns it on)\n";
  out += "  memory " + format_rate(p.mem_bandwidth_Bps, "B") + ", per-op overhead " + seconds_text(p.launch_overhead_s) + "\n";
  auto link = [](const char* what, const LinkSpec& l) {
    return std::string("  ") + what + " " + l.kind + " " + format_rate(l.bandwidth_Bps, "B") + ", α " + seconds_text(l.latency_s) + "\n";
  };
  out += link("host link", p.host_link) + link("intra-node", p.intra_node);
  if (p.nodes > 1) out += link("inter-node", p.inter_node);
  if (p.collectives.calibrated) {
    char eff[32];
    std::snprintf(eff, sizeof eff, "%.2f", p.collectives.intra_efficiency);
    out += "  collectives NCCL-like: launch " + seconds_text(p.collectives.launch_s) + ", intra-node link efficiency " + eff +
           (p.collectives.tree ? ", tree across nodes" : "") + (p.collectives.nvls_efficiency > 0 ? ", NVLS" : "") +
           ", protocol by size\n";
  } else {
    out += "  collectives: the textbook ring on the links' raw figures\n";
  }
  if (p.calibration && !p.calibration->record.empty()) {
    const nlohmann::json c = nlohmann::json::parse(p.calibration->record, nullptr, false);
    auto field = [&c](const char* key) { return c.is_object() && c.contains(key) ? c[key] : nlohmann::json(); };
    std::string where = p.calibration->machine.empty() ? "an unnamed machine" : p.calibration->machine;
    if (field("cpu").is_string()) {
      where += " (" + field("cpu").get<std::string>();
      if (field("cores").is_number_integer()) where += ", " + std::to_string(field("cores").get<int64_t>()) + " cores";
      where += ")";
    }
    out += "  calibrated by `scalelab calibrate` on " + where + ", " + readable_date(p.calibration->date);
    if (field("devices").is_number_integer() && field("devices").get<int64_t>() > 1)
      out += ", as one of " + std::to_string(field("devices").get<int64_t>()) + " devices";
    if (field("quick").is_boolean() && field("quick").get<bool>()) out += " (--quick)";
    out += "; its raw measurements are in the trace\n";
  }
  return out;
}

std::optional<HardwareProfile> parsed_profile(const std::string& json_text) {
  if (json_text.empty()) return std::nullopt;
  try {
    return parse_profile(json_text, "--predict profile");
  } catch (const Error&) {
    return std::nullopt;  // a later format: the bar says it cannot name it rather than failing
  }
}

}  // namespace

std::string profile_label(const HardwareProfile& p) {
  if (!p.calibration || p.calibration->record.empty()) return p.name + " (published figures)";
  const HostCalibration& c = *p.calibration;
  return p.name + " (calibrated on " + (c.machine.empty() ? "an unnamed machine" : c.machine) +
         (c.date.empty() ? "" : ", " + readable_date(c.date)) + ")";
}

RunProvenance describe_provenance(const DashboardModel& model) {
  RunProvenance r;
  // The device kind is the label's prefix ("cpu:0", "cuda:1", "sim:2"): what made the device.
  int cpu = 0, cuda = 0, logical = 0;
  for (const DeviceInfo& d : model.devices()) {
    if (d.label.rfind("cpu:", 0) == 0) ++cpu;
    if (d.label.rfind("cuda:", 0) == 0) ++cuda;
    // A logical cuda device is labelled "cuda:GPU.K": the K-th of several sharing one GPU.
    if (d.label.rfind("cuda:", 0) == 0 && d.label.find('.') != std::string::npos) ++logical;
  }
  if (model.info().simulated) {
    r.summary = "modelled times (simulated)";
    r.details = "Every time shown was computed by the cost model from the profile below; nothing was measured.\n";
    if (const auto& p = model.profile()) {
      r.summary += " · profile " + profile_label(*p);
      if (p->peak_flops_tf32 > 0) r.summary += p->tf32 ? " · TF32 on" : " · TF32 off";
      r.details += profile_details(*p);
    } else {
      r.summary += " · profile not recorded in this trace";
      r.details += "The trace carries no profile this build can read (an older or later trace).\n";
    }
  } else {
    r.summary = cuda > 0 ? "measured times (CUDA events)" : "measured times (wall clock)";
    r.details = cuda > 0 ? "Every time shown was measured on the GPU with CUDA events around each op.\n"
                         : "Every time shown was measured with the host's wall clock around each op.\n";
    if (logical > 0) {
      r.summary += " · " + std::to_string(logical) + " logical devices share the GPU";
      r.details += "The " + std::to_string(logical) + " cuda devices labelled cuda:G.K are logical: the K-th of the "
                   "devices placed on GPU G, each with its own streams and share of its memory, so they also share its "
                   "compute and memory bandwidth. Their collectives run through the threads backend in GPU memory.\n";
    }
    if (cpu > 1) {
      r.summary += " · " + std::to_string(cpu) + " cpu devices take turns on one host's cores";
      r.details += "The " + std::to_string(cpu) + " cpu devices are threads or processes of one host: they share its cores "
                   "and memory bandwidth, so each is slower than one device alone would be.\n";
    }
    const std::string& predicted = model.info().predicted_with;
    if (!predicted.empty()) {
      if (const auto p = parsed_profile(predicted)) {
        r.summary += " · predicted on " + profile_label(*p);
        r.details += "The prediction beside this run (--predict) was priced on:\n" + profile_details(*p);
      } else {
        r.summary += " · predicted on a profile this build cannot read";
      }
    }
  }
  if (!r.details.empty() && r.details.back() == '\n') r.details.pop_back();
  return r;
}

}  // namespace scalelab::viz
