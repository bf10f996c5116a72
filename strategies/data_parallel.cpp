// data-parallel: one controller drives every device, as torch.nn.DataParallel does. The model
// lives on device 0; every step the batch is split along dim 0, the model is copied out, every
// device runs its part, and everything comes back to device 0:
//
//   forward   1. the batch is copied to device 0 and scattered, row slices, to the devices
//             2. the weights are replicated from device 0 to every device
//             3. each replica runs forward on its slice, all at the same time
//             4. the outputs are gathered on device 0, which computes the loss
//   backward  5. the gradient of the loss w.r.t. the outputs is scattered back to the devices
//             6. each replica runs backward on its slice, all at the same time
//             7. the replicas' gradients are summed on device 0
//             8. unscale, check for overflow, step or skip: the optimizer updates the weights on
//                device 0 (with --amp fp16, unless a gradient overflowed)
//
// With --amp each replica casts its copy of the f32 weights to half before its forward (autocast
// runs inside every replica), the outputs and their gradients travel in half — half the bytes —
// and the gradients the replicas send back are their f32 master gradients.
//
// Every move is a copy between devices (an event on the receiving device's copy lane, with its
// bytes). Device 0 does all the gathering, reducing and updating, and holds the most memory: the
// imbalance DistributedDataParallel removes.
#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/nn/optimizer.h"
#include "strategies/registry.h"
#include "strategies/replica_threads.h"

namespace scalelab {
namespace {

class DataParallel : public Strategy {
 public:
  explicit DataParallel(StrategyContext& ctx)
      : devices_(ctx.devices),
        model_(*devices_[0], ctx.initial_weights),
        optimizer_(ctx.config.optimizer, model_.parameters()),
        scaler_(make_loss_scaler(ctx.config)),
        threads_(static_cast<int>(ctx.devices.size())) {
    // The replicas on devices 1..n−1 have the model's shapes; their weights are overwritten from
    // device 0 at every step (2.), so what they start with does not matter.
    replicas_.push_back(&model_);
    for (size_t i = 1; i < devices_.size(); ++i) {
      copies_.push_back(std::make_unique<Model>(*devices_[i], ctx.initial_weights));
      replicas_.push_back(copies_.back().get());
    }
    for (Model* replica : replicas_) {
      replica->set_precision(ctx.config.amp_dtype());
      replica->set_recompute(ctx.config.recompute);
    }
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    const int n = static_cast<int>(devices_.size());
    const int64_t rows = batch.size / n;  // each device's share of the batch (checked in make_data_parallel)
    Device& dev0 = *devices_[0];
    for (Device* d : devices_) d->set_step(step);

    // 1. The batch goes from the host to device 0, then each device copies its rows of it (a
    //    scatter along dim 0). Device 0 keeps its own rows where they are. The labels stay on
    //    device 0, where the loss is computed.
    Tensor x = dev0.empty({batch.size, batch.features}, DType::f32, MemoryCategory::activations, "batch.x");
    Tensor y = dev0.empty({batch.size * batch.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
    dev0.upload({"batch.x", Phase::data}, x, batch.x.data());
    dev0.upload({"batch.y", Phase::data}, y, batch.y.data());
    std::vector<Tensor> xs(static_cast<size_t>(n));
    xs[0] = x.rows_slice(0, rows);
    for (int i = 1; i < n; ++i) {
      Device& dev = *devices_[i];
      xs[i] = dev.empty({rows, batch.features}, DType::f32, MemoryCategory::activations, "scatter.x");
      dev.copy({.name = "scatter batch.x", .phase = Phase::data, .role = Role::scatter}, x.rows_slice(i * rows, rows),
               xs[i]);
    }

    // slide: dp-replicate
    // 2. The weights are replicated: every device copies each parameter from device 0.
    const std::vector<Parameter*> master = model_.parameters();
    for (int i = 1; i < n; ++i) {
      const std::vector<Parameter*> replica = replicas_[i]->parameters();
      for (size_t j = 0; j < master.size(); ++j)
        devices_[i]->copy({.name = "replicate " + master[j]->name, .phase = Phase::comm,
                           .layer = master[j]->layer, .role = Role::replicate},
                          master[j]->value, replica[j]->value);
    // end slide
    }

    // 3. Each replica runs forward on its slice, layer by layer, on its own device (with --amp:
    //    from half copies of its weights, cast first).
    std::vector<Tensor> outputs(static_cast<size_t>(n));
    threads_.apply([&](int i) {
      replicas_[i]->refresh_half_weights();
      replicas_[i]->set_batch_position({step, i * rows, 1});  // --dropout: its slice's samples
      Tensor h = xs[i];
      for (Layer& layer : replicas_[i]->layers()) h = layer.forward(h);
      outputs[i] = h;
    });

    // 4. The outputs are gathered on device 0, in batch order, and the loss is computed there on
    //    the whole batch: exactly the loss, and the gradient w.r.t. the logits, of `single`
    //    (with fp16, multiplied by the loss scale).
    //    (A GPT's outputs have a row per token: T rows per sample.)
    const int64_t classes = outputs[0].cols(), out_rows = outputs[0].rows();
    const DType act = outputs[0].dtype();  // f32, or the --amp dtype
    Tensor logits = dev0.empty({n * out_rows, classes}, act, MemoryCategory::activations, "gather.logits");
    for (int i = 0; i < n; ++i)
      dev0.copy({.name = "gather logits", .phase = Phase::comm, .role = Role::gather}, outputs[i],
                logits.rows_slice(i * out_rows, out_rows));
    Tensor dlogits = dev0.empty({n * out_rows, classes}, act, MemoryCategory::activations, "dlogits");
    double loss = dev0.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits, scaler_.scale());

    // 5. The gradient w.r.t. the outputs is scattered back: each device copies its rows.
    std::vector<Tensor> doutputs(static_cast<size_t>(n));
    doutputs[0] = dlogits.rows_slice(0, out_rows);
    for (int i = 1; i < n; ++i) {
      Device& dev = *devices_[i];
      doutputs[i] = dev.empty({out_rows, classes}, act, MemoryCategory::activations, "scatter.dlogits");
      dev.copy({.name = "scatter dlogits", .phase = Phase::comm, .role = Role::scatter},
               dlogits.rows_slice(i * out_rows, out_rows), doutputs[i]);
    }

    // 6. Each replica runs backward, last layer to first, on its own device: each writes the
    //    gradients of its slice into its own copy of the parameters' .grad.
    threads_.apply([&](int i) {
      const LayerList& layers = replicas_[i]->layers();
      Tensor g = doutputs[i];
      for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) g = layers[l].backward(g, /*need_dx=*/l > 0);
    });

    // slide: dp-reduce
    // 7. The gradients are reduced to device 0: it copies each replica's gradient into a buffer
    //    and adds it to its own. The sum over slices is the gradient of the whole batch.
    for (int i = 1; i < n; ++i) {
      const std::vector<Parameter*> replica = replicas_[i]->parameters();
      for (size_t j = 0; j < master.size(); ++j) {
        Tensor buffer = dev0.empty(master[j]->grad.shape(), DType::f32, MemoryCategory::comm_buffers,
                                   master[j]->name + ".grad from " + devices_[i]->name());
        const OpTag reduce{.name = "reduce " + master[j]->name + ".grad", .phase = Phase::comm,
                           .layer = master[j]->layer, .role = Role::reduce};
        dev0.copy(reduce, replica[j]->grad, buffer);
        dev0.axpy(reduce, 1.0f, buffer, master[j]->grad);
    // end slide
      }
    }

    // 8. Unscale, check for overflow, step or skip, on device 0: with fp16 the summed gradients
    //    are divided by the loss scale, and the optimizer steps only if none overflowed (the
    //    scale is halved if one did). The next step replicates the weights again.
    const bool overflow = scaler_.unscale_and_check(master);
    if (!overflow) optimizer_.step();
    scaler_.update(overflow);
    return loss;
  }

