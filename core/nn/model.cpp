#include "core/nn/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/kernels/cpu_kernels.h"
#include "core/nn/conv_layers.h"
#include "core/nn/transformer_layers.h"
#include "core/rng.h"

namespace scalelab {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// The numbers of a spec's tail, "784-256-10" → {784, 256, 10}; `bad` makes the error.
template <typename Bad>
std::vector<int64_t> dash_numbers(const std::string& rest, Bad bad) {
  std::vector<int64_t> v;
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t dash = rest.find('-', pos);
    std::string part = rest.substr(pos, dash == std::string::npos ? std::string::npos : dash - pos);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) throw bad("'" + part + "' is not a size");
    if (part.size() > 9) throw bad("size " + part + " is too large");
    int64_t n = std::stoll(part);
    if (n < 1) throw bad("sizes must be at least 1");
    v.push_back(n);
    if (dash == std::string::npos) break;
    pos = dash + 1;
  }
  return v;
}

// The ConvNet's fixed shape: 1×28×28 images (Fashion-MNIST), 10 classes.
constexpr int64_t kImage = 28, kConv1 = 16, kConv2 = 32, kKernel = 5, kPad = 2, kClasses = 10;

void add_linear(std::vector<TensorSpec>& t, const std::string& name, int layer, int64_t in, int64_t out) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in));
  t.push_back({name + ".weight", {out, in}, layer, TensorSpec::Init::uniform, bound});
  t.push_back({name + ".bias", {out}, layer, TensorSpec::Init::uniform, bound});
}

void add_conv(std::vector<TensorSpec>& t, const std::string& name, int layer, int64_t in, int64_t out, int64_t k) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in * k * k));
  t.push_back({name + ".weight", {out, in, k, k}, layer, TensorSpec::Init::uniform, bound});
  t.push_back({name + ".bias", {out}, layer, TensorSpec::Init::uniform, bound});
}

void add_layer_norm(std::vector<TensorSpec>& t, const std::string& name, int layer, int64_t width) {
  t.push_back({name + ".weight", {width}, layer, TensorSpec::Init::ones, 0});
  t.push_back({name + ".bias", {width}, layer, TensorSpec::Init::zeros, 0});
}

}  // namespace

