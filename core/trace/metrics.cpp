#include "core/trace/metrics.h"

#include <algorithm>
#include <climits>
#include <map>

namespace scalelab {

namespace {

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

// Sorted, disjoint, non-empty intervals covering the same points.
Intervals merged(Intervals v) {
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());  // a trace's are, mostly
  Intervals out;
  for (const auto& [b, e] : v) {
    if (e <= b) continue;
    if (!out.empty() && b <= out.back().second) out.back().second = std::max(out.back().second, e);
    else out.emplace_back(b, e);
  }
  return out;
}

}  // namespace

int64_t union_length(Intervals intervals) {
  int64_t total = 0;
  for (const auto& [b, e] : merged(std::move(intervals))) total += e - b;
  return total;
}

int64_t intersection_length(Intervals a, Intervals b) {
  const Intervals x = merged(std::move(a)), y = merged(std::move(b));
  int64_t total = 0;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const int64_t lo = std::max(x[i].first, y[j].first), hi = std::min(x[i].second, y[j].second);
    if (hi > lo) total += hi - lo;
    if (x[i].second < y[j].second) ++i;
    else ++j;
  }
  return total;
}

RunMetrics compute_metrics(const std::vector<Event>& events, const std::vector<MemorySample>& memory,
                           int device_count, const std::vector<DeviceTally>& tallies) {
  RunMetrics r;
  int max_device = device_count - 1;
  for (const Event& e : events) max_device = std::max(max_device, e.device);
  for (const MemorySample& m : memory) max_device = std::max(max_device, m.device);
  for (const DeviceTally& t : tallies) max_device = std::max(max_device, t.device);
  const size_t n = static_cast<size_t>(std::max(max_device + 1, 0));
  r.per_device.resize(n);

  std::vector<std::array<Intervals, kLaneCount>> lanes(n);
  r.t_begin_ns = INT64_MAX;
  r.t_end_ns = 0;
  for (const DeviceTally& t : tallies) {
    if (t.device < 0 || t.events == 0) continue;
    r.t_begin_ns = std::min(r.t_begin_ns, t.t_begin_ns);
    r.t_end_ns = std::max(r.t_end_ns, t.t_end_ns);
    lanes[static_cast<size_t>(t.device)] = t.lanes;
    DeviceMetrics& d = r.per_device[static_cast<size_t>(t.device)];
    d.flops += t.flops;
    d.bytes_moved += t.bytes_moved;
  }
  for (const Event& e : events) {
    if (e.device < 0) continue;
    r.t_begin_ns = std::min(r.t_begin_ns, e.t_begin_ns);
    r.t_end_ns = std::max(r.t_end_ns, e.t_end_ns);
    lanes[static_cast<size_t>(e.device)][static_cast<int>(e.lane)].emplace_back(e.t_begin_ns, e.t_end_ns);
    DeviceMetrics& d = r.per_device[static_cast<size_t>(e.device)];
    d.flops += e.flops;
    if (e.lane == Lane::comm || e.lane == Lane::copy) d.bytes_moved += e.bytes;
  }
  if (r.t_begin_ns == INT64_MAX) r.t_begin_ns = 0;  // no event at all
  const double span = static_cast<double>(r.t_end_ns - r.t_begin_ns);

  int64_t comm_total = 0, hidden_total = 0;
  for (size_t i = 0; i < n; ++i) {
    DeviceMetrics& d = r.per_device[i];
    d.device = static_cast<int>(i);
    const auto& l = lanes[i];
    d.compute_ns = union_length(l[static_cast<int>(Lane::compute)]);
    d.comm_ns = union_length(l[static_cast<int>(Lane::comm)]);
    d.copy_ns = union_length(l[static_cast<int>(Lane::copy)]);
    Intervals all;
    for (const auto& lane : l) all.insert(all.end(), lane.begin(), lane.end());
    d.idle_ns = (r.t_end_ns - r.t_begin_ns) - union_length(all);
    if (span > 0) {
      d.busy_pct = 100.0 * static_cast<double>(d.compute_ns) / span;
      d.comm_pct = 100.0 * static_cast<double>(d.comm_ns) / span;
      d.idle_pct = 100.0 * static_cast<double>(d.idle_ns) / span;
    }
    const int64_t hidden = intersection_length(l[static_cast<int>(Lane::comm)], l[static_cast<int>(Lane::compute)]);
    d.overlap_pct = d.comm_ns > 0 ? 100.0 * static_cast<double>(hidden) / static_cast<double>(d.comm_ns) : 0.0;
    comm_total += d.comm_ns;
    hidden_total += hidden;
    r.bytes_moved += d.bytes_moved;
  }
  r.overlap_pct = comm_total > 0 ? 100.0 * static_cast<double>(hidden_total) / static_cast<double>(comm_total) : 0.0;

  // Bubbles: over the training steps (events with step ≥ 0; setting up and evaluating are not
  // training), the share of devices × span in which a compute lane stood idle. Steps overlap in
  // time (the next batch's copy starts while the last backward runs), so it is taken over the
  // whole span, not step by step.
  {
    int64_t b = INT64_MAX, e = 0;
    std::vector<Intervals> compute(n);
    for (const DeviceTally& t : tallies) {
      if (t.device < 0 || t.step_end_ns == 0) continue;
      b = std::min(b, t.step_begin_ns);
      e = std::max(e, t.step_end_ns);
      compute[static_cast<size_t>(t.device)] = t.step_compute;
    }
    for (const Event& ev : events) {
      if (ev.step < 0 || ev.device < 0) continue;
      b = std::min(b, ev.t_begin_ns);
      e = std::max(e, ev.t_end_ns);
      if (ev.lane == Lane::compute) compute[static_cast<size_t>(ev.device)].emplace_back(ev.t_begin_ns, ev.t_end_ns);
    }
    int64_t busy = 0;
    for (auto& c : compute) busy += union_length(std::move(c));
    const double capacity = e > b ? static_cast<double>(e - b) * static_cast<double>(n) : 0.0;
    r.bubble_fraction = capacity > 0 ? 1.0 - static_cast<double>(busy) / capacity : 0.0;
  }

  // Peaks from the samples, in time order (stable: equal stamps keep emission order).
  std::vector<MemorySample> samples = memory;
  std::stable_sort(samples.begin(), samples.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.t_ns < b.t_ns; });
  for (const DeviceTally& t : tallies) {
    if (t.device < 0) continue;
    DeviceMetrics& d = r.per_device[static_cast<size_t>(t.device)];
    d.peak_bytes = t.peak_bytes;
    d.peak_total = t.peak_total;
  }
  std::vector<std::array<int64_t, kMemoryCategoryCount>> live(n);
  for (const MemorySample& m : samples) {
    if (m.device < 0) continue;
    const size_t dev = static_cast<size_t>(m.device);
    DeviceMetrics& d = r.per_device[dev];
    const int c = static_cast<int>(m.category);
    live[dev][c] = m.bytes;
    d.peak_bytes[c] = std::max(d.peak_bytes[c], m.bytes);
    int64_t total = 0;
    for (int64_t v : live[dev]) total += v;
    d.peak_total = std::max(d.peak_total, total);
  }
  return r;
}

