#pragma once
// What the harnesses compare a student's training with: the same global batches, and one device
// trained on them, step by step (upload, forward, loss, backward, optimizer step) — single's
// training, written out so a check can give it any optimizer.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "labs/common/harness.h"

namespace lab {

// `steps` global batches of `batch` rows of a synthetic set of `samples` (at least one epoch's worth).
inline std::vector<scalelab::HostBatch> synthetic_batches(const std::string& model, int64_t batch, int steps,
                                                          int64_t samples, uint64_t seed) {
  const scalelab::ModelSpec m = scalelab::ModelSpec::parse(model);
  const scalelab::DataSplit data = scalelab::make_synthetic(std::max<int64_t>(samples, batch * steps), 16, m.inputs(),
                                                            static_cast<int>(m.outputs()), seed);
  scalelab::Loader loader(data.train, batch, seed);
  std::vector<scalelab::HostBatch> out(static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) loader.fill(s, out[static_cast<size_t>(s)]);
  return out;
}

// One batch through `model` on `device`: every parameter's .grad holds scale · d(mean loss)/dw.
// Returns the batch's mean loss.
inline double forward_backward(scalelab::Device& device, scalelab::Model& model, const scalelab::HostBatch& b,
                             float scale = 1.0f) {
  using namespace scalelab;
  Tensor x = device.empty({b.size, b.features}, DType::f32, MemoryCategory::activations, "batch.x");
  Tensor y = device.empty({b.size}, DType::i32, MemoryCategory::activations, "batch.y");
  device.upload({"batch.x", Phase::data}, x, b.x.data());
  device.upload({"batch.y", Phase::data}, y, b.y.data());
  Tensor logits = model.forward(x);
  Tensor dlogits = device.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
  const double loss = device.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits, scale);
  model.backward(dlogits);
  return loss;
}

// The model (weights from seed 7, as every harness starts its ranks) trained on one cpu device;
// each step's mean loss into `losses` when given (a harness compares the losses a step returns).
inline scalelab::HostWeights train_single(const std::string& model, const scalelab::OptimizerConfig& optimizer,
                                          const std::vector<scalelab::HostBatch>& batches,
                                          std::vector<double>* losses = nullptr) {
  using namespace scalelab;
  EventBus bus;
  DeviceOptions o;
  o.bus = &bus;
  auto devices = make_devices(o);
  Model m(*devices[0], init_weights(ModelSpec::parse(model), 7));
  Optimizer step(optimizer, m.parameters());
  for (const HostBatch& b : batches) {
    const double loss = forward_backward(*devices[0], m, b);
    if (losses) losses->push_back(loss);
    step.step();
  }
  return m.download();
}

// Every rank's replica holds rank 0's weights bit for bit: each applied the same averaged gradients.
inline void expect_replicas_equal(const std::vector<scalelab::HostWeights>& w, const std::string& what) {
  for (size_t r = 1; r < w.size(); ++r)
    expect(scalelab::weights_checksum(w[r]) == scalelab::weights_checksum(w[0]), what + ": rank " + str(r) + "'s weights",
           "rank 0's, bit for bit (every rank applies the same averaged gradients)",
           "max relative difference " + str(scalelab::max_relative_difference(w[r], w[0])));
}

}  // namespace lab