  HostWeights weights() override { return model_.download(); }

  TrainingState state() override { return whole_model_state(model_, optimizer_, scaler_); }
  void load_state(const TrainingState& s) override { load_whole_model_state(model_, optimizer_, scaler_, s); }
  AmpReport amp_report() const override { return scaler_.report(); }

 private:
  std::vector<Device*> devices_;
  Model model_;  // on device 0: the model the optimizer updates
  Optimizer optimizer_;
  LossScaler scaler_;
  std::vector<std::unique_ptr<Model>> copies_;  // the replicas on devices 1..n−1
  std::vector<Model*> replicas_;                // every replica by device: model_, then copies_
  // One host thread per replica, as torch.nn.parallel.parallel_apply: each issues its replica's
  // ops to that replica's device, so the devices compute at the same time (steps 3. and 6.).
  ReplicaThreads threads_;
};

}  // namespace

std::unique_ptr<Strategy> make_data_parallel(StrategyContext& ctx) {
  const int64_t n = static_cast<int64_t>(ctx.devices.size());
  const int64_t batch = ctx.config.batch;
  if (batch % n != 0)
    throw UsageError("data-parallel", "--batch " + std::to_string(batch) + " cannot be split evenly over --devices " +
                                          std::to_string(n) + " (each device takes batch / devices rows) — use a --batch that is a multiple of " +
                                          std::to_string(n) + ", e.g. " + std::to_string(std::max<int64_t>(n, batch / n * n)));
  return std::make_unique<DataParallel>(ctx);
}

}  // namespace scalelab
