// The cuda device against the cpu reference: every executor op on the same random inputs on both,
// including odd sizes, n = 0 and 1, every gemm transpose, and the half-precision casts bit for bit;
// and the ops of mixed precision on f16 and bf16 tensors (cublasGemmEx with f32 accumulation, the
// element-wise kernels templated on the dtype) against the cpu's half path.
// Needs a GPU: each test skips with the reason where there is none (run with `ctest -L cuda`).
#include <gtest/gtest.h>

#ifdef SCALELAB_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/device/cpu/cpu_executor.h"
#include "core/device/device.h"
#include "core/error.h"
#include "core/nn/model.h"
#include "core/nn/transformer_layers.h"
#include "core/rng.h"

namespace {

using namespace scalelab;

constexpr const char* kNoGpu = "no CUDA device: cuda_device_count() is 0 (no GPU or no driver on this machine)";

// The same tensor on the cpu device (index 0) and on the cuda device (index 1).
struct Pair {
  Tensor t[2];
  const Tensor& operator[](int side) const { return t[side]; }
};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}


DeviceOptions options(DeviceKind kind, int count = 1) {
  DeviceOptions o;
  o.kind = kind;
  o.count = count;
  return o;
}

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << kNoGpu;
    cpu_ = std::move(make_devices(options(DeviceKind::cpu)).front());
    gpu_ = std::move(make_devices(options(DeviceKind::cuda)).front());
  }

  Device& dev(int side) { return side == 0 ? *cpu_ : *gpu_; }

  Pair empty(std::vector<int64_t> shape, DType dtype = DType::f32) {
    Pair p;
    for (int s : {0, 1}) p.t[s] = dev(s).empty(shape, dtype, MemoryCategory::workspace, "test");
    return p;
  }

  // Both sides get the same bytes.
  template <typename T>
  Pair from(const std::vector<T>& v, std::vector<int64_t> shape, DType dtype) {
    Pair p = empty(std::move(shape), dtype);
    EXPECT_EQ(static_cast<int64_t>(v.size() * sizeof(T)), p[0].nbytes());
    if (!v.empty())
      for (int s : {0, 1}) dev(s).upload(tag_, p[s], v.data());
    return p;
  }
  Pair from(const std::vector<float>& v, std::vector<int64_t> shape) { return from(v, std::move(shape), DType::f32); }

  Pair random(std::vector<int64_t> shape, uint64_t seed, float lo = -1, float hi = 1) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    Rng r(seed);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = r.uniform(lo, hi);
    return from(v, std::move(shape));
  }

  template <typename T>
  std::vector<T> host(int side, const Tensor& t) {
    std::vector<T> v(static_cast<size_t>(t.nbytes()) / sizeof(T));
    if (!v.empty()) dev(side).download(tag_, v.data(), t);
    return v;
  }

  // |gpu − cpu| ≤ atol + rtol·|cpu| elementwise (nan only where the cpu has nan).
  void expect_close(const Pair& p, double rtol, double atol, const std::string& what) {
    auto c = host<float>(0, p[0]), g = host<float>(1, p[1]);
    ASSERT_EQ(c.size(), g.size()) << what;
    for (size_t i = 0; i < c.size(); ++i) {
      if (std::isnan(c[i])) {
        ASSERT_TRUE(std::isnan(g[i])) << what << " at " << i;
        continue;
      }
      ASSERT_NEAR(g[i], c[i], atol + rtol * std::fabs(c[i])) << what << " at " << i;
    }
  }

  template <typename T>
  void expect_same_bytes(const Pair& p, const std::string& what) {
    auto c = host<T>(0, p[0]), g = host<T>(1, p[1]);
    ASSERT_EQ(c.size(), g.size()) << what;
    for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(g[i], c[i]) << what << " at " << i;
  }

  // Half tensors (dtype f16 or bf16) holding round(random values), the same bits on both sides.
  Pair random_half(std::vector<int64_t> shape, DType dtype, uint64_t seed, float lo = -1, float hi = 1) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    Rng r(seed);
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (uint16_t& h : v) {
      const float f = r.uniform(lo, hi);
      h = dtype == DType::f16 ? float_to_half(f) : float_to_bf16(f);
    }
    return from(v, std::move(shape), dtype);
  }

  // The values of a tensor of any float dtype, as f32.
  std::vector<float> values(int side, const Tensor& t) {
    if (t.dtype() == DType::f32) return host<float>(side, t);
    std::vector<float> out;
    for (uint16_t h : host<uint16_t>(side, t))
      out.push_back(t.dtype() == DType::f16 ? half_to_float(h) : bf16_to_float(h));
    return out;
  }

  // |gpu − cpu| ≤ ulps units in the last place of the tensor's dtype (+ atol), elementwise.
  void expect_within_ulps(const Pair& p, double ulps, double atol, const std::string& what) {
    const int bits = p[0].dtype() == DType::f16 ? 10 : p[0].dtype() == DType::bf16 ? 7 : 23;
    auto c = values(0, p[0]), g = values(1, p[1]);
    ASSERT_EQ(c.size(), g.size()) << what;
    for (size_t i = 0; i < c.size(); ++i) {
      if (std::isnan(c[i])) {
        ASSERT_TRUE(std::isnan(g[i])) << what << " at " << i;
        continue;
      }
      const double ulp = std::ldexp(std::max(std::fabs(static_cast<double>(c[i])), 1e-30), -bits);
      ASSERT_NEAR(g[i], c[i], ulps * ulp + atol) << what << " at " << i;
    }
  }

  std::unique_ptr<Device> cpu_, gpu_;
  OpTag tag_{"test"};
};