std::vector<int64_t> moving_time_ns(const std::vector<Event>& events) {
  const size_t n = events.size();
  std::vector<int64_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = events[i].t_end_ns - events[i].t_begin_ns;
  std::map<int64_t, int64_t> p2p_ready;  // flow_id → the later start of its send and recv
  for (const Event& e : events)
    if (e.flow_id >= 0 && (e.role == Role::send || e.role == Role::recv)) {
      auto [it, fresh] = p2p_ready.try_emplace(e.flow_id, e.t_begin_ns);
      if (!fresh) it->second = std::max(it->second, e.t_begin_ns);
    }
  // A collective's steps on each rank: the first carries the call's flow_id, the rest none.
  struct RankCall {
    size_t first;
    int64_t begin, end;
    std::vector<size_t> rest;
  };
  std::map<std::pair<int64_t, int>, RankCall> calls;  // (flow_id, device)
  std::map<int64_t, int64_t> call_ready;               // flow_id → the latest first step of any rank
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return events[a].t_begin_ns < events[b].t_begin_ns; });
  std::map<int, int64_t> open;  // device → the flow_id of its call under way
  for (size_t i : order) {
    const Event& e = events[i];
    if (e.flow_id >= 0 && (e.role == Role::send || e.role == Role::recv)) {
      t[i] = std::max<int64_t>(0, e.t_end_ns - p2p_ready[e.flow_id]);
      continue;
    }
    if (e.lane != Lane::comm || e.role == Role::none) continue;
    if (e.flow_id >= 0) {
      open[e.device] = e.flow_id;
      calls[{e.flow_id, e.device}] = RankCall{i, e.t_begin_ns, e.t_end_ns, {}};
      auto [it, fresh] = call_ready.try_emplace(e.flow_id, e.t_begin_ns);
      if (!fresh) it->second = std::max(it->second, e.t_begin_ns);
    } else if (const auto o = open.find(e.device); o != open.end()) {
      RankCall& c = calls[{o->second, e.device}];
      c.end = std::max(c.end, e.t_end_ns);
      c.rest.push_back(i);
    }
  }
  for (const auto& [key, c] : calls) {
    t[c.first] = std::max<int64_t>(0, c.end - call_ready[key.first]);
    for (size_t j : c.rest) t[j] = 0;
  }
  return t;
}

}  // namespace scalelab
