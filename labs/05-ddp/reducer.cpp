// Lab 05 — your file. Write the functions below (their contracts are in lab.h), then grade them:
//   scalelab grade 05-ddp
// Read first: README.md of this lab; strategies/ddp_buckets.h, strategies/ddp_common.cpp
// (GradientReducer) and strategies/ddp.cpp (the step of one rank, which the harness runs with your
// Reducer).
#include "lab.h"

namespace lab05 {

std::vector<std::vector<int>> bucket_assignment(const std::vector<int64_t>& param_bytes, int64_t bucket_cap_bytes,
                                                int64_t first_bucket_cap_bytes) {
  // TODO: walk the parameters from the last to the first; close a bucket when the next parameter
  // would take it over its cap (the first bucket's cap is first_bucket_cap_bytes).
  (void)param_bytes, (void)bucket_cap_bytes, (void)first_bucket_cap_bytes;
  throw lab::Todo("bucket_assignment", "labs/05-ddp/reducer.cpp");
}

Reducer::Reducer(std::vector<Parameter*> params, ProcessGroup& group, int64_t bucket_cap_bytes,
                 int64_t first_bucket_cap_bytes)
    : params_(std::move(params)), group_(group) {
  // TODO: bucket_assignment of the gradients' sizes; make_bucket for each; fill bucket_of_.
  (void)bucket_cap_bytes, (void)first_bucket_cap_bytes;
  throw lab::Todo("Reducer::Reducer", "labs/05-ddp/reducer.cpp");
}

void Reducer::mark_ready(int param) {
  // TODO: one gradient fewer pending in its bucket; then launch (pack + all_reduce_async) every
  // complete bucket from next_launch_ on, in order.
  (void)param;
  throw lab::Todo("Reducer::mark_ready", "labs/05-ddp/reducer.cpp");
}

void Reducer::finish() {
  // TODO: wait for each bucket's all-reduce, average, unpack; reset for the next backward.
  throw lab::Todo("Reducer::finish", "labs/05-ddp/reducer.cpp");
}

NoSyncWindow no_sync_window(int k, int64_t step) {
  // TODO: which steps of a window of k accumulate, which one synchronises, and the loss
  // gradient's scale.
  (void)k, (void)step;
  throw lab::Todo("no_sync_window", "labs/05-ddp/reducer.cpp");
}

}  // namespace lab05
