// ddp-mp: DDP with model parallel inside each replica. Every rank owns two devices: the first half
// of the layers lives on the first, the rest on the second, and the activations (forward) and
// their gradients (backward) are copied between them. Across ranks it is plain DDP: rank 0's
// weights broadcast once, each rank a shard of the batch, gradients averaged by bucketed
// all-reduces during backward, one optimizer per rank. (PyTorch: a model whose layers sit on two
// GPUs, wrapped in DistributedDataParallel without device_ids.)
//
// A bucket never mixes the two devices: each is all-reduced from the device its gradients live on.
// This file is the step of ONE rank; the buckets and all-reduces are shared with ddp (ddp_common).
#include "core/error.h"
#include "strategies/ddp_common.h"
#include "strategies/distributed_sampler.h"
#include "strategies/registry.h"

namespace scalelab {
namespace {

// The layers [0, split) go on a rank's first device, [split, L) on its second.
int first_half(int layers) { return (layers + 1) / 2; }

class DdpMp : public Strategy {
 public:
  explicit DdpMp(StrategyContext& ctx)
      : config_(ctx.config),
        // slide: ddp-mp-placement
        replicas_(ctx, "ddp-mp", [](const std::vector<Device*>& rank_devices, int layers) {
          std::vector<Device*> place;
          for (int l = 0; l < layers; ++l) place.push_back(rank_devices.at(l < first_half(layers) ? 0 : 1));
          return place;
        // end slide
        }) {}

  double train_step(const HostBatch& batch, int64_t step) override {
    const NoSyncWindow window = no_sync_window(config_.no_sync, step);
    return replicas_.run([&](DdpReplica& r) { return rank_step(r, batch, step, window); });
  }

  HostWeights weights() override { return replicas_.weights(); }
  TrainingState state() override { return replicas_.state(); }
  void load_state(const TrainingState& s) override { replicas_.load_state(s); }
  AmpReport amp_report() const override { return replicas_.amp_report(); }

 private:
  static double rank_step(DdpReplica& r, const HostBatch& batch, int64_t step, const NoSyncWindow& window) {
    Device& first = *r.devices.at(0);
    Device& second = *r.devices.at(1);
    first.set_step(step);
    second.set_step(step);
    const LayerList& layers = r.model->layers();
    const int L = static_cast<int>(layers.size());
    const int split = first_half(L);
    // 1. This rank's shard of the global batch (DistributedSampler): rows r, r+N, r+2N, …
    take_shard(batch, r.rank, r.world_size, r.shard);
    // 2. The inputs go to the first device, the labels to the second, where the loss is computed.
    Tensor x = first.empty({r.shard.size, r.shard.features}, DType::f32, MemoryCategory::activations, "batch.x");
    Tensor y = second.empty({r.shard.size * r.shard.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
    first.upload({"batch.x", Phase::data}, x, r.shard.x.data());
    second.upload({"batch.y", Phase::data}, y, r.shard.y.data());
    // 3. Forward: the first half on the first device, its output copied to the second device, the
    //    rest there. While one device computes, the other waits: model parallel's idle time.
    //    (--amp: each layer casts its weights to half first; the activation travels in half.)
    r.model->refresh_half_weights();
    r.model->set_batch_position({step, r.rank, r.world_size});  // --dropout: samples r, r+N, …
    Tensor h = r.model->forward_range(0, split, x);
    Tensor h_there = second.empty(h.shape(), h.dtype(), MemoryCategory::activations, "activation");
    second.copy({"activation → " + second.name(), Phase::fwd, split - 1}, h, h_there);
    Tensor logits = r.model->forward_range(split, L, h_there);
    // 4. The loss over this rank's rows (its gradient scaled by 1/K with --no-sync K, and by the
    //    loss scale with fp16), on the second device.
    Tensor dlogits = second.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
    const double loss =
        second.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits, window.grad_scale * r.scaler->scale());
    // 5. Backward, last layer first, each layer on its own device. As in ddp, each layer's
    //    gradients go to the reducer, which all-reduces a bucket as soon as it is complete — the
    //    second device's buckets start while the first device is still computing.
    auto backward_layer = [&](int l, const Tensor& dy) {
      Tensor dx = layers[l].backward(dy, /*need_dx=*/l > 0, window.accumulate);
      if (window.sync) {
        // The layer's gradients are ready, last first (a Linear: bias, then weight).
        const std::vector<Parameter*> ready = layers[l].parameters();
        for (auto p = ready.rbegin(); p != ready.rend(); ++p) r.reducer->mark_ready(**p);
      }
      return dx;
    };
    Tensor grad = dlogits;
    for (int l = L - 1; l >= split; --l) grad = backward_layer(l, grad);
    //    The gradient w.r.t. the activation goes back to the first device.
    Tensor grad_here = first.empty(grad.shape(), grad.dtype(), MemoryCategory::activations, "activation.grad");
    first.copy({"activation grad → " + first.name(), Phase::bwd, split}, grad, grad_here);
    grad = grad_here;
    for (int l = split - 1; l >= 0; --l) grad = backward_layer(l, grad);
    // 6. On a synchronising step: wait for every bucket (on both devices) and copy the averaged
    //    gradients back. Then unscale, check for overflow (both devices' gradients, and every
    //    rank's verdict), step this rank's optimizer (each parameter on its own device) or skip.
    if (window.sync) {
      r.reducer->finish();
      const bool overflow = r.scaler->unscale_and_check(r.model->parameters());
      if (!overflow) r.optimizer->step();
      r.scaler->update(overflow);
    }
    return loss;
  }

  const TrainConfig& config_;
  DdpReplicas replicas_;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp_mp(StrategyContext& ctx) {
  const ModelSpec spec = ModelSpec::parse(ctx.config.model);
  if (spec.layer_count() < 2)
    throw UsageError("ddp-mp", "--model " + spec.text + " has 1 layer, but ddp-mp splits each replica's layers over "
                               "2 devices — use a model with at least 2 layers, e.g. mlp:" +
                                   std::to_string(spec.inputs()) + "-64-" + std::to_string(spec.outputs()));
  return std::make_unique<DdpMp>(ctx);
}

}  // namespace scalelab
