// The ConvNet's layers on the cpu device: Conv2d's forward against a float64 loop and its backward
// (x, W, b) against central finite differences of that loop; chunked batches; accumulation;
// MaxPool2d's windows, ties, NaNs and backward; Dropout's mask, which depends on where a row sits
// in the global batch and not on how the batch was split; the ops on a dry-run sim device (shapes
// only, priced as a real run); and the errors for shapes that do not fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/nn/conv_layers.h"
#include "core/nn/dropout.h"
#include "core/rng.h"

using namespace scalelab;

namespace {

const std::string kTiny = std::string(SCALELAB_TEST_DATA) + "/tiny.json";

std::unique_ptr<Device> cpu_device() {
  DeviceOptions o;
  o.kind = DeviceKind::cpu;
  return std::move(make_devices(o).front());
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& f : v) f = rng.uniform(lo, hi);
  return v;
}

Tensor upload(Device& d, const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = d.empty(std::move(shape), DType::f32, MemoryCategory::activations, "test input");
  d.upload({"test input", Phase::data}, t, v.data());
  return t;
}

// A half tensor is cast to f32 on the device first (exactly: every half value is an f32 value).
std::vector<float> download(Device& d, const Tensor& t) {
  if (t.dtype() == DType::f32) return d.download_f32({"test output", Phase::data}, t);
  Tensor f32 = d.empty(t.shape(), DType::f32, MemoryCategory::workspace, "test output");
  d.cast({"test output", Phase::data}, t, f32);
  return d.download_f32({"test output", Phase::data}, f32);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The error text of f(), or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- float64 references -------------------------------------------------------------------

struct ConvCase {
  int64_t n, c, h, w, oc, k, s, p;
  Activation act;
  int64_t oh() const { return (h + 2 * p - k) / s + 1; }
  int64_t ow() const { return (w + 2 * p - k) / s + 1; }
  std::string text() const {
    return "N" + std::to_string(n) + " C" + std::to_string(c) + " " + std::to_string(h) + "x" + std::to_string(w) +
           " OC" + std::to_string(oc) + " K" + std::to_string(k) + " S" + std::to_string(s) + " P" + std::to_string(p) +
           (act == Activation::relu ? " relu" : "");
  }
};

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// y = act(conv(x, W) + b) by the definition, in double.
std::vector<double> conv_reference(const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& b, const ConvCase& g) {
  std::vector<double> y(static_cast<size_t>(g.n * g.oc * g.oh() * g.ow()));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oc = 0; oc < g.oc; ++oc)
      for (int64_t oh = 0; oh < g.oh(); ++oh)
        for (int64_t ow = 0; ow < g.ow(); ++ow) {
          double acc = b[static_cast<size_t>(oc)];
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t kh = 0; kh < g.k; ++kh)
              for (int64_t kw = 0; kw < g.k; ++kw) {
                const int64_t ih = oh * g.s - g.p + kh, iw = ow * g.s - g.p + kw;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                acc += x[static_cast<size_t>(((n * g.c + c) * g.h + ih) * g.w + iw)] *
                       w[static_cast<size_t>(((oc * g.c + c) * g.k + kh) * g.k + kw)];
              }
          if (g.act == Activation::relu) acc = std::max(acc, 0.0);
          y[static_cast<size_t>(((n * g.oc + oc) * g.oh() + oh) * g.ow() + ow)] = acc;
        }
  return y;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d(Σ dy ⊙ f(v))/dv[i] by central differences, for every i, in double.
