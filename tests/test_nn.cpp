// Layers and losses: analytic gradients against finite differences; the model spec; init.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/device/device.h"
#include "core/error.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/rng.h"

using namespace scalelab;

namespace {

struct CpuFixture : ::testing::Test {
  std::unique_ptr<Device> dev = std::move(make_devices(DeviceOptions{})[0]);
  Tensor host_tensor(std::vector<int64_t> shape, const std::vector<float>& v, MemoryCategory c = MemoryCategory::activations) {
    Tensor t = dev->empty(shape, DType::f32, c, "t");
    dev->upload({"t", Phase::data}, t, v.data());
    return t;
  }
  std::vector<float> read(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    dev->download({"t", Phase::data}, v.data(), t);
    return v;
  }
};

std::vector<float> randn(size_t n, uint64_t seed, float s = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = s * r.normal();
  return v;
}

}  // namespace

// L = Σ R ⊙ layer(x): dL/dy = R. Compare dW, db, dx with central differences in the loss.
class LinearGrad : public CpuFixture, public ::testing::WithParamInterface<Activation> {};

TEST_P(LinearGrad, MatchesFiniteDifferences) {
  const int64_t batch = 5, in = 7, out = 4;
  const Activation act = GetParam();
  ModelSpec spec = ModelSpec::parse("mlp:7-4");
  HostWeights w = init_weights(spec, 3);
  Linear layer(*dev, 0, "fc1", in, out, act);
  auto x = randn(batch * in, 11), R = randn(batch * out, 12);
  auto upload_w = [&](const HostWeights& hw) {
    dev->upload({"w", Phase::data}, layer.weight.value, hw.values[0].data());
    dev->upload({"b", Phase::data}, layer.bias.value, hw.values[1].data());
  };
  auto loss_of = [&](const HostWeights& hw, const std::vector<float>& xv) {
    upload_w(hw);
    Tensor y = layer.forward(host_tensor({batch, in}, xv));
    auto yv = read(y);
    layer.clear_saved();
    double l = 0;
    for (size_t i = 0; i < yv.size(); ++i) l += static_cast<double>(yv[i]) * R[i];
    return l;
  };
  upload_w(w);
  layer.forward(host_tensor({batch, in}, x));
  Tensor dy = host_tensor({batch, out}, R);
  Tensor dx = layer.backward(dy, true);
  auto dW = read(layer.weight.grad), db = read(layer.bias.grad), dxv = read(dx);

  const float h = 1e-2f;
  auto check = [&](std::vector<float>& param, const std::vector<float>& analytic, const char* what,
                   const std::function<double()>& loss) {
    for (size_t i = 0; i < param.size(); ++i) {
      float keep = param[i];
      param[i] = keep + h;
      double lp = loss();
      param[i] = keep - h;
      double lm = loss();
      param[i] = keep;
      double numeric = (lp - lm) / (2 * h);
      ASSERT_NEAR(analytic[i], numeric, 2e-3 * (1 + std::fabs(numeric))) << what << "[" << i << "]";
    }
  };
  check(w.values[0], dW, "dW", [&] { return loss_of(w, x); });
  check(w.values[1], db, "db", [&] { return loss_of(w, x); });
  check(x, dxv, "dx", [&] { return loss_of(w, x); });
}

INSTANTIATE_TEST_SUITE_P(Activations, LinearGrad, ::testing::Values(Activation::none, Activation::relu));

TEST_F(CpuFixture, SoftmaxXentGradientMatchesFiniteDifferences) {
  const int64_t rows = 4, classes = 5;
  auto logits = randn(rows * classes, 21, 2.0f);
  std::vector<int32_t> labels{0, 4, 2, 2};
  Tensor y = dev->empty({rows}, DType::i32, MemoryCategory::activations, "y");
  dev->upload({"y", Phase::data}, y, labels.data());
  Tensor d = dev->empty({rows, classes}, DType::f32, MemoryCategory::activations, "d");
  dev->softmax_xent({"loss"}, host_tensor({rows, classes}, logits), y, d);
  auto dv = read(d);
  const float h = 1e-2f;
  for (size_t i = 0; i < logits.size(); ++i) {
    auto lp = logits, lm = logits;
    lp[i] += h;
    lm[i] -= h;
    double fp = dev->softmax_xent({"loss"}, host_tensor({rows, classes}, lp), y, Tensor());
    double fm = dev->softmax_xent({"loss"}, host_tensor({rows, classes}, lm), y, Tensor());
    ASSERT_NEAR(dv[i], (fp - fm) / (2 * h), 1e-4) << i;
  }
}

