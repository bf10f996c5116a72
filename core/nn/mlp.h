#pragma once
// The model: a multilayer perceptron written out layer by layer, with explicit forward and
// backward passes so a student can see every GEMM. Built from a spec like "mlp:784-256-128-10".
#include <cstdint>
#include <string>
#include <vector>

#include "core/device/device.h"

namespace scalelab {

struct ModelSpec {
  std::vector<int64_t> sizes;  // input, hidden..., output
  std::string text;            // as given: "mlp:784-256-128-10"

  static ModelSpec parse(const std::string& text);  // throws UsageError naming --model
  int layer_count() const { return static_cast<int>(sizes.size()) - 1; }
  int64_t parameter_count() const;
  int64_t layer_parameter_count(int layer) const { return sizes[layer + 1] * sizes[layer] + sizes[layer + 1]; }
  int64_t inputs() const { return sizes.front(); }
  int64_t outputs() const { return sizes.back(); }
};

// A trainable tensor and its gradient, on the same device.
struct Parameter {
  std::string name;  // "fc1.weight"
  int layer = 0;
  Tensor value;
  Tensor grad;
};

// y = act(x · Wᵀ + b), W is out × in. Bias and ReLU are one fused kernel (bias_act), as cuDNN and
// PyTorch's fused epilogues do: one pass over y instead of two. The last layer has no activation.
class Linear {
 public:
  Linear(Device& device, int index, int64_t in, int64_t out, Activation act);

  // Keeps x and y for backward. `micro_batch` tags the events (pipeline schedules).
  Tensor forward(const Tensor& x, int micro_batch = -1);
  // dy is the gradient of the loss w.r.t. this layer's output; it is overwritten in place.
  // Writes (or, with accumulate, adds) dW and db; returns dx unless need_dx is false.
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1);
  // Frees what forward kept: a dry-run or an aborted step must not hold activations.
  void clear_saved();

  Device& device() { return *device_; }
  int index() const { return index_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Activation activation() const { return act_; }
  Parameter weight;
  Parameter bias;

 private:
  Device* device_;
  int index_;
  int64_t in_, out_;
  Activation act_;
  std::vector<Tensor> saved_x_, saved_y_;  // a stack: pipelines run several micro-batches' forwards first
};

// Host copy of a model's weights, layer by layer: W (out × in) then b (out).
struct HostWeights {
  ModelSpec spec;
  std::vector<std::vector<float>> weight;
  std::vector<std::vector<float>> bias;
};

// Deterministic initial weights from a seed, as PyTorch's nn.Linear default: W, b ~ U(−1/√in, 1/√in).
HostWeights init_weights(const ModelSpec& spec, uint64_t seed);

// The sequential model. Each layer can live on its own device (model parallel); the simple
// constructor puts them all on one.
class Mlp {
 public:
  Mlp(Device& device, const HostWeights& init);
  Mlp(const std::vector<Device*>& layer_devices, const HostWeights& init);

  // Runs the layers in order; the caller copies activations between devices where they change
  // (see forward_range).
  Tensor forward(const Tensor& x, int micro_batch = -1);
  // From the gradient of the loss w.r.t. the logits down to the first layer.
  void backward(const Tensor& dlogits, bool accumulate = false, int micro_batch = -1);
  // Layers [first, last) only: the building block of model-parallel and pipeline stages.
  Tensor forward_range(int first, int last, const Tensor& x, int micro_batch = -1);
  Tensor backward_range(int first, int last, const Tensor& dy, bool need_dx, bool accumulate = false,
                        int micro_batch = -1);

  std::vector<Parameter*> parameters();
  std::vector<Linear>& layers() { return layers_; }
  const ModelSpec& spec() const { return spec_; }
  HostWeights download();  // copies the weights to the host (traced as data movement)
  void upload(const HostWeights& w);

 private:
  ModelSpec spec_;
  std::vector<Linear> layers_;
};

// Accuracy of host weights on a dataset (no events: evaluation is not part of the run's timeline).
double evaluate_accuracy(const HostWeights& w, const float* images, const int32_t* labels, int64_t count);
// FNV-1a over the weights' bytes, as 16 hex digits: equal checksums mean bit-identical weights.
std::string weights_checksum(const HostWeights& w);
// Per tensor, max|a − b| / max|b|; the largest over all tensors: the equivalence figure.
double max_relative_difference(const HostWeights& a, const HostWeights& b);

}  // namespace scalelab