template <typename F>
std::vector<double> finite_differences(std::vector<double> v, F&& loss) {
  const double h = 1e-6;
  std::vector<double> g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double up = loss(v);
    v[i] = keep - h;
    const double down = loss(v);
    v[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-3;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << " at " << i;
}

struct ConvRun {
  std::vector<float> x, w, b, dy;  // the inputs
  std::vector<float> y, dx, dw, db;  // what the layer gave
};

// One forward and one backward of a Conv2d on the cpu with random inputs.
ConvRun run_conv(const ConvCase& g, uint64_t seed) {
  auto d = cpu_device();
  Conv2d conv(*d, 0, "conv", g.c, g.oc, g.k, g.s, g.p, g.h, g.w, g.act);
  ConvRun r;
  r.x = random_floats(static_cast<size_t>(g.n * g.c * g.h * g.w), seed);
  r.w = random_floats(static_cast<size_t>(g.oc * g.c * g.k * g.k), seed + 1, -0.5f, 0.5f);
  r.b = random_floats(static_cast<size_t>(g.oc), seed + 2, -0.2f, 0.2f);
  r.dy = random_floats(static_cast<size_t>(g.n * g.oc * g.oh() * g.ow()), seed + 3);
  d->upload({"w", Phase::data}, conv.weight.value, r.w.data());
  d->upload({"b", Phase::data}, conv.bias.value, r.b.data());
  Tensor y = conv.forward(upload(*d, r.x, {g.n, g.c * g.h * g.w}));
  r.y = download(*d, y);
  Tensor dx = conv.backward(upload(*d, r.dy, {g.n, g.oc * g.oh() * g.ow()}), true);
  r.dx = download(*d, dx);
  r.dw = download(*d, conv.weight.grad);
  r.db = download(*d, conv.bias.grad);
  return r;
}

const std::vector<ConvCase> kConvCases = {
    {2, 3, 7, 6, 4, 3, 1, 1, Activation::relu},  // "same" padding
    {2, 2, 7, 6, 3, 3, 2, 0, Activation::none},  // stride 2, no padding
    {1, 2, 6, 7, 3, 5, 1, 2, Activation::relu},  // the lecture's k5, p2
    {2, 2, 7, 5, 3, 5, 2, 2, Activation::relu},  // stride 2 with padding 2
    {3, 3, 4, 4, 2, 1, 1, 0, Activation::none},  // a 1×1 convolution
    {2, 1, 5, 5, 2, 2, 3, 1, Activation::none},  // stride larger than the kernel: pixels no window reads
    {2, 2, 2, 3, 3, 5, 1, 2, Activation::relu},  // "same" padding on an image smaller than the kernel
};

}  // namespace

// ---- Conv2d ---------------------------------------------------------------------------------

TEST(Conv2d, ForwardMatchesAFloat64Loop) {
  for (const ConvCase& g : kConvCases) {
    const ConvRun r = run_conv(g, 11);
    expect_close(r.y, conv_reference(to_double(r.x), to_double(r.w), to_double(r.b), g), 1e-5, g.text());
  }
}

TEST(Conv2d, BackwardMatchesFiniteDifferences) {
  for (const ConvCase& g : kConvCases) {
    const ConvRun r = run_conv(g, 21);
    const auto x = to_double(r.x), w = to_double(r.w), b = to_double(r.b), dy = to_double(r.dy);
    const auto dx = finite_differences(x, [&](const std::vector<double>& v) { return dot(dy, conv_reference(v, w, b, g)); });
    const auto dw = finite_differences(w, [&](const std::vector<double>& v) { return dot(dy, conv_reference(x, v, b, g)); });
    const auto db = finite_differences(b, [&](const std::vector<double>& v) { return dot(dy, conv_reference(x, w, v, g)); });
    expect_close(r.dx, dx, 1e-4, "dx " + g.text());
    expect_close(r.dw, dw, 1e-4, "dW " + g.text());
    expect_close(r.db, db, 1e-4, "db " + g.text());
  }
}

TEST(Conv2d, LargeBatchesRunInChunksWithTheSameResult) {
  // The lecture's second conv on 14×14: at most 49 images a chunk, so 50 take two of 25.
  const ConvCase g{50, 16, 14, 14, 32, 5, 1, 2, Activation::relu};
  Conv2dGeometry geometry{50, 16, 14, 14, 32, 5, 1, 2};
  ASSERT_EQ(kernels::conv2d_chunk_images(geometry), 25);
  const ConvRun all = run_conv(g, 31);
  expect_close(all.y, conv_reference(to_double(all.x), to_double(all.w), to_double(all.b), g), 1e-5, "y");
  // Image by image (one chunk each), accumulating: the same gradients.
  auto d = cpu_device();
  Conv2d conv(*d, 0, "conv", g.c, g.oc, g.k, g.s, g.p, g.h, g.w, g.act);
  d->upload({"w", Phase::data}, conv.weight.value, all.w.data());
  d->upload({"b", Phase::data}, conv.bias.value, all.b.data());
  const int64_t in = g.c * g.h * g.w, out = g.oc * g.oh() * g.ow();
  std::vector<float> dx;
  for (int64_t n = 0; n < g.n; ++n) {
    conv.forward(upload(*d, std::vector<float>(all.x.begin() + n * in, all.x.begin() + (n + 1) * in), {1, in}));
    Tensor dxn = conv.backward(
        upload(*d, std::vector<float>(all.dy.begin() + n * out, all.dy.begin() + (n + 1) * out), {1, out}), true, n > 0);
    for (float v : download(*d, dxn)) dx.push_back(v);
  }
  expect_close(dx, to_double(all.dx), 1e-5, "dx");
  expect_close(download(*d, conv.weight.grad), to_double(all.dw), 1e-5, "dW");
  expect_close(download(*d, conv.bias.grad), to_double(all.db), 1e-5, "db");
}

