#include "core/nn/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"

namespace scalelab {

ModelSpec ModelSpec::parse(const std::string& text) {
  const std::string prefix = "mlp:";
  auto bad = [&](const std::string& why) {
    return UsageError("model", "--model '" + text + "': " + why + " — write it like mlp:784-256-128-10 (input, hidden sizes, classes)");
  };
  if (text.rfind(prefix, 0) != 0) throw bad("only mlp models are supported");
  ModelSpec spec;
  spec.text = text;
  std::string rest = text.substr(prefix.size());
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t dash = rest.find('-', pos);
    std::string part = rest.substr(pos, dash == std::string::npos ? std::string::npos : dash - pos);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) throw bad("'" + part + "' is not a size");
    if (part.size() > 9) throw bad("size " + part + " is too large");
    int64_t v = std::stoll(part);
    if (v < 1) throw bad("sizes must be at least 1");
    spec.sizes.push_back(v);
    if (dash == std::string::npos) break;
    pos = dash + 1;
  }
  if (spec.sizes.size() < 2) throw bad("needs at least an input and an output size");
  return spec;
}

int64_t ModelSpec::parameter_count() const {
  int64_t n = 0;
  for (int l = 0; l < layer_count(); ++l) n += layer_parameter_count(l);
  return n;
}

Linear::Linear(Device& device, int index, int64_t in, int64_t out, Activation act)
    : device_(&device), index_(index), in_(in), out_(out), act_(act) {
  const std::string fc = "fc" + std::to_string(index + 1);
  weight.name = fc + ".weight";
  bias.name = fc + ".bias";
  weight.layer = bias.layer = index;
  weight.value = device.empty({out, in}, DType::f32, MemoryCategory::params, weight.name);
  bias.value = device.empty({out}, DType::f32, MemoryCategory::params, bias.name);
  weight.grad = device.zeros({out, in}, DType::f32, MemoryCategory::grads, weight.name + ".grad");
  bias.grad = device.zeros({out}, DType::f32, MemoryCategory::grads, bias.name + ".grad");
}

void Linear::set_precision(DType compute) {
  if (compute != DType::f32 && compute != DType::f16 && compute != DType::bf16)
    throw Error("nn", "fc" + std::to_string(index_ + 1) + " cannot compute in " + dtype_name(compute) +
                          " — use f32, or f16 / bf16 for mixed precision");
  compute_ = compute;
  half_weights_cast_ = false;
  if (compute == DType::f32) {
    weight_half_ = bias_half_ = Tensor();
    return;
  }
  // The half copies are workspace, not params: they are derived from the masters every step, no
  // optimizer updates them and no checkpoint saves them. So "params" keeps meaning the f32 weights
  // that are trained (4 bytes each, as in fp32 and as ZeRO shards them), and what AMP adds — 2
  // bytes per weight — shows on its own line. They are allocated once and refreshed in place.
  const std::string half = std::string(".") + dtype_name(compute);
  weight_half_ = device_->empty({out_, in_}, compute, MemoryCategory::workspace, weight.name + half);
  bias_half_ = device_->empty({out_}, compute, MemoryCategory::workspace, bias.name + half);
}

void Linear::refresh_half_weights(int micro_batch) {
  if (compute_ == DType::f32) return;
  const std::string to = std::string(" → ") + dtype_name(compute_);
  device_->cast({weight.name + to, Phase::fwd, index_, micro_batch}, weight.value, weight_half_);
  device_->cast({bias.name + to, Phase::fwd, index_, micro_batch}, bias.value, bias_half_);
  half_weights_cast_ = true;
}