TEST_F(CudaVsCpu, GemmEveryTransposeAndOddSizes) {
  struct Size {
    int64_t m, n, k;
  };
  for (Size z : {Size{37, 19, 53}, Size{1, 1, 1}, Size{1, 17, 3}, Size{64, 1, 5}, Size{128, 96, 300}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.0f, 0.5f}) {
          Pair a = random(ta ? std::vector<int64_t>{z.k, z.m} : std::vector<int64_t>{z.m, z.k}, 1);
          Pair b = random(tb ? std::vector<int64_t>{z.n, z.k} : std::vector<int64_t>{z.k, z.n}, 2);
          // beta = 0 must not read C (BLAS semantics): start it as nan to prove it.
          Pair c = beta == 0.0f ? from(std::vector<float>(static_cast<size_t>(z.m * z.n), NAN), {z.m, z.n})
                                : random({z.m, z.n}, 3);
          for (int s : {0, 1}) dev(s).gemm(tag_, ta, tb, a[s], b[s], c[s], beta, 1.5f);
          expect_close(c, 1e-5, 1e-5 * static_cast<double>(z.k),
                       "gemm m=" + std::to_string(z.m) + " n=" + std::to_string(z.n) + " k=" + std::to_string(z.k) +
                           " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta));
        }
}

TEST_F(CudaVsCpu, GemmEmptyDimensions) {
  // k = 0 leaves beta · C (the executor directly: Device's shape check reads [0, n] as 0 columns).
  for (float beta : {0.0f, 0.5f}) {
    Pair a = empty({3, 0}), b = empty({0}), c = random({3, 4}, 4);
    for (int s : {0, 1}) dev(s).executor().gemm(false, false, 1.0f, a[s], b[s], beta, c[s]);
    expect_close(c, 0, 0, "gemm k=0 beta=" + std::to_string(beta));
  }
  // m = 0: nothing to do.
  Pair a = empty({0, 5}), b = random({5, 4}, 5), c = empty({0, 4});
  for (int s : {0, 1}) dev(s).executor().gemm(false, false, 1.0f, a[s], b[s], 0.0f, c[s]);
}

TEST_F(CudaVsCpu, BiasAct) {
  struct Shape {
    int64_t rows, cols;
  };
  for (Shape z : {Shape{33, 65}, Shape{1, 1}, Shape{1, 7}, Shape{1000, 3}})
    for (Activation act : {Activation::none, Activation::relu}) {
      Pair y = random({z.rows, z.cols}, 10), b = random({z.cols}, 11);
      for (int s : {0, 1}) dev(s).bias_act(tag_, y[s], b[s], act);
      expect_close(y, 0, 0, "bias_act rows=" + std::to_string(z.rows) + " cols=" + std::to_string(z.cols));
    }
  Pair y = empty({0, 5}), b = empty({0});
  for (int s : {0, 1}) dev(s).bias_act(tag_, y[s], b[s], Activation::relu);
}

TEST_F(CudaVsCpu, BiasActBackward) {
  struct Shape {
    int64_t rows, cols;
  };
  // 5000 rows: the rows are summed in chunks of 256 and the chunks added in a second kernel.
  for (Shape z : {Shape{33, 65}, Shape{1, 1}, Shape{300, 3}, Shape{2, 1000}, Shape{0, 4}, Shape{5000, 70}})
    for (Activation act : {Activation::none, Activation::relu})
      for (bool accumulate : {false, true}) {
        const std::string what = "bias_act_backward rows=" + std::to_string(z.rows) + " cols=" +
                                 std::to_string(z.cols) + " accumulate=" + std::to_string(accumulate);
        Pair y = random({z.rows, z.cols}, 20), b = random({z.cols}, 21);
        if (z.rows > 0)  // zeros for relu to mask
          for (int s : {0, 1}) dev(s).bias_act(tag_, y[s], b[s], Activation::relu);
        Pair dy = random({z.rows, z.cols}, 22), db = random({z.cols}, 23);
        for (int s : {0, 1}) dev(s).bias_act_backward(tag_, dy[s], y[s], db[s], act, accumulate);
        expect_close(dy, 0, 0, what + " dy");
        expect_close(db, 1e-5, 1e-6 * static_cast<double>(z.rows + 1), what + " dbias");
      }
}

TEST_F(CudaVsCpu, SoftmaxXent) {
  struct Shape {
    int64_t rows, cols;
  };
  for (Shape z : {Shape{64, 10}, Shape{1, 1}, Shape{1, 1000}, Shape{33, 257}, Shape{3000, 2}, Shape{0, 10}})
    for (bool with_grad : {true, false}) {
      const std::string what = "softmax_xent rows=" + std::to_string(z.rows) + " cols=" + std::to_string(z.cols);
      Pair logits = random({z.rows, z.cols}, 30, -8, 8);
      Rng r(31);
      std::vector<int32_t> lab(static_cast<size_t>(z.rows));
      for (int32_t& l : lab) l = static_cast<int32_t>(r.below(static_cast<uint64_t>(z.cols)));
      Pair labels = from(lab, {z.rows}, DType::i32);
      Pair d = with_grad ? empty({z.rows, z.cols}) : Pair{};
      double loss[2];
      for (int s : {0, 1}) loss[s] = dev(s).softmax_xent(tag_, logits[s], labels[s], d[s], 0.5f);
      EXPECT_NEAR(loss[1], loss[0], 1e-10 * (1 + std::fabs(loss[0]))) << what;
      if (with_grad) expect_close(d, 1e-6, 1e-7, what + " dlogits");
    }
}

TEST_F(CudaVsCpu, SoftmaxXentLabelOutOfRangeSaysWhich) {
  Pair logits = random({4, 5}, 40);
  for (std::vector<int32_t> lab : {std::vector<int32_t>{2, 7, 1, -1}, std::vector<int32_t>{0, 1, -3, 9}}) {
    Pair labels = from(lab, {4}, DType::i32);
    Pair d = empty({4, 5});
    std::string message[2];
    for (int s : {0, 1}) {
      try {
        dev(s).softmax_xent(tag_, logits[s], labels[s], d[s]);
        ADD_FAILURE() << "no error for an out-of-range label on side " << s;
      } catch (const Error& e) {
        message[s] = e.what();
      }
    }
    EXPECT_EQ(message[1], message[0]);
    EXPECT_NE(message[1].find("[loss] label"), std::string::npos) << message[1];
    EXPECT_NE(message[1].find("outside [0, 5)"), std::string::npos) << message[1];
  }
  // The device still works afterwards.
  Pair labels = from(std::vector<int32_t>{0, 1, 2, 3}, {4}, DType::i32);
  EXPECT_TRUE(std::isfinite(gpu_->softmax_xent(tag_, logits[1], labels[1], Tensor{})));
}

TEST_F(CudaVsCpu, Mse) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{(1 << 20) + 3}})
    for (bool with_grad : {true, false}) {
      Pair p = random({n}, 50), t = random({n}, 51);
      Pair d = with_grad ? empty({n}) : Pair{};
      double loss[2];
      for (int s : {0, 1}) loss[s] = dev(s).mse(tag_, p[s], t[s], d[s], 2.0f);
      EXPECT_NEAR(loss[1], loss[0], 1e-12 * (1 + std::fabs(loss[0]))) << "mse n=" << n;
      if (with_grad) expect_close(d, 1e-6, 0, "mse dpred n=" + std::to_string(n));
    }
}

