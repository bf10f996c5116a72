#pragma once
// A layer of a sequential model: what a strategy places on a device, splits into pipeline stages
// or buckets by its gradients. Every kind (Linear, Conv2d, MaxPool2d, a transformer block …)
// writes out its forward and its backward with the device's ops, so each op is an event.
//
// Activations are 2-D row-major tensors: a row per sample for images (a ConvNet's image as C·H·W
// floats, PyTorch's NCHW order, so Flatten moves nothing), a row per token for text (B·T rows of
// the hidden size). A layer keeps what its backward needs in a queue, one entry per forward:
// pipeline schedules run several micro-batches' forwards before the first backward, and backward
// takes the oldest.
#include <cstdint>
#include <string>
#include <vector>

#include "core/device/device.h"

namespace scalelab {

// A trainable tensor and its gradient, on the same device.
struct Parameter {
  std::string name;  // as PyTorch's state_dict names it: "fc1.weight", "blocks.0.attn.qkv.weight"
  int layer = 0;     // the index of the layer that holds it in its model
  Tensor value;
  Tensor grad;
};

// Where a replica's samples sit in the step's global batch: its local sample j (counted across
// the step's forwards, micro-batch after micro-batch) is global sample first_sample + j·stride. A
// DDP rank r of N: (r, N); single, a pipeline, tensor parallel: (0, 1). What dropout's mask is a
// function of, so that a sample is dropped alike whichever device computes it.
struct BatchPosition {
  int64_t step = 0;
  int64_t first_sample = 0;
  int64_t sample_stride = 1;
};

class Layer {
 public:
  Layer(Device& device, int index, std::string name) : device_(&device), index_(index), name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  Device& device() { return *device_; }
  int index() const { return index_; }            // its place in the model: the events' `layer`
  const std::string& name() const { return name_; }  // "fc1", "conv1", "block0"

  // The output's shape for an input of `input` ({rows, cols}); throws Error naming the layer when
  // the input does not fit it.
  virtual std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const = 0;
  // Keeps what backward needs. `micro_batch` tags the events (pipeline schedules).
  virtual Tensor forward(const Tensor& x, int micro_batch = -1) = 0;
  // dy is the gradient of the loss w.r.t. this layer's output (it may be overwritten). Writes (or,
  // with accumulate, adds to) the parameters' gradients; returns dx unless need_dx is false.
  virtual Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) = 0;
  // Frees what forward kept: a dry run or an aborted step must not hold activations.
  virtual void clear_saved() = 0;
  // Its trainable tensors in state_dict order (none for a pooling layer).
  virtual std::vector<Parameter*> parameters() { return {}; }

  // Mixed precision (see Linear): f32, or f16 / bf16 from half copies of the f32 weights. A layer
  // that cannot compute in half refuses it with an error naming itself.
  virtual void set_precision(DType compute);
  DType precision() const { return compute_; }
  // Casts the f32 master weights into the half copies; nothing to do in f32.
  virtual void refresh_half_weights(int /*micro_batch*/ = -1) {}
  // Frees the half copies until the next refresh_half_weights() makes them again: ZeRO-3 holds a
  // layer's weights, and so their half copies, only while the layer computes.
  virtual void drop_half_weights() {}
  // Activation checkpointing (--recompute): forward keeps only the layer's input, backward runs
  // the forward again first. A transformer block does; other layers keep what they keep.
  virtual void set_recompute(bool /*on*/) {}
  // Dropout (a layer that has it: an MLP's or the ConvNet's head input, a GPT's embedding output):
  // where the next forwards' samples sit, once per step before them; and training (on) or
  // evaluation (off: dropout is the identity, as model.eval()). Other layers ignore both.
  virtual void set_batch_position(const BatchPosition& /*position*/) {}
  virtual void set_training(bool /*on*/) {}
  // Zero-bubble pipelines split a backward in two (strategies/pipeline_schedule.h). Deferred,
  // backward computes the input's gradient and the cheap gradients (biases, LayerNorms) and keeps
  // what each weight's GEMM needs (its input and its output's gradient); weight_pass() computes
  // those weights' gradients later, the oldest backward's first, and writes (or, with accumulate,
  // adds) them. A layer whose weight gradients are not GEMMs of their own — a convolution's come
  // out of one fused op, an embedding's are a scatter — computes them all in backward, and its
  // weight_pass does nothing.
  virtual void set_weight_pass(bool /*deferred*/) {}
  virtual void weight_pass(bool /*accumulate*/, int /*micro_batch*/ = -1) {}

 protected:
  // Mixed precision for a layer with weights (Linear, Conv2d): the weights the optimizer updates
  // stay f32 (the masters) and the layer computes from half copies of them. The copies are
  // workspace, not params: derived from the masters every step, never trained or saved — so
  // "params" keeps meaning the f32 weights (4 bytes each, as ZeRO shards them) and what AMP adds
  // (2 bytes per weight) shows on its own line. Allocated once, refreshed in place (a parameter
  // with no weights yet — ZeRO-3's, gathered later — gets its copy at the first refresh).
  void set_half_copies(DType compute);          // f32 drops them; f16 / bf16 allocates one per parameter
  void refresh_half_copies(int micro_batch);    // casts the masters into them (nothing to do in f32)
  void drop_half_copies();                      // frees them; the next refresh allocates them again
  // Parameter p, parameters()[i], as the ops read it: the master in f32, its copy under AMP.
  const Tensor& compute_value(const Parameter& p, size_t i) const { return compute_ == DType::f32 ? p.value : half_copies_[i]; }
  // Refuses a forward in half before the copies were filled.
  void check_half_copies_cast() const;
  // Puts a half gradient into its f32 master: cast (the first write) or add (accumulating).
  void to_master_grad(const Tensor& half, Parameter& p, bool accumulate, int micro_batch, Phase phase = Phase::bwd);

  Device* device_;
  int index_;
  std::string name_;
  DType compute_ = DType::f32;

 private:
  std::vector<Tensor> half_copies_;  // one per parameters(), in its order
  bool half_copies_cast_ = false;
};

}  // namespace scalelab
