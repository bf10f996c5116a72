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
      : device_(*ctx.devices.at(0)), model_(device_, ctx.initial_weights), optimizer_(ctx.config.optimizer, model_.parameters()) {}

  double train_step(const HostBatch& batch, int64_t step) override {
    device_.set_step(step);
    // 1. The batch goes from host memory to the device.
    Tensor x = device_.empty({batch.size, batch.features}, DType::f32, MemoryCategory::activations, "batch.x");
    Tensor y = device_.empty({batch.size}, DType::i32, MemoryCategory::activations, "batch.y");
    device_.upload({"batch.x", Phase::data}, x, batch.x.data());
    device_.upload({"batch.y", Phase::data}, y, batch.y.data());
    // 2. Forward through every layer, then the loss and its gradient w.r.t. the logits.
    Tensor logits = model_.forward(x);
    Tensor dlogits = device_.empty(logits.shape(), DType::f32, MemoryCategory::activations, "dlogits");
    double loss = device_.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);
    // 3. Backward through every layer, last to first: each writes its weight and bias gradients.
    model_.backward(dlogits);
    // 4. The optimizer updates the weights from the gradients.
    optimizer_.step();
    return loss;
  }

  HostWeights weights() override { return model_.download(); }

  TrainingState state() override {
    TrainingState s;
    s.weights = model_.download();
    s.optimizer_steps = optimizer_.steps_taken();
    s.optimizer = optimizer_.download_state();
    return s;
  }

  void load_state(const TrainingState& s) override {
    model_.upload(s.weights);
    optimizer_.set_steps_taken(s.optimizer_steps);
    optimizer_.upload_state(s.optimizer);
  }

 private:
  Device& device_;
  Mlp model_;
  Optimizer optimizer_;
};

}  // namespace

std::unique_ptr<Strategy> make_single(StrategyContext& ctx) {
  if (ctx.devices.size() != 1)
    throw UsageError("single", "the single strategy uses exactly one device, got --devices " +
                                   std::to_string(ctx.devices.size()) + " — pass --devices 1");
  return std::make_unique<Single>(ctx);
}

}  // namespace scalelab
