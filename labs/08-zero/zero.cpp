// Lab 08 — your file. Write the functions below (their contracts are in lab.h), then grade them:
//   scalelab grade 08-zero
// Read first: README.md of this lab; strategies/zero.cpp (the library's ZeRO: its constructor and
// rank_step are what you write here, for Adam).
#include "lab.h"

namespace lab08 {

using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::Phase;
using scalelab::ReduceOp;

Shard shard_of(int64_t params, int world, int rank) {
  // TODO: S = ⌈P/N⌉, P' = S·N, rank r owns [r·S, (r+1)·S).
  (void)params, (void)world, (void)rank;
  throw lab::Todo("shard_of", "labs/08-zero/zero.cpp");
}

ZeroAdam::ZeroAdam(Model& model, ProcessGroup& group, int stage, const AdamOptions& adam)
    : model_(model), group_(group), stage_(stage), adam_(adam) {
  // TODO: P (the sum of the parameters' numel()); shard_ = shard_of(P, N, rank);
  // flat_params_ = flatten_parameters(model_, P'); the gradient buffers of your stage; m_ and v_:
  // S floats each, MemoryCategory::optimizer.
  throw lab::Todo("ZeroAdam::ZeroAdam", "labs/08-zero/zero.cpp");
}

void ZeroAdam::prepare_backward() {
  // TODO: stage 2 — a bucket of P' floats (comm_buffers), its padding zeroed, the gradients seated in it.
  throw lab::Todo("ZeroAdam::prepare_backward", "labs/08-zero/zero.cpp");
}

void ZeroAdam::step() {
  // TODO: average the gradient (stage 1: all-reduce; stage 2: reduce-scatter into your shard, then
  // drop the bucket); Adam on your shard (t = 1, 2, …); all-gather the weights.
  throw lab::Todo("ZeroAdam::step", "labs/08-zero/zero.cpp");
}

}  // namespace lab08
