#pragma once
// The model: a sequence of layers (core/nn/layer.h), each with explicit forward and backward
// passes, so a student sees every GEMM. Three families, each from a spec:
//   mlp:784-256-128-10       a multilayer perceptron (input, hidden sizes, classes)
//   convnet                  the lecture's ConvNet on 1×28×28 images: two conv + ReLU + max-pool
//                            blocks, then a linear head (PyTorch's DDP tutorial, without BatchNorm)
//   gpt:L-C-H-T-V            a GPT-2-style decoder: L blocks of hidden size C with H heads over a
//                            context of T tokens, a vocabulary of V (token + position embedding, the
//                            blocks, a final LayerNorm and an LM head)
// A model's layers are what strategies place on devices and cut into pipeline stages: an MLP's
// Linear layers, the ConvNet's convolutions and pools, a GPT's embedding, blocks and head.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/nn/layer.h"
#include "core/nn/linear.h"

namespace scalelab {

enum class ModelFamily : uint8_t { mlp, convnet, gpt };

// A GPT's shape: gpt:L-C-H-T-V.
struct GptShape {
  int64_t layers = 0, hidden = 0, heads = 0, context = 0, vocab = 0;
};

// A parameter tensor as the spec knows it, before any device holds it: what initial weights,
// checkpoints, exports and ZeRO's flat shards are laid out by.
struct TensorSpec {
  enum class Init : uint8_t { uniform, normal, ones, zeros };
  std::string name;            // the state_dict name: "fc1.weight", "blocks.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // PyTorch's: Linear {out, in}, Conv2d {out, in, k, k}
  int layer = 0;               // the model layer that holds it
  Init init = Init::uniform;
  float scale = 0;  // uniform: U(−scale, scale) (PyTorch's 1/√fan_in); normal: its std
  int64_t numel() const;
};

struct ModelSpec {
  std::string text;  // as given: "mlp:784-256-128-10", "convnet", "gpt:2-128-4-64-96"
  ModelFamily family = ModelFamily::mlp;
  std::vector<int64_t> sizes;  // mlp: input, hidden…, output (empty for the other families)
  GptShape gpt;                // gpt only
  // Dropout (--dropout p, 0: none), where each family has it: the input of every MLP layer but the
  // first, the ConvNet's features before its head, a GPT's embedding output. Its seed is the run's.
  // No parameters: weights and checkpoints are the same with it or without.
  float dropout = 0;
  uint64_t dropout_seed = 0;

  static ModelSpec parse(const std::string& text);  // throws UsageError naming --model
  // The same layers and tensors (the text may differ: "mlp:10-2" and "mlp:010-2").
  bool same_model(const ModelSpec& other) const {
    return family == other.family && sizes == other.sizes && gpt.layers == other.gpt.layers &&
           gpt.hidden == other.gpt.hidden && gpt.heads == other.gpt.heads && gpt.context == other.gpt.context &&
           gpt.vocab == other.gpt.vocab;
  }
  // Every parameter tensor in state_dict order (shared by the spec's copies: a 96-block GPT on a
  // thousand ranks holds one list).
  const std::vector<TensorSpec>& tensors() const { return *tensors_; }
  int layer_count() const { return layer_count_; }
  // What layer `l` is called in events ("fc1", "conv1", "pool1", "embed", "block3", "head").
  std::string layer_name(int l) const;
  int64_t parameter_count() const;
  int64_t layer_parameter_count(int layer) const;
  // A sample as the batch holds it: 784 pixels, or T token ids; the labels a sample carries (1, or
  // T next tokens) and the classes each label is one of (10, or V).
  int64_t inputs() const;
  int64_t labels_per_sample() const { return family == ModelFamily::gpt ? gpt.context : 1; }
  int64_t outputs() const;
  // The activation between layer b−1 and layer b (b = 0: the batch, b = layer_count(): the logits)
  // for `samples` samples: {rows, cols}. What a pipeline stage receives and model parallel copies.
  std::vector<int64_t> activation_shape(int boundary, int64_t samples) const;
  // … and its dtype when the layers compute in `compute` (--amp): an MLP's activations are in the
  // compute dtype, a GPT's residual stream stays f32 (its logits do not), the ConvNet's are f32.
  DType activation_dtype(int boundary, DType compute) const;
  // Training FLOPs (forward and backward) per sample: an MLP's and ConvNet's per image, a GPT's
  // for its T tokens — per token 6·P + 12·L·C·T (the matmuls of the weights, then attention's),
  // the count MFU is taken with (PaLM, appendix B). P is the weights that multiply: not the token
  // and position embeddings, which are looked up (PaLM's embedding is its tied head, so it counts;
  // ours is untied, and the head counts on its own).
  double train_flops_per_sample() const;
  // A GPT's tokens per sample (T); 0 for the image families.
  int64_t tokens_per_sample() const { return family == ModelFamily::gpt ? gpt.context : 0; }