// Under AMP a convolution and a pool take and give half tensors and compute in f32 between: the
// layer's output is the f32 convolution of the rounded input, weights and bias, rounded once; its
// dx the f32 col2im of the rounded dy, rounded; dW and db the rounded f32 sums, cast into the f32
// masters. Bit for bit, in f16 and bf16.
TEST(Conv2d, InHalfIsTheF32OpOnRoundedValuesRoundedOnce) {
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const auto round = [dt](std::vector<float> v) {
      for (float& f : v) f = dt == DType::f16 ? half_to_float(float_to_half(f)) : bf16_to_float(float_to_bf16(f));
      return v;
    };
    const ConvCase g = kConvCases[0];
    ConvRun f32 = run_conv(g, 21);  // the same op in f32, on the values rounded to half
    {
      auto d = cpu_device();
      Conv2d conv(*d, 0, "conv", g.c, g.oc, g.k, g.s, g.p, g.h, g.w, g.act);
      d->upload({"w", Phase::data}, conv.weight.value, round(f32.w).data());
      d->upload({"b", Phase::data}, conv.bias.value, round(f32.b).data());
      const Tensor y = conv.forward(upload(*d, round(f32.x), {g.n, g.c * g.h * g.w}));
      f32.y = download(*d, y);
      const Tensor dx = conv.backward(upload(*d, round(f32.dy), {g.n, g.oc * g.oh() * g.ow()}), true);
      f32.dx = download(*d, dx);
      f32.dw = download(*d, conv.weight.grad);
      f32.db = download(*d, conv.bias.grad);
    }
    auto d = cpu_device();
    Conv2d conv(*d, 0, "conv", g.c, g.oc, g.k, g.s, g.p, g.h, g.w, g.act);
    const ConvRun in = run_conv(g, 21);  // the inputs again
    d->upload({"w", Phase::data}, conv.weight.value, in.w.data());
    d->upload({"b", Phase::data}, conv.bias.value, in.b.data());
    conv.set_precision(dt);
    EXPECT_NE(error_of([&] { conv.forward(upload(*d, in.x, {g.n, g.c * g.h * g.w})); }).find("never cast"),
              std::string::npos);
    conv.refresh_half_weights();
    const Tensor y = conv.forward(upload(*d, in.x, {g.n, g.c * g.h * g.w}));  // the f32 batch, cast in
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(download(*d, y), round(f32.y));
    const Tensor dy_f32 = upload(*d, in.dy, {g.n, g.oc * g.oh() * g.ow()});
    Tensor dy = d->empty(dy_f32.shape(), dt, MemoryCategory::activations, "dy");
    d->cast({"dy", Phase::bwd}, dy_f32, dy);
    const Tensor dx = conv.backward(dy, true);
    EXPECT_EQ(dx.dtype(), dt);
    EXPECT_EQ(download(*d, dx), round(f32.dx));
    EXPECT_EQ(download(*d, conv.weight.grad), round(f32.dw));  // f32 masters holding half values
    EXPECT_EQ(download(*d, conv.bias.grad), round(f32.db));

    // The pool keeps its input's dtype; a max and its scatter round to themselves.
    MaxPool2d pool(*d, 1, "pool", g.oc, g.oh(), g.ow(), 2, 2);
    pool.set_precision(dt);
    const Tensor py = pool.forward(y);
    EXPECT_EQ(py.dtype(), dt);
    const std::vector<float> yv = download(*d, y), pv = download(*d, py);
    for (size_t i = 0; i < pv.size(); ++i) EXPECT_NE(std::find(yv.begin(), yv.end(), pv[i]), yv.end());
    EXPECT_EQ(pool.backward(py, true).dtype(), dt);
  }
}

