#pragma once
// Lab 08 — ZeRO stages 1 and 2 (the ZeroRedundancyOptimizer). You write the functions declared
// under "Task" below, in zero.cpp; the rest is given. The grader builds your zero.cpp into
// harness.cpp and runs the checks of checks.json (`scalelab grade 08-zero`).
//
// The harness trains a replica of an MLP on each rank (threads of one process, one cpu device
// each), each rank on its DistributedSampler rows of the global batch, as strategies/zero.cpp's
// rank_step does, with YOUR ZeroAdam in place of the library's sharded optimizer:
//
//     ZeroAdam opt(model, group, stage, adam);        // once
//     every step: forward, loss;  opt.prepare_backward();  model.backward(dlogits);  opt.step();
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/tensor.h"
#include "labs/common/harness.h"

namespace lab08 {

using scalelab::AdamOptions;
using scalelab::Device;
using scalelab::Model;
using scalelab::Parameter;
using scalelab::ProcessGroup;
using scalelab::Tensor;

// ---- Task 1: the shard arithmetic -------------------------------------------------------------

// Every parameter of the model, in model order, lies in ONE flat buffer of `padded` floats: the
// P parameters, then zeros up to the smallest multiple of the world size N that holds them, so
// that the N shards are equal (a reduce-scatter and an all-gather need equal blocks).
// Rank r owns [begin, end) of that buffer: `size` = ⌈P/N⌉ floats each.
//
// Example: P = 10, N = 4 → padded 12, size 3; rank 3 owns [9, 12) (its last two are padding).
struct Shard {
  int64_t padded = 0;  // P' = size · N ≥ P
  int64_t size = 0;    // S = ⌈P/N⌉
  int64_t begin = 0;   // rank · S
  int64_t end = 0;     // begin + S
};
Shard shard_of(int64_t params, int world, int rank);

// ---- Given: the flat layout -------------------------------------------------------------------

// Replaces every parameter's own tensors by views of ONE flat buffer of `padded` floats (memory
// category params, zero-filled: the padding is zero), in model order, and keeps the weights the
// model had. Returns the flat buffer. The parameters' .grad are left empty: seat them next.
inline Tensor flatten_parameters(Model& model, int64_t padded) {
  std::vector<Parameter*> params = model.parameters();
  Device& device = *params.at(0)->value.device();
  const scalelab::HostWeights weights = model.download();
  std::vector<std::vector<int64_t>> shapes;
  for (Parameter* p : params) {
    shapes.push_back(p->value.shape());
    p->value = p->grad = Tensor();  // the Model's own tensors are freed here
  }
  Tensor flat = device.zeros({padded}, scalelab::DType::f32, scalelab::MemoryCategory::params, "zero.flat_params");
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i]->value = flat.view(offset, shapes[i]);
    offset += params[i]->value.numel();
  }
  model.upload(weights);
  return flat;
}

// Makes every parameter's gradient a view of `flat` (P' floats), in the same layout as the
// weights: backward then writes the whole gradient into `flat`. It does not touch the padding.
inline void seat_gradients(Model& model, const Tensor& flat) {
  int64_t offset = 0;
  for (Parameter* p : model.parameters()) {
    p->grad = flat.view(offset, p->value.shape());
    offset += p->value.numel();
  }
}

// What you call (see core/device/device.h, core/comm/process_group.h):
//   device.zeros({n}, DType::f32, MemoryCategory::optimizer | grads | comm_buffers, "name")
//   device.empty(...) (not zeroed), device.fill({"name", Phase::bwd}, t, 0.0f), t.view(offset, {n})
//   group.all_reduce(t, ReduceOp::avg)            group.reduce_scatter(in_P', out_S, ReduceOp::avg)
//   group.all_gather(in_S, out_P')                group.rank(), group.size()
//   device.adam({"zero.adam", Phase::optim}, w, g, m, v, adam_options, t)   — t = 1, 2, 3, … (bias correction)

// ---- Task 2: ZeRO's step for one rank ------------------------------------------------------------

class ZeroAdam {
 public:
  // Stage 1 or 2, for this rank of `group` (the model's weights are the same on every rank).
  //  - the layout: shard_of(P, N, rank); flatten_parameters;
  //  - the gradients: stage 1 — one flat buffer of P' floats (MemoryCategory::grads), seated
  //    once; stage 2 — only this rank's S floats of averaged gradient are KEPT (grads);
  //  - Adam's state m and v: S floats each, for this rank's shard only, allocated through the
  //    device in MemoryCategory::optimizer (the ledger counts it: 2 · 4 · S bytes per rank).
  ZeroAdam(Model& model, ProcessGroup& group, int stage, const AdamOptions& adam);

  // Before each backward. Stage 2: the buffer backward writes the whole gradient into, which
  // lives only until the reduce-scatter has read it (MemoryCategory::comm_buffers; its padding
  // must be zero); seat the gradients in it. Stage 1: nothing to do (the flat gradient is seated).
  void prepare_backward();

  // After backward: stage 1 — all-reduce the flat gradient (the AVERAGE over the ranks); stage 2
  // — reduce-scatter it instead (average), keeping only this rank's shard, and let go of the
  // bucket. Then Adam on this rank's shard of the weights with its shard of the gradient and its
  // m and v; then all-gather the shards, so that every rank has every weight for the next forward.
  void step();

 private:
  Model& model_;
  ProcessGroup& group_;
  int stage_;
  AdamOptions adam_;
  Shard shard_;
  int64_t params_ = 0;     // P
  int64_t t_ = 0;          // Adam's step count
  Tensor flat_params_;     // P' floats: every weight, the padding zero
  Tensor flat_grads_;      // stage 1: P' floats, kept; stage 2: the bucket, during one step only
  Tensor shard_grad_;      // this rank's S floats of gradient (stage 1: a view of flat_grads_)
  Tensor m_, v_;           // Adam's state for this rank's shard: S floats each
};

}  // namespace lab08
