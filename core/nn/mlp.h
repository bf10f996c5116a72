#pragma once
// The model: a multilayer perceptron written out layer by layer, with explicit forward and
// backward passes so a student can see every GEMM. Built from a spec like "mlp:784-256-128-10".
#include <cstdint>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/nn/linear.h"

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

// Host copy of a model's weights, layer by layer: W (out × in) then b (out). A dry run's weights
// are shapes only (no floats): a 1e9-parameter model, on a thousand ranks, costs the host nothing.
struct HostWeights {
  ModelSpec spec;
  std::vector<std::vector<float>> weight;  // empty (or empty vectors): shapes only
  std::vector<std::vector<float>> bias;

  bool has_values() const { return !weight.empty() && !weight.front().empty(); }
  // Layer l's floats for an upload; nullptr for shapes only (a device that computes refuses it).
  const float* weight_data(int l) const { return has_values() ? weight[static_cast<size_t>(l)].data() : nullptr; }
  const float* bias_data(int l) const { return has_values() ? bias[static_cast<size_t>(l)].data() : nullptr; }
};

// Deterministic initial weights from a seed, as PyTorch's nn.Linear default: W, b ~ U(−1/√in, 1/√in).
// values = false: the spec alone, for devices that compute nothing (a dry run); the same call
// either way, so code that draws weights per rank passes on whether its first ones had values.
HostWeights init_weights(const ModelSpec& spec, uint64_t seed, bool values = true);

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

  // Mixed precision: every layer computes in `compute` (f32, f16 or bf16); see Linear.
  void set_precision(DType compute);
  DType precision() const;
  // Every layer casts its f32 master weights into its half copies: once per step, before forward.
  void refresh_half_weights();

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
