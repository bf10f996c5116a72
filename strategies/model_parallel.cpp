// model-parallel: the layers split into contiguous groups, one group per device, as the lecture's
// Net with sub_net1 on gpu0 and sub_net2 on gpu1. The activations are copied forward to the next
// device, and their gradients copied back:
//
//   1. the batch goes to the first device, the labels to the last one (where the loss is)
//   2. forward, layer by layer: where the next layer lives on another device, the activations
//      are copied there first — `sub_net2(y.to(gpu1))`, "blocking": that device cannot start
//      before the copy ends, and the device that produced them has nothing left to do
//   3. the loss and its gradient on the last device
//   4. backward, layer by layer in reverse: the gradient is copied back across each boundary
//   5. unscale, check for overflow, step or skip: the optimizer updates each layer on the device
//      that holds it (with --amp fp16: unless a gradient, on any device, overflowed)
//
// Only one device works at any moment; the others stand idle, waiting. With p devices doing equal
// shares, each is busy about 1/p of the time (the idle share the metrics show): the model fits
// where one device's memory would not, but it trains no faster. Pipelines fill that idle time.
#include <memory>

#include "core/error.h"
#include "core/nn/optimizer.h"
#include "strategies/registry.h"

namespace scalelab {
namespace {

// slide: mp-layer-devices
// Layer l of L goes to device ⌊l·p / L⌋: p contiguous groups whose sizes differ by at most one.
std::vector<Device*> layer_devices(const std::vector<Device*>& devices, int layers) {
  const int p = static_cast<int>(devices.size());
  std::vector<Device*> out;
  for (int l = 0; l < layers; ++l) out.push_back(devices[static_cast<size_t>(l * p / layers)]);
  return out;
}
// end slide

// The tensor on `dst`: itself if it is there already, else a copy made by `dst` (on its copy lane).
Tensor moved_to(Device& dst, const Tensor& t, const OpTag& tag, const std::string& what) {
  if (t.device() == &dst) return t;
  Tensor out = dst.empty(t.shape(), t.dtype(), MemoryCategory::activations, what);
  dst.copy(tag, t, out);
  return out;
}

class ModelParallel : public Strategy {
 public:
  explicit ModelParallel(StrategyContext& ctx)
      : model_(layer_devices(ctx.devices, ctx.initial_weights.spec.layer_count()), ctx.initial_weights),
        optimizer_(ctx.config.optimizer, model_.parameters()),
        scaler_(make_loss_scaler(ctx.config)) {
    for (Device* d : ctx.devices) devices_.push_back(d);
    model_.set_precision(ctx.config.amp_dtype());
    model_.set_recompute(ctx.config.recompute);
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    const LayerList& layers = model_.layers();
    const int L = static_cast<int>(layers.size());
    Device& first = layers.front().device();
    Device& last = layers.back().device();
    for (Device* d : devices_) d->set_step(step);

    // 1. The batch goes from the host to the first device, the labels to the last.
    Tensor x = first.empty({batch.size, batch.features}, DType::f32, MemoryCategory::activations, "batch.x");
    Tensor y = last.empty({batch.size * batch.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
    first.upload({"batch.x", Phase::data}, x, batch.x.data());
    last.upload({"batch.y", Phase::data}, y, batch.y.data());

    // slide: mp-forward-backward
    // 2. Forward, layer by layer; across a device boundary the activations are copied first (with
    //    --amp each layer computes from a half copy of its weights, and the copies carry half).
    //    The whole batch is one micro-batch (number 0): model parallel is a pipeline with m = 1,
    //    and the dashboard's Pipeline panel shows its idle share, (p−1)/p.
    model_.refresh_half_weights();
    model_.set_batch_position({step, 0, 1});  // --dropout: the whole batch, in order
    Tensor h = x;
    for (int l = 0; l < L; ++l) {
      const std::string fc = "fc" + std::to_string(l + 1);
      h = moved_to(layers[l].device(), h, {"activations to " + fc, Phase::fwd, l}, fc + ".in");
      h = layers[l].forward(h, /*micro_batch=*/0);
    }

    // 3. The loss and its gradient w.r.t. the logits (times the fp16 loss scale), on the last device.
    Tensor dlogits = last.empty(h.shape(), h.dtype(), MemoryCategory::activations, "dlogits");
    double loss = last.softmax_xent({"loss", Phase::fwd, -1, 0}, h, y, dlogits, scaler_.scale());

    // 4. Backward, last layer to first; across a device boundary the gradient is copied back.
    Tensor g = dlogits;
    for (int l = L - 1; l >= 0; --l) {
      const std::string fc = "fc" + std::to_string(l + 1);
      g = moved_to(layers[l].device(), g, {"gradient back to " + fc, Phase::bwd, l}, fc + ".dout");
      g = layers[l].backward(g, /*need_dx=*/l > 0, /*accumulate=*/false, /*micro_batch=*/0);
    // end slide
    }

    // 5. Unscale, check for overflow, step or skip: every gradient is unscaled and checked where it
    //    lives; one controller sees all the flags, so one decision needs no communication. Then the
    //    optimizer updates every layer where it lives.
    const bool overflow = scaler_.unscale_and_check(model_.parameters());
    if (!overflow) optimizer_.step();
    scaler_.update(overflow);
    return loss;
  }

  // The layers, gathered from their devices.
  HostWeights weights() override { return model_.download(); }

  TrainingState state() override { return whole_model_state(model_, optimizer_, scaler_); }
  void load_state(const TrainingState& s) override { load_whole_model_state(model_, optimizer_, scaler_, s); }
  AmpReport amp_report() const override { return scaler_.report(); }

 private:
  std::vector<Device*> devices_;
  Model model_;  // each layer on its group's device
  Optimizer optimizer_;
  LossScaler scaler_;
};

}  // namespace

void check_model_parallel_shape(int p, const ModelSpec& spec) {
  if (p > spec.layer_count())
    throw UsageError("model-parallel", "--devices " + std::to_string(p) + " but --model " + spec.text + " has only " +
                                           std::to_string(spec.layer_count()) +
                                           " layers to split, and every device needs at least one — use --devices ≤ " +
                                           std::to_string(spec.layer_count()) + ", or a model with more layers");
}

std::unique_ptr<Strategy> make_model_parallel(StrategyContext& ctx) {
  check_model_parallel_shape(static_cast<int>(ctx.devices.size()), ctx.initial_weights.spec);
  return std::make_unique<ModelParallel>(ctx);
}

}  // namespace scalelab
