// Lab 04 — the reference solution (not in the hand-out): strategies/model_parallel.cpp's
// train_step, then the same step with the batch cut into chunks (the tutorial's
// PipelineParallelResNet50).
#include "lab.h"

#include <algorithm>
#include <string>

namespace lab04 {

using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::OpTag;
using scalelab::Phase;

std::vector<int> layer_devices(int layers, int devices) {
  // Layer l goes to device ⌊l·p / L⌋: p contiguous groups whose sizes differ by at most one.
  std::vector<int> out;
  for (int l = 0; l < layers; ++l) out.push_back(l * devices / layers);
  return out;
}

namespace {

// The tensor on `dst`: itself if it is there already, else a copy made by `dst`.
Tensor moved_to(Device& dst, const Tensor& t, const OpTag& tag, const std::string& what) {
  if (t.device() == &dst) return t;
  Tensor out = dst.empty(t.shape(), t.dtype(), MemoryCategory::activations, what);
  dst.copy(tag, t, out);
  return out;
}

}  // namespace

double model_parallel_step(Controller& c, const HostBatch& batch) {
  const LayerList& layers = c.model->layers();
  const int L = static_cast<int>(layers.size());
  Device& first = layers.front().device();
  Device& last = layers.back().device();

  // 1. The batch to the first device, the labels to the last (where the loss is).
  Tensor x = first.empty({batch.size, batch.features}, DType::f32, MemoryCategory::activations, "batch.x");
  Tensor y = last.empty({batch.size}, DType::i32, MemoryCategory::activations, "batch.y");
  first.upload({"batch.x", Phase::data}, x, batch.x.data());
  last.upload({"batch.y", Phase::data}, y, batch.y.data());

  // 2. Forward, layer by layer; across a device boundary the activations are copied first.
  Tensor h = x;
  for (int l = 0; l < L; ++l) {
    const std::string fc = "fc" + std::to_string(l + 1);
    h = moved_to(layers[l].device(), h, {"activations to " + fc, Phase::fwd, l}, fc + ".in");
    h = layers[l].forward(h);
  }

  // 3. The loss and its gradient w.r.t. the logits, on the last device.
  Tensor dlogits = last.empty(h.shape(), h.dtype(), MemoryCategory::activations, "dlogits");
  const double loss = last.softmax_xent({"loss", Phase::fwd}, h, y, dlogits);

  // 4. Backward, last layer first; across a device boundary the gradient is copied back.
  Tensor g = dlogits;
  for (int l = L - 1; l >= 0; --l) {
    const std::string fc = "fc" + std::to_string(l + 1);
    g = moved_to(layers[l].device(), g, {"gradient back to " + fc, Phase::bwd, l}, fc + ".dout");
    g = layers[l].backward(g, /*need_dx=*/l > 0);
  }

  // 5. The optimizer updates every layer where it lives.
  c.optimizer->step();
  return loss;
}

double pipelined_step(Controller& c, const HostBatch& batch, int64_t split_size) {
  const LayerList& layers = c.model->layers();
  const int L = static_cast<int>(layers.size());
  Device& first = layers.front().device();
  Device& last = layers.back().device();
  const int64_t B = batch.size;
  const int64_t split = std::min(split_size, B);
  const int chunks = static_cast<int>((B + split - 1) / split);
  const bool pipelined = chunks > 1;

  // 1. The batch to the first device, the labels to the last: one upload each.
  Tensor x = first.empty({B, batch.features}, DType::f32, MemoryCategory::activations, "batch.x");
  Tensor y = last.empty({B}, DType::i32, MemoryCategory::activations, "batch.y");
  first.upload({"batch.x", Phase::data}, x, batch.x.data());
  last.upload({"batch.y", Phase::data}, y, batch.y.data());

  // 2. Forward, chunk after chunk: chunk i + 1 enters device 0 while chunk i is on device 1. Each
  //    chunk's loss (its mean) on the last device, its gradient scaled by the chunk's share of the
  //    batch, so that the chunks' gradients add up to the batch mean's.
  std::vector<Tensor> dlogits(static_cast<size_t>(chunks));
  double loss = 0;
  for (int i = 0; i < chunks; ++i) {
    const int64_t begin = i * split, rows = std::min(split, B - begin);
    const int mb = pipelined ? i : -1;
    Tensor h = x.rows_slice(begin, rows);
    for (int l = 0; l < L; ++l) {
      const std::string fc = "fc" + std::to_string(l + 1);
      h = moved_to(layers[l].device(), h, {"activations to " + fc, Phase::fwd, l, mb}, fc + ".in");
      h = layers[l].forward(h, mb);
    }
    dlogits[i] = last.empty(h.shape(), h.dtype(), MemoryCategory::activations, "dlogits");
    const float share = static_cast<float>(rows) / static_cast<float>(B);
    loss += share * last.softmax_xent({"loss", Phase::fwd, -1, mb}, h, y.rows_slice(begin, rows), dlogits[i], share);
  }

  // 3. Backward, chunk after chunk in the order of the forwards; the gradient copied back across
  //    each boundary; the first chunk writes the weight gradients, the others add to them.
  for (int i = 0; i < chunks; ++i) {
    const int mb = pipelined ? i : -1;
    Tensor g = dlogits[i];
    for (int l = L - 1; l >= 0; --l) {
      const std::string fc = "fc" + std::to_string(l + 1);
      g = moved_to(layers[l].device(), g, {"gradient back to " + fc, Phase::bwd, l, mb}, fc + ".dout");
      g = layers[l].backward(g, /*need_dx=*/l > 0, /*accumulate=*/i > 0, mb);
    }
  }

  // 4. One step: each parameter updated on the device that holds it.
  c.optimizer->step();
  return loss;
}

}  // namespace lab04
