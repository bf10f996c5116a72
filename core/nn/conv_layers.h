#pragma once
// The ConvNet's layers (the lecture's DDP example: conv → ReLU → max-pool, twice, then a linear
// head). Images are rows of C·H·W floats in NCHW order, so a conv layer's output row
// is already the flattened input of the next Linear: Flatten moves nothing.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/nn/layer.h"

namespace scalelab {

// y = act(conv(x, W) + b), as PyTorch's nn.Conv2d followed by its ReLU: each of the out_channels
// filters (in_channels × kernel × kernel) slides over the zero-padded image every `stride` pixels.
// Computed as im2col + one GEMM per chunk of images (Device::conv2d). Parameters "<name>.weight"
// {out_channels, in_channels, kernel, kernel} and "<name>.bias" {out_channels}, as in PyTorch's
// state_dict; PyTorch's default initialisation draws both from U(−1/√fan_in, 1/√fan_in),
// fan_in = in_channels · kernel².
class Conv2d : public Layer {
 public:
  Conv2d(Device& device, int index, std::string name, int64_t in_channels, int64_t out_channels, int64_t kernel,
         int64_t stride, int64_t padding, int64_t height, int64_t width, Activation act);

  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override;
  // Keeps x and y (y for the ReLU's mask) until backward.
  Tensor forward(const Tensor& x, int micro_batch = -1) override;
  // Masks dy in place by the ReLU; writes (accumulate: adds to) the gradients; dx unless !need_dx.
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override;
  void clear_saved() override;
  std::vector<Parameter*> parameters() override { return {&weight, &bias}; }
  // Mixed precision as Linear (autocast runs a convolution in half): half copies of W and b, the
  // input cast to half (the first conv: the batch), the output and dx in half, dW and db cast into
  // the f32 masters.
  void set_precision(DType compute) override { set_half_copies(compute); }
  void refresh_half_weights(int micro_batch = -1) override { refresh_half_copies(micro_batch); }
  void drop_half_weights() override { drop_half_copies(); }

  int64_t out_height() const { return geometry(0).out_height(); }
  int64_t out_width() const { return geometry(0).out_width(); }
  Conv2dGeometry geometry(int64_t batch) const;  // the op's sizes for a batch of `batch` images

  Parameter weight;  // {out_channels, in_channels, kernel, kernel}
  Parameter bias;    // {out_channels}

 private:
  int64_t in_channels_, out_channels_, kernel_, stride_, padding_, height_, width_;
  Activation act_;
  std::deque<Tensor> saved_x_, saved_y_;  // one per forward; backward takes the oldest
};

// y = the max of each kernel × kernel window, every `stride` pixels, of each channel (no padding),
// as nn.MaxPool2d. Keeps the argmax of each output (i32, the index within its channel, h·W + w)
// for backward, which sends each dy to the pixel that won.
class MaxPool2d : public Layer {
 public:
  MaxPool2d(Device& device, int index, std::string name, int64_t channels, int64_t height, int64_t width,
            int64_t kernel, int64_t stride);

  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override;
  Tensor forward(const Tensor& x, int micro_batch = -1) override;
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override;
  void clear_saved() override { saved_indices_.clear(); }
  // Under AMP it takes and gives the dtype its input comes in: nothing of its own to cast.
  void set_precision(DType compute) override { compute_ = compute; }
  int64_t out_height() const { return geometry(0).out_height(); }
  int64_t out_width() const { return geometry(0).out_width(); }
  Pool2dGeometry geometry(int64_t batch) const;

 private:
  int64_t channels_, height_, width_, kernel_, stride_;
  std::deque<Tensor> saved_indices_;
};

// nn.Flatten between the last pool and the Linear head: the rows are C·H·W in NCHW order
// already, so it moves nothing and runs no op. It is a layer so that the model lists what
// PyTorch's does, and so that a wrong image size is refused where it enters the head.
class Flatten : public Layer {
 public:
  Flatten(Device& device, int index, std::string name, int64_t channels, int64_t height, int64_t width);
  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override;
  Tensor forward(const Tensor& x, int micro_batch = -1) override;  // x itself
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override;
  void clear_saved() override {}
  void set_precision(DType compute) override { compute_ = compute; }  // moves nothing, in any dtype

 private:
  int64_t channels_, height_, width_;
};

}  // namespace scalelab