TEST_F(CudaVsCpu, Sgd) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4097}})
    for (SgdOptions o : {SgdOptions{0.1f, 0.0f, 0.0f}, SgdOptions{0.1f, 0.9f, 1e-2f}})
      for (bool with_buf : {true, false}) {
        const std::string what = "sgd n=" + std::to_string(n) + " momentum=" + std::to_string(o.momentum);
        Pair w = random({n}, 60), buf = with_buf ? from(std::vector<float>(static_cast<size_t>(n), 0.0f), {n}) : Pair{};
        for (int step = 0; step < 3; ++step) {
          Pair g = random({n}, 61 + static_cast<uint64_t>(step));
          for (int s : {0, 1}) dev(s).sgd(tag_, w[s], g[s], buf[s], o);
        }
        expect_close(w, 1e-5, 1e-6, what + " w");
        if (with_buf) expect_close(buf, 1e-5, 1e-6, what + " buf");
      }
}

TEST_F(CudaVsCpu, Adam) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4097}})
    for (float wd : {0.0f, 0.01f}) {
      const std::string what = "adam n=" + std::to_string(n) + " wd=" + std::to_string(wd);
      AdamOptions o;
      o.weight_decay = wd;
      Pair w = random({n}, 70), m = from(std::vector<float>(static_cast<size_t>(n), 0.0f), {n}),
           v = from(std::vector<float>(static_cast<size_t>(n), 0.0f), {n});
      for (int64_t t = 1; t <= 3; ++t) {
        Pair g = random({n}, 71 + static_cast<uint64_t>(t));
        for (int s : {0, 1}) dev(s).adam(tag_, w[s], g[s], m[s], v[s], o, t);
      }
      expect_close(w, 1e-5, 1e-6, what + " w");
      expect_close(m, 1e-5, 1e-7, what + " m");
      expect_close(v, 1e-5, 1e-8, what + " v");
    }
}

TEST_F(CudaVsCpu, AxpyAndScale) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1023}, int64_t{3 << 20}}) {
    Pair x = random({n}, 80), y = random({n}, 81);
    for (int s : {0, 1}) dev(s).axpy(tag_, -0.75f, x[s], y[s]);
    expect_close(y, 1e-6, 1e-7, "axpy n=" + std::to_string(n));
    for (int s : {0, 1}) dev(s).scale(tag_, 3.5f, x[s]);
    expect_close(x, 0, 0, "scale n=" + std::to_string(n));
  }
}

TEST_F(CudaVsCpu, FillEveryDtype) {
  const float specials[] = {0.1f, -0.0f, 65519.0f, 65520.0f, 1e-8f, 3.0e38f, INFINITY, NAN, 7.9f, -3.5f};
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}})
    for (float value : specials) {
      const std::string what = "fill n=" + std::to_string(n) + " value=" + std::to_string(value);
      Pair f32 = empty({n}), f16 = empty({n}, DType::f16), bf16 = empty({n}, DType::bf16);
      for (int s : {0, 1})
        for (const Tensor* t : {&f32[s], &f16[s], &bf16[s]}) dev(s).fill(tag_, *t, value);
      expect_same_bytes<uint32_t>(f32, what + " f32");
      expect_same_bytes<uint16_t>(f16, what + " f16");
      expect_same_bytes<uint16_t>(bf16, what + " bf16");
      if (std::isfinite(value) && std::fabs(value) < 1e9f) {  // float -> int32 is defined there
        Pair i32 = empty({n}, DType::i32);
        for (int s : {0, 1}) dev(s).fill(tag_, i32[s], value);
        expect_same_bytes<int32_t>(i32, what + " i32");
      }
    }
}

TEST_F(CudaVsCpu, CastsAreBitEqual) {
  // f32 -> f16 / bf16: rounding ties, overflow, subnormals, nan payloads, and random bit patterns.
  std::vector<uint32_t> words = {
      bits_of(0.0f), bits_of(-0.0f), bits_of(1.0f), bits_of(0.1f), bits_of(1.0f / 3), bits_of(65504.0f),
      bits_of(65505.0f), bits_of(65519.0f), bits_of(65520.0f), bits_of(-1e6f), bits_of(6.0e-5f),
      bits_of(5.9604645e-8f) /* 2^-24 */, bits_of(2.9802322e-8f) /* 2^-25: tie to 0 */, bits_of(3.0e-8f),
      0x00000001u /* f32 subnormal */, bits_of(std::numeric_limits<float>::min()),
      bits_of(std::numeric_limits<float>::max()), bits_of(INFINITY), bits_of(-INFINITY), 0x7fc00000u,
      0xffc00000u, 0x7fa00001u /* signalling nan */, 0x7fc12345u, 0x3f808000u /* bf16 tie, to even */,
      0x3f818000u /* bf16 tie, up */, 0x3f800001u, 0x7f7fffffu, 0x7f7f8000u /* bf16 overflow tie */};
  Rng r(90);
  for (int i = 0; i < 200000; ++i) words.push_back(static_cast<uint32_t>(r.next_u64()));
  const int64_t n = static_cast<int64_t>(words.size());
  Pair f32 = from(words, {n}, DType::f32);
  for (DType to : {DType::f16, DType::bf16}) {
    Pair out = empty({n}, to);
    for (int s : {0, 1}) dev(s).cast(tag_, f32[s], out[s]);
    expect_same_bytes<uint16_t>(out, std::string("cast f32 -> ") + dtype_name(to));
  }
  // Every 16-bit pattern to f32, to the other half type, and to its own type (a copy).
  std::vector<uint16_t> halves(65536);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);
  for (DType from_type : {DType::f16, DType::bf16}) {
    Pair h = from(halves, {65536}, from_type);
    for (DType to : {DType::f32, DType::f16, DType::bf16}) {
      Pair out = empty({65536}, to);
      for (int s : {0, 1}) dev(s).cast(tag_, h[s], out[s]);
      const std::string what = std::string("cast ") + dtype_name(from_type) + " -> " + dtype_name(to);
      if (to == DType::f32) expect_same_bytes<uint32_t>(out, what);
      else expect_same_bytes<uint16_t>(out, what);
    }
  }
  // n = 0 and 1
  for (int64_t m : {int64_t{0}, int64_t{1}}) {
    Pair src = random({m}, 91), out = empty({m}, DType::bf16);
    for (int s : {0, 1}) dev(s).cast(tag_, src[s], out[s]);
    expect_same_bytes<uint16_t>(out, "cast n=" + std::to_string(m));
  }
}