ModelSpec ModelSpec::parse(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return UsageError("model", "--model '" + text + "': " + why +
                                   " — write mlp:784-256-128-10 (input, hidden sizes, classes), convnet, or "
                                   "gpt:L-C-H-T-V (layers, hidden, heads, context, vocabulary: gpt:2-128-4-64-96); "
                                   "`scalelab models` lists presets");
  };
  ModelSpec spec;
  spec.text = text;
  auto tensors = std::make_shared<std::vector<TensorSpec>>();
  if (text.rfind("mlp:", 0) == 0) {
    spec.family = ModelFamily::mlp;
    spec.sizes = dash_numbers(text.substr(4), bad);
    if (spec.sizes.size() < 2) throw bad("needs at least an input and an output size");
    spec.layer_count_ = static_cast<int>(spec.sizes.size()) - 1;
    for (int l = 0; l < spec.layer_count_; ++l)
      add_linear(*tensors, "fc" + std::to_string(l + 1), l, spec.sizes[l], spec.sizes[l + 1]);
  } else if (text == "convnet") {
    spec.family = ModelFamily::convnet;
    spec.layer_count_ = 5;  // conv1, pool1, conv2, pool2, fc
    add_conv(*tensors, "conv1", 0, 1, kConv1, kKernel);
    add_conv(*tensors, "conv2", 2, kConv1, kConv2, kKernel);
    add_linear(*tensors, "fc", 4, kConv2 * (kImage / 4) * (kImage / 4), kClasses);
  } else if (text.rfind("gpt:", 0) == 0) {
    spec.family = ModelFamily::gpt;
    const std::vector<int64_t> n = dash_numbers(text.substr(4), bad);
    if (n.size() != 5) throw bad("a GPT takes five sizes, got " + std::to_string(n.size()));
    GptShape& g = spec.gpt;
    g = {n[0], n[1], n[2], n[3], n[4]};
    if (g.hidden % g.heads != 0)
      throw bad("the hidden size " + std::to_string(g.hidden) + " must be a multiple of the heads (" +
                std::to_string(g.heads) + ")");
    if (g.vocab < 2) throw bad("a vocabulary of at least 2 tokens is needed");
    if (g.layers > 100000) throw bad("more than 100000 blocks");
    spec.layer_count_ = static_cast<int>(g.layers) + 2;  // embedding, blocks, head
    const int64_t C = g.hidden;
    tensors->push_back({"tok_emb.weight", {g.vocab, C}, 0, TensorSpec::Init::normal, 0.02f});
    tensors->push_back({"pos_emb.weight", {g.context, C}, 0, TensorSpec::Init::normal, 0.02f});
    for (int b = 0; b < g.layers; ++b) {
      const std::string p = "blocks." + std::to_string(b);
      add_layer_norm(*tensors, p + ".ln1", b + 1, C);
      add_linear(*tensors, p + ".attn.qkv", b + 1, C, 3 * C);
      add_linear(*tensors, p + ".attn.proj", b + 1, C, C);
      add_layer_norm(*tensors, p + ".ln2", b + 1, C);
      add_linear(*tensors, p + ".mlp.fc", b + 1, C, 4 * C);
      add_linear(*tensors, p + ".mlp.proj", b + 1, 4 * C, C);
    }
    add_layer_norm(*tensors, "ln_f", spec.layer_count_ - 1, C);
    add_linear(*tensors, "head", spec.layer_count_ - 1, C, g.vocab);
  } else {
    throw bad("unknown model family");
  }
  spec.tensors_ = std::move(tensors);
  return spec;
}

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"mlp:784-512-256-128-10", "the default MLP on Fashion-MNIST"},
      {"convnet", "the lecture's ConvNet on 1×28×28 images (PyTorch's DDP tutorial, no BatchNorm)"},
      {"gpt:2-128-4-64-96", "a tiny character GPT: trains on the CPU in seconds (printable ASCII)"},
      {"gpt:4-256-4-128-256", "a small byte-level GPT (bench compute's)"},
      {"gpt:12-768-12-1024-50257", "GPT-2 small (124M; an untied head adds 39M)"},
      {"gpt:24-1024-16-1024-50257", "GPT-2 medium"},
      {"gpt:48-1600-25-1024-50257", "GPT-2 XL (1.5B)"},
      {"gpt:96-12288-96-2048-50257", "GPT-3 175B: for dry runs on simulated clusters"},
  };
  return presets;
}

std::string ModelSpec::layer_name(int l) const {
  switch (family) {
    case ModelFamily::mlp: return "fc" + std::to_string(l + 1);
    case ModelFamily::convnet: {
      static const char* names[] = {"conv1", "pool1", "conv2", "pool2", "fc"};
      return names[l];
    }
    case ModelFamily::gpt:
      if (l == 0) return "embed";
      if (l == layer_count_ - 1) return "head";
      return "block" + std::to_string(l - 1);
  }
  return "layer" + std::to_string(l);
}

int64_t ModelSpec::parameter_count() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors()) n += t.numel();
  return n;
}

int64_t ModelSpec::layer_parameter_count(int layer) const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors())
    if (t.layer == layer) n += t.numel();
  return n;
}

int64_t ModelSpec::inputs() const {
  switch (family) {
    case ModelFamily::mlp: return sizes.front();
    case ModelFamily::convnet: return kImage * kImage;
    case ModelFamily::gpt: return gpt.context;
  }
  return 0;
}