TEST(Conv2d, AccumulateAddsToTheGradients) {
  const ConvCase g{2, 2, 6, 6, 3, 3, 1, 1, Activation::relu};
  auto d = cpu_device();
  Conv2d conv(*d, 0, "conv", g.c, g.oc, g.k, g.s, g.p, g.h, g.w, g.act);
  const auto w = random_floats(static_cast<size_t>(g.oc * g.c * g.k * g.k), 41);
  const auto b = random_floats(static_cast<size_t>(g.oc), 42);
  d->upload({"w", Phase::data}, conv.weight.value, w.data());
  d->upload({"b", Phase::data}, conv.bias.value, b.data());
  const int64_t in = g.c * g.h * g.w, out = g.oc * g.oh() * g.ow();
  const auto x1 = random_floats(static_cast<size_t>(g.n * in), 43), x2 = random_floats(static_cast<size_t>(g.n * in), 44);
  const auto dy1 = random_floats(static_cast<size_t>(g.n * out), 45), dy2 = random_floats(static_cast<size_t>(g.n * out), 46);
  auto grads_of = [&](const std::vector<float>& x, const std::vector<float>& dy) {
    conv.forward(upload(*d, x, {g.n, in}));
    conv.backward(upload(*d, dy, {g.n, out}), false);
    return std::make_pair(download(*d, conv.weight.grad), download(*d, conv.bias.grad));
  };
  const auto [w1, b1] = grads_of(x1, dy1);
  const auto [w2, b2] = grads_of(x2, dy2);
  // Two micro-batches' forwards first (a pipeline's order), then their backwards, the second adding.
  conv.forward(upload(*d, x1, {g.n, in}));
  conv.forward(upload(*d, x2, {g.n, in}));
  EXPECT_FALSE(conv.backward(upload(*d, dy1, {g.n, out}), false).defined());  // no dx asked for
  conv.backward(upload(*d, dy2, {g.n, out}), false, /*accumulate=*/true);
  const auto w12 = download(*d, conv.weight.grad), b12 = download(*d, conv.bias.grad);
  for (size_t i = 0; i < w12.size(); ++i) EXPECT_NEAR(w12[i], w1[i] + w2[i], 1e-5) << i;
  for (size_t i = 0; i < b12.size(); ++i) EXPECT_NEAR(b12[i], b1[i] + b2[i], 1e-5) << i;
}

TEST(Conv2d, ParametersAreNamedAndShapedAsPyTorchsStateDict) {
  auto d = cpu_device();
  Conv2d conv(*d, 3, "conv1", 1, 16, 5, 1, 2, 28, 28, Activation::relu);
  ASSERT_EQ(conv.parameters().size(), 2u);
  EXPECT_EQ(conv.parameters()[0]->name, "conv1.weight");
  EXPECT_EQ(conv.parameters()[1]->name, "conv1.bias");
  EXPECT_EQ(conv.weight.value.shape(), (std::vector<int64_t>{16, 1, 5, 5}));
  EXPECT_EQ(conv.bias.grad.shape(), (std::vector<int64_t>{16}));
  EXPECT_EQ(conv.weight.layer, 3);
  EXPECT_EQ(d->memory().live(MemoryCategory::params), (16 * 25 + 16) * 4);
  EXPECT_EQ(d->memory().live(MemoryCategory::grads), (16 * 25 + 16) * 4);
  EXPECT_TRUE(contains(error_of([&] { conv.set_precision(DType::i32); }), "conv1 cannot compute in i32"));
  conv.set_precision(DType::bf16);  // AMP: half copies of W and b, in workspace; params stay f32
  EXPECT_EQ(d->memory().live(MemoryCategory::params), (16 * 25 + 16) * 4);
  EXPECT_EQ(d->memory().live(MemoryCategory::workspace), (16 * 25 + 16) * 2);
}

TEST(ConvNet, TheLecturesShapes) {
  auto d = cpu_device();
  Conv2d conv1(*d, 0, "conv1", 1, 16, 5, 1, 2, 28, 28, Activation::relu);
  MaxPool2d pool1(*d, 1, "pool1", 16, 28, 28, 2, 2);
  Conv2d conv2(*d, 2, "conv2", 16, 32, 5, 1, 2, 14, 14, Activation::relu);
  MaxPool2d pool2(*d, 3, "pool2", 32, 14, 14, 2, 2);
  Flatten flatten(*d, 4, "flatten", 32, 7, 7);
  std::vector<int64_t> shape{64, 784};
  for (Layer* l : std::vector<Layer*>{&conv1, &pool1, &conv2, &pool2, &flatten}) shape = l->output_shape(shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{64, 7 * 7 * 32}));  // the Linear head's input
  // Flatten moves nothing: its output is its input, its dx is dy.
  Tensor x = d->zeros({2, 1568}, DType::f32, MemoryCategory::activations, "x");
  EXPECT_EQ(flatten.forward(x).raw(), x.raw());
  EXPECT_EQ(flatten.backward(x, true).raw(), x.raw());
  EXPECT_TRUE(contains(error_of([&] { flatten.forward(d->zeros({2, 1600}, DType::f32, MemoryCategory::activations, "x")); }),
                       "flatten expects {rows, 1568} (32×7×7 images"));
}

// ---- MaxPool2d ------------------------------------------------------------------------------

