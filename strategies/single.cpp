// single: the whole model on one device. The reference every other strategy is checked against:
// copy the batch in, forward layer by layer, loss, backward layer by layer, optimizer step.
//
// With --amp (mixed precision, PyTorch's autocast + GradScaler) the same steps run in half: the
// layers compute from half copies of the f32 weights, the loss gradient is multiplied by the fp16
// loss scale, and before the optimizer steps the gradients are unscaled and checked for overflow
// (core/nn/loss_scaler.h). Without --amp those parts do nothing.
#include "core/error.h"
#include "core/nn/optimizer.h"
#include "strategies/registry.h"

namespace scalelab {
namespace {

class Single : public Strategy {
 public:
  explicit Single(StrategyContext& ctx)
      : device_(*ctx.devices.at(0)),
        model_(device_, ctx.initial_weights),
        optimizer_(ctx.config.optimizer, model_.parameters()),
        scaler_(make_loss_scaler(ctx.config)),
        accumulate_steps_(ctx.config.no_sync) {
    model_.set_precision(ctx.config.amp_dtype());
    model_.set_recompute(ctx.config.recompute);
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    device_.set_step(step);
    // 1. The batch goes from host memory to the device.
    Tensor x = device_.empty({batch.size, batch.features}, DType::f32, MemoryCategory::activations, "batch.x");
    Tensor y = device_.empty({batch.size * batch.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
    device_.upload({"batch.x", Phase::data}, x, batch.x.data());
    device_.upload({"batch.y", Phase::data}, y, batch.y.data());
    // 2. Forward through every layer, then the loss and its gradient w.r.t. the logits.
    //    With --no-sync K (gradient accumulation, as ddp does it) the gradient is scaled by 1/K.
    //    With --amp the layers first cast their f32 weights to half, and compute in half; with
    //    fp16 the loss gradient is also multiplied by the loss scale S (scaler.scale(loss)).
    const int K = accumulate_steps_;
    model_.refresh_half_weights();
    // --dropout: the batch's samples in order (a half of a batch: where it sits in that one).
    model_.set_batch_position({batch.part_of_step >= 0 ? batch.part_of_step : step, batch.first_sample, 1});
    Tensor logits = model_.forward(x);
    Tensor dlogits = device_.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
    double loss =
        device_.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits, scaler_.scale() / static_cast<float>(K));
    // 3. Backward through every layer, last to first: each writes its weight and bias gradients
    //    (or, after the first batch of a --no-sync window, adds to them).
    model_.backward(dlogits, /*accumulate=*/step % K != 0);
    // 4. Unscale, check for overflow, step or skip (with --no-sync K: once every K batches, from
    //    the mean gradient over them). fp16: the gradients are divided by S; if one is inf or nan,
    //    the optimizer does not step and S is halved. Otherwise — and always without fp16 — the
    //    optimizer updates the weights from the gradients.
    if (step % K == K - 1) {
      const bool overflow = scaler_.unscale_and_check(model_.parameters());
      if (!overflow) optimizer_.step();
      scaler_.update(overflow);
    }
    return loss;
  }

  HostWeights weights() override { return model_.download(); }

  TrainingState state() override { return whole_model_state(model_, optimizer_, scaler_); }
  void load_state(const TrainingState& s) override { load_whole_model_state(model_, optimizer_, scaler_, s); }
  AmpReport amp_report() const override { return scaler_.report(); }

 private:
  Device& device_;
  Model model_;
  Optimizer optimizer_;
  LossScaler scaler_;
  int accumulate_steps_;  // --no-sync K: step once every K batches (1: every batch)
};

}  // namespace

std::unique_ptr<Strategy> make_single(StrategyContext& ctx) {
  if (ctx.devices.size() != 1)
    throw UsageError("single", "the single strategy uses exactly one device, got --devices " +
                                   std::to_string(ctx.devices.size()) + " — pass --devices 1");
  return std::make_unique<Single>(ctx);
}

}  // namespace scalelab
