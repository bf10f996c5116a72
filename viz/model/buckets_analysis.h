#pragma once
// Gradient buckets (DDP, ZeRO): which gradients were copied into which bucket, when each bucket's
// all-reduce ran, and how much of it hid under the backward pass. Apart from the drawing so tests
// and --describe can count buckets.
#include <cstdint>
#include <string>
#include <vector>

#include "viz/model/dashboard_model.h"

namespace scalelab::viz {

struct BucketTimes {
  int bucket = 0;
  int64_t bytes = 0;             // the bucket's size: the gradient bytes copied into it
  Interval fill{0, 0};           // first to last copy into it (0,0: none)
  Interval all_reduce{0, 0};     // first to last communication event of the bucket
  Interval unpack{0, 0};         // copies back out after the all-reduce
  int64_t all_reduce_ns = 0;     // union of its communication events
  int64_t hidden_ns = 0;         // of which under compute on the same device
  std::string collective;        // what its communication was: "all-reduce", or ZeRO's "reduce-scatter" …
};

struct BucketStep {
  int step_index = -1;
  Interval window{0, 1};                 // the step on this device
  Interval backward{0, 0};               // first to last backward op on this device
  std::vector<uint32_t> compute;         // compute-lane events of the step on this device
  std::vector<BucketTimes> buckets;      // by bucket id
};

struct BucketSummary {
  std::vector<int> bucket_ids;           // distinct bucket ids ≥ 0
  size_t bucket_events = 0;              // events with bucket ≥ 0
  size_t all_reduce_events = 0;          // of which on the communication lane
};

bool has_buckets(const DashboardModel& model);
BucketSummary summarize_buckets(const DashboardModel& model);
// Adds the model's events from `from` on to `s` (a live model that grew).
void extend_bucket_summary(BucketSummary& s, const DashboardModel& model, size_t from);
BucketStep analyze_bucket_step(const DashboardModel& model, int step_index, int device);
// The bytes a copy event carried. A copy within one device counts its bytes twice (read and
// write: that is the traffic the cost model prices), a copy between devices once.
int64_t copied_bytes(const Event& e);

}  // namespace scalelab::viz