TEST_F(CudaVsCpu, HasNonFinite) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{(1 << 22) + 1}}) {
    Pair x = random({n}, 100);
    EXPECT_FALSE(gpu_->has_non_finite(tag_, x[1])) << "n=" << n;
    if (n == 0) continue;
    Rng r(101);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = r.uniform(-1, 1);
    for (float bad : {INFINITY, -INFINITY, NAN})
      for (size_t at : {size_t{0}, v.size() - 1, v.size() / 2}) {
        std::vector<float> w = v;
        w[at] = bad;
        Pair y = from(w, {n});
        for (int s : {0, 1})
          EXPECT_TRUE(dev(s).has_non_finite(tag_, y[s]))
              << "n=" << n << " bad=" << bad << " at " << at << " side " << s;
      }
  }
}

// ---- mixed precision: f16 and bf16 ----------------------------------------------------------

TEST_F(CudaVsCpu, HalfGemmAccumulatesInF32) {
  // Both sides multiply the same half values and sum in f32 (cublasGemmEx with CUBLAS_COMPUTE_32F;
  // sgemm on the exact f32 values), in different orders, then round once into C: they agree to
  // the f32 sums' difference (≈ k · 2^-24 relative) plus one unit of C's dtype where that tips a
  // rounding.
  struct Size {
    int64_t m, n, k;
  };
  for (DType d : {DType::f16, DType::bf16})
    for (Size z : {Size{37, 19, 53}, Size{1, 1, 1}, Size{128, 96, 300}})
      for (DType c_dtype : {d, DType::f32})
        for (int ta = 0; ta < 2; ++ta)
          for (int tb = 0; tb < 2; ++tb)
            for (float beta : {0.0f, 0.5f}) {
              Pair a = random_half(ta ? std::vector<int64_t>{z.k, z.m} : std::vector<int64_t>{z.m, z.k}, d, 1);
              Pair b = random_half(tb ? std::vector<int64_t>{z.n, z.k} : std::vector<int64_t>{z.k, z.n}, d, 2);
              Pair c = c_dtype == DType::f32 ? random({z.m, z.n}, 3) : random_half({z.m, z.n}, c_dtype, 3);
              for (int s : {0, 1}) dev(s).gemm(tag_, ta, tb, a[s], b[s], c[s], beta, 1.5f);
              expect_within_ulps(c, c_dtype == DType::f32 ? 0 : 1, 1e-5 * static_cast<double>(z.k),
                                 std::string("gemm ") + dtype_name(d) + " → " + dtype_name(c_dtype) +
                                     " m=" + std::to_string(z.m) + " n=" + std::to_string(z.n) +
                                     " k=" + std::to_string(z.k) + " ta=" + std::to_string(ta) +
                                     " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta));
            }
  // k = 0 on a half C: beta · C, rounded.
  for (DType d : {DType::f16, DType::bf16}) {
    Pair a = empty({3, 0}, d), b = empty({0}, d), c = random_half({3, 4}, d, 4);
    for (int s : {0, 1}) dev(s).executor().gemm(false, false, 1.0f, a[s], b[s], 0.5f, c[s]);
    expect_same_bytes<uint16_t>(c, std::string("gemm k=0 ") + dtype_name(d));
  }
}

TEST_F(CudaVsCpu, HalfBiasActAndBackward) {
  for (DType d : {DType::f16, DType::bf16})
    for (Activation act : {Activation::none, Activation::relu}) {
      const std::string what = std::string(dtype_name(d)) + (act == Activation::relu ? " relu" : " none");
      // Forward: the same f32 sum of two half values, rounded once: the same bits.
      Pair y = random_half({33, 65}, d, 10, -2, 2), b = random_half({65}, d, 11);
      for (int s : {0, 1}) dev(s).bias_act(tag_, y[s], b[s], act);
      expect_same_bytes<uint16_t>(y, "bias_act " + what);
      // Backward: dy masked (the same bits); dbias summed in f32 in another order, rounded once.
      for (bool accumulate : {false, true}) {
        Pair dy = random_half({300, 65}, d, 12), db = random_half({65}, d, 13);
        Pair yy = random_half({300, 65}, d, 14, -1, 1);
        for (int s : {0, 1}) dev(s).bias_act_backward(tag_, dy[s], yy[s], db[s], act, accumulate);
        expect_same_bytes<uint16_t>(dy, "bias_act_backward dy " + what);
        expect_within_ulps(db, 1, 1e-6 * 300,
                           "bias_act_backward dbias " + what + " accumulate=" + std::to_string(accumulate));
      }
    }
}

TEST_F(CudaVsCpu, HalfSoftmaxXent) {
  for (DType d : {DType::f16, DType::bf16}) {
    const int64_t rows = 64, cols = 10;
    Pair logits = random_half({rows, cols}, d, 30, -8, 8);
    Rng r(31);
    std::vector<int32_t> lab(static_cast<size_t>(rows));
    for (int32_t& l : lab) l = static_cast<int32_t>(r.below(static_cast<uint64_t>(cols)));
    Pair labels = from(lab, {rows}, DType::i32);
    Pair dl = empty({rows, cols}, d);
    double loss[2];
    for (int s : {0, 1}) loss[s] = dev(s).softmax_xent(tag_, logits[s], labels[s], dl[s], 65536.0f);  // a loss scale
    EXPECT_NEAR(loss[1], loss[0], 1e-10 * (1 + std::fabs(loss[0]))) << dtype_name(d);
    expect_within_ulps(dl, 1, 0, std::string("softmax_xent dlogits ") + dtype_name(d));
  }
}

TEST_F(CudaVsCpu, HalfAxpyScaleAndNonFinite) {
  for (DType d : {DType::f16, DType::bf16}) {
    const std::string name = dtype_name(d);
    // A half gradient added into an f32 master gradient, and into a half one.
    Pair x = random_half({1001}, d, 80), y = random({1001}, 81);
    for (int s : {0, 1}) dev(s).axpy(tag_, 1.0f, x[s], y[s]);
    expect_close(y, 1e-6, 1e-7, "axpy " + name + " → f32");
    Pair yh = random_half({1001}, d, 82);
    for (int s : {0, 1}) dev(s).axpy(tag_, -0.75f, x[s], yh[s]);
    expect_within_ulps(yh, 1, 0, "axpy " + name + " → " + name);
    // Unscaling by a power of two is exact.
    for (int s : {0, 1}) dev(s).scale(tag_, 0.5f, x[s]);
    expect_same_bytes<uint16_t>(x, "scale " + name);
    EXPECT_FALSE(gpu_->has_non_finite(tag_, x[1])) << name;
    std::vector<uint16_t> bits = host<uint16_t>(0, x[0]);
    for (uint16_t bad : {uint16_t(d == DType::f16 ? 0x7c00 : 0x7f80), uint16_t(d == DType::f16 ? 0xfe00 : 0xffc0)}) {
      std::vector<uint16_t> w = bits;
      w[500] = bad;  // +inf, then a nan
      Pair z = from(w, {1001}, d);
      for (int s : {0, 1}) EXPECT_TRUE(dev(s).has_non_finite(tag_, z[s])) << name << " side " << s;
    }
  }
}

TEST_F(CudaVsCpu, HalfTrainingStepMatchesTheCpu) {
  // One fp16 step of a small Model, from the same weights and batch: the layers, the loss and the
  // casts into the f32 master gradients, end to end on the GPU against the cpu.
  const ModelSpec spec = ModelSpec::parse("mlp:32-24-16-8");
  const HostWeights w = init_weights(spec, 5);
  Rng r(6);
  std::vector<float> xv(64 * 32);
  for (float& v : xv) v = r.uniform(-1, 1);
  std::vector<int32_t> lab(64);
  for (int32_t& l : lab) l = static_cast<int32_t>(r.below(8));
  std::vector<std::vector<float>> grads[2];
  for (int s : {0, 1}) {
    Model m(dev(s), w);
    m.set_precision(DType::f16);
    m.refresh_half_weights();
    Tensor x = dev(s).empty({64, 32}, DType::f32, MemoryCategory::activations, "x");
    Tensor y = dev(s).empty({64}, DType::i32, MemoryCategory::activations, "y");
    dev(s).upload(tag_, x, xv.data());
    dev(s).upload(tag_, y, lab.data());
    Tensor logits = m.forward(x);
    Tensor dl = dev(s).empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dl");
    dev(s).softmax_xent(tag_, logits, y, dl, 1024.0f);
    m.backward(dl);
    for (Parameter* p : m.parameters()) grads[s].push_back(host<float>(s, p->grad));
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    double diff = 0, scale = 0;
    for (size_t j = 0; j < grads[0][i].size(); ++j) {
      diff = std::max(diff, std::fabs(static_cast<double>(grads[1][i][j]) - grads[0][i][j]));
      scale = std::max(scale, std::fabs(static_cast<double>(grads[0][i][j])));
    }
    EXPECT_LE(diff, 4e-3 * scale) << "parameter " << i;  // a few f16 units: sums in other orders
  }
}

TEST_F(CudaVsCpu, CopiesRoundTripAndViews) {
  // Odd byte counts through the host link.
  std::vector<uint16_t> h{1, 2, 3};
  Pair half = from(h, {3}, DType::f16);
  expect_same_bytes<uint16_t>(half, "upload/download 6 bytes");
  // Device to device on the same GPU, into a row slice of a larger tensor.
  Pair src = random({5, 7}, 110), dst = from(std::vector<float>(10 * 7, -1.0f), {10, 7});
  for (int s : {0, 1}) dev(s).copy(tag_, src[s], dst[s].rows_slice(3, 5));
  expect_close(dst, 0, 0, "copy into a row slice");
  // From a cpu device's tensor (host memory) onto the GPU.
  Tensor g = gpu_->empty({5, 7}, DType::f32, MemoryCategory::workspace, "test");
  gpu_->copy(tag_, src[0], g);
  EXPECT_EQ(host<float>(1, g), host<float>(0, src[0]));
  // Empty tensors.
  Pair e = empty({0});
  for (int s : {0, 1}) dev(s).copy(tag_, e[s], e[s]);
}

TEST_F(CudaVsCpu, PeerCopyBetweenGpus) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "one CUDA device: a peer copy needs two";
  auto gpus = make_devices(options(DeviceKind::cuda, 2));
  Rng r(120);
  std::vector<float> v(100003);
  for (float& f : v) f = r.uniform(-1, 1);
  Tensor a = gpus[0]->empty({100003}, DType::f32, MemoryCategory::workspace, "a");
  Tensor b = gpus[1]->empty({100003}, DType::f32, MemoryCategory::workspace, "b");
  gpus[0]->upload(tag_, a, v.data());
  gpus[0]->scale(tag_, 2.0f, a);  // still queued work on gpu 0 must land before the copy reads a
  gpus[1]->copy(tag_, a, b);
  std::vector<float> back(v.size());
  gpus[1]->download(tag_, back.data(), b);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(back[i], 2.0f * v[i]) << i;
}