int64_t ModelSpec::outputs() const {
  switch (family) {
    case ModelFamily::mlp: return sizes.back();
    case ModelFamily::convnet: return kClasses;
    case ModelFamily::gpt: return gpt.vocab;
  }
  return 0;
}

std::vector<int64_t> ModelSpec::activation_shape(int boundary, int64_t samples) const {
  switch (family) {
    case ModelFamily::mlp: return {samples, sizes[static_cast<size_t>(boundary)]};
    case ModelFamily::convnet: {
      // conv1 keeps 28×28 (padding 2), each pool halves it.
      static const int64_t widths[] = {kImage * kImage, kConv1 * kImage * kImage, kConv1 * 14 * 14,
                                       kConv2 * 14 * 14, kConv2 * 7 * 7, kClasses};
      return {samples, widths[boundary]};
    }
    case ModelFamily::gpt:
      if (boundary == 0) return {samples, gpt.context};  // token ids, a row per sequence
      return {samples * gpt.context, boundary == layer_count_ ? gpt.vocab : gpt.hidden};
  }
  return {};
}

DType ModelSpec::activation_dtype(int boundary, DType compute) const {
  if (boundary == 0) return DType::f32;  // the batch
  switch (family) {
    case ModelFamily::mlp: return compute;
    case ModelFamily::convnet: return compute;  // every layer computes in half under AMP
    case ModelFamily::gpt: return boundary == layer_count_ ? compute : DType::f32;
  }
  return DType::f32;
}

double ModelSpec::train_flops_per_sample() const {
  const double P = static_cast<double>(parameter_count());
  switch (family) {
    case ModelFamily::mlp: return 6.0 * P;
    case ModelFamily::convnet: {
      // A convolution's weights are used at every output position: 2·OC·C·K²·OH·OW forward.
      const double conv1 = 2.0 * kConv1 * 1 * kKernel * kKernel * kImage * kImage;
      const double conv2 = 2.0 * kConv2 * kConv1 * kKernel * kKernel * 14 * 14;
      const double fc = 2.0 * static_cast<double>(kConv2 * 7 * 7 * kClasses);
      return 3.0 * (conv1 + conv2 + fc);
    }
    case ModelFamily::gpt: {
      const double T = static_cast<double>(gpt.context);
      const double C = static_cast<double>(gpt.hidden);
      const double multiplied = P - static_cast<double>(gpt.vocab) * C - T * C;  // less the two lookups
      const double per_token = 6.0 * multiplied + 12.0 * static_cast<double>(gpt.layers) * static_cast<double>(gpt.hidden) * T;
      return per_token * T;
    }
  }
  return 0;
}

HostWeights init_weights(const ModelSpec& spec, uint64_t seed, bool values) {
  HostWeights w;
  w.spec = spec;
  if (!values) return w;
  Rng rng(seed);
  for (const TensorSpec& t : spec.tensors()) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    switch (t.init) {
      case TensorSpec::Init::uniform:
        for (float& x : v) x = rng.uniform(-t.scale, t.scale);
        break;
      case TensorSpec::Init::normal:
        for (float& x : v) x = t.scale * rng.normal();
        break;
      case TensorSpec::Init::ones: std::fill(v.begin(), v.end(), 1.0f); break;
      case TensorSpec::Init::zeros: break;
    }
    w.values.push_back(std::move(v));
  }
  return w;
}

uint64_t layer_dropout_seed(const ModelSpec& spec, int l) {
  // Each layer's dropout draws its own mask: the seed mixed with the layer.
  return kernels::mix64(spec.dropout_seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(l + 1)));
}