 private:
  std::shared_ptr<const std::vector<TensorSpec>> tensors_ = std::make_shared<std::vector<TensorSpec>>();
  int layer_count_ = 0;
};

// Models worth naming: what `scalelab models` lists (spec, what it is).
struct ModelPreset {
  const char* spec;
  const char* what;
};
const std::vector<ModelPreset>& model_presets();

// Host copy of a model's weights: one float vector per parameter tensor, in spec.tensors() order.
// A dry run's weights are shapes only (no floats): a 1e9-parameter model, on a thousand ranks,
// costs the host nothing.
struct HostWeights {
  ModelSpec spec;
  std::vector<std::vector<float>> values;  // empty: shapes only

  bool has_values() const { return !values.empty() && !values.front().empty(); }
  // Parameter p's floats for an upload; nullptr for shapes only (a device that computes refuses it).
  const float* data(size_t p) const { return has_values() ? values[p].data() : nullptr; }
};

// Deterministic initial weights from a seed, drawn tensor after tensor in state_dict order, as
// PyTorch's defaults: Linear and Conv2d U(−1/√fan_in, 1/√fan_in), LayerNorm 1 and 0, embeddings
// N(0, 0.02²) (GPT-2's). values = false: the spec alone, for devices that compute nothing (a dry
// run); the same call either way, so code that draws weights per rank passes on whether its first
// ones had values.
HostWeights init_weights(const ModelSpec& spec, uint64_t seed, bool values = true);

// Layer l of `spec`, made on `device` (its parameters uninitialised: Model uploads them).
std::unique_ptr<Layer> make_layer(const ModelSpec& spec, int l, Device& device);
// The seed of layer l's dropout mask (the run's seed mixed with the layer): a strategy that drops
// a layer's activations itself (sequence parallel's embedding shard) draws the same mask.
uint64_t layer_dropout_seed(const ModelSpec& spec, int l);

// The layers a model holds, read as Layer& (`layers()[l].forward(h)`, `for (Layer& layer : …)`).
class LayerList {
 public:
  class iterator {
   public:
    explicit iterator(std::vector<std::unique_ptr<Layer>>::const_iterator at) : at_(at) {}
    Layer& operator*() const { return **at_; }
    iterator& operator++() { ++at_; return *this; }
    bool operator!=(const iterator& other) const { return at_ != other.at_; }
   private:
    std::vector<std::unique_ptr<Layer>>::const_iterator at_;
  };
  Layer& operator[](size_t l) const { return *items_[l]; }
  size_t size() const { return items_.size(); }
  Layer& front() const { return *items_.front(); }
  Layer& back() const { return *items_.back(); }
  iterator begin() const { return iterator(items_.begin()); }
  iterator end() const { return iterator(items_.end()); }
  void push_back(std::unique_ptr<Layer> layer) { items_.push_back(std::move(layer)); }

 private:
  std::vector<std::unique_ptr<Layer>> items_;
};

// The sequential model. Each layer can live on its own device (model parallel); the simple
// constructor puts them all on one.
class Model {
 public:
  Model(Device& device, const HostWeights& init);
  Model(const std::vector<Device*>& layer_devices, const HostWeights& init);

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
  // --recompute: every transformer block keeps only its input and recomputes the rest in backward.
  void set_recompute(bool on) {
    for (Layer& layer : layers_) layer.set_recompute(on);
  }
  // Dropout: where this step's forwards' samples sit in the global batch (Layer::set_batch_position),
  // and training or evaluation.
  void set_batch_position(const BatchPosition& position) {
    for (Layer& layer : layers_) layer.set_batch_position(position);
  }
  void set_training(bool on) {
    for (Layer& layer : layers_) layer.set_training(on);
  }

  std::vector<Parameter*> parameters();
  const LayerList& layers() const { return layers_; }
  const ModelSpec& spec() const { return spec_; }
  HostWeights download();  // copies the weights to the host (traced as data movement)
  void upload(const HostWeights& w);

 private:
  ModelSpec spec_;
  LayerList layers_;
};

// Uploads parameter tensors of `w` into a layer's parameters (the spec's tensors of that layer, in
// order; checked by name and size): what Model::upload does layer by layer, and a pipeline stage
// for the layers it holds.
void upload_layer(Layer& layer, const HostWeights& w);

// Accuracy of host weights on a dataset (no events: evaluation is not part of the run's timeline):
// the share of labels the model's largest logit hits (a GPT: next tokens).
double evaluate_accuracy(const HostWeights& w, const float* inputs, const int32_t* labels, int64_t count);
// FNV-1a over the weights' bytes, as 16 hex digits: equal checksums mean bit-identical weights.
std::string weights_checksum(const HostWeights& w);
// Per tensor, max|a − b| / max|b|; the largest over all tensors: the equivalence figure.
double max_relative_difference(const HostWeights& a, const HostWeights& b);

}  // namespace scalelab