TEST_F(CudaVsCpu, ClockMeasuresOnTheGpu) {
  Clock& clock = gpu_->clock();
  EXPECT_FALSE(clock.simulated());
  Pair a = random({1024, 1024}, 130), c = empty({1024, 1024});
  Interval last{};
  for (int i = 0; i < 3; ++i) {
    const Interval now = clock.run(Lane::compute, 0, OpCost{}, [&] {
      gpu_->executor().gemm(false, false, 1.0f, a[1], a[1], 0.0f, c[1]);
    });
    EXPECT_GT(now.end_ns, now.begin_ns) << "a 2 GFLOP gemm takes time";
    EXPECT_GE(now.begin_ns, last.end_ns) << "ops on one stream do not overlap";
    EXPECT_GE(now.begin_ns, 0);
    last = now;
  }
  // Wall time now is past the last op's end (allowing for the one-off anchoring error).
  EXPECT_GE(clock.now_ns() + 1'000'000, last.end_ns);
  // An empty op is fine.
  const Interval empty_op = clock.run(Lane::compute, 0, OpCost{}, nullptr);
  EXPECT_GE(empty_op.end_ns, empty_op.begin_ns);
}

TEST_F(CudaVsCpu, ExecutorKnowsItsCapacity) {
  EXPECT_GT(gpu_->executor().capacity_bytes(), int64_t{1} << 30);
  EXPECT_TRUE(cuda_available());
}

