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
    layers_.emplace_back(*layer_devices[l], l, "fc" + std::to_string(l + 1), spec_.sizes[l], spec_.sizes[l + 1],
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