Tensor Linear::forward(const Tensor& x, int micro_batch) {
  const std::string fc = "fc" + std::to_string(index_ + 1);
  if (x.cols() != in_)
    throw Error("nn", fc + " expects " + std::to_string(in_) + " inputs, got " + x.shape_string());
  if (compute_ != DType::f32 && !half_weights_cast_)
    throw Error("nn", fc + " computes in " + dtype_name(compute_) +
                          " but its half weights were never cast — call refresh_half_weights() at the start of "
                          "every step");
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
  if (saved_y_.empty()) throw Error("nn", "fc" + std::to_string(index_ + 1) + ": backward without a forward");
  // Forward pushed micro-batches in order; GPipe and 1F1B both run their backwards in that order
  // too, so the oldest saved pair is the one to use.
  Tensor x = saved_x_.front(), y = saved_y_.front();
  saved_x_.erase(saved_x_.begin());
  saved_y_.erase(saved_y_.begin());
  const std::string fc = "fc" + std::to_string(index_ + 1);
  OpTag tag{fc + ".bwd", Phase::bwd, index_, micro_batch};
  if (compute_ == DType::f32) {
    const float beta = accumulate ? 1.0f : 0.0f;
    device_->bias_act_backward(tag, dy, y, bias.grad, act_, accumulate);  // dy ← dy ⊙ act'(y); db = Σ dy
    device_->gemm(tag, true, false, dy, x, weight.grad, beta);            // dW = dyᵀ · x
  } else {
    // AMP: the same two ops in half. Their gradients come out in the compute dtype and live only
    // until they are in the f32 master gradients.
    const std::string half = std::string(".") + dtype_name(compute_);
    Tensor db = device_->empty({out_}, compute_, MemoryCategory::workspace, bias.name + ".grad" + half);
    Tensor dW = device_->empty({out_, in_}, compute_, MemoryCategory::workspace, weight.name + ".grad" + half);
    device_->bias_act_backward(tag, dy, y, db, act_);  // dy ← dy ⊙ act'(y); db = Σ dy
    device_->gemm(tag, true, false, dy, x, dW);        // dW = dyᵀ · x
    to_master_grad(db, bias, accumulate, micro_batch);
    to_master_grad(dW, weight, accumulate, micro_batch);
  }
  Tensor dx;
  if (need_dx) {
    dx = device_->empty({dy.rows(), in_}, compute_, MemoryCategory::activations, fc + ".dx");
    device_->gemm(tag, false, false, dy, compute_weight(), dx);  // dx = dy · W
  }
  return dx;
}

void Linear::to_master_grad(const Tensor& half, Parameter& p, bool accumulate, int micro_batch) {
  const OpTag tag{p.name + ".grad → f32", Phase::bwd, index_, micro_batch};
  if (accumulate) device_->axpy(tag, 1.0f, half, p.grad);  // .grad += f32(half gradient)
  else device_->cast(tag, half, p.grad);                  // .grad  = f32(half gradient)
}

void Linear::clear_saved() {
  saved_x_.clear();
  saved_y_.clear();
}

HostWeights init_weights(const ModelSpec& spec, uint64_t seed, bool values) {
  HostWeights w;
  w.spec = spec;
  if (!values) return w;
  Rng rng(seed);
  for (int l = 0; l < spec.layer_count(); ++l) {
    const int64_t in = spec.sizes[l], out = spec.sizes[l + 1];
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    std::vector<float> W(static_cast<size_t>(out * in)), b(static_cast<size_t>(out));
    for (float& v : W) v = rng.uniform(-bound, bound);
    for (float& v : b) v = rng.uniform(-bound, bound);
    w.weight.push_back(std::move(W));
    w.bias.push_back(std::move(b));
  }
  return w;
}

Mlp::Mlp(Device& device, const HostWeights& init)
    : Mlp(std::vector<Device*>(static_cast<size_t>(init.spec.layer_count()), &device), init) {}

Mlp::Mlp(const std::vector<Device*>& layer_devices, const HostWeights& init) : spec_(init.spec) {
  const int n = spec_.layer_count();
  if (static_cast<int>(layer_devices.size()) != n)
    throw Error("nn", "a device for each of the " + std::to_string(n) + " layers is needed, got " +
                          std::to_string(layer_devices.size()));
  layers_.reserve(static_cast<size_t>(n));
  for (int l = 0; l < n; ++l)
    layers_.emplace_back(*layer_devices[l], l, spec_.sizes[l], spec_.sizes[l + 1],
                         l + 1 < n ? Activation::relu : Activation::none);
  upload(init);
}

Tensor Mlp::forward_range(int first, int last, const Tensor& x, int micro_batch) {
  Tensor h = x;
  for (int l = first; l < last; ++l) h = layers_[l].forward(h, micro_batch);
  return h;
}

Tensor Mlp::backward_range(int first, int last, const Tensor& dy, bool need_dx, bool accumulate, int micro_batch) {
  Tensor g = dy;
  for (int l = last - 1; l >= first; --l) g = layers_[l].backward(g, need_dx || l > first, accumulate, micro_batch);
  return g;
}