TEST_F(CudaVsCpu, BadOrdinalsAndClocksAreUsageErrors) {
  for (int ordinal : {-1, cuda_device_count()}) {
    try {
      make_cuda_executor(ordinal);
      ADD_FAILURE() << "no error for ordinal " << ordinal;
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[cuda] ", 0), 0u) << e.what();
    }
  }
  CpuExecutor cpu_executor;
  EXPECT_THROW(make_cuda_clock(cpu_executor, std::chrono::steady_clock::now()), UsageError);
}


// ---- the ConvNet's ops ------------------------------------------------------------------------

TEST_F(CudaVsCpu, Conv2dForwardAndBackward) {
  const std::vector<Conv2dGeometry> cases = {
      {3, 3, 9, 7, 5, 3, 1, 1},      // "same" padding
      {2, 2, 9, 8, 4, 3, 2, 0},      // stride 2, no padding
      {2, 1, 28, 28, 16, 5, 1, 2},   // the lecture's first conv
      {13, 16, 28, 28, 32, 5, 1, 2}, // more images than a chunk holds
      {2, 2, 5, 5, 3, 2, 3, 1},      // stride past the kernel: pixels no window reads
  };
  for (const Conv2dGeometry& g : cases)
    for (Activation act : {Activation::none, Activation::relu})
      for (bool accumulate : {false, true}) {
        const std::string what = "conv2d N" + std::to_string(g.batch) + " C" + std::to_string(g.in_channels) + " " +
                                 std::to_string(g.height) + "x" + std::to_string(g.width) + " K" +
                                 std::to_string(g.kernel) + " S" + std::to_string(g.stride) + " P" +
                                 std::to_string(g.padding) + (act == Activation::relu ? " relu" : "") +
                                 (accumulate ? " accumulate" : "");
        const int64_t in = g.in_channels * g.height * g.width, out = g.out_channels * g.pixels();
        Pair x = random({g.batch, in}, 20), w = random({g.out_channels, g.in_channels, g.kernel, g.kernel}, 21);
        Pair b = random({g.out_channels}, 22), y = empty({g.batch, out});
        for (int s : {0, 1}) dev(s).conv2d(tag_, x[s], w[s], b[s], y[s], g, act);
        expect_close(y, 1e-5, 1e-5 * static_cast<double>(g.patch()), what + " y");
        Pair dy = random({g.batch, out}, 23), dx = empty({g.batch, in});
        Pair dw = random({g.out_channels, g.in_channels, g.kernel, g.kernel}, 24), db = random({g.out_channels}, 25);
        for (int s : {0, 1}) dev(s).conv2d_backward(tag_, x[s], y[s], dy[s], w[s], dw[s], db[s], dx[s], g, act, accumulate);
        expect_close(dy, 0, 0, what + " masked dy");
        const double terms = static_cast<double>(g.batch * g.pixels());
        expect_close(db, 1e-5, 1e-6 * terms, what + " db");
        expect_close(dw, 1e-5, 1e-5 * terms, what + " dW");
        expect_close(dx, 1e-5, 1e-5 * static_cast<double>(g.out_channels * g.kernel * g.kernel), what + " dx");
      }
}

TEST_F(CudaVsCpu, MaxPool2dIsBitEqual) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto [k, stride] : std::vector<std::pair<int64_t, int64_t>>{{2, 2}, {3, 2}, {2, 1}, {3, 3}}) {
    const Pool2dGeometry g{3, 4, 11, 9, k, stride};
    const int64_t in = g.channels * g.height * g.width, out = g.channels * g.out_height() * g.out_width();
    // Values from a few levels, so windows tie; and a NaN.
    Rng r(30 + static_cast<uint64_t>(k));
    std::vector<float> v(static_cast<size_t>(g.batch * in));
    for (float& f : v) f = std::floor(r.uniform(0, 4));
    v[17] = nan;
    Pair x = from(v, {g.batch, in}), y = empty({g.batch, out}), idx = empty({g.batch, out}, DType::i32);
    for (int s : {0, 1}) dev(s).max_pool2d(tag_, x[s], y[s], idx[s], g);
    const std::string what = "max_pool2d k" + std::to_string(k) + " s" + std::to_string(stride);
    expect_close(y, 0, 0, what + " y");
    expect_same_bytes<int32_t>(idx, what + " indices");
    Pair dy = random({g.batch, out}, 31), dx = empty({g.batch, in});
    for (int s : {0, 1}) dev(s).max_pool2d_backward(tag_, dy[s], idx[s], dx[s], g);
    expect_same_bytes<float>(dx, what + " dx");  // the same additions in the same order
  }
}

