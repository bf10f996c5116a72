// The host kernels against plain loops and closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/kernels/cpu_kernels.h"
#include "core/rng.h"
#include "core/tensor.h"

using namespace scalelab;
namespace k = scalelab::kernels;

static std::vector<float> random_vec(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = r.uniform(-1, 1);
  return v;
}

TEST(Gemm, MatchesNaiveLoopForEveryTransposeAndOddSizes) {
  const int64_t m = 37, n = 19, kk = 53;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.0f, 0.5f}) {
        auto a = random_vec(m * kk, 1), b = random_vec(kk * n, 2), c0 = random_vec(m * n, 3);
        auto c1 = c0, c2 = c0;
        k::gemm(ta, tb, m, n, kk, 1.5f, a.data(), b.data(), beta, c1.data());
        k::gemm_naive(ta, tb, m, n, kk, 1.5f, a.data(), b.data(), beta, c2.data());
        for (size_t i = 0; i < c1.size(); ++i)
          ASSERT_NEAR(c1[i], c2[i], 1e-4f * (1 + std::fabs(c2[i]))) << "ta=" << ta << " tb=" << tb << " beta=" << beta << " i=" << i;
      }
}

TEST(Gemm, SmallCaseByHand) {
  // [1 2; 3 4] · [5 6; 7 8] = [19 22; 43 50]
  std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c(4, -1.0f);
  k::gemm(false, false, 2, 2, 2, 1.0f, a.data(), b.data(), 0.0f, c.data());
  EXPECT_EQ(c, (std::vector<float>{19, 22, 43, 50}));
  // beta = 1 accumulates; Aᵀ·B = [1 3; 2 4]·[5 6; 7 8] = [26 30; 38 44]
  k::gemm(true, false, 2, 2, 2, 1.0f, a.data(), b.data(), 1.0f, c.data());
  EXPECT_EQ(c, (std::vector<float>{45, 52, 81, 94}));
}

TEST(Gemm, ZeroInnerDimensionScalesC) {
  std::vector<float> c{1, 2, 3, 4};
  k::gemm(false, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.5f, c.data());
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
}

TEST(BiasAct, ReluAndIdentity) {
  std::vector<float> y{-1, 0.5f, 2, -3}, b{0.5f, -1};
  k::bias_act(y.data(), b.data(), 2, 2, k::Activation::relu);
  EXPECT_EQ(y, (std::vector<float>{0, 0, 2.5f, 0}));
  std::vector<float> z{-1, 0.5f, 2, -3};
  k::bias_act(z.data(), b.data(), 2, 2, k::Activation::none);
  EXPECT_EQ(z, (std::vector<float>{-0.5f, -0.5f, 2.5f, -4}));
  // backward: dy masked where y == 0, dbias = column sums of the masked dy
  std::vector<float> dy{1, 1, 1, 1}, db(2, 7.0f);
  k::bias_act_backward(dy.data(), y.data(), db.data(), 2, 2, k::Activation::relu, false);
  EXPECT_EQ(dy, (std::vector<float>{0, 0, 1, 0}));
  EXPECT_EQ(db, (std::vector<float>{1, 0}));
  k::bias_act_backward(dy.data(), y.data(), db.data(), 2, 2, k::Activation::relu, true);
  EXPECT_EQ(db, (std::vector<float>{2, 0}));
}

TEST(SoftmaxXent, UniformLogitsGiveLogClassesAndKnownGradient) {
  const int64_t rows = 3, classes = 4;
  std::vector<float> logits(rows * classes, 2.0f), d(rows * classes);
  std::vector<int32_t> labels{0, 3, 1};
  double loss = k::softmax_xent(logits.data(), labels.data(), d.data(), rows, classes, 1.0f);
  EXPECT_NEAR(loss, std::log(4.0), 1e-12);
  // d = (p − onehot) / rows with p = 1/4
  EXPECT_FLOAT_EQ(d[0], (0.25f - 1) / 3);
  EXPECT_FLOAT_EQ(d[1], 0.25f / 3);
  EXPECT_FLOAT_EQ(d[4 + 3], (0.25f - 1) / 3);
}

TEST(SoftmaxXent, LabelOutOfRangeIsAClearError) {
  std::vector<float> logits(4, 0.0f);
  std::vector<int32_t> labels{5};
  try {
    k::softmax_xent(logits.data(), labels.data(), nullptr, 1, 4, 1.0f);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("label 5"), std::string::npos) << e.what();
  }
}

TEST(Mse, ClosedForm) {
  std::vector<float> p{1, 2, 3}, t{0, 2, 5}, d(3);
  double loss = k::mse(p.data(), t.data(), d.data(), 3, 1.0f);
  EXPECT_NEAR(loss, (1.0 + 0 + 4) / 3, 1e-12);
  EXPECT_FLOAT_EQ(d[0], 2.0f * 1 / 3);
  EXPECT_FLOAT_EQ(d[2], 2.0f * -2 / 3);
}

