// Lab 11 — your file. Write the functions below (their contracts are in lab.h), then grade them:
//   scalelab grade 11-fsdp
// Read first: README.md of this lab; strategies/zero.cpp, stage 3 (sharded_forward and
// sharded_backward are what you write here, without the prefetch).
#include "lab.h"

namespace lab11 {

using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::Phase;
using scalelab::ReduceOp;

std::vector<Piece> pieces_of(const std::vector<int64_t>& unit_params, int world, int rank) {
  // TODO: per unit size = ⌈P_u/N⌉, padded = size·N, rank r owns [r·size, (r+1)·size); the pieces
  // lie end to end in the shard (shard_offset).
  (void)unit_params, (void)world, (void)rank;
  throw lab::Todo("pieces_of", "labs/11-fsdp/fsdp.cpp");
}

Fsdp::Fsdp(Model& model, ProcessGroup& group, const AdamOptions& adam) : model_(model), group_(group), adam_(adam) {
  // TODO: units_, shapes_ (before make_shard drops the tensors), pieces_, shard_ = make_shard(…);
  // shard_grad_ (grads), m_ and v_ (optimizer): the shard's size each.
  throw lab::Todo("Fsdp::Fsdp", "labs/11-fsdp/fsdp.cpp");
}

Tensor Fsdp::forward(const Tensor& x) {
  // TODO: per layer: a unit — all-gather its weights into a P'_u buffer, seat, forward, free.
  (void)x;
  throw lab::Todo("Fsdp::forward", "labs/11-fsdp/fsdp.cpp");
}

void Fsdp::backward(const Tensor& dlogits) {
  // TODO: last layer first: gather again, a zeroed gradient buffer, backward, reduce-scatter (avg)
  // into your piece of shard_grad_, free both.
  (void)dlogits;
  throw lab::Todo("Fsdp::backward", "labs/11-fsdp/fsdp.cpp");
}

void Fsdp::step() {
  // TODO: Adam on the shard (t = 1, 2, …).
  throw lab::Todo("Fsdp::step", "labs/11-fsdp/fsdp.cpp");
}

}  // namespace lab11
