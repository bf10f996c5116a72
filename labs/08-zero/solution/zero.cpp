// Lab 08 — the reference solution.
#include "lab.h"

namespace lab08 {

using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::Phase;
using scalelab::ReduceOp;

Shard shard_of(int64_t params, int world, int rank) {
  Shard s;
  s.size = (params + world - 1) / world;  // ⌈P/N⌉
  s.padded = s.size * world;
  s.begin = rank * s.size;
  s.end = s.begin + s.size;
  return s;
}

ZeroAdam::ZeroAdam(Model& model, ProcessGroup& group, int stage, const AdamOptions& adam)
    : model_(model), group_(group), stage_(stage), adam_(adam) {
  for (Parameter* p : model_.parameters()) params_ += p->value.numel();
  shard_ = shard_of(params_, group_.size(), group_.rank());
  flat_params_ = flatten_parameters(model_, shard_.padded);
  Device& d = *flat_params_.device();
  if (stage_ == 1) {
    flat_grads_ = d.zeros({shard_.padded}, DType::f32, MemoryCategory::grads, "zero.flat_grads");
    seat_gradients(model_, flat_grads_);
    shard_grad_ = flat_grads_.view(shard_.begin, {shard_.size});
  } else {
    shard_grad_ = d.zeros({shard_.size}, DType::f32, MemoryCategory::grads, "zero.shard_grad");
  }
  m_ = d.zeros({shard_.size}, DType::f32, MemoryCategory::optimizer, "zero.exp_avg");
  v_ = d.zeros({shard_.size}, DType::f32, MemoryCategory::optimizer, "zero.exp_avg_sq");
}

void ZeroAdam::prepare_backward() {
  if (stage_ != 2) return;
  Device& d = *flat_params_.device();
  flat_grads_ = d.empty({shard_.padded}, DType::f32, MemoryCategory::comm_buffers, "zero.grad_bucket");
  if (shard_.padded > params_)
    d.fill({"zero.pad", Phase::bwd}, flat_grads_.view(params_, {shard_.padded - params_}), 0.0f);
  seat_gradients(model_, flat_grads_);
}

void ZeroAdam::step() {
  Device& d = *flat_params_.device();
  if (stage_ == 1) {
    group_.all_reduce(flat_grads_, ReduceOp::avg, {.name = "zero.grads"});
  } else {
    group_.reduce_scatter(flat_grads_, shard_grad_, ReduceOp::avg, {.name = "zero.grads"});
    for (Parameter* p : model_.parameters()) p->grad = Tensor();
    flat_grads_ = Tensor();  // the bucket is freed here
  }
  ++t_;
  d.adam({"zero.adam", Phase::optim}, flat_params_.view(shard_.begin, {shard_.size}), shard_grad_, m_, v_, adam_, t_);
  group_.all_gather(flat_params_.view(shard_.begin, {shard_.size}), flat_params_, {.name = "zero.params"});
}

}  // namespace lab08