TEST(MaxPool2d, ForwardBackwardAndIndices) {
  auto d = cpu_device();
  // 2 images × 2 channels of 5×6, windows of 2 every 2 (the last row and column are left out),
  // and windows of 3 every 2, which overlap: a pixel may win in two windows.
  for (auto [k, s] : std::vector<std::pair<int64_t, int64_t>>{{2, 2}, {3, 2}, {2, 1}}) {
    const int64_t N = 2, C = 2, H = 5, W = 6, OH = (H - k) / s + 1, OW = (W - k) / s + 1;
    MaxPool2d pool(*d, 0, "pool", C, H, W, k, s);
    const auto x = random_floats(static_cast<size_t>(N * C * H * W), 51 + k);
    const auto dy = random_floats(static_cast<size_t>(N * C * OH * OW), 61 + k);
    Tensor y = pool.forward(upload(*d, x, {N, C * H * W}));
    const auto hy = download(*d, y);
    auto reference = [&](const std::vector<double>& v) {
      std::vector<double> out(static_cast<size_t>(N * C * OH * OW));
      for (int64_t plane = 0; plane < N * C; ++plane)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double m = -std::numeric_limits<double>::infinity();
            for (int64_t kh = 0; kh < k; ++kh)
              for (int64_t kw = 0; kw < k; ++kw)
                m = std::max(m, v[static_cast<size_t>(plane * H * W + (oh * s + kh) * W + ow * s + kw)]);
            out[static_cast<size_t>((plane * OH + oh) * OW + ow)] = m;
          }
      return out;
    };
    const std::string what = "k" + std::to_string(k) + " s" + std::to_string(s);
    expect_close(hy, reference(to_double(x)), 0, what + " y");
    Tensor dx = pool.backward(upload(*d, dy, {N, C * OH * OW}), true);
    const auto fd = finite_differences(to_double(x), [&](const std::vector<double>& v) { return dot(to_double(dy), reference(v)); });
    expect_close(download(*d, dx), fd, 1e-6, what + " dx");
  }
}

TEST(MaxPool2d, TheFirstMaxWinsATieAndANaNWins) {
  auto d = cpu_device();
  MaxPool2d pool(*d, 0, "pool", 1, 2, 6, 2, 2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Three 2×2 windows: all equal; the max twice (top right, bottom left); a NaN bottom right.
  const std::vector<float> x = {1, 1, 0, 3, 5, 5,  //
                                1, 1, 3, 2, 5, nan};
  Tensor y = pool.forward(upload(*d, x, {1, 12}));
  const auto hy = download(*d, y);
  EXPECT_EQ(hy[0], 1.0f);
  EXPECT_EQ(hy[1], 3.0f);
  EXPECT_TRUE(std::isnan(hy[2]));
  // The saved argmax, as backward uses it: dy goes to the first of the tied pixels.
  Tensor dx = pool.backward(upload(*d, {10, 20, 30}, {1, 3}), true);
  const auto hdx = download(*d, dx);
  EXPECT_EQ(hdx, (std::vector<float>{10, 0, 0, 20, 0, 0,  //
                                     0, 0, 0, 0, 0, 30}));
}

// ---- Dropout --------------------------------------------------------------------------------

TEST(Dropout, TheSameRowsGetTheSameMaskHoweverTheBatchIsSplit) {
  auto d = cpu_device();
  const int64_t rows = 8, cols = 33;
  const auto x = random_floats(static_cast<size_t>(rows * cols), 71, 0.5f, 1.5f);  // no zeros
  Dropout whole(*d, 0, "drop", 0.4f, 1234);
  whole.set_batch_position({5, 0, 1});
  const auto y = download(*d, whole.forward(upload(*d, x, {rows, cols})));
  auto half = [&](int64_t first) {
    return upload(*d, std::vector<float>(x.begin() + first * cols, x.begin() + (first + rows / 2) * cols), {rows / 2, cols});
  };
  // One layer running the two halves as micro-batches: set once, the second follows the first.
  Dropout staged(*d, 0, "drop", 0.4f, 1234);
  staged.set_batch_position({5, 0, 1});
  auto y1 = download(*d, staged.forward(half(0)));
  const auto y2 = download(*d, staged.forward(half(rows / 2)));
  y1.insert(y1.end(), y2.begin(), y2.end());
  EXPECT_EQ(y1, y);
  // Two replicas, each told where its shard starts.
  Dropout second(*d, 0, "drop", 0.4f, 1234);
  second.set_batch_position({5, rows / 2, 1});
  EXPECT_EQ(download(*d, second.forward(half(rows / 2))), y2);
  // Two DDP ranks: rank r holds rows r, r+2, r+4, … (DistributedSampler's shard), told (r, 2).
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<float> shard, expected;
    for (int64_t j = r; j < rows; j += 2) {
      shard.insert(shard.end(), x.begin() + j * cols, x.begin() + (j + 1) * cols);
      expected.insert(expected.end(), y.begin() + j * cols, y.begin() + (j + 1) * cols);
    }
    Dropout rank(*d, 0, "drop", 0.4f, 1234);
    rank.set_batch_position({5, r, 2});
    EXPECT_EQ(download(*d, rank.forward(upload(*d, shard, {rows / 2, cols}))), expected) << "rank " << r;
  }
  // Another step, or another seed: another mask.
  Dropout later(*d, 0, "drop", 0.4f, 1234), other(*d, 0, "drop", 0.4f, 99);
  later.set_batch_position({6, 0, 1});
  other.set_batch_position({5, 0, 1});
  EXPECT_NE(download(*d, later.forward(upload(*d, x, {rows, cols}))), y);
  EXPECT_NE(download(*d, other.forward(upload(*d, x, {rows, cols}))), y);
}

