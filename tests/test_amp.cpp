// Mixed precision (--amp fp16 | bf16): the half ops of the executor against the f32 reference;
// the loss scaler's rules (GradScaler's defaults) and the ranks' agreement on an overflow; every
// synchronous strategy trained 5 steps in fp16 and bf16 against the same run in fp32; a real
// overflow (initial scale 2^40) skipping the step on single and on ddp's two ranks together;
// checkpoints that resume the scaler exactly; the activation memory halved, in closed form from
// the ledger; the sim pricing a half GEMM at the profile's f16 peak; and the options refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/comm/threads/threads_group.h"
#include "core/device/device.h"
#include "core/error.h"
#include "core/kernels/cpu_kernels.h"
#include "core/nn/loss_scaler.h"
#include "core/nn/model.h"
#include "core/rng.h"
#include "run/train.h"
#include "support/errors.h"
#include "support/gemm_formula.h"
#include "support/small_config.h"

using namespace scalelab;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

float round_to(DType d, float v) {
  return d == DType::f16 ? half_to_float(float_to_half(v)) : d == DType::bf16 ? bf16_to_float(float_to_bf16(v)) : v;
}

// One unit in the last place of `v` in dtype d (10 mantissa bits for f16, 7 for bf16).
double ulp(DType d, double v) {
  const int bits = d == DType::f16 ? 10 : 7;
  const double a = std::max(std::fabs(v), d == DType::f16 ? 6.103515625e-05 : 1.1754943508222875e-38);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - bits);
}

std::vector<float> random_values(size_t n, uint64_t seed, float lo = -1, float hi = 1) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = r.uniform(lo, hi);
  return v;
}

struct HalfOps : testing::TestWithParam<DType> {
  std::unique_ptr<Device> dev = std::move(make_devices(DeviceOptions{})[0]);
  OpTag tag{"test"};

  // A tensor of dtype d holding round(v): the half values the op reads.
  Tensor make(std::vector<int64_t> shape, DType d, const std::vector<float>& v) {
    Tensor f = dev->empty(shape, DType::f32, MemoryCategory::workspace, "f32");
    dev->upload(tag, f, v.data());
    if (d == DType::f32) return f;
    Tensor t = dev->empty(shape, d, MemoryCategory::workspace, "half");
    dev->cast(tag, f, t);
    return t;
  }
  std::vector<float> read(const Tensor& t) {
    Tensor f = t;
    if (t.dtype() != DType::f32) {
      f = dev->empty(t.shape(), DType::f32, MemoryCategory::workspace, "f32");
      dev->cast(tag, t, f);
    }
    std::vector<float> v(static_cast<size_t>(f.numel()));
    dev->download(tag, v.data(), f);
    return v;
  }
  static std::vector<float> rounded(DType d, std::vector<float> v) {
    for (float& x : v) x = round_to(d, x);
    return v;
  }
};

std::string dtype_case(const testing::TestParamInfo<DType>& info) { return dtype_name(info.param); }

// A checkpoint at the end of a run is the easiest way to its whole final state, on any strategy.
struct RunOutcome {
  TrainResult result;
  TrainingState state;
  std::vector<Event> events;
};