TEST(Sgd, MomentumAndWeightDecayTwoStepsClosedForm) {
  // PyTorch: d = g + wd·w; buf = μ·buf + d; w -= lr·buf
  std::vector<float> w{1.0f}, g{0.5f}, buf{0.0f};
  k::SgdOptions o{0.1f, 0.9f, 0.01f};
  k::sgd(w.data(), g.data(), buf.data(), 1, o);
  double d1 = 0.5 + 0.01 * 1.0, b1 = d1, w1 = 1.0 - 0.1 * b1;
  EXPECT_NEAR(w[0], w1, 1e-7);
  k::sgd(w.data(), g.data(), buf.data(), 1, o);
  double d2 = 0.5 + 0.01 * w1, b2 = 0.9 * b1 + d2, w2 = w1 - 0.1 * b2;
  EXPECT_NEAR(buf[0], b2, 1e-7);
  EXPECT_NEAR(w[0], w2, 1e-7);
}

TEST(Adam, FirstTwoStepsClosedForm) {
  std::vector<float> w{1.0f, -2.0f}, g{0.3f, -0.1f}, m(2, 0.0f), v(2, 0.0f);
  k::AdamOptions o{0.01f, 0.9f, 0.999f, 1e-8f, 0.0f};
  k::adam(w.data(), g.data(), m.data(), v.data(), 2, o, 1);
  // Step 1: m̂ = g, v̂ = g², so the update is lr · g / (|g| + eps) ≈ lr · sign(g).
  EXPECT_NEAR(w[0], 1.0 - 0.01 * 0.3 / (0.3 + 1e-8), 1e-6);
  EXPECT_NEAR(w[1], -2.0 + 0.01 * 0.1 / (0.1 + 1e-8), 1e-6);
  k::adam(w.data(), g.data(), m.data(), v.data(), 2, o, 2);
  double m2 = 0.9 * (0.1 * 0.3) + 0.1 * 0.3, v2 = 0.999 * (0.001 * 0.09) + 0.001 * 0.09;
  double mh = m2 / (1 - 0.81), vh = v2 / (1 - 0.999 * 0.999);
  double w2 = (1.0 - 0.01 * 0.3 / (0.3 + 1e-8)) - 0.01 * mh / (std::sqrt(vh) + 1e-8);
  EXPECT_NEAR(w[0], w2, 1e-6);
}

// The optimizer loops are vectorized; one element at a time (n = 1) runs the scalar remainder. The
// two must agree to the bit, or a run's weights would depend on how a tensor is split.
TEST(Optimizers, VectorizedLoopsGiveTheBitsOfOneElementAtATime) {
  const int64_t n = 1027;  // a vector body and a remainder
  std::vector<float> w0(n), g(n), m0(n), v0(n);
  for (int64_t i = 0; i < n; ++i) {
    w0[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    g[i] = std::cos(1.3f * static_cast<float>(i)) * 0.02f;
    m0[i] = g[i] * 0.5f;
    v0[i] = g[i] * g[i] * 0.25f;
  }
  const k::SgdOptions sgd{0.05f, 0.9f, 1e-4f};
  for (bool momentum : {true, false}) {
    std::vector<float> w = w0, buf = m0, w1 = w0, buf1 = m0;
    k::SgdOptions o = sgd;
    if (!momentum) o.momentum = 0.0f;
    k::sgd(w.data(), g.data(), buf.data(), n, o);
    for (int64_t i = 0; i < n; ++i) k::sgd(&w1[i], &g[i], &buf1[i], 1, o);
    EXPECT_EQ(w, w1) << "momentum " << momentum;
    EXPECT_EQ(buf, buf1) << "momentum " << momentum;
  }
  const k::AdamOptions adam{1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f};
  std::vector<float> w = w0, m = m0, v = v0, w1 = w0, m1 = m0, v1 = v0;
  k::adam(w.data(), g.data(), m.data(), v.data(), n, adam, 3);
  for (int64_t i = 0; i < n; ++i) k::adam(&w1[i], &g[i], &m1[i], &v1[i], 1, adam, 3);
  EXPECT_EQ(w, w1);
  EXPECT_EQ(m, m1);
  EXPECT_EQ(v, v1);
}
TEST(Axpy, AddsScaled) {
  std::vector<float> x{1, 2}, y{10, 20};
  k::axpy(0.5f, x.data(), y.data(), 2);
  EXPECT_EQ(y, (std::vector<float>{10.5f, 21}));
}

TEST(Cast, HalfKnownValuesAndRounding) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);                 // largest half
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);                 // rounds to inf
  EXPECT_EQ(float_to_half(5.960464477539063e-08f), 0x0001);   // smallest subnormal
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);        // tie → even
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);        // tie → even (up)
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  for (uint32_t h = 0; h < 0x7c00; ++h)  // every finite positive half round-trips exactly
    ASSERT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h) << h;
}

TEST(Cast, Bf16KnownValuesAndArrays) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie → even
  std::vector<float> src{0.1f, -3.5f, 1000.0f}, back(3);
  std::vector<uint16_t> mid(3);
  k::cast(src.data(), 0, mid.data(), 2, 3);
  k::cast(mid.data(), 2, back.data(), 0, 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(back[i], src[i], std::fabs(src[i]) / 128);
  k::cast(src.data(), 0, mid.data(), 1, 3);
  k::cast(mid.data(), 1, back.data(), 0, 3);
  EXPECT_EQ(back[1], -3.5f);
  EXPECT_TRUE(k::has_non_finite(std::vector<float>{1, INFINITY}.data(), 2));
  EXPECT_FALSE(k::has_non_finite(std::vector<float>{1, 2}.data(), 2));
}
