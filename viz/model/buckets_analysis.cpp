// The Buckets panel's analysis: each bucket's fill, all-reduce and unpack in a step, and how much
// of its all-reduce hid under backward.
#include "viz/model/buckets_analysis.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <set>
#include <string>

namespace scalelab::viz {

bool has_buckets(const DashboardModel& model) {
  for (const Event& e : model.events())
    if (e.bucket >= 0) return true;
  return false;
}

BucketSummary summarize_buckets(const DashboardModel& model) {
  BucketSummary s;
  extend_bucket_summary(s, model, 0);
  return s;
}

void extend_bucket_summary(BucketSummary& s, const DashboardModel& model, size_t from) {
  std::set<int> ids(s.bucket_ids.begin(), s.bucket_ids.end());
  const auto& events = model.events();
  for (size_t i = from; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.bucket < 0) continue;
    ids.insert(e.bucket);
    ++s.bucket_events;
    if (e.lane == Lane::comm) ++s.all_reduce_events;
  }
  s.bucket_ids.assign(ids.begin(), ids.end());
}

namespace {

void widen(Interval& iv, int64_t b, int64_t e) {
  if (iv.first == 0 && iv.second == 0) iv = {b, e};
  else iv = {std::min(iv.first, b), std::max(iv.second, e)};
}

}  // namespace

int64_t copied_bytes(const Event& e) { return e.kind == "copy" ? e.bytes / 2 : e.bytes; }

BucketStep analyze_bucket_step(const DashboardModel& model, int step_index, int device) {
  BucketStep bs;
  if (step_index < 0 || step_index >= static_cast<int>(model.steps().size())) return bs;
  bs.step_index = step_index;
  const auto& events = model.events();
  const StepSpan& span = model.steps()[static_cast<size_t>(step_index)];
  std::map<int, std::vector<const Event*>> by_bucket;
  std::vector<Interval> compute;
  int64_t wb = INT64_MAX, we = INT64_MIN;
  for (uint32_t idx : span.events) {
    const Event& e = events[idx];
    if (e.device != device) continue;
    wb = std::min(wb, e.t_begin_ns);
    we = std::max(we, e.t_end_ns);
    if (e.lane == Lane::compute) {
      bs.compute.push_back(idx);
      compute.emplace_back(e.t_begin_ns, e.t_end_ns);
      if (e.phase == Phase::bwd) widen(bs.backward, e.t_begin_ns, e.t_end_ns);
    }
    if (e.bucket >= 0) by_bucket[e.bucket].push_back(&e);
  }
  if (wb > we) return bs;
  bs.window = {wb, std::max(we, wb + 1)};
  for (const auto& [id, list] : by_bucket) {
    BucketTimes t;
    t.bucket = id;
    int64_t first_comm = INT64_MAX;
    std::vector<Interval> comm;
    for (const Event* e : list)
      if (e->lane == Lane::comm) {
        first_comm = std::min(first_comm, e->t_begin_ns);
        widen(t.all_reduce, e->t_begin_ns, e->t_end_ns);
        comm.emplace_back(e->t_begin_ns, e->t_end_ns);
        // Named as the lecture names it: all_reduce → "all-reduce"; several joined by " + ".
        std::string role = role_name(e->role);
        std::replace(role.begin(), role.end(), '_', '-');
        if (t.collective.find(role) == std::string::npos) t.collective += (t.collective.empty() ? "" : " + ") + role;
      }
    for (const Event* e : list) {
      if (e->lane == Lane::comm) continue;
      // Copies before the bucket's all-reduce fill it; those after hand the averaged gradients back.
      if (e->t_begin_ns < first_comm) {
        widen(t.fill, e->t_begin_ns, e->t_end_ns);
        t.bytes += copied_bytes(*e);
      } else {
        widen(t.unpack, e->t_begin_ns, e->t_end_ns);
      }
    }
    // The same interval arithmetic as the metrics pass's overlap figure.
    t.all_reduce_ns = union_length(comm);
    t.hidden_ns = intersection_length(comm, compute);
    bs.buckets.push_back(t);
  }
  return bs;
}

}  // namespace scalelab::viz