RunOutcome run(TrainConfig c) {
  static int counter = 0;
  const fs::path path = fs::temp_directory_path() /
                        ("scalelab-amp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".ckpt");
  c.checkpoint_path = path.string();
  EventBus bus;
  RunOutcome out;
  out.result = train(c, bus);
  out.state = load_checkpoint(path.string()).state;
  out.events = bus.events();
  fs::remove(path);
  return out;
}

// Small enough to be quick, 4 layers for the pipelines: test_parallel's model and data.
// Fashion-MNIST-sized inputs, so half-precision GEMMs are of a realistic shape.
TrainConfig small_config(const std::string& strategy, int devices, DeviceKind kind) {
  TrainConfig c = test::small_config(strategy, devices, kind);
  c.model = "mlp:784-64-64-32-10";
  c.synthetic_train = 1024;
  c.synthetic_test = 256;
  c.batch = 128;
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The executor's half ops against the f32 reference. A half op reads half values, multiplies and
// adds in f32 and rounds once at the output: the reference computes in double on the same half
// values and rounds once, so the two agree to one unit in the last place of the half result (a
// tie may fall either way between an f32 and a double sum).

TEST_P(HalfOps, GemmEveryTransposeAndBeta) {
  const DType d = GetParam();
  const int64_t m = 37, n = 19, k = 53;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (DType c_dtype : {d, DType::f32})
        for (float beta : {0.0f, 0.5f}) {
          const auto av = rounded(d, random_values(static_cast<size_t>(m * k), 1));
          const auto bv = rounded(d, random_values(static_cast<size_t>(k * n), 2));
          const auto cv = rounded(c_dtype, random_values(static_cast<size_t>(m * n), 3));
          Tensor a = make(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, d, av);
          Tensor b = make(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, d, bv);
          Tensor c = make({m, n}, c_dtype, cv);
          dev->gemm(tag, ta, tb, a, b, c, beta, 1.5f);
          std::vector<float> ref = cv;
          kernels::gemm_naive(ta, tb, m, n, k, 1.5f, av.data(), bv.data(), beta, ref.data());  // double sums
          const auto got = read(c);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_LE(std::fabs(got[i] - round_to(c_dtype, ref[i])),
                      (c_dtype == DType::f32 ? 1e-5 * std::fabs(ref[i]) + 1e-6 : ulp(c_dtype, ref[i])))
                << "ta=" << ta << " tb=" << tb << " C " << dtype_name(c_dtype) << " beta=" << beta << " i=" << i;
        }
}

TEST_P(HalfOps, BiasActIsOneRoundingOfTheF32Sum) {
  const DType d = GetParam();
  const auto yv = rounded(d, random_values(33 * 65, 10, -2, 2)), bv = rounded(d, random_values(65, 11));
  for (Activation act : {Activation::none, Activation::relu}) {
    Tensor y = make({33, 65}, d, yv), b = make({65}, d, bv);
    dev->bias_act(tag, y, b, act);
    const auto got = read(y);
    for (size_t i = 0; i < got.size(); ++i) {
      float v = yv[i] + bv[i % 65];
      if (act == Activation::relu) v = std::max(v, 0.0f);
      ASSERT_EQ(got[i], round_to(d, v)) << i;  // exactly: the same f32 sum, rounded once
    }
  }
}

TEST_P(HalfOps, BiasActBackwardMasksAndSumsInF32) {
  const DType d = GetParam();
  const int64_t rows = 300, cols = 7;
  auto yv = rounded(d, random_values(static_cast<size_t>(rows * cols), 20));
  for (float& v : yv) v = std::max(v, 0.0f);  // a relu output: zeros to mask
  const auto dyv = rounded(d, random_values(static_cast<size_t>(rows * cols), 21));
  Tensor y = make({rows, cols}, d, yv), dy = make({rows, cols}, d, dyv), db = make({cols}, d, std::vector<float>(7, 9));
  dev->bias_act_backward(tag, dy, y, db, Activation::relu);
  const auto got_dy = read(dy), got_db = read(db);
  for (int64_t j = 0; j < cols; ++j) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const size_t i = static_cast<size_t>(r * cols + j);
      const float masked = yv[i] > 0 ? dyv[i] : 0.0f;
      ASSERT_EQ(got_dy[i], masked) << i;
      sum += masked;
    }
    EXPECT_LE(std::fabs(got_db[j] - round_to(d, static_cast<float>(sum))), ulp(d, sum) + 1e-6) << j;
  }
}

TEST_P(HalfOps, SoftmaxXentReadsHalfLogitsAndComputesTheLossInF32) {
  const DType d = GetParam();
  const int64_t rows = 64, cols = 10;
  const auto lv = rounded(d, random_values(static_cast<size_t>(rows * cols), 30, -8, 8));
  std::vector<int32_t> lab(rows);
  for (int64_t r = 0; r < rows; ++r) lab[r] = static_cast<int32_t>((r * 7) % cols);
  Tensor logits = make({rows, cols}, d, lv), dlogits = dev->empty({rows, cols}, d, MemoryCategory::workspace, "d");
  Tensor labels = dev->empty({rows}, DType::i32, MemoryCategory::workspace, "labels");
  dev->upload(tag, labels, lab.data());
  const float scale = 1024.0f;  // a loss scale: the gradient is scaled before it is rounded to half
  const double loss = dev->softmax_xent(tag, logits, labels, dlogits, scale);
  std::vector<float> ref(static_cast<size_t>(rows * cols));
  const double ref_loss = kernels::softmax_xent(lv.data(), lab.data(), ref.data(), rows, cols, scale);
  EXPECT_EQ(loss, ref_loss);  // the same f32 values in, the same f32 / double arithmetic
  const auto got = read(dlogits);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], round_to(d, ref[i])) << i;
}

TEST_P(HalfOps, AxpyIntoF32ScaleAndNonFinite) {
  const DType d = GetParam();
  const auto xv = rounded(d, random_values(1001, 40)), yv = random_values(1001, 41);
  Tensor x = make({1001}, d, xv), y = make({1001}, DType::f32, yv);
  dev->axpy(tag, 0.75f, x, y);  // a half gradient accumulated into an f32 master gradient
  const auto got = read(y);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], yv[i] + 0.75f * xv[i]) << i;
  dev->scale(tag, 0.5f, x);  // a power of two: exact in half
  const auto halved = read(x);
  for (size_t i = 0; i < halved.size(); ++i) ASSERT_EQ(halved[i], 0.5f * xv[i]) << i;
  EXPECT_FALSE(dev->has_non_finite(tag, x));
  // 1e6 is beyond f16's 65504: the cast overflows to inf, which the check finds. bf16 holds it.
  std::vector<float> big = xv;
  big[500] = 1e6f;
  EXPECT_EQ(dev->has_non_finite(tag, make({1001}, d, big)), d == DType::f16);
  big[500] = NAN;
  EXPECT_TRUE(dev->has_non_finite(tag, make({1001}, d, big)));
}

