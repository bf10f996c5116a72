// single: the whole model on one device. The reference every other strategy is checked against:
// copy the batch in, forward layer by layer, loss, backward layer by layer, optimizer step.
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
        accumulate_steps_(ctx.config.no_sync) {}

  double train_step(const HostBatch& batch, int64_t step) override {
    device_.set_step(step);
    // 1. The batch goes from host memory to the device.
    Tensor x = device_.empty({batch.size, batch.features}, DType::f32, MemoryCategory::activations, "batch.x");
    Tensor y = device_.empty({batch.size}, DType::i32, MemoryCategory::activations, "batch.y");
    device_.upload({"batch.x", Phase::data}, x, batch.x.data());
    device_.upload({"batch.y", Phase::data}, y, batch.y.data());
    // 2. Forward through every layer, then the loss and its gradient w.r.t. the logits.
    //    With --no-sync K (gradient accumulation, as ddp does it) the gradient is scaled by 1/K.
    const int K = accumulate_steps_;
    Tensor logits = model_.forward(x);
    Tensor dlogits = device_.empty(logits.shape(), DType::f32, MemoryCategory::activations, "dlogits");
    double loss = device_.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits, 1.0f / static_cast<float>(K));
    // 3. Backward through every layer, last to first: each writes its weight and bias gradients
    //    (or, after the first batch of a --no-sync window, adds to them).
    model_.backward(dlogits, /*accumulate=*/step % K != 0);
    // 4. The optimizer updates the weights from the gradients (with --no-sync K: once every K
    //    batches, from the mean gradient over them).
    if (step % K == K - 1) optimizer_.step();
    return loss;
  }

  HostWeights weights() override { return model_.download(); }

  TrainingState state() override { return whole_model_state(model_, optimizer_); }
  void load_state(const TrainingState& s) override { load_whole_model_state(model_, optimizer_, s); }

 private:
  Device& device_;
  Mlp model_;
  Optimizer optimizer_;
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