std::unique_ptr<Layer> make_layer(const ModelSpec& spec, int l, Device& device) {
  const std::string name = spec.layer_name(l);
  const uint64_t seed = layer_dropout_seed(spec, l);
  switch (spec.family) {
    case ModelFamily::mlp: {
      auto fc = std::make_unique<Linear>(device, l, name, spec.sizes[l], spec.sizes[l + 1],
                                         l + 1 < spec.layer_count() ? Activation::relu : Activation::none);
      if (l > 0) fc->set_input_dropout(spec.dropout, seed);
      return fc;
    }
    case ModelFamily::convnet:
      switch (l) {
        case 0: return std::make_unique<Conv2d>(device, l, name, 1, kConv1, kKernel, 1, kPad, kImage, kImage, Activation::relu);
        case 1: return std::make_unique<MaxPool2d>(device, l, name, kConv1, kImage, kImage, 2, 2);
        case 2: return std::make_unique<Conv2d>(device, l, name, kConv1, kConv2, kKernel, 1, kPad, 14, 14, Activation::relu);
        case 3: return std::make_unique<MaxPool2d>(device, l, name, kConv2, 14, 14, 2, 2);
        default: {
          auto head = std::make_unique<Linear>(device, l, name, kConv2 * 7 * 7, kClasses, Activation::none);
          head->set_input_dropout(spec.dropout, seed);
          return head;
        }
      }
    case ModelFamily::gpt: {
      const GptShape& g = spec.gpt;
      if (l == 0) {
        auto embed = std::make_unique<TokenEmbedding>(device, l, g.vocab, g.context, g.hidden);
        embed->set_output_dropout(spec.dropout, seed);
        return embed;
      }
      if (l == spec.layer_count() - 1) return std::make_unique<LmHead>(device, l, g.hidden, g.vocab);
      return std::make_unique<TransformerBlock>(device, l, l - 1, g.hidden, g.heads, g.context);
    }
  }
  throw Error("nn", "the layers of " + spec.text + " are not built yet");
}

void upload_layer(Layer& layer, const HostWeights& w) {
  const std::vector<TensorSpec>& specs = w.spec.tensors();
  size_t p = 0;
  while (p < specs.size() && specs[p].layer != layer.index()) ++p;
  for (Parameter* param : layer.parameters()) {
    if (p >= specs.size() || specs[p].layer != layer.index() || specs[p].name != param->name ||
        specs[p].numel() != param->value.numel())
      throw Error("nn", "weights for " + w.spec.text + " do not fit " + layer.name() + "'s " + param->name);
    layer.device().upload({param->name, Phase::data, layer.index()}, param->value, w.data(p));
    ++p;
  }
}

Model::Model(Device& device, const HostWeights& init)
    : Model(std::vector<Device*>(static_cast<size_t>(init.spec.layer_count()), &device), init) {}

Model::Model(const std::vector<Device*>& layer_devices, const HostWeights& init) : spec_(init.spec) {
  const int n = spec_.layer_count();
  if (static_cast<int>(layer_devices.size()) != n)
    throw Error("nn", "a device for each of the " + std::to_string(n) + " layers is needed, got " +
                          std::to_string(layer_devices.size()));
  for (int l = 0; l < n; ++l) layers_.push_back(make_layer(spec_, l, *layer_devices[l]));
  upload(init);
}

Tensor Model::forward_range(int first, int last, const Tensor& x, int micro_batch) {
  Tensor h = x;
  for (int l = first; l < last; ++l) h = layers_[l].forward(h, micro_batch);
  return h;
}

Tensor Model::backward_range(int first, int last, const Tensor& dy, bool need_dx, bool accumulate, int micro_batch) {
  Tensor g = dy;
  for (int l = last - 1; l >= first; --l) g = layers_[l].backward(g, need_dx || l > first, accumulate, micro_batch);
  return g;
}

Tensor Model::forward(const Tensor& x, int micro_batch) {
  return forward_range(0, static_cast<int>(layers_.size()), x, micro_batch);
}

void Model::backward(const Tensor& dlogits, bool accumulate, int micro_batch) {
  backward_range(0, static_cast<int>(layers_.size()), dlogits, false, accumulate, micro_batch);
}