INSTANTIATE_TEST_SUITE_P(Amp, HalfOps, testing::Values(DType::f16, DType::bf16), dtype_case);

TEST(HalfOpsErrors, OneDtypePerOpAndCopiesDoNotConvert) {
  auto dev = std::move(make_devices(DeviceOptions{})[0]);
  auto t = [&](std::vector<int64_t> shape, DType d) { return dev->zeros(shape, d, MemoryCategory::workspace, "t"); };
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  std::string e = message(
      [&] { dev->gemm({"g"}, false, false, t({2, 3}, DType::f16), t({3, 2}, DType::bf16), t({2, 2}, DType::f32)); });
  EXPECT_NE(e.find("[cpu:0] gemm"), std::string::npos) << e;
  EXPECT_NE(e.find("cast one of them"), std::string::npos) << e;
  e = message(
      [&] { dev->gemm({"g"}, false, false, t({2, 3}, DType::f16), t({3, 2}, DType::f16), t({2, 2}, DType::bf16)); });
  EXPECT_NE(e.find("in the inputs' dtype or in f32"), std::string::npos) << e;
  e = message([&] { dev->bias_act({"b"}, t({2, 3}, DType::f16), t({3}, DType::f32), Activation::relu); });
  EXPECT_NE(e.find("y and bias"), std::string::npos) << e;
  e = message([&] { dev->axpy({"a"}, 1.0f, t({4}, DType::f32), t({4}, DType::f16)); });
  EXPECT_NE(e.find("axpy"), std::string::npos) << e;
  e = message([&] { dev->copy({"c"}, t({4}, DType::f32), t({8}, DType::f16)); });
  EXPECT_NE(e.find("differ in dtype"), std::string::npos) << e;
  EXPECT_NE(e.find("cast"), std::string::npos) << e;
  // The optimizers step f32 master weights only.
  e = message([&] { dev->sgd({"s"}, t({4}, DType::f16), t({4}, DType::f16), Tensor(), SgdOptions{}); });
  EXPECT_NE(e.find("needs f32"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------
// The loss scaler.

TEST(LossScaler, GradScalersDefaultsAndRules) {
  LossScaler s(DType::f16);
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.0f);  // 2^16
  s.update(true);                   // overflow: backoff ×0.5, counted as skipped
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_EQ(s.skipped_steps(), 1);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 32768.0f);  // 1999 good steps in a row: not yet
  EXPECT_EQ(s.good_steps(), 1999);
  s.update(false);                 // the 2000th: growth ×2, and the count starts again
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.good_steps(), 0);
  for (int i = 0; i < 1000; ++i) s.update(false);
  s.update(true);  // an overflow resets the count
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_EQ(s.skipped_steps(), 2);

  // Never grows into inf.
  LossScalerOptions o;
  o.init_scale = 3.0e38;
  o.growth_interval = 1;
  LossScaler top(DType::f16, o);
  top.update(false);
  EXPECT_EQ(top.scale(), 3.0e38f);

  // Checkpoints: the scale and the count come back; 0 (no scaler saved) keeps the initial scale.
  LossScaler r(DType::f16);
  r.load_state(512.0, 17);
  EXPECT_EQ(r.scale(), 512.0f);
  EXPECT_EQ(r.good_steps(), 17);
  EXPECT_EQ(r.state_scale(), 512.0);
  r.load_state(0.0, 3);
  EXPECT_EQ(r.scale(), 512.0f);

  // bf16 and f32: no scaler. Scale 1, nothing skipped, nothing saved.
  for (DType d : {DType::bf16, DType::f32}) {
    LossScaler none(d);
    EXPECT_FALSE(none.enabled());
    EXPECT_EQ(none.scale(), 1.0f);
    none.update(true);
    EXPECT_EQ(none.skipped_steps(), 0);
    EXPECT_EQ(none.scale(), 1.0f);
    EXPECT_EQ(none.state_scale(), 0.0);
  }

  LossScalerOptions bad;
  bad.init_scale = 0;
  EXPECT_THROW(LossScaler(DType::f16, bad), UsageError);
}

TEST(LossScaler, UnscalesExactlyAndFindsInfAndNan) {
  auto dev = std::move(make_devices(DeviceOptions{})[0]);
  Parameter p;
  p.name = "w";
  p.grad = dev->empty({3}, DType::f32, MemoryCategory::grads, "w.grad");
  LossScaler s(DType::f16);
  std::vector<float> g{65536.0f, -3.0f * 65536, 0.5f};
  dev->upload({"g"}, p.grad, g.data());
  EXPECT_FALSE(s.unscale_and_check({&p}));
  std::vector<float> back(3);
  dev->download({"g"}, back.data(), p.grad);
  EXPECT_EQ(back, (std::vector<float>{1.0f, -3.0f, 0.5f / 65536}));  // ×2^-16: exact
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    g[1] = bad;
    dev->upload({"g"}, p.grad, g.data());
    EXPECT_TRUE(s.unscale_and_check({&p})) << bad;
  }
  // bf16: nothing to unscale, nothing runs.
  LossScaler none(DType::bf16);
  EXPECT_FALSE(none.unscale_and_check({&p}));
}

