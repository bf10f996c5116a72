// Lab 03 — the reference solution (not in the hand-out): strategies/data_parallel.cpp's
// train_step, without mixed precision.
#include "lab.h"

namespace lab03 {

using scalelab::DType;
using scalelab::Layer;
using scalelab::MemoryCategory;
using scalelab::Phase;
using scalelab::Role;

double data_parallel_step(Controller& c, const HostBatch& batch) {
  const int n = static_cast<int>(c.devices.size());
  const int64_t rows = batch.size / n;
  Device& dev0 = *c.devices[0];

  // 1. scatter the batch
  Tensor x = dev0.empty({batch.size, batch.features}, DType::f32, MemoryCategory::activations, "batch.x");
  Tensor y = dev0.empty({batch.size}, DType::i32, MemoryCategory::activations, "batch.y");
  dev0.upload({"batch.x", Phase::data}, x, batch.x.data());
  dev0.upload({"batch.y", Phase::data}, y, batch.y.data());
  std::vector<Tensor> xs(static_cast<size_t>(n));
  xs[0] = x.rows_slice(0, rows);
  for (int i = 1; i < n; ++i) {
    Device& dev = *c.devices[i];
    xs[i] = dev.empty({rows, batch.features}, DType::f32, MemoryCategory::activations, "scatter.x");
    dev.copy({.name = "scatter batch.x", .phase = Phase::data, .role = Role::scatter}, x.rows_slice(i * rows, rows), xs[i]);
  }

  // 2. replicate the weights from device 0
  const std::vector<Parameter*> master = c.replicas[0]->parameters();
  for (int i = 1; i < n; ++i) {
    const std::vector<Parameter*> replica = c.replicas[i]->parameters();
    for (size_t j = 0; j < master.size(); ++j)
      c.devices[i]->copy({.name = "replicate " + master[j]->name, .phase = Phase::comm, .layer = master[j]->layer,
                          .role = Role::replicate},
                         master[j]->value, replica[j]->value);
  }

  // 3. forward on every replica
  std::vector<Tensor> outputs(static_cast<size_t>(n));
  parallel_apply(n, [&](int i) {
    Tensor h = xs[i];
    for (Layer& layer : c.replicas[i]->layers()) h = layer.forward(h);
    outputs[i] = h;
  });

  // 4. gather the outputs on device 0; the loss on the whole batch
  const int64_t classes = outputs[0].cols();
  Tensor logits = dev0.empty({batch.size, classes}, DType::f32, MemoryCategory::activations, "gather.logits");
  for (int i = 0; i < n; ++i)
    dev0.copy({.name = "gather logits", .phase = Phase::comm, .role = Role::gather}, outputs[i],
              logits.rows_slice(i * rows, rows));
  Tensor dlogits = dev0.empty({batch.size, classes}, DType::f32, MemoryCategory::activations, "dlogits");
  const double loss = dev0.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);

  // 5. scatter the gradient w.r.t. the outputs
  std::vector<Tensor> douts(static_cast<size_t>(n));
  douts[0] = dlogits.rows_slice(0, rows);
  for (int i = 1; i < n; ++i) {
    Device& dev = *c.devices[i];
    douts[i] = dev.empty({rows, classes}, DType::f32, MemoryCategory::activations, "scatter.dlogits");
    dev.copy({.name = "scatter dlogits", .phase = Phase::comm, .role = Role::scatter}, dlogits.rows_slice(i * rows, rows),
             douts[i]);
  }

  // 6. backward on every replica
  parallel_apply(n, [&](int i) {
    const LayerList& layers = c.replicas[i]->layers();
    Tensor g = douts[i];
    for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) g = layers[l].backward(g, /*need_dx=*/l > 0);
  });

  // 7. reduce (sum) the gradients to device 0
  for (int i = 1; i < n; ++i) {
    const std::vector<Parameter*> replica = c.replicas[i]->parameters();
    for (size_t j = 0; j < master.size(); ++j) {
      Tensor buffer = dev0.empty(master[j]->grad.shape(), DType::f32, MemoryCategory::comm_buffers,
                                 master[j]->name + ".grad from " + c.devices[i]->name());
      const scalelab::OpTag reduce{.name = "reduce " + master[j]->name + ".grad", .phase = Phase::comm,
                                   .layer = master[j]->layer, .role = Role::reduce};
      dev0.copy(reduce, replica[j]->grad, buffer);
      dev0.axpy(reduce, 1.0f, buffer, master[j]->grad);
    }
  }

  // 8. step on device 0
  c.optimizer->step();
  return loss;
}

int64_t device0_extra_peak_bytes() {
  // mlp:784-512-256-10: P = 784·512 + 512 + 512·256 + 256 + 256·10 + 10 = 535 818; B = 512, N = 4,
  // R = 128 rows a device, F = 784 features, C = 10 classes. Category by category, device 0 − device 1:
  const int64_t P = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10, B = 512, R = 128, F = 784, C = 10;
  const int64_t optimizer = 4 * P;               // the momentum buffers: only device 0's optimizer
  const int64_t comm_buffers = 4 * 784 * 512;    // one reduce buffer at a time: the largest, fc1.weight
  const int64_t activations = 4 * (B - R) * F    // the whole batch.x against device 1's R rows
                              + 4 * B            // the labels
                              + 4 * B * C * 2    // the gathered outputs and their gradient
                              - 4 * R * C;       // device 1's rows of that gradient
  return optimizer + comm_buffers + activations;  // params, grads: the same on every device
}

}  // namespace lab03
