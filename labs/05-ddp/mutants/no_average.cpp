// mutant: forgot to average: the gradients are the SUM over the ranks, n times too large
// caught-by: equivalence
// (A whole file: the reference solution with the change above.)
#include "lab.h"

namespace lab05 {

std::vector<std::vector<int>> bucket_assignment(const std::vector<int64_t>& param_bytes, int64_t bucket_cap_bytes,
                                                int64_t first_bucket_cap_bytes) {
  std::vector<std::vector<int>> buckets;
  std::vector<int> open;  // the bucket being filled
  int64_t open_bytes = 0;
  // Backward writes the last layer's gradients first: walk the parameters from the end.
  for (int i = static_cast<int>(param_bytes.size()) - 1; i >= 0; --i) {
    const int64_t bytes = param_bytes[static_cast<size_t>(i)];
    const int64_t cap = buckets.empty() ? first_bucket_cap_bytes : bucket_cap_bytes;
    if (!open.empty() && open_bytes + bytes > cap) {  // it would go over: close the bucket
      buckets.push_back(open);
      open.clear();
      open_bytes = 0;
    }
    open.push_back(i);
    open_bytes += bytes;
  }
  if (!open.empty()) buckets.push_back(open);
  return buckets;
}

Reducer::Reducer(std::vector<Parameter*> params, ProcessGroup& group, int64_t bucket_cap_bytes,
                 int64_t first_bucket_cap_bytes)
    : params_(std::move(params)), group_(group) {
  std::vector<int64_t> bytes;
  for (const Parameter* p : params_) bytes.push_back(p->grad.nbytes());
  const auto assignment = bucket_assignment(bytes, bucket_cap_bytes, first_bucket_cap_bytes);
  bucket_of_.assign(params_.size(), -1);
  for (size_t k = 0; k < assignment.size(); ++k) {
    for (int i : assignment[k]) bucket_of_[static_cast<size_t>(i)] = static_cast<int>(k);
    buckets_.push_back(make_bucket(params_, assignment[k], static_cast<int>(k)));
  }
}

void Reducer::mark_ready(int param) {
  --buckets_[static_cast<size_t>(bucket_of_[static_cast<size_t>(param)])].pending;
  // Launch in bucket order only, each bucket as soon as it and every bucket before it are complete.
  while (next_launch_ < static_cast<int>(buckets_.size()) && buckets_[static_cast<size_t>(next_launch_)].pending == 0) {
    Bucket& b = buckets_[static_cast<size_t>(next_launch_)];
    pack(params_, b, next_launch_);
    b.work = all_reduce_async(group_, b, next_launch_);
    ++next_launch_;
  }
}

void Reducer::finish() {
  const float inv_world = 1.0f / static_cast<float>(group_.size());
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    b.work->wait();
    b.work.reset();
    (void)inv_world;
    unpack(params_, b, static_cast<int>(k));
    b.pending = static_cast<int>(b.params.size());
  }
  next_launch_ = 0;
}

NoSyncWindow no_sync_window(int k, int64_t step) {
  NoSyncWindow w;
  const int64_t in_window = step % k;  // 0 … K − 1
  w.accumulate = in_window != 0;       // the window's first backward overwrites, the others add
  w.sync = in_window == k - 1;         // only the last one all-reduces and steps
  w.grad_scale = 1.0f / static_cast<float>(k);
  return w;
}

}  // namespace lab05