TEST(LossScaler, EveryRankTakesTheSameDecisionWhenOnlyOneOverflowed) {
  // Two ranks, each with its own gradient (as two pipeline stages or two ZeRO-2 shards): only
  // rank 1's holds an inf. The all-reduced flag makes both skip.
  DeviceOptions o;
  o.count = 2;
  auto devices = make_devices(o);
  for (auto& d : devices) d->use_own_host();
  auto groups = make_threads_groups(2);
  bool found[2] = {false, false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Device& d = *devices[static_cast<size_t>(r)];
      groups[static_cast<size_t>(r)]->set_device(&d);
      Parameter p;
      p.name = "g" + std::to_string(r);
      p.grad = d.empty({4}, DType::f32, MemoryCategory::grads, "grad");
      std::vector<float> g{1, 2, 3, r == 1 ? INFINITY : 4.0f};
      d.upload({"g"}, p.grad, g.data());
      LossScaler s(DType::f16);
      s.agree_over(*groups[static_cast<size_t>(r)], d);
      found[r] = s.unscale_and_check({&p});
      s.update(found[r]);
    });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(found[0]);
  EXPECT_TRUE(found[1]);
}

// ---------------------------------------------------------------------------------------------
// Every synchronous strategy: 5 steps in fp16 and bf16 against the same run in fp32.
//
// The tolerances are the brief's: fp16 within 1e-2 of fp32, bf16 within 5e-2 (max relative weight
// difference, per tensor). fp16 carries 11 significant bits, bf16 8: the activations, their
// gradients and the weight gradients are rounded to that many at every layer, and after 5 SGD
// steps from equal weights the f32 master weights differ by a few lr·|Δg| — see the figures printed.

struct AmpCase {
  std::string strategy;
  int devices;
  DeviceKind kind;
  int zero_stage = 0;
  Schedule schedule = Schedule::gpipe;
  int micro_batches = 1;
  std::string model = test::kEquivalenceModel;  // or "convnet": its convolutions and pools in half
};