TEST_F(CpuFixture, MseGradientMatchesFiniteDifferences) {
  auto p = randn(6, 31), t = randn(6, 32);
  Tensor target = host_tensor({6}, t);
  Tensor d = dev->empty({6}, DType::f32, MemoryCategory::activations, "d");
  dev->mse({"mse"}, host_tensor({6}, p), target, d);
  auto dv = read(d);
  const float h = 1e-2f;
  for (size_t i = 0; i < p.size(); ++i) {
    auto pp = p, pm = p;
    pp[i] += h;
    pm[i] -= h;
    double fp = dev->mse({"mse"}, host_tensor({6}, pp), target, Tensor());
    double fm = dev->mse({"mse"}, host_tensor({6}, pm), target, Tensor());
    ASSERT_NEAR(dv[i], (fp - fm) / (2 * h), 1e-4) << i;
  }
}

TEST_F(CpuFixture, WholeMlpGradientMatchesFiniteDifferencesOfTheLoss) {
  ModelSpec spec = ModelSpec::parse("mlp:6-5-4-3");
  HostWeights w = init_weights(spec, 5);
  Model model(*dev, w);
  auto x = randn(8 * 6, 41);
  std::vector<int32_t> labels{0, 1, 2, 0, 1, 2, 2, 1};
  Tensor y = dev->empty({8}, DType::i32, MemoryCategory::activations, "y");
  dev->upload({"y", Phase::data}, y, labels.data());
  auto loss_of = [&](const HostWeights& hw) {
    model.upload(hw);
    Tensor logits = model.forward(host_tensor({8, 6}, x));
    for (auto& l : model.layers()) l.clear_saved();
    return dev->softmax_xent({"loss"}, logits, y, Tensor());
  };
  model.upload(w);
  Tensor logits = model.forward(host_tensor({8, 6}, x));
  Tensor d = dev->empty(logits.shape(), DType::f32, MemoryCategory::activations, "d");
  dev->softmax_xent({"loss"}, logits, y, d);
  model.backward(d);
  std::vector<std::vector<float>> dW;
  for (Layer& l : model.layers()) dW.push_back(read(l.parameters()[0]->grad));
  // h small enough that no ReLU changes side between w − h and w + h (a kink makes the central
  // difference meaningless), large enough that f32 round-off in the loss stays below 1e-4.
  const float h = 1e-3f;
  for (int l = 0; l < spec.layer_count(); ++l)
    for (size_t i = 0; i < w.values[2 * l].size(); i += 3) {
      HostWeights wp = w, wm = w;
      wp.values[2 * l][i] += h;
      wm.values[2 * l][i] -= h;
      double numeric = (loss_of(wp) - loss_of(wm)) / (2 * h);
      ASSERT_NEAR(dW[l][i], numeric, 1e-3) << "layer " << l << " i " << i;
    }
}

TEST(ModelSpec, ParsesAndRejectsWithTheOptionName) {
  ModelSpec s = ModelSpec::parse("mlp:784-256-128-10");
  EXPECT_EQ(s.sizes, (std::vector<int64_t>{784, 256, 128, 10}));
  EXPECT_EQ(s.parameter_count(), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  for (const char* bad : {"cnn:1-2", "mlp:", "mlp:784", "mlp:784--10", "mlp:0-10", "mlp:a-10"}) {
    try {
      ModelSpec::parse(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--model"), std::string::npos) << e.what();
    }
  }
}

TEST(Init, SameSeedSameWeightsInBoundsDifferentSeedDiffers) {
  ModelSpec s = ModelSpec::parse("mlp:100-20-10");
  HostWeights a = init_weights(s, 1), b = init_weights(s, 1), c = init_weights(s, 2);
  EXPECT_EQ(weights_checksum(a), weights_checksum(b));
  EXPECT_NE(weights_checksum(a), weights_checksum(c));
  for (float v : a.values[0]) ASSERT_LE(std::fabs(v), 0.1f);  // 1/√100
  EXPECT_EQ(max_relative_difference(a, b), 0.0);
  EXPECT_GT(max_relative_difference(a, c), 0.1);
  // A NaN weight is as far from any weight as can be, on either side (std::max would drop it).
  HostWeights nan = a;
  nan.values[1][3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(max_relative_difference(nan, a), std::numeric_limits<double>::infinity());
  EXPECT_EQ(max_relative_difference(a, nan), std::numeric_limits<double>::infinity());
}

TEST_F(CpuFixture, OptimizerStateIsCountedAsOptimizerMemory) {
  ModelSpec s = ModelSpec::parse("mlp:10-5");
  Model model(*dev, init_weights(s, 1));
  const int64_t bytes = s.parameter_count() * 4;
  EXPECT_EQ(dev->memory().live(MemoryCategory::params), bytes);
  EXPECT_EQ(dev->memory().live(MemoryCategory::grads), bytes);
  OptimizerConfig adam;
  adam.kind = "adam";
  Optimizer opt(adam, model.parameters());
  EXPECT_EQ(dev->memory().live(MemoryCategory::optimizer), 2 * bytes);  // m and v
}

TEST(OptimizerConfig, BadValuesNameTheOption) {
  OptimizerConfig c;
  c.kind = "rmsprop";
  EXPECT_THROW(c.validate(), UsageError);
  c.kind = "sgd";
  c.lr = -1;
  try {
    c.validate();
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--lr"), std::string::npos);
  }
}