Tensor Mlp::forward(const Tensor& x, int micro_batch) {
  return forward_range(0, static_cast<int>(layers_.size()), x, micro_batch);
}

void Mlp::backward(const Tensor& dlogits, bool accumulate, int micro_batch) {
  backward_range(0, static_cast<int>(layers_.size()), dlogits, false, accumulate, micro_batch);
}

void Mlp::set_precision(DType compute) {
  for (auto& layer : layers_) layer.set_precision(compute);
}

DType Mlp::precision() const { return layers_.empty() ? DType::f32 : layers_.front().precision(); }

void Mlp::refresh_half_weights() {
  for (auto& layer : layers_) layer.refresh_half_weights();
}

std::vector<Parameter*> Mlp::parameters() {
  std::vector<Parameter*> p;
  for (auto& layer : layers_) {
    p.push_back(&layer.weight);
    p.push_back(&layer.bias);
  }
  return p;
}

HostWeights Mlp::download() {
  HostWeights w;
  w.spec = spec_;
  for (auto& layer : layers_) {
    w.weight.push_back(layer.device().download_f32({layer.weight.name, Phase::data, layer.index()}, layer.weight.value));
    w.bias.push_back(layer.device().download_f32({layer.bias.name, Phase::data, layer.index()}, layer.bias.value));
  }
  return w;
}

void Mlp::upload(const HostWeights& w) {
  if (w.spec.sizes != spec_.sizes) throw Error("nn", "weights for " + w.spec.text + " do not fit " + spec_.text);
  for (auto& layer : layers_) {
    layer.device().upload({layer.weight.name, Phase::data, layer.index()}, layer.weight.value,
                          w.weight_data(layer.index()));
    layer.device().upload({layer.bias.name, Phase::data, layer.index()}, layer.bias.value,
                          w.bias_data(layer.index()));
  }
}

double evaluate_accuracy(const HostWeights& w, const float* images, const int32_t* labels, int64_t count) {
  if (count == 0) return 0;
  const int64_t chunk = 1000;
  int64_t correct = 0;
  std::vector<float> a, b;
  for (int64_t first = 0; first < count; first += chunk) {
    const int64_t rows = std::min(chunk, count - first);
    a.assign(images + first * w.spec.inputs(), images + (first + rows) * w.spec.inputs());
    for (int l = 0; l < w.spec.layer_count(); ++l) {
      const int64_t in = w.spec.sizes[l], out = w.spec.sizes[l + 1];
      b.assign(static_cast<size_t>(rows * out), 0.0f);
      kernels::gemm(false, true, rows, out, in, 1.0f, a.data(), w.weight[l].data(), 0.0f, b.data());
      kernels::bias_act(b.data(), w.bias[l].data(), rows, out,
                        l + 1 < w.spec.layer_count() ? Activation::relu : Activation::none);
      a.swap(b);
    }
    const int64_t classes = w.spec.outputs();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = a.data() + r * classes;
      int64_t best = std::max_element(row, row + classes) - row;
      if (best == labels[first + r]) ++correct;
    }
  }
  return static_cast<double>(correct) / static_cast<double>(count);
}

std::string weights_checksum(const HostWeights& w) {
  uint64_t h = 1469598103934665603ULL;
  auto feed = [&](const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(float); ++i) {
      h ^= p[i];
      h *= 1099511628211ULL;
    }
  };
  for (size_t l = 0; l < w.weight.size(); ++l) {
    feed(w.weight[l]);
    feed(w.bias[l]);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

double max_relative_difference(const HostWeights& a, const HostWeights& b) {
  if (a.spec.sizes != b.spec.sizes) throw Error("nn", "cannot compare weights of " + a.spec.text + " and " + b.spec.text);
  // Per tensor: the largest difference over the tensor's largest magnitude. Element-wise ratios
  // would blow up on weights that happen to sit near zero, where round-off is all there is.
  double worst = 0;
  auto cmp = [&](const std::vector<float>& x, const std::vector<float>& y) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(x[i]) - y[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
    }
    if (diff > 0) worst = std::max(worst, diff / std::max(scale, 1e-30));
  };
  for (size_t l = 0; l < a.weight.size(); ++l) {
    cmp(a.weight[l], b.weight[l]);
    cmp(a.bias[l], b.bias[l]);
  }
  return worst;
}

}  // namespace scalelab