std::string amp_case_name(const testing::TestParamInfo<AmpCase>& info) {
  const AmpCase& c = info.param;
  std::string s = (c.model == "convnet" ? "convnet_" : "") + c.strategy + "_" + std::to_string(c.devices) + "_" +
                  device_kind_name(c.kind);
  if (c.strategy == "zero") s += "_stage" + std::to_string(c.zero_stage);
  if (c.strategy == "pipeline") s += std::string("_") + schedule_name(c.schedule) + "_m" + std::to_string(c.micro_batches);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

class AmpEquivalence : public testing::TestWithParam<AmpCase> {};

TEST_P(AmpEquivalence, HalfRunsStayCloseToFp32) {
  const AmpCase& k = GetParam();
  TrainConfig c = small_config(k.strategy, k.devices, k.kind);
  if (k.strategy == "zero") c.zero_stage = k.zero_stage;
  c.schedule = k.schedule;
  c.micro_batches = k.micro_batches;
  if (k.model != test::kEquivalenceModel) c.model = k.model;
  if (k.model == "convnet") {  // 28×28 images: a smaller batch keeps the case quick
    c.batch = 16;
    c.synthetic_train = 512;
    c.synthetic_test = 32;
  }
  const RunOutcome fp32 = run(c);
  EXPECT_EQ(fp32.result.skipped_steps, 0);
  double diff[2] = {0, 0};
  int i = 0;
  for (const char* amp : {"fp16", "bf16"}) {
    c.amp = parse_amp(amp);
    const RunOutcome half = run(c);
    ASSERT_EQ(half.result.losses.size(), 5u);
    for (double l : half.result.losses) EXPECT_TRUE(std::isfinite(l)) << amp;
    // No overflow at GradScaler's initial 2^16 on this model: every step was taken.
    EXPECT_EQ(half.result.skipped_steps, 0) << amp;
    EXPECT_EQ(half.state.optimizer_steps, 5) << amp;
    EXPECT_EQ(half.result.loss_scale, 1.0 * (std::string(amp) == "fp16" ? 65536 : 1)) << amp;
    diff[i++] = max_relative_difference(half.state.weights, fp32.state.weights);
    EXPECT_GT(diff[i - 1], 0.0) << amp << ": the half run computed nothing in half";
    if (k.model == "convnet") {  // both convolutions read half weights, cast from the masters each step
      int casts = 0;
      for (const Event& e : half.events) casts += e.name == std::string("conv2.weight → ") + dtype_name(c.amp_dtype());
      EXPECT_GE(casts, 5) << amp;
    }
  }
  EXPECT_LE(diff[0], 1e-2) << "fp16";
  EXPECT_LE(diff[1], 5e-2) << "bf16";
  std::printf("[ amp vs fp32 ] %-36s fp16 %.3g   bf16 %.3g\n", amp_case_name({k, 0}).c_str(), diff[0], diff[1]);
}

std::vector<AmpCase> amp_cases() {
  std::vector<AmpCase> cases;
  for (DeviceKind kind : {DeviceKind::cpu, DeviceKind::sim}) {
    cases.push_back({"single", 1, kind});
    cases.push_back({"data-parallel", 2, kind});
    cases.push_back({"model-parallel", 2, kind});
    cases.push_back({"pipeline", 2, kind, 0, Schedule::gpipe, 2});
    cases.push_back({"pipeline", 2, kind, 0, Schedule::one_f_one_b, 4});
    cases.push_back({"ddp", 2, kind});
    cases.push_back({"ddp-mp", 2, kind});  // one rank over 2 devices
    cases.push_back({"ddp-mp", 4, kind});  // two ranks of 2
    cases.push_back({"zero", 2, kind, 1});
    cases.push_back({"zero", 2, kind, 2});
    cases.push_back({"zero", 2, kind, 3});  // each unit's half copies made after its gather, freed with it
    // Its heads and MLP split over 2 ranks: a GPT's.
    cases.push_back({"tensor-parallel", 2, kind, 0, Schedule::gpipe, 1, "gpt:2-32-4-16-96"});
  }
  // The ConvNet: every strategy on cpu, and on sim (whose half convolutions are priced at the
  // half peak) single and ddp.
  for (const AmpCase& m : std::vector<AmpCase>{{"single", 1, DeviceKind::cpu},
                                              {"data-parallel", 2, DeviceKind::cpu},
                                              {"model-parallel", 2, DeviceKind::cpu},
                                              {"pipeline", 2, DeviceKind::cpu, 0, Schedule::one_f_one_b, 4},
                                              {"ddp", 2, DeviceKind::cpu},
                                              {"ddp-mp", 4, DeviceKind::cpu},
                                              {"zero", 2, DeviceKind::cpu, 2},
                                              {"single", 1, DeviceKind::sim},
                                              {"ddp", 2, DeviceKind::sim}}) {
    AmpCase convnet = m;
    convnet.model = "convnet";
    cases.push_back(convnet);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Strategies, AmpEquivalence, testing::ValuesIn(amp_cases()), amp_case_name);

TEST(Amp, LayersComputeInHalfAndCastTheirWeightsEachStep) {
  // ddp, 2 ranks of 64 rows, fp16, on sim. Every step each rank casts its f32 masters to half —
  // events "cast" with (4 + 2) bytes per weight and bias — and fc1's forward GEMM reads and writes
  // 2-byte elements: x [64 × 784], W [64 × 784], y [64 × 64].
  TrainConfig c = small_config("ddp", 2, DeviceKind::sim);
  c.amp = Amp::fp16;
  c.steps = 2;
  const RunOutcome out = run(c);
  const int64_t P = ModelSpec::parse(c.model).parameter_count();
  std::map<int, int64_t> cast_bytes;
  std::map<int, int64_t> fc1_bytes;
  for (const Event& e : out.events) {
    if (e.step != 1) continue;
    if (e.kind == "cast" && e.name.find(" → f16") != std::string::npos) cast_bytes[e.device] += e.bytes;
    if (e.kind == "gemm" && e.name == "fc1.fwd") fc1_bytes[e.device] = e.bytes;
  }
  EXPECT_EQ(cast_bytes, (std::map<int, int64_t>{{0, 6 * P}, {1, 6 * P}}));
  const int64_t fc1 = 2 * (64 * 784 + 64 * 784 + 64 * 64);
  EXPECT_EQ(fc1_bytes, (std::map<int, int64_t>{{0, fc1}, {1, fc1}}));
}

// ---------------------------------------------------------------------------------------------
// A real overflow: an initial loss scale of 2^40 makes the scaled loss gradient (2^40 / batch ·
// (p − onehot), up to 2^33) overflow f16's 65504 in the very first layer of backward.

TEST(AmpOverflow, SingleSkipsTheStepAndHalvesTheScale) {
  TrainConfig c = small_config("single", 1, DeviceKind::cpu);
  c.amp = Amp::fp16;
  c.amp_initial_scale = std::ldexp(1.0, 40);
  c.steps = 1;
  const RunOutcome out = run(c);
  // The weights are the initial ones, bit for bit; the optimizer never stepped.
  EXPECT_EQ(weights_checksum(out.state.weights), weights_checksum(init_weights(ModelSpec::parse(c.model), c.seed)));
  EXPECT_EQ(out.state.optimizer_steps, 0);
  EXPECT_EQ(out.state.loss_scale, std::ldexp(1.0, 39));
  EXPECT_EQ(out.result.skipped_steps, 1);
  EXPECT_EQ(out.result.loss_scale, std::ldexp(1.0, 39));
  EXPECT_TRUE(std::isfinite(out.result.losses.at(0)));  // the loss itself is computed in f32: fine
  for (const Event& e : out.events) EXPECT_NE(e.kind, "sgd") << "the optimizer stepped";

  // Run on: the scale halves on every overflow until the gradients fit, then steps are taken.
  // 2^40 / 128 rows = 2^33 per unit of (p − onehot); the steps resume once S / 128 · the largest
  // gradient is below 65504. Whatever that point is, skipped + taken = steps, and the scale is
  // 2^(40 − skipped).
  c.steps = 30;
  const RunOutcome longer = run(c);
  const int64_t skipped = longer.result.skipped_steps;
  std::printf("    2^40 initial scale: %lld of 30 steps skipped, final scale 2^%g\n", static_cast<long long>(skipped),
              std::log2(longer.result.loss_scale));
  EXPECT_GT(skipped, 10);
  EXPECT_LT(skipped, 30);
  EXPECT_EQ(longer.state.optimizer_steps, 30 - skipped);
  EXPECT_EQ(longer.result.loss_scale, std::ldexp(1.0, 40 - static_cast<int>(skipped)));
}

TEST(AmpOverflow, DdpRanksSkipTogether) {
  TrainConfig c = small_config("ddp", 2, DeviceKind::sim);
  c.amp = Amp::fp16;
  c.amp_initial_scale = std::ldexp(1.0, 40);
  c.steps = 1;
  const RunOutcome out = run(c);
  EXPECT_EQ(weights_checksum(out.state.weights), weights_checksum(init_weights(ModelSpec::parse(c.model), c.seed)));
  EXPECT_EQ(out.state.optimizer_steps, 0);
  EXPECT_EQ(out.result.skipped_steps, 1);
  EXPECT_EQ(out.state.loss_scale, std::ldexp(1.0, 39));
  // Both ranks: the flag all-reduced (the collective's first event carries its flow), no
  // optimizer step.
  std::map<int, int> found_inf, steps;
  for (const Event& e : out.events) {
    if (e.kind == "all_reduce" && e.name.rfind("amp.found_inf", 0) == 0 && e.flow_id >= 0) ++found_inf[e.device];
    if (e.kind == "sgd") ++steps[e.device];
  }
  EXPECT_EQ(found_inf, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_TRUE(steps.empty());

  // Later steps: whatever one rank does, the other does too. Each rank's optimizer steps exactly as
  // often as the scaler did not skip, on both devices.
  c.steps = 30;
  const RunOutcome longer = run(c);
  const int64_t skipped = longer.result.skipped_steps;
  const int64_t params = 2 * ModelSpec::parse(c.model).layer_count();
  std::map<int, int64_t> sgd;
  for (const Event& e : longer.events)
    if (e.kind == "sgd") ++sgd[e.device];
  EXPECT_GT(skipped, 10);
  EXPECT_EQ(sgd, (std::map<int, int64_t>{{0, (30 - skipped) * params}, {1, (30 - skipped) * params}}));
  EXPECT_EQ(longer.state.optimizer_steps, 30 - skipped);
  // And the training is the same as single's: the same overflows, the same scale.
  TrainConfig s = c;
  s.strategy = "single";
  s.devices = 1;
  const RunOutcome single = run(s);
  EXPECT_EQ(single.result.skipped_steps, skipped);
  EXPECT_EQ(single.result.loss_scale, longer.result.loss_scale);
}

TEST(AmpOverflow, PipelineAndZeroStagesSkipTogether) {
  for (const char* strategy : {"pipeline", "zero"}) {
    TrainConfig c = small_config(strategy, 2, DeviceKind::cpu);
    if (std::string(strategy) == "zero") c.zero_stage = 2;
    c.amp = Amp::fp16;
    c.amp_initial_scale = std::ldexp(1.0, 40);
    c.steps = 1;
    const RunOutcome out = run(c);
    EXPECT_EQ(weights_checksum(out.state.weights), weights_checksum(init_weights(ModelSpec::parse(c.model), c.seed)))
        << strategy;
    EXPECT_EQ(out.state.optimizer_steps, 0) << strategy;
    EXPECT_EQ(out.result.skipped_steps, 1) << strategy;
    for (const Event& e : out.events) EXPECT_NE(e.kind, "sgd") << strategy << " stepped on device " << e.device;
  }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints carry the scaler: an interrupted fp16 run resumes bit-identical to one that never
// stopped, overflows and scale included.

TEST(AmpCheckpoint, ResumesTheScalerExactly) {
  for (const char* strategy : {"single", "ddp"}) {
    SCOPED_TRACE(strategy);
    TrainConfig c = small_config(strategy, std::string(strategy) == "ddp" ? 2 : 1, DeviceKind::cpu);
    c.amp = Amp::fp16;
    c.amp_initial_scale = std::ldexp(1.0, 26);  // a few overflows first, then steps
    c.steps = 14;
    const RunOutcome whole = run(c);
    ASSERT_GT(whole.result.skipped_steps, 0);
    ASSERT_LT(whole.result.skipped_steps, 14);

    const fs::path mid = fs::temp_directory_path() / ("scalelab-amp-mid-" + std::to_string(::getpid()) + ".ckpt");
    TrainConfig first = c;
    first.steps = 7;
    first.checkpoint_path = mid.string();
    EventBus bus;
    train(first, bus);
    const TrainingState saved = load_checkpoint(mid.string()).state;
    EXPECT_GT(saved.loss_scale, 0.0);
    EXPECT_LT(saved.loss_scale, std::ldexp(1.0, 26));
    TrainConfig second = c;
    second.resume_path = mid.string();
    const RunOutcome resumed = run(second);
    fs::remove(mid);
    EXPECT_EQ(weights_checksum(resumed.state.weights), weights_checksum(whole.state.weights));
    EXPECT_EQ(resumed.state.loss_scale, whole.state.loss_scale);
    EXPECT_EQ(resumed.state.scaler_good_steps, whole.state.scaler_good_steps);
    EXPECT_EQ(resumed.state.optimizer_steps, whole.state.optimizer_steps);
  }
}

// ---------------------------------------------------------------------------------------------
// Memory: the activations in half take half the bytes.

TEST(AmpMemory, ActivationPeakIsAboutHalfInClosedForm) {
  // single, mlp:I-H-H-C, batch B, a dry run on sim (the ledger counts the same bytes as a real
  // run). Live at the peak, the first backward GEMM of the middle layer (its dx allocated):
  //   the batch x (f32, B·I, as uploaded) and the labels (i32, B),
  //   fp16 only: x cast to half for the first GEMM (B·I),
  //   the three layer outputs (B·H, B·H, B·C) and the loss gradient (B·C),
  //   the gradients w.r.t. the last two layers' inputs (B·H each), in flight together.
  // In fp32 every activation is 4 bytes; in fp16 all but x and the labels are 2.
  const int64_t I = 64, H = 2048, C = 16, B = 256;
  auto peak = [&](const std::string& amp) {
    TrainConfig c;
    c.device = DeviceKind::sim;
    c.hw = "a100-nvlink-8";
    c.dry_run = true;
    c.model = "mlp:" + std::to_string(I) + "-" + std::to_string(H) + "-" + std::to_string(H) + "-" + std::to_string(C);
    c.dataset = "synthetic";
    c.synthetic_train = B;
    c.synthetic_test = 16;
    c.batch = B;
    c.steps = 2;
    c.amp = parse_amp(amp);
    EventBus bus;
    TrainResult r = train(c, bus);
    return r.per_device.at(0).peak_bytes[static_cast<int>(MemoryCategory::activations)];
  };
  const int64_t fp32 = 4 * B * I + 4 * B + 4 * B * (2 * H + C) + 4 * B * C + 4 * B * 2 * H;
  const int64_t fp16 = 4 * B * I + 4 * B + 2 * B * I + 2 * B * (2 * H + C) + 2 * B * C + 2 * B * 2 * H;
  const int64_t got32 = peak("off"), got16 = peak("fp16"), got_bf16 = peak("bf16");
  std::printf("    activation peak: fp32 %lld B, fp16 %lld B, bf16 %lld B: ratio %.4f\n", static_cast<long long>(got32),
              static_cast<long long>(got16), static_cast<long long>(got_bf16),
              static_cast<double>(got16) / static_cast<double>(got32));
  EXPECT_EQ(got32, fp32);
  EXPECT_EQ(got16, fp16);
  EXPECT_EQ(got_bf16, fp16);
  EXPECT_NEAR(static_cast<double>(got16) / static_cast<double>(got32), 0.5, 0.01);
}

TEST(AmpMemory, HalfWeightsAreWorkspaceAndParamsStayF32) {
  // The half copies of the weights are workspace (derived every step, never trained or saved);
  // params stay the 4-byte masters.
  TrainConfig c = small_config("single", 1, DeviceKind::sim);
  c.dry_run = true;
  c.steps = 1;
  const ModelSpec spec = ModelSpec::parse(c.model);
  const int64_t P = spec.parameter_count();
  EventBus a, b;
  const TrainResult fp32 = train(c, a);
  c.amp = Amp::fp16;
  const TrainResult fp16 = train(c, b);
  const auto& p32 = fp32.per_device.at(0).peak_bytes;
  const auto& p16 = fp16.per_device.at(0).peak_bytes;
  EXPECT_EQ(p32[static_cast<int>(MemoryCategory::params)], 4 * P);
  EXPECT_EQ(p16[static_cast<int>(MemoryCategory::params)], 4 * P);
  EXPECT_EQ(p16[static_cast<int>(MemoryCategory::grads)], 4 * P);
  EXPECT_EQ(p32[static_cast<int>(MemoryCategory::workspace)], 0);
  // The half weights (2·P), plus the largest weight's half gradient while it is cast into f32 (a
  // layer's bias gradient is cast, and freed, before its weight gradient is computed).
  int64_t largest = 0;
  for (const TensorSpec& t : spec.tensors())
    if (t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0) largest = std::max(largest, t.numel());
  EXPECT_EQ(p16[static_cast<int>(MemoryCategory::workspace)], 2 * P + 2 * largest);
}

// ---------------------------------------------------------------------------------------------
// sim: a half GEMM is priced at the profile's f16 peak.

TEST(AmpSim, HalfGemmUsesTheF16Peak) {
  const HardwareProfile p = load_profile("a100-nvlink-8");
  const int64_t B = 4096, H = 4096;
  for (const char* amp : {"off", "fp16", "bf16"}) {
    TrainConfig c;
    c.device = DeviceKind::sim;
    c.hw = "a100-nvlink-8";
    c.dry_run = true;
    c.model = "mlp:1024-4096-4096-10";
    c.dataset = "synthetic";
    c.synthetic_train = B;
    c.synthetic_test = 16;
    c.batch = B;
    c.steps = 1;
    c.amp = parse_amp(amp);
    EventBus bus;
    train(c, bus);
    const Event* gemm = nullptr;
    const std::vector<Event> events = bus.events();  // a copy: the pointer below must outlive the loop
    for (const Event& e : events)
      if (e.step == 0 && e.kind == "gemm" && e.name == "fc2.fwd") gemm = &e;
    ASSERT_NE(gemm, nullptr) << amp;
    // fc2.fwd: [B × H] · [H × H]ᵀ → [B × H]: 2·B·H·H flop; A, B and C read or written once.
    const DType d = c.amp_dtype();
    const double peak = d == DType::f16 ? p.peak_flops_f16 : d == DType::bf16 ? p.peak_flops_bf16 : p.peak_flops_f32;
    const double flops = 2.0 * B * H * H;
    const double bytes = static_cast<double>(dtype_size(d)) * (B * H + H * H + B * H);
    const double seconds = gemm_formula_seconds(p, d, flops, bytes);
    std::printf("    %-4s fc2.fwd gemm: %.1f µs modelled, formula %.1f µs (peak %.1f TFLOP/s)\n", amp,
                (gemm->t_end_ns - gemm->t_begin_ns) / 1e3, seconds * 1e6, peak / 1e12);
    EXPECT_EQ(gemm->t_end_ns - gemm->t_begin_ns, seconds_to_ns(seconds)) << amp;
    EXPECT_EQ(gemm->flops, flops) << amp;
    EXPECT_EQ(gemm->bytes, static_cast<int64_t>(bytes)) << amp;
  }
}

// ---------------------------------------------------------------------------------------------
// The summary and its JSON; options refused.

TEST(AmpReport, JsonCarriesDtypeScaleAndSkippedSteps) {
  TrainConfig c = small_config("single", 1, DeviceKind::cpu);
  c.steps = 2;
  EventBus a;
  TrainResult off = train(c, a);
  EXPECT_TRUE(to_json(off)["amp"].is_null());
  c.amp = Amp::fp16;
  c.amp_initial_scale = std::ldexp(1.0, 40);
  EventBus b;
  TrainResult r = train(c, b);
  const nlohmann::json j = to_json(r);
  ASSERT_TRUE(j["amp"].is_object());
  EXPECT_EQ(j["amp"]["dtype"], "fp16");
  EXPECT_EQ(j["amp"]["loss_scale"].get<double>(), std::ldexp(1.0, 38));
  EXPECT_EQ(j["amp"]["skipped_steps"].get<int64_t>(), 2);
  for (const char* key : {"strategy", "final_loss", "weights_checksum", "per_device", "equivalence"})
    EXPECT_TRUE(j.contains(key)) << key;  // the existing keys stay
  const TrainResult back = from_json(j, c);
  EXPECT_EQ(back.loss_scale, r.loss_scale);
  EXPECT_EQ(back.skipped_steps, 2);
  const std::string summary = format_summary(r);
  EXPECT_NE(summary.find("2 of 2 steps skipped"), std::string::npos) << summary;
}

TEST(AmpReport, BadOptionsAreUsageErrors) {
  auto usage = [](TrainConfig c) {
    EventBus bus;
    return test::message_of([&] { train(c, bus); });
  };
  TrainConfig c = small_config("single", 1, DeviceKind::cpu);
  EXPECT_THROW(parse_amp("fp8"), UsageError);
  try {
    parse_amp("fp8");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--amp 'fp8' is unknown — use off, fp16 or bf16"), std::string::npos) << e.what();
  }
  c.amp = Amp::bf16;
  c.amp_initial_scale = 1024;
  std::string e = usage(c);
  EXPECT_NE(e.find("[amp] --amp-initial-scale"), std::string::npos) << e;
  EXPECT_NE(e.find("add --amp fp16"), std::string::npos) << e;
  c.amp = Amp::fp16;
  c.amp_initial_scale = 0;
  EXPECT_NE(usage(c).find("--amp-initial-scale must be a positive"), std::string::npos);
  // Hogwild still refuses mixed precision.
  c = small_config("multiprocessing", 2, DeviceKind::cpu);
  c.amp = Amp::fp16;
  e = usage(c);
  EXPECT_NE(e.find("[amp] --amp fp16 does not apply to --strategy multiprocessing (it would be ignored)"), std::string::npos) << e;
}

