#include "core/nn/conv_layers.h"

#include "core/error.h"

namespace scalelab {

namespace {

std::string image_text(int64_t c, int64_t h, int64_t w) {
  return std::to_string(c) + "×" + std::to_string(h) + "×" + std::to_string(w);
}

// An image layer's input is {rows, C·H·W}; anything else is refused with what was expected.
void check_images(const std::string& layer, const std::vector<int64_t>& input, int64_t c, int64_t h, int64_t w) {
  if (input.size() != 2 || input[1] != c * h * w)
    throw Error("nn", layer + " expects {rows, " + std::to_string(c * h * w) + "} (" + image_text(c, h, w) +
                          " images, one per row in NCHW order), got " + shape_text(input) +
                          " — give it rows of C·H·W floats, or build the layer for this image size");
}

void check_gradient(const std::string& layer, const Tensor& dy, const std::vector<int64_t>& want) {
  if (dy.shape() != want)
    throw Error("nn", layer + ": backward expects dy " + shape_text(want) + ", the shape of its forward's output, got " +
                          shape_text(dy.shape()));
}

}  // namespace

// ---- Conv2d ---------------------------------------------------------------------------------

Conv2d::Conv2d(Device& device, int index, std::string name, int64_t in_channels, int64_t out_channels,
               int64_t kernel, int64_t stride, int64_t padding, int64_t height, int64_t width, Activation act)
    : Layer(device, index, std::move(name)),
      in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_(kernel),
      stride_(stride),
      padding_(padding),
      height_(height),
      width_(width),
      act_(act) {
  if (in_channels < 1 || out_channels < 1 || kernel < 1 || stride < 1 || padding < 0 || height < 1 || width < 1)
    throw Error("nn", name_ + ": channels " + std::to_string(in_channels) + " → " + std::to_string(out_channels) +
                          ", kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride) + ", padding " +
                          std::to_string(padding) + ", image " + std::to_string(height) + "×" +
                          std::to_string(width) + " — channels, kernel, stride and image sizes must be at least 1, "
                          "padding at least 0");
  if (out_height() < 1 || out_width() < 1)
    throw Error("nn", name_ + ": a kernel of " + std::to_string(kernel) + " does not fit a " + std::to_string(height) +
                          "×" + std::to_string(width) + " image padded by " + std::to_string(padding) +
                          " — use a smaller kernel or more padding");
  weight.name = name_ + ".weight";
  bias.name = name_ + ".bias";
  weight.layer = bias.layer = index;
  const std::vector<int64_t> w_shape{out_channels, in_channels, kernel, kernel};
  weight.value = device.empty(w_shape, DType::f32, MemoryCategory::params, weight.name);
  bias.value = device.empty({out_channels}, DType::f32, MemoryCategory::params, bias.name);
  weight.grad = device.zeros(w_shape, DType::f32, MemoryCategory::grads, weight.name + ".grad");
  bias.grad = device.zeros({out_channels}, DType::f32, MemoryCategory::grads, bias.name + ".grad");
}

Conv2dGeometry Conv2d::geometry(int64_t batch) const {
  return Conv2dGeometry{batch, in_channels_, height_, width_, out_channels_, kernel_, stride_, padding_};
}

std::vector<int64_t> Conv2d::output_shape(const std::vector<int64_t>& input) const {
  check_images(name_, input, in_channels_, height_, width_);
  return {input[0], out_channels_ * out_height() * out_width()};
}

Tensor Conv2d::forward(const Tensor& x, int micro_batch) {
  const std::vector<int64_t> out = output_shape(x.shape());
  check_half_copies_cast();
  const OpTag tag{name_ + ".fwd", Phase::fwd, index_, micro_batch};
  Tensor in = x;  // under AMP in the compute dtype, as autocast casts a convolution's input
  if (x.dtype() != compute_) {
    in = device_->empty(x.shape(), compute_, MemoryCategory::activations, name_ + ".in." + dtype_name(compute_));
    device_->cast(tag, x, in);
  }
  Tensor y = device_->empty(out, compute_, MemoryCategory::activations, name_ + ".out");
  // y = act(conv(x, W) + b)
  device_->conv2d(tag, in, compute_value(weight, 0), compute_value(bias, 1), y, geometry(x.rows()), act_);
  saved_x_.push_back(in);  // for dW
  saved_y_.push_back(act_ == Activation::relu ? y : Tensor());  // for the ReLU's mask
  return y;
}

Tensor Conv2d::backward(const Tensor& dy, bool need_dx, bool accumulate, int micro_batch) {
  if (saved_x_.empty()) throw Error("nn", name_ + ": backward without a forward — run forward first");
  // Pipeline schedules run their backwards in the order of their forwards: the oldest is this one.
  const Tensor x = saved_x_.front(), y = saved_y_.front();
  saved_x_.pop_front();
  saved_y_.pop_front();
  check_gradient(name_, dy, output_shape(x.shape()));
  const OpTag tag{name_ + ".bwd", Phase::bwd, index_, micro_batch};
  Tensor dx;
  if (need_dx) dx = device_->empty(x.shape(), compute_, MemoryCategory::activations, name_ + ".dx");
  // dy ← dy ⊙ relu'(y); db (+)= Σ dy; dW (+)= dy · im2col(x)ᵀ; dx = col2im(Wᵀ · dy).
  if (compute_ == DType::f32) {
    device_->conv2d_backward(tag, x, y, dy, weight.value, weight.grad, bias.grad, dx, geometry(x.rows()), act_,
                             accumulate);
    return dx;
  }
  // AMP: the same op in half; its weight gradients live only until they are in the f32 masters.
  const std::string half = std::string(".") + dtype_name(compute_);
  Tensor dW = device_->empty(weight.value.shape(), compute_, MemoryCategory::workspace, weight.name + ".grad" + half);
  Tensor db = device_->empty(bias.value.shape(), compute_, MemoryCategory::workspace, bias.name + ".grad" + half);
  device_->conv2d_backward(tag, x, y, dy, compute_value(weight, 0), dW, db, dx, geometry(x.rows()), act_, false);
  to_master_grad(db, bias, accumulate, micro_batch);
  to_master_grad(dW, weight, accumulate, micro_batch);
  return dx;
}

void Conv2d::clear_saved() {
  saved_x_.clear();
  saved_y_.clear();
}

// ---- MaxPool2d ------------------------------------------------------------------------------

MaxPool2d::MaxPool2d(Device& device, int index, std::string name, int64_t channels, int64_t height, int64_t width,
                     int64_t kernel, int64_t stride)
    : Layer(device, index, std::move(name)),
      channels_(channels),
      height_(height),
      width_(width),
      kernel_(kernel),
      stride_(stride) {
  if (channels < 1 || height < 1 || width < 1 || kernel < 1 || stride < 1)
    throw Error("nn", name_ + ": channels " + std::to_string(channels) + ", image " + std::to_string(height) + "×" +
                          std::to_string(width) + ", kernel " + std::to_string(kernel) + ", stride " +
                          std::to_string(stride) + " — each must be at least 1");
  if (kernel > height || kernel > width)
    throw Error("nn", name_ + ": a window of " + std::to_string(kernel) + " does not fit a " + std::to_string(height) +
                          "×" + std::to_string(width) + " image — use a smaller kernel");
}

Pool2dGeometry MaxPool2d::geometry(int64_t batch) const {
  return Pool2dGeometry{batch, channels_, height_, width_, kernel_, stride_};
}

std::vector<int64_t> MaxPool2d::output_shape(const std::vector<int64_t>& input) const {
  check_images(name_, input, channels_, height_, width_);
  return {input[0], channels_ * out_height() * out_width()};
}

Tensor MaxPool2d::forward(const Tensor& x, int micro_batch) {
  const std::vector<int64_t> out = output_shape(x.shape());
  const OpTag tag{name_ + ".fwd", Phase::fwd, index_, micro_batch};
  Tensor y = device_->empty(out, x.dtype(), MemoryCategory::activations, name_ + ".out");
  Tensor indices = device_->empty(out, DType::i32, MemoryCategory::activations, name_ + ".argmax");
  device_->max_pool2d(tag, x, y, indices, geometry(x.rows()));
  saved_indices_.push_back(indices);  // all backward needs: where each max came from
  return y;
}

Tensor MaxPool2d::backward(const Tensor& dy, bool need_dx, bool, int micro_batch) {
  if (saved_indices_.empty()) throw Error("nn", name_ + ": backward without a forward — run forward first");
  const Tensor indices = saved_indices_.front();
  saved_indices_.pop_front();
  check_gradient(name_, dy, indices.shape());
  if (!need_dx) return Tensor();
  const OpTag tag{name_ + ".bwd", Phase::bwd, index_, micro_batch};
  Tensor dx = device_->empty({dy.rows(), channels_ * height_ * width_}, dy.dtype(), MemoryCategory::activations,
                             name_ + ".dx");
  device_->max_pool2d_backward(tag, dy, indices, dx, geometry(dy.rows()));  // dx[argmax] += dy
  return dx;
}

// ---- Flatten --------------------------------------------------------------------------------

Flatten::Flatten(Device& device, int index, std::string name, int64_t channels, int64_t height, int64_t width)
    : Layer(device, index, std::move(name)), channels_(channels), height_(height), width_(width) {
  if (channels < 1 || height < 1 || width < 1)
    throw Error("nn", name_ + ": images of " + image_text(channels, height, width) + " — each size must be at least 1");
}

std::vector<int64_t> Flatten::output_shape(const std::vector<int64_t>& input) const {
  check_images(name_, input, channels_, height_, width_);
  return input;
}

Tensor Flatten::forward(const Tensor& x, int) {
  output_shape(x.shape());
  return x;
}

Tensor Flatten::backward(const Tensor& dy, bool need_dx, bool, int) {
  output_shape(dy.shape());
  return need_dx ? dy : Tensor();
}

}  // namespace scalelab
