// Lab 06 — the reference solution (not in the hand-out): strategies/ddp_mp.cpp's rank_step, with
// one bucket per device.
#include "lab.h"

namespace lab06 {

using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::Phase;

RankDevices rank_devices(int rank) { return {2 * rank, 2 * rank + 1}; }

int layer_side(int layer, int layers) {
  const int first_half = (layers + 1) / 2;  // ⌈L/2⌉: the first device takes the extra layer
  return layer < first_half ? 0 : 1;
}

std::vector<Bucket> make_buckets(const std::vector<Parameter*>& params) {
  // Runs of parameters on one device, in model order (two for this replica) …
  std::vector<std::vector<int>> runs;
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    if (runs.empty() || params[i]->grad.device() != params[runs.back().front()]->grad.device()) runs.emplace_back();
    runs.back().push_back(i);
  }
  // … bucketed last run first: backward writes the second device's gradients first.
  std::vector<Bucket> buckets;
  for (auto run = runs.rbegin(); run != runs.rend(); ++run)
    buckets.push_back(make_bucket(params, *run, static_cast<int>(buckets.size())));
  return buckets;
}

namespace {

// Bucket k into its buffer, and its all-reduce started on the bucket's device.
void launch(Replica& r, const std::vector<Parameter*>& params, int k) {
  Bucket& b = r.buckets[static_cast<size_t>(k)];
  pack(params, b, k);
  b.work = all_reduce_async(*r.group, b, k);
}

// Waits for every bucket's all-reduce; the sum of the ranks' means → the global batch's mean, back
// into the gradients.
void average(Replica& r, const std::vector<Parameter*>& params) {
  const float inv_world = 1.0f / static_cast<float>(r.world_size);
  for (size_t k = 0; k < r.buckets.size(); ++k) {
    r.buckets[k].work->wait();
    r.buckets[k].work.reset();
    scale(r.buckets[k], inv_world, static_cast<int>(k));
    unpack(params, r.buckets[k], static_cast<int>(k));
  }
}

}  // namespace

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
  Tensor grad_here = first.empty(grad.shape(), grad.dtype(), MemoryCategory::activations, "activation.grad");
  first.copy({"activation grad → " + first.name(), Phase::bwd, split}, grad, grad_here);
  r.model->backward_range(0, split, grad_here, /*need_dx=*/false);
  for (int k = 1; k < static_cast<int>(r.buckets.size()); ++k) launch(r, params, k);

  // 5. The gradients averaged over the ranks; 6. every rank takes the same step from them.
  average(r, params);
  r.optimizer->step();
  return loss;
}

}  // namespace lab06
