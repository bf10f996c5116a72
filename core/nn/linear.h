#pragma once
// A fully connected layer written out as its GEMMs: the layer of an MLP, of a ConvNet's head and
// of a transformer block's projections.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/nn/dropout.h"
#include "core/nn/layer.h"

namespace scalelab {

// y = act(x · Wᵀ + b), W is out × in. Bias and ReLU are one fused kernel (bias_act), as cuDNN and
// PyTorch's fused epilogues do: one pass over y instead of two. The last layer has no activation.
//
// Mixed precision (--amp fp16 | bf16, PyTorch's autocast): the weights the optimizer updates stay
// f32 (the "master" weights), but the layer computes in half. Each step, refresh_half_weights()
// casts W and b into half copies; forward casts its input to half (the first layer: the batch)
// and writes its output in half; the GEMMs take half inputs and sum in f32 (a tensor core);
// backward takes and gives half activation gradients, and its weight gradients, which come out in
// half, are cast into the f32 master gradients (.grad) the optimizer and the all-reduces read.
class Linear : public Layer {
 public:
  // `name` prefixes its parameters: "fc1" → "fc1.weight", "fc1.bias".
  Linear(Device& device, int index, std::string name, int64_t in, int64_t out, Activation act);

  // f32 (the default), f16 or bf16: the dtype the layer computes in. Half allocates the copies of
  // W and b; refresh_half_weights() must fill them before the first forward.
  void set_precision(DType compute) override;
  // Casts the f32 master weights into the half copies forward and backward read: at the start of
  // every step, after the optimizer moved the masters (autocast recasts at every forward). Nothing
  // to do in f32.
  void refresh_half_weights(int micro_batch = -1) override;
  void drop_half_weights() override { drop_half_copies(); }

  // Keeps x and y for backward. `micro_batch` tags the events (pipeline schedules).
  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override;
  Tensor forward(const Tensor& x, int micro_batch = -1) override;
  // dy is the gradient of the loss w.r.t. this layer's output; it is overwritten in place.
  // Writes (or, with accumulate, adds) dW and db; returns dx unless need_dx is false.
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override;
  // Frees what forward kept: a dry-run or an aborted step must not hold activations.
  void clear_saved() override;
  // Frees what the newest forward kept, and nothing else: a recomputing block's Linears keep
  // nothing from its forward, but may hold older backwards' inputs for weight_pass().
  void forget_last_forward();
  std::vector<Parameter*> parameters() override { return {&weight, &bias}; }
  // Dropout of the input (p > 0): an MLP's hidden activations, the ConvNet's features before its
  // head (where PyTorch's MNIST example puts nn.Dropout). Held inside the layer, "<name>.drop", so
  // the model keeps the layers strategies cut into stages.
  void set_input_dropout(float p, uint64_t seed);
  void set_batch_position(const BatchPosition& position) override;
  void set_training(bool on) override;
  // Zero bubble: backward leaves dW = dyᵀ · x to weight_pass(), keeping x and dy (Layer says more).
  void set_weight_pass(bool deferred) override { weight_pass_deferred_ = deferred; }
  void weight_pass(bool accumulate, int micro_batch = -1) override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Activation activation() const { return act_; }
  Parameter weight;  // f32 master weight and gradient
  Parameter bias;

 private:
  // The weights as the GEMM and bias_act read them: the masters in f32, the half copies under AMP.
  const Tensor& compute_weight() const { return compute_value(weight, 0); }
  const Tensor& compute_bias() const { return compute_value(bias, 1); }
  // dW = dyᵀ · x, written or (accumulate) added to weight.grad; under AMP through a half workspace.
  void weight_gradient(const OpTag& tag, const Tensor& x, const Tensor& dy, bool accumulate, int micro_batch);

  int64_t in_, out_;
  Activation act_;
  std::unique_ptr<Dropout> input_dropout_;  // none without dropout
  std::vector<Tensor> saved_x_, saved_y_;  // a queue: pipelines run several micro-batches' forwards first; backward takes the oldest
  bool weight_pass_deferred_ = false;
  std::deque<std::pair<Tensor, Tensor>> deferred_;  // (x, dy) of each backward whose dW waits for weight_pass()
};

}  // namespace scalelab