// A GPT's activations: T rows (tokens) per sample. Rank r of 2 holds samples r, r+2, …, each
// with its T rows; its rows get the masks of those samples' rows in the whole batch.
TEST(Dropout, ASamplesTokensKeepTheirMaskOnAStridedShard) {
  auto d = cpu_device();
  const int64_t samples = 6, T = 3, cols = 17;
  const auto x = random_floats(static_cast<size_t>(samples * T * cols), 75, 0.5f, 1.5f);
  Dropout whole(*d, 0, "drop", 0.5f, 8, T);
  whole.set_batch_position({2, 0, 1});
  const auto y = download(*d, whole.forward(upload(*d, x, {samples * T, cols})));
  const int64_t per_sample = T * cols;
  for (int64_t r = 0; r < 2; ++r) {
    Dropout rank(*d, 0, "drop", 0.5f, 8, T);
    rank.set_batch_position({2, r, 2});
    // Two micro-batches of one sample each, then the last: the rows carry on across forwards.
    std::vector<float> got;
    for (int64_t s = r; s < samples; s += 2) {
      const std::vector<float> one(x.begin() + s * per_sample, x.begin() + (s + 1) * per_sample);
      const auto out = download(*d, rank.forward(upload(*d, one, {T, cols})));
      got.insert(got.end(), out.begin(), out.end());
    }
    std::vector<float> expected;
    for (int64_t s = r; s < samples; s += 2)
      expected.insert(expected.end(), y.begin() + s * per_sample, y.begin() + (s + 1) * per_sample);
    EXPECT_EQ(got, expected) << "rank " << r;
  }
}

TEST(Dropout, KeepsOneMinusPScaledAndBackwardUsesTheSameMask) {
  auto d = cpu_device();
  const float p = 0.3f;
  const int64_t rows = 256, cols = 256;
  Dropout drop(*d, 2, "drop", p, 7);
  drop.set_batch_position({3, 1000, 1});
  const std::vector<float> ones(static_cast<size_t>(rows * cols), 1.0f);
  const auto y = download(*d, drop.forward(upload(*d, ones, {rows, cols})));
  double sum = 0;
  int64_t kept = 0;
  for (float v : y) {
    sum += v;
    if (v != 0.0f) {
      ++kept;
      ASSERT_EQ(v, 1.0f / (1.0f - p));
    }
  }
  const double n = static_cast<double>(rows * cols);
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01);  // 65 536 draws: σ ≈ 0.002
  EXPECT_NEAR(sum / n, 1.0, 0.015);                           // the expectation is kept
  // dx = dy ⊙ mask / (1 − p): zero exactly where the forward dropped.
  const auto dy = random_floats(static_cast<size_t>(rows * cols), 72);
  const auto dx = download(*d, drop.backward(upload(*d, dy, {rows, cols}), true));
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], y[i] == 0.0f ? 0.0f : dy[i] * (1.0f / (1.0f - p))) << i;
}

TEST(Dropout, PZeroAndEvaluationAreTheIdentityWithNoOp) {
  EventBus bus;
  DeviceOptions o;
  o.bus = &bus;
  auto d = std::move(make_devices(o).front());
  Tensor x = upload(*d, random_floats(12, 81), {3, 4});
  const size_t before = bus.events().size();
  Dropout none(*d, 0, "drop", 0.0f, 1);
  EXPECT_EQ(none.forward(x).raw(), x.raw());
  EXPECT_EQ(none.backward(x, true).raw(), x.raw());
  Dropout eval(*d, 0, "drop", 0.5f, 1);
  eval.set_training(false);
  EXPECT_EQ(eval.forward(x).raw(), x.raw());
  EXPECT_EQ(bus.events().size(), before);
  Dropout all(*d, 0, "drop", 1.0f, 1);  // p = 1: everything dropped
  EXPECT_EQ(download(*d, all.forward(x)), std::vector<float>(12, 0.0f));
}

// ---- a dry run: shapes only, the same events and prices --------------------------------------

