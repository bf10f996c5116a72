// mutant: the buffer for the activation's gradient is made on the first device, but the copy back
//   from the second device is forgotten: the first device's layers get a gradient of zeros
// caught-by: equivalence
// The reference solution with rank_step replaced by the version below (the macro renames the
// reference's own; its launch and average are used as they are).
#include "lab.h"
#define rank_step reference_rank_step
#include "labs/06-ddp-mp/solution/ddp_mp.cpp"
#undef rank_step

namespace lab06 {

double rank_step(Replica& r, const HostBatch& shard) {
  Device& first = *r.first;
  Device& second = *r.second;
  const std::vector<Parameter*> params = r.model->parameters();
  const int L = static_cast<int>(r.model->layers().size());
  int split = 0;  // the first device's layers are [0, split)
  while (split < L && &r.model->layers()[static_cast<size_t>(split)].device() == &first) ++split;

  // 1. The features to the first device, the labels to the second (where the loss is).
  Tensor x = first.empty({shard.size, shard.features}, DType::f32, MemoryCategory::activations, "batch.x");
  Tensor y = second.empty({shard.size}, DType::i32, MemoryCategory::activations, "batch.y");
  first.upload({"batch.x", Phase::data}, x, shard.x.data());
  second.upload({"batch.y", Phase::data}, y, shard.y.data());

  // 2. Forward: the first half, its output copied to the second device, the second half.
  Tensor h = r.model->forward_range(0, split, x);
  Tensor h_there = second.empty(h.shape(), h.dtype(), MemoryCategory::activations, "activation");
  second.copy({"activation → " + second.name(), Phase::fwd, split - 1}, h, h_there);
  Tensor logits = r.model->forward_range(split, L, h_there);

  // 3. The loss over this rank's rows, on the second device.
  Tensor dlogits = second.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
  const double loss = second.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);

  // 4. Backward: the second half, and its bucket (bucket 0) all-reduced at once on the second
  //    device while the first goes on; the gradient w.r.t. the activation copied back; the first
  //    half, and its bucket.
  Tensor grad = r.model->backward_range(split, L, dlogits, /*need_dx=*/true);
  launch(r, params, 0);
  Tensor grad_here = first.zeros(grad.shape(), grad.dtype(), MemoryCategory::activations, "activation.grad");
  r.model->backward_range(0, split, grad_here, /*need_dx=*/false);
  for (int k = 1; k < static_cast<int>(r.buckets.size()); ++k) launch(r, params, k);

  // 5. The gradients averaged over the ranks; 6. every rank takes the same step from them.
  average(r, params);
  r.optimizer->step();
  return loss;
}

}  // namespace lab06
