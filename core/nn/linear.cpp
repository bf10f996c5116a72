#include "core/nn/linear.h"

#include "core/error.h"

namespace scalelab {

Linear::Linear(Device& device, int index, std::string name, int64_t in, int64_t out, Activation act)
    : Layer(device, index, std::move(name)), in_(in), out_(out), act_(act) {
  weight.name = name_ + ".weight";
  bias.name = name_ + ".bias";
  weight.layer = bias.layer = index;
  weight.value = device.empty({out, in}, DType::f32, MemoryCategory::params, weight.name);
  bias.value = device.empty({out}, DType::f32, MemoryCategory::params, bias.name);
  weight.grad = device.zeros({out, in}, DType::f32, MemoryCategory::grads, weight.name + ".grad");
  bias.grad = device.zeros({out}, DType::f32, MemoryCategory::grads, bias.name + ".grad");
}

void Linear::set_precision(DType compute) { set_half_copies(compute); }

void Linear::set_input_dropout(float p, uint64_t seed) {
  input_dropout_ = p > 0.0f ? std::make_unique<Dropout>(*device_, index_, name_ + ".drop", p, seed) : nullptr;
}

void Linear::set_batch_position(const BatchPosition& position) {
  if (input_dropout_) input_dropout_->set_batch_position(position);
}

void Linear::set_training(bool on) {
  if (input_dropout_) input_dropout_->set_training(on);
}

void Linear::refresh_half_weights(int micro_batch) { refresh_half_copies(micro_batch); }

std::vector<int64_t> Linear::output_shape(const std::vector<int64_t>& input) const {
  if (input.size() != 2 || input[1] != in_)
    throw Error("nn", name_ + " expects {rows, " + std::to_string(in_) + "}, got " + shape_text(input) +
                          " — the layer before it must give " + std::to_string(in_) + " features");
  return {input[0], out_};
}

Tensor Linear::forward(const Tensor& input, int micro_batch) {
  const std::string& fc = name_;
  if (input.cols() != in_)
    throw Error("nn", fc + " expects " + std::to_string(in_) + " inputs, got " + input.shape_string());
  check_half_copies_cast();
  const Tensor x = input_dropout_ ? input_dropout_->forward(input, micro_batch) : input;
  OpTag tag{fc + ".fwd", Phase::fwd, index_, micro_batch};
  // Under AMP a GEMM's input is cast to the compute dtype first, as autocast does: the batch, for
  // the first layer; the others receive their predecessor's half output as it is.
  Tensor in = x;
  if (x.dtype() != compute_) {
    in = device_->empty(x.shape(), compute_, MemoryCategory::activations, fc + ".in." + dtype_name(compute_));
    device_->cast(tag, x, in);
  }
  Tensor y = device_->empty({x.rows(), out_}, compute_, MemoryCategory::activations, fc + ".out");
  device_->gemm(tag, false, true, in, compute_weight(), y);  // y = x · Wᵀ
  device_->bias_act(tag, y, compute_bias(), act_);           // y = act(y + b)
  saved_x_.push_back(in);
  saved_y_.push_back(y);
  return y;
}

Tensor Linear::backward(const Tensor& dy, bool need_dx, bool accumulate, int micro_batch) {
  if (saved_y_.empty()) throw Error("nn", name_ + ": backward without a forward");
  // Forward pushed micro-batches in order; GPipe and 1F1B both run their backwards in that order
  // too, so the oldest saved pair is the one to use.
  Tensor x = saved_x_.front(), y = saved_y_.front();
  saved_x_.erase(saved_x_.begin());
  saved_y_.erase(saved_y_.begin());
  const std::string& fc = name_;
  OpTag tag{fc + ".bwd", Phase::bwd, index_, micro_batch};
  if (compute_ == DType::f32) {
    device_->bias_act_backward(tag, dy, y, bias.grad, act_, accumulate);  // dy ← dy ⊙ act'(y); db = Σ dy
  } else {
    // AMP: db comes out in the compute dtype and lives only until it is in the f32 master gradient.
    Tensor db = device_->empty({out_}, compute_, MemoryCategory::workspace, bias.name + ".grad." + dtype_name(compute_));
    device_->bias_act_backward(tag, dy, y, db, act_);  // dy ← dy ⊙ act'(y); db = Σ dy
    to_master_grad(db, bias, accumulate, micro_batch);
  }
  if (weight_pass_deferred_) deferred_.emplace_back(x, dy);  // dW in weight_pass()
  else weight_gradient(tag, x, dy, accumulate, micro_batch);
  Tensor dx;
  if (need_dx) {
    dx = device_->empty({dy.rows(), in_}, compute_, MemoryCategory::activations, fc + ".dx");
    device_->gemm(tag, false, false, dy, compute_weight(), dx);  // dx = dy · W
  }
  // Through the input's dropout: the forward's mask again (it pops its forward either way).
  if (input_dropout_) dx = input_dropout_->backward(dx, need_dx, false, micro_batch);
  return dx;
}

void Linear::weight_gradient(const OpTag& tag, const Tensor& x, const Tensor& dy, bool accumulate, int micro_batch) {
  if (compute_ == DType::f32) {
    device_->gemm(tag, true, false, dy, x, weight.grad, accumulate ? 1.0f : 0.0f);  // dW (+)= dyᵀ · x
    return;
  }
  Tensor dW = device_->empty({out_, in_}, compute_, MemoryCategory::workspace, weight.name + ".grad." + dtype_name(compute_));
  device_->gemm(tag, true, false, dy, x, dW);  // dW = dyᵀ · x, in half
  to_master_grad(dW, weight, accumulate, micro_batch, tag.phase);
}

void Linear::weight_pass(bool accumulate, int micro_batch) {
  if (deferred_.empty()) throw Error("nn", name_ + ": weight_pass without a backward that left it its dW");
  const auto [x, dy] = deferred_.front();  // the oldest: Ws run in the order of their backwards
  deferred_.pop_front();
  weight_gradient({name_ + ".wgrad", Phase::wgrad, index_, micro_batch}, x, dy, accumulate, micro_batch);
}

void Linear::forget_last_forward() {
  if (saved_x_.empty() || input_dropout_) throw Error("nn", name_ + ": forget_last_forward needs a forward and no input dropout");
  saved_x_.pop_back();
  saved_y_.pop_back();
}

void Linear::clear_saved() {
  saved_x_.clear();
  saved_y_.clear();
  deferred_.clear();
  if (input_dropout_) input_dropout_->clear_saved();
}

}  // namespace scalelab