namespace {

struct Recorded {
  std::vector<Event> events;
  int64_t workspace_peak = 0;
  bool meta = false;
};

// conv (1→4, k3, p1) + ReLU, max-pool 2, dropout on 2 images of 8×8, forward and backward.
Recorded small_convnet(bool dry_run) {
  EventBus bus;
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile(kTiny);
  o.dry_run = dry_run;
  o.bus = &bus;
  auto d = std::move(make_devices(o).front());
  Conv2d conv(*d, 0, "conv1", 1, 4, 3, 1, 1, 8, 8, Activation::relu);
  MaxPool2d pool(*d, 1, "pool1", 4, 8, 8, 2, 2);
  Dropout drop(*d, 2, "drop", 0.5f, 3);
  const auto w = random_floats(36, 91), b = random_floats(4, 92), x = random_floats(128, 93), dy = random_floats(128, 94);
  d->upload({"w", Phase::data}, conv.weight.value, dry_run ? nullptr : w.data());
  d->upload({"b", Phase::data}, conv.bias.value, dry_run ? nullptr : b.data());
  Tensor in = d->empty({2, 64}, DType::f32, MemoryCategory::activations, "x");
  d->upload({"x", Phase::data}, in, dry_run ? nullptr : x.data());
  Tensor out = drop.forward(pool.forward(conv.forward(in)));
  Tensor g = d->empty({2, 64}, DType::f32, MemoryCategory::activations, "dy");
  d->upload({"dy", Phase::data}, g, dry_run ? nullptr : dy.data());
  Tensor dx = conv.backward(pool.backward(drop.backward(g, true), true), true);
  Recorded r;
  r.meta = out.is_meta() && dx.is_meta() && conv.weight.grad.is_meta();
  r.workspace_peak = d->memory().peak(MemoryCategory::workspace);
  r.events = bus.events();
  return r;
}

}  // namespace

TEST(ConvOps, ADryRunComputesNothingAndIsPricedAsARealRun) {
  const Recorded dry = small_convnet(true), real = small_convnet(false);
  EXPECT_TRUE(dry.meta);
  EXPECT_FALSE(real.meta);
  std::vector<std::string> kinds;
  for (const Event& e : dry.events)
    if (e.lane == Lane::compute) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"conv2d", "max_pool2d", "dropout", "dropout", "max_pool2d_bwd",
                                             "conv2d_bwd_weight", "conv2d_bwd_input"}));
  ASSERT_EQ(dry.events.size(), real.events.size());
  for (size_t i = 0; i < dry.events.size(); ++i) {
    EXPECT_EQ(dry.events[i].name, real.events[i].name) << i;
    EXPECT_EQ(dry.events[i].t_begin_ns, real.events[i].t_begin_ns) << i;
    EXPECT_EQ(dry.events[i].t_end_ns, real.events[i].t_end_ns) << i;
    EXPECT_EQ(dry.events[i].bytes, real.events[i].bytes) << i;
  }
  // The im2col workspace is in the ledger while the op runs: (C·K·K + OC) · images · OH·OW floats.
  EXPECT_EQ(dry.workspace_peak, (9 + 4) * 2 * 64 * 4);
  EXPECT_EQ(dry.workspace_peak, real.workspace_peak);

  // The forward conv as a GEMM on tiny.json (5e11 FLOP/s for GEMMs, 1e11 B/s, 1 µs launches):
  // m = OC = 4, n = N·OH·OW = 128, k = C·K·K = 9, plus the bias and ReLU on each output.
  const Event& conv = *std::find_if(dry.events.begin(), dry.events.end(), [](const Event& e) { return e.kind == "conv2d"; });
  EXPECT_EQ(conv.name, "conv1.fwd");
  EXPECT_EQ(conv.layer, 0);
  EXPECT_DOUBLE_EQ(conv.flops, 2.0 * 4 * 128 * 9 + 2.0 * 4 * 128);
  // x, W, b, y, and the columns (9 × 128) and the GEMM's output (4 × 128) written and read.
  const int64_t bytes = 2 * 64 * 4 + 36 * 4 + 4 * 4 + 2 * 256 * 4 + 8 * (9 + 4) * 128;
  EXPECT_EQ(conv.bytes, bytes);
  const HardwareProfile p = load_profile(kTiny);
  const double seconds = std::max(conv.flops / (p.peak_flops_f32 * p.gemm_efficiency), bytes / p.mem_bandwidth_Bps) +
                         p.launch_overhead_s;
  EXPECT_EQ(conv.t_end_ns - conv.t_begin_ns, std::llround(seconds * 1e9));
  // Backward: dW = dy · colᵀ (m = OC, n = C·K·K, k = N·OH·OW) with the mask and db's sums, then
  // dcol = Wᵀ · dy (m = C·K·K, n = N·OH·OW, k = OC) with col2im's additions.
  auto flops_of = [&](const std::string& kind) {
    return std::find_if(dry.events.begin(), dry.events.end(), [&](const Event& e) { return e.kind == kind; })->flops;
  };
  EXPECT_DOUBLE_EQ(flops_of("conv2d_bwd_weight"), 2.0 * 4 * 9 * 128 + 2.0 * 4 * 128);
  EXPECT_DOUBLE_EQ(flops_of("conv2d_bwd_input"), 2.0 * 9 * 128 * 4 + 9.0 * 128);
  EXPECT_DOUBLE_EQ(flops_of("max_pool2d"), 2.0 * 4 * 16 * 4);  // 4 comparisons per output
  for (const Event& e : dry.events) {
    if (e.lane != Lane::compute) continue;
    EXPECT_GT(e.flops, 0) << e.kind;
  }
}