TEST_F(CudaVsCpu, DropoutHasTheSameMask) {
  for (float p : {0.0f, 0.1f, 0.5f, 1.0f}) {
    DropoutMask m;
    m.p = p;
    m.seed = 77;
    m.step = 3;
    m.first_row = 1000;
    if (p == 0.5f) {  // a DDP rank's tokens: samples 1, 3, 5, … of 3 rows each
      m.first_row = 6;
      m.sample_offset = 1;
      m.sample_stride = 2;
      m.rows_per_sample = 3;
    }
    Pair x = random({37, 129}, 40), y = empty({37, 129});
    for (int s : {0, 1}) dev(s).dropout(tag_, x[s], y[s], m);
    expect_same_bytes<float>(y, "dropout p=" + std::to_string(p));
    for (int s : {0, 1}) dev(s).dropout(tag_, x[s], x[s], m);  // in place, as backward runs it
    expect_same_bytes<float>(x, "dropout in place p=" + std::to_string(p));
  }
}

// ---- transformer ops (f32): LayerNorm, GELU, embedding, causal attention ----

TEST_F(CudaVsCpu, LayerNormAndBackward) {
  struct Shape {
    int64_t rows, cols;
  };
  for (Shape z : {Shape{7, 33}, Shape{1, 1}, Shape{300, 768}, Shape{2, 1025}})
    for (bool accumulate : {false, true}) {
      const std::string what = "layer_norm rows=" + std::to_string(z.rows) + " cols=" + std::to_string(z.cols);
      Pair x = random({z.rows, z.cols}, 50, -3, 3), g = random({z.cols}, 51, 0.5f, 1.5f), b = random({z.cols}, 52);
      Pair y = empty({z.rows, z.cols}), mean = empty({z.rows}), rstd = empty({z.rows});
      for (int s : {0, 1}) dev(s).layer_norm(tag_, x[s], g[s], b[s], y[s], mean[s], rstd[s]);
      expect_close(y, 1e-5, 1e-5, what + " y");
      expect_close(mean, 1e-6, 1e-6, what + " mean");
      expect_close(rstd, 1e-6, 1e-6, what + " rstd");
      Pair dy = random({z.rows, z.cols}, 53), dx = empty({z.rows, z.cols});
      Pair dg = random({z.cols}, 54), db = random({z.cols}, 55);
      for (int s : {0, 1}) dev(s).layer_norm_backward(tag_, dy[s], x[s], g[s], mean[s], rstd[s], dx[s], dg[s], db[s], accumulate);
      expect_close(dx, 1e-4, 1e-5, what + " dx");
      expect_close(dg, 1e-5, 1e-5, what + " dgamma");
      expect_close(db, 1e-5, 1e-5, what + " dbeta");
    }
}

TEST_F(CudaVsCpu, GeluAndBackward) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100003}}) {
    Pair x = random({n}, 60, -6, 6), y = empty({n}), dy = random({n}, 61);
    for (int s : {0, 1}) dev(s).gelu(tag_, x[s], y[s]);
    expect_close(y, 1e-6, 1e-7, "gelu n=" + std::to_string(n));
    for (int s : {0, 1}) dev(s).gelu_backward(tag_, dy[s], x[s], y[s], dy[s]);
    expect_close(dy, 1e-5, 1e-6, "gelu_backward n=" + std::to_string(n));
  }
}

TEST_F(CudaVsCpu, EmbeddingAndItsDeterministicScatter) {
  const int64_t B = 4, T = 33, Vocab = 300, C = 70;
  Rng r(70);
  std::vector<float> ids(static_cast<size_t>(B * T));
  for (float& id : ids) id = static_cast<float>(r.below(40));  // few ids: many tokens share a row
  Pair tids = from(ids, {B, T}), wte = random({Vocab, C}, 71), wpe = random({T, C}, 72), out = empty({B * T, C});
  for (int s : {0, 1}) dev(s).embedding(tag_, tids[s], wte[s], wpe[s], out[s]);
  expect_same_bytes<float>(out, "embedding");
  Pair dout = random({B * T, C}, 73), dwte = random({Vocab, C}, 74), dwpe = random({T, C}, 75);
  for (bool accumulate : {false, true}) {
    for (int s : {0, 1}) dev(s).embedding_backward(tag_, dout[s], tids[s], dwte[s], dwpe[s], accumulate);
    // The tokens are added in the host's order: the same bits.
    expect_same_bytes<float>(dwte, "embedding dwte");
    expect_same_bytes<float>(dwpe, "embedding dwpe");
  }
  Pair bad = from(std::vector<float>{1, 2, 300, 4}, {2, 2});
  Pair out2 = empty({4, C}), wpe2 = random({2, C}, 76);
  try {
    dev(1).embedding(tag_, bad[1], wte[1], wpe2[1], out2[1]);
    ADD_FAILURE() << "id 300 of 300 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("at batch row 1, position 0 is not a whole number in [0, 300)"), std::string::npos)
        << e.message();
  }
}

TEST_F(CudaVsCpu, CausalAttentionAndBackward) {
  struct Shape {
    int64_t batch, seq, heads, hidden;
  };
  for (Shape z : {Shape{2, 5, 2, 6}, Shape{1, 1, 1, 1}, Shape{3, 64, 4, 128}, Shape{2, 130, 12, 96}}) {
    const std::string what = "attention B=" + std::to_string(z.batch) + " T=" + std::to_string(z.seq) +
                             " H=" + std::to_string(z.heads) + " C=" + std::to_string(z.hidden);
    const int64_t rows = z.batch * z.seq;
    Pair qkv = random({rows, 3 * z.hidden}, 80, -2, 2), probs = empty({z.batch * z.heads * z.seq, z.seq});
    Pair y = empty({rows, z.hidden});
    for (int s : {0, 1}) dev(s).attention(tag_, qkv[s], z.heads, probs[s], y[s]);
    expect_close(probs, 1e-5, 1e-6, what + " P");
    expect_close(y, 1e-4, 1e-5, what + " y");
    Pair dy = random({rows, z.hidden}, 81), dscores = empty(probs[0].shape()), dqkv = empty({rows, 3 * z.hidden});
    for (int s : {0, 1}) dev(s).attention_backward(tag_, dy[s], qkv[s], probs[s], z.heads, dscores[s], dqkv[s]);
    expect_close(dqkv, 1e-4, 1e-4, what + " dqkv");
  }
}