void Model::set_precision(DType compute) {
  for (Layer& layer : layers_) layer.set_precision(compute);
}

DType Model::precision() const { return layers_.size() == 0 ? DType::f32 : layers_.front().precision(); }

void Model::refresh_half_weights() {
  for (Layer& layer : layers_) layer.refresh_half_weights();
}

std::vector<Parameter*> Model::parameters() {
  std::vector<Parameter*> p;
  for (Layer& layer : layers_)
    for (Parameter* q : layer.parameters()) p.push_back(q);
  return p;
}

HostWeights Model::download() {
  HostWeights w;
  w.spec = spec_;
  for (Layer& layer : layers_)
    for (Parameter* p : layer.parameters())
      w.values.push_back(layer.device().download_f32({p->name, Phase::data, layer.index()}, p->value));
  if (!w.values.empty() && w.values.front().empty()) w.values.clear();  // a dry run's: shapes only
  return w;
}

void Model::upload(const HostWeights& w) {
  if (!w.spec.same_model(spec_)) throw Error("nn", "weights for " + w.spec.text + " do not fit " + spec_.text);
  for (Layer& layer : layers_) upload_layer(layer, w);
}

double evaluate_accuracy(const HostWeights& w, const float* inputs, const int32_t* labels, int64_t count) {
  if (count == 0 || !w.has_values()) return 0;
  // The model itself on a cpu device of its own, with no bus: evaluation is not part of the run's
  // timeline, and one forward serves every family.
  std::unique_ptr<Device> device = std::move(make_devices(DeviceOptions{})[0]);
  Model model(*device, w);
  model.set_training(false);  // model.eval(): no dropout
  const ModelSpec& spec = w.spec;
  const int64_t chunk = std::max<int64_t>(1, 1000 / std::max<int64_t>(1, spec.labels_per_sample()));
  const int64_t per = spec.labels_per_sample(), classes = spec.outputs();
  int64_t correct = 0;
  std::vector<float> logits;
  for (int64_t first = 0; first < count; first += chunk) {
    const int64_t rows = std::min(chunk, count - first);
    Tensor x = device->empty({rows, spec.inputs()}, DType::f32, MemoryCategory::activations, "eval.x");
    device->upload({"eval.x", Phase::eval}, x, inputs + first * spec.inputs());
    Tensor y = model.forward(x);
    for (Layer& layer : model.layers()) layer.clear_saved();
    logits.resize(static_cast<size_t>(y.numel()));
    device->download({"eval.logits", Phase::eval}, logits.data(), y);
    for (int64_t r = 0; r < rows * per; ++r) {
      const float* row = logits.data() + r * classes;
      const int64_t best = std::max_element(row, row + classes) - row;
      if (best == labels[first * per + r]) ++correct;
    }
  }
  return static_cast<double>(correct) / static_cast<double>(count * per);
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
  for (const std::vector<float>& v : w.values) feed(v);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

double max_relative_difference(const HostWeights& a, const HostWeights& b) {
  if (!a.spec.same_model(b.spec)) throw Error("nn", "cannot compare weights of " + a.spec.text + " and " + b.spec.text);
  // Per tensor: the largest difference over the tensor's largest magnitude. Element-wise ratios
  // would blow up on weights that happen to sit near zero, where round-off is all there is.
  double worst = 0;
  auto cmp = [&](const std::vector<float>& x, const std::vector<float>& y) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
      // A NaN weight (or inf against inf) differs from everything: std::max would drop its NaN.
      if (std::isnan(d)) {
        worst = std::numeric_limits<double>::infinity();
        return;
      }
      diff = std::max(diff, d);
      scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
    }
    if (diff > 0) worst = std::max(worst, diff / std::max(scale, 1e-30));
  };
  for (size_t p = 0; p < a.values.size() && p < b.values.size(); ++p) cmp(a.values[p], b.values[p]);
  return worst;
}

}  // namespace scalelab