// ---- shapes that do not fit ----------------------------------------------------------------

TEST(ConvLayers, BadShapesAreRefusedWithWhatWasExpected) {
  auto d = cpu_device();
  Conv2d conv1(*d, 0, "conv1", 1, 16, 5, 1, 2, 28, 28, Activation::relu);
  Tensor wrong = d->zeros({4, 100}, DType::f32, MemoryCategory::activations, "x");
  EXPECT_TRUE(contains(error_of([&] { conv1.forward(wrong); }),
                       "conv1 expects {rows, 784} (1×28×28 images, one per row in NCHW order), got [4,100]"));
  EXPECT_TRUE(contains(error_of([&] { conv1.output_shape({784}); }), "got [784]"));
  EXPECT_TRUE(contains(error_of([&] { conv1.backward(wrong, true); }), "conv1: backward without a forward"));
  conv1.forward(d->zeros({2, 784}, DType::f32, MemoryCategory::activations, "x"));
  EXPECT_TRUE(contains(error_of([&] { conv1.backward(wrong, true); }),
                       "conv1: backward expects dy [2,12544], the shape of its forward's output, got [4,100]"));
  EXPECT_TRUE(contains(error_of([] {
                         auto dev = cpu_device();
                         Conv2d c(*dev, 0, "big", 1, 1, 9, 1, 1, 5, 5, Activation::none);
                       }),
                       "big: a kernel of 9 does not fit a 5×5 image padded by 1"));
  EXPECT_TRUE(contains(error_of([&] { Conv2d c(*d, 0, "c", 1, 1, 3, 0, 0, 5, 5, Activation::none); }),
                       "must be at least 1"));

  MaxPool2d pool(*d, 1, "pool1", 16, 28, 28, 2, 2);
  EXPECT_TRUE(contains(error_of([&] { pool.forward(wrong); }), "pool1 expects {rows, 12544} (16×28×28 images"));
  EXPECT_TRUE(contains(error_of([&] { MaxPool2d m(*d, 0, "p", 1, 2, 2, 3, 1); }), "p: a window of 3 does not fit a 2×2 image"));

  EXPECT_TRUE(contains(error_of([&] { Dropout x(*d, 0, "drop", 1.5f, 0); }), "drop: p = 1.5"));
  Dropout drop(*d, 2, "drop", 0.5f, 0);
  EXPECT_TRUE(contains(error_of([&] { drop.set_batch_position({0, -1, 1}); }), "first sample -1"));
  EXPECT_TRUE(contains(error_of([&] { drop.set_batch_position({0, 0, 0}); }), "stride 0"));
  Dropout tokens(*d, 2, "drop", 0.5f, 0, 4);  // 4 rows (tokens) per sample
  EXPECT_TRUE(contains(error_of([&] { tokens.forward(d->zeros({6, 3}, DType::f32, MemoryCategory::activations, "x")); }),
                       "6 rows are not whole samples of 4 rows"));

  // The device's ops check their tensors against the geometry too.
  Conv2dGeometry g{2, 1, 28, 28, 16, 5, 1, 2};
  Tensor x = d->zeros({2, 784}, DType::f32, MemoryCategory::activations, "x");
  Tensor y = d->zeros({2, 16 * 784}, DType::f32, MemoryCategory::activations, "y");
  Tensor w = d->zeros({16, 25}, DType::f32, MemoryCategory::params, "w");  // flat: not {OC, C, K, K}
  const std::string e = error_of([&] { d->conv2d({"c", Phase::fwd}, x, w, conv1.bias.value, y, g, Activation::none); });
  EXPECT_TRUE(contains(e, "conv2d c: expects x {2, 784}, weight {16, 1, 5, 5}, bias {16}, y {2, 12544}")) << e;
  Tensor pooled = d->zeros({2, 16 * 196}, DType::f32, MemoryCategory::activations, "pooled");
  Pool2dGeometry pg{2, 16, 28, 28, 2, 2};
  // f32 indices: refused.
  EXPECT_TRUE(contains(error_of([&] { d->max_pool2d({"p", Phase::fwd}, y, pooled, pooled, pg); }), "indices i32"));
}