TEST_F(CudaVsCpu, HalfAttentionAndGelu) {
  const int64_t B = 2, T = 40, H = 4, C = 64;
  for (DType half : {DType::f16, DType::bf16}) {
    const std::string what = std::string(" in ") + dtype_name(half);
    Pair qkv = random_half({B * T, 3 * C}, half, 110, -2, 2);
    Pair probs = empty({B * H * T, T}, half), y = empty({B * T, C}, half);
    for (int s : {0, 1}) dev(s).attention(tag_, qkv[s], H, probs[s], y[s]);
    // S and P are rounded to half on both sides; an f32 sum in another order may round one unit apart.
    expect_within_ulps(probs, 4, 1e-3, "P" + what);
    expect_within_ulps(y, 8, 1e-3, "y" + what);
    Pair dy = random_half({B * T, C}, half, 111), dscores = empty({B * H * T, T}, half), dqkv = empty({B * T, 3 * C}, half);
    for (int s : {0, 1}) dev(s).attention_backward(tag_, dy[s], qkv[s], probs[s], H, dscores[s], dqkv[s]);
    expect_within_ulps(dqkv, 16, 2e-3, "dqkv" + what);
    Pair x = random_half({1000}, half, 112, -5, 5), g = empty({1000}, half), d = random_half({1000}, half, 113);
    for (int s : {0, 1}) dev(s).gelu(tag_, x[s], g[s]);
    expect_within_ulps(g, 1, 1e-6, "gelu" + what);
    for (int s : {0, 1}) dev(s).gelu_backward(tag_, d[s], x[s], g[s], d[s]);
    expect_within_ulps(d, 2, 1e-6, "gelu_backward" + what);
  }
}

// A small GPT's step, layer by layer, on both devices from the same weights and tokens: the loss,
// the input gradient of every layer and every parameter's gradient (recompute on in one block).
TEST_F(CudaVsCpu, SmallGptStepMatchesTheCpu) {
  const int64_t B = 3, T = 32, C = 64, H = 4, Vocab = 97;
  std::unique_ptr<TokenEmbedding> emb[2];
  std::unique_ptr<TransformerBlock> blocks[2][2];
  std::unique_ptr<LmHead> head[2];
  std::vector<Layer*> layers[2];
  for (int s : {0, 1}) {
    emb[s] = std::make_unique<TokenEmbedding>(dev(s), 0, Vocab, T, C);
    for (int b = 0; b < 2; ++b) blocks[s][b] = std::make_unique<TransformerBlock>(dev(s), 1 + b, b, C, H, T);
    blocks[s][1]->set_recompute(true);
    head[s] = std::make_unique<LmHead>(dev(s), 3, C, Vocab);
    layers[s] = {emb[s].get(), blocks[s][0].get(), blocks[s][1].get(), head[s].get()};
  }
  uint64_t seed = 90;
  for (size_t l = 0; l < layers[0].size(); ++l)
    for (size_t p = 0; p < layers[0][l]->parameters().size(); ++p) {
      Parameter* cpu_p = layers[0][l]->parameters()[p];
      Rng r(seed++);
      std::vector<float> v(static_cast<size_t>(cpu_p->value.numel()));
      for (float& x : v) x = cpu_p->name.find("ln") != std::string::npos ? r.uniform(0.5f, 1.5f) : r.uniform(-0.2f, 0.2f);
      for (int s : {0, 1}) dev(s).upload(tag_, layers[s][l]->parameters()[p]->value, v.data());
    }
  Rng r(99);
  std::vector<float> ids(static_cast<size_t>(B * T));
  std::vector<int32_t> labels(static_cast<size_t>(B * T));
  for (float& id : ids) id = static_cast<float>(r.below(Vocab));
  for (int32_t& l : labels) l = static_cast<int32_t>(r.below(Vocab));
  Pair tids = from(ids, {B, T}), tlabels = from(labels, {B * T}, DType::i32);
  Pair h;
  for (int s : {0, 1}) {
    h.t[s] = tids[s];
    for (Layer* layer : layers[s]) h.t[s] = layer->forward(h.t[s]);
  }
  expect_close(h, 1e-4, 1e-4, "logits");
  Pair dlogits = empty({B * T, Vocab});
  double loss[2];
  for (int s : {0, 1}) loss[s] = dev(s).softmax_xent(tag_, h[s], tlabels[s], dlogits[s]);
  EXPECT_NEAR(loss[1], loss[0], 1e-5);
  Pair g = dlogits;
  for (int l = static_cast<int>(layers[0].size()) - 1; l >= 1; --l) {
    for (int s : {0, 1}) g.t[s] = layers[s][static_cast<size_t>(l)]->backward(g.t[s], true);
    expect_close(g, 1e-3, 1e-5, "dx of layer " + std::to_string(l));
  }
  for (int s : {0, 1}) layers[s][0]->backward(g.t[s], false);
  for (size_t l = 0; l < layers[0].size(); ++l)
    for (size_t p = 0; p < layers[0][l]->parameters().size(); ++p) {
      Pair grad;
      for (int s : {0, 1}) grad.t[s] = layers[s][l]->parameters()[p]->grad;
      expect_close(grad, 1e-3, 1e-5, layers[0][l]->parameters()[p]->name + ".grad");
    }
}

}  // namespace

#else  // built without CUDA

TEST(CudaExecutor, Skipped) { GTEST_SKIP() << "built without CUDA (configure where nvcc and cuBLAS are found)"; }

#endif
