#pragma once
// Lab 05 — DistributedDataParallel's reducer. You write the functions declared under "Task" below,
// in reducer.cpp; the rest is given. The grader builds your reducer.cpp into harness.cpp and runs
// the checks of checks.json (`scalelab grade 05-ddp`).
//
// The harness trains a replica of an MLP on each rank (threads of one process, one device each,
// cpu or simulated A100s), as strategies/ddp.cpp's rank_step does, with YOUR Reducer in place of
// the library's GradientReducer: backward walks the layers last first and calls
// reducer.mark_ready(i) as soon as parameter i's gradient is written (PyTorch: an autograd hook per
// parameter); before the optimizer step it calls reducer.finish().
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/tensor.h"
#include "labs/common/harness.h"

namespace lab05 {

using scalelab::Parameter;
using scalelab::ProcessGroup;
using scalelab::Tensor;
using scalelab::Work;

// Task 1. DDP's bucket assignment (PyTorch: compute_bucket_assignment_by_size), a pure function.
// `param_bytes[i]` is the size of parameter i in MODEL order (fc1.weight, fc1.bias, fc2.weight, …).
// Take the parameters in REVERSE order (backward writes the last layer's gradients first) and fill
// buckets: the first bucket's cap is `first_bucket_cap_bytes` (PyTorch: 1 MiB, so the first
// all-reduce starts early), every later bucket's `bucket_cap_bytes` (25 MiB). A bucket closes when
// the next parameter would take it OVER its cap (exactly the cap still fits); an empty bucket takes
// any parameter, so one larger than the cap sits alone. Returns, per bucket in the order they fill,
// its parameter indices in the order taken.
//
// Example: sizes {400, 40, 300, 30}, first cap 100, cap 500 → {{3}, {2, 1}, {0}}.
std::vector<std::vector<int>> bucket_assignment(const std::vector<int64_t>& param_bytes, int64_t bucket_cap_bytes,
                                                int64_t first_bucket_cap_bytes);

// ---- Given: a bucket and what you do with it ------------------------------------------------

// One bucket: its parameters' gradients share a flat f32 buffer, all-reduced as one tensor.
struct Bucket {
  std::vector<int> params;       // parameter indices (model order), as bucket_assignment gave them
  std::vector<int64_t> offsets;  // element offset of each parameter's gradient in `flat`
  Tensor flat;                   // the bucket's buffer, on the parameters' device
  int pending = 0;               // gradients of this bucket not yet marked ready in this backward
  std::shared_ptr<Work> work;    // the all-reduce in flight (null when none)
};

// Bucket number `k` for the parameters `indices` of `params`: its flat buffer (allocated once,
// reused every step), the offsets, and pending = the number of its parameters.
inline Bucket make_bucket(const std::vector<Parameter*>& params, const std::vector<int>& indices, int k) {
  Bucket b;
  b.params = indices;
  int64_t elems = 0;
  for (int i : indices) {
    b.offsets.push_back(elems);
    elems += params.at(static_cast<size_t>(i))->grad.numel();
  }
  scalelab::Device& device = *params.at(static_cast<size_t>(indices.at(0)))->grad.device();
  b.flat = device.zeros({elems}, scalelab::DType::f32, scalelab::MemoryCategory::comm_buffers,
                        "bucket " + std::to_string(k));
  b.pending = static_cast<int>(indices.size());
  return b;
}

// The simulated moment the host has reached on this rank (each rank is a thread): the harness's
// backward sets it to the time a gradient was written just before it calls mark_ready, and to the
// end of backward before it calls finish(). Work you issue cannot start before you issue it, so a
// bucket packed and launched in finish() starts after the whole backward, as on a real GPU.
namespace detail {
inline thread_local int64_t host_now_ns = 0;
}

// Copies the bucket's gradients (params[i]->grad) into its flat buffer, from the moment it is called.
inline void pack(const std::vector<Parameter*>& params, const Bucket& b, int k) {
  scalelab::Device& device = *b.flat.device();
  b.flat.set_ready_ns(std::max(b.flat.ready_ns(), detail::host_now_ns));
  for (size_t j = 0; j < b.params.size(); ++j) {
    const Parameter& p = *params.at(static_cast<size_t>(b.params[j]));
    device.copy({"bucket " + std::to_string(k) + " ← " + p.name + ".grad", scalelab::Phase::comm, p.layer, -1, k},
                p.grad, b.flat.view(b.offsets[j], p.grad.shape()));
  }
}

// Starts the SUM all-reduce of the bucket's flat buffer over `group` and returns at once: the
// communication runs beside backward (a CUDA stream in PyTorch). Call wait() on the result later.
inline std::shared_ptr<Work> all_reduce_async(ProcessGroup& group, const Bucket& b, int k) {
  return group.all_reduce_async(b.flat, scalelab::ReduceOp::sum, {.name = "bucket " + std::to_string(k), .bucket = k});
}

// flat *= alpha, on the bucket's device.
inline void scale(const Bucket& b, float alpha, int k) {
  b.flat.device()->scale({"bucket " + std::to_string(k) + " average", scalelab::Phase::comm, -1, -1, k}, alpha, b.flat);
}

// Copies the bucket's flat buffer back into its parameters' gradients.
inline void unpack(const std::vector<Parameter*>& params, const Bucket& b, int k) {
  scalelab::Device& device = *b.flat.device();
  for (size_t j = 0; j < b.params.size(); ++j) {
    const Parameter& p = *params.at(static_cast<size_t>(b.params[j]));
    device.copy({"bucket " + std::to_string(k) + " → " + p.name + ".grad", scalelab::Phase::comm, p.layer, -1, k},
                b.flat.view(b.offsets[j], p.grad.shape()), p.grad);
  }
}

// ---- Task 2: the reducer --------------------------------------------------------------------

class Reducer {
 public:
  // Buckets the parameters with bucket_assignment (sizes: each gradient's bytes, p->grad.nbytes())
  // and makes each bucket (make_bucket). Remember which bucket each parameter is in.
  Reducer(std::vector<Parameter*> params, ProcessGroup& group, int64_t bucket_cap_bytes,
          int64_t first_bucket_cap_bytes);

  // Backward has written params[param]'s gradient. When that completes the NEXT bucket in order
  // (and maybe the ones after it, already complete), pack each and start its all-reduce now —
  // while backward goes on. Launch strictly in bucket order: every rank must issue the same
  // all-reduces in the same order, or the collectives pair up wrongly.
  void mark_ready(int param);

  // Before the optimizer step: wait for every bucket's all-reduce, turn the sum into the average
  // (each rank's gradient is the mean over its share of the batch: the mean of those is the
  // batch's), copy the gradients back (unpack), and get ready for the next backward.
  void finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  std::vector<Parameter*> params_;
  ProcessGroup& group_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // per parameter: the index of its bucket
  int next_launch_ = 0;         // the next bucket to launch, in order
};

// ---- Task 3: no_sync ------------------------------------------------------------------------

// Gradient accumulation over K batches (PyTorch: K − 1 backwards inside `with model.no_sync():`,
// then one outside it). For step `step` (0, 1, 2, …) of a run with windows of K steps:
struct NoSyncWindow {
  bool accumulate = false;  // add this backward's gradients to those already there
  bool sync = true;         // this backward marks gradients ready (all-reduce), then the optimizer steps
  float grad_scale = 1.0f;  // multiplies the loss gradient, so the step uses the MEAN over the K batches
};
NoSyncWindow no_sync_window(int k, int64_t step);

}  // namespace lab05
