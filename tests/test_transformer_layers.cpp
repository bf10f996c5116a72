// A GPT's layers and their ops: each forward against a plain float64 loop written here, each
// backward against central finite differences of that loop in double (loss = Σ dy ⊙ y with a
// random dy, perturbing every input and parameter), accumulation, the causal mask, activation
// checkpointing (the same gradient bits, a lower activation peak), a dry run that prices the ops
// with no storage, and bad shapes and ids against their error text.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/nn/model.h"
#include "core/nn/transformer_layers.h"
#include "core/rng.h"

namespace {

using namespace scalelab;
using V = std::vector<double>;

const std::string kTiny = std::string(SCALELAB_TEST_DATA) + "/tiny.json";

std::unique_ptr<Device> cpu_device(EventBus* bus = nullptr) {
  DeviceOptions o;
  o.kind = DeviceKind::cpu;
  o.bus = bus;
  return std::move(make_devices(o).front());
}

std::unique_ptr<Device> dry_sim_device(EventBus* bus) {
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile(kTiny);
  o.dry_run = true;
  o.bus = bus;
  return std::move(make_devices(o).front());
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1, float hi = 1) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = r.uniform(lo, hi);
  return v;
}

V to_double(const std::vector<float>& v) { return V(v.begin(), v.end()); }

Tensor upload(Device& d, const std::vector<float>& v, std::vector<int64_t> shape,
              MemoryCategory category = MemoryCategory::activations) {
  Tensor t = d.empty(std::move(shape), DType::f32, category, "test");
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  d.upload({"test", Phase::data}, t, v.data());
  return t;
}

std::vector<float> download(Device& d, const Tensor& t) { return d.download_f32({"test", Phase::data}, t); }

// |got − want| ≤ tol · (1 + |want|) element by element; at most a few failures reported.
void expect_close(const std::vector<float>& got, const V& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i]))) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << ", expected " << want[i];
}

// Central differences of loss(inputs) in double, for every element of every input, next to the
// analytic gradients (one per input, in the same order).
void expect_gradients(std::vector<V> inputs, const std::vector<std::vector<float>>& analytic,
                      const std::vector<std::string>& names, const std::function<double(const std::vector<V>&)>& loss,
                      double tol = 2e-4) {
  ASSERT_EQ(inputs.size(), analytic.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(inputs[i].size(), analytic[i].size()) << names[i];
    V numeric(inputs[i].size());
    for (size_t j = 0; j < inputs[i].size(); ++j) {
      const double keep = inputs[i][j], h = 1e-6;
      inputs[i][j] = keep + h;
      const double up = loss(inputs);
      inputs[i][j] = keep - h;
      const double down = loss(inputs);
      inputs[i][j] = keep;
      numeric[j] = (up - down) / (2 * h);
    }
    expect_close(analytic[i], numeric, tol, "d/d " + names[i]);
  }
}

double dot(const V& a, const V& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- float64 references ---------------------------------------------------------------------

V layer_norm_ref(const V& x, int64_t rows, int64_t cols, const V& gamma, const V& beta) {
  V y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mean += x[r * cols + j] / cols;
    for (int64_t j = 0; j < cols; ++j) var += (x[r * cols + j] - mean) * (x[r * cols + j] - mean) / cols;
    for (int64_t j = 0; j < cols; ++j)
      y[r * cols + j] = (x[r * cols + j] - mean) / std::sqrt(var + 1e-5) * gamma[j] + beta[j];
  }
  return y;
}

V gelu_ref(const V& x) {
  V y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0)));
  return y;
}

// y = x · Wᵀ + b, W out × in.
V linear_ref(const V& x, int64_t rows, int64_t in, const V& w, const V& b, int64_t out) {
  V y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

V embedding_ref(const std::vector<float>& ids, int64_t batch, int64_t seq, int64_t hidden, const V& wte, const V& wpe) {
  V out(static_cast<size_t>(batch * seq * hidden));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t)
      for (int64_t j = 0; j < hidden; ++j)
        out[(b * seq + t) * hidden + j] = wte[static_cast<int64_t>(ids[b * seq + t]) * hidden + j] + wpe[t * hidden + j];
  return out;
}

// Causal attention by its definition: per sequence, head, query i: softmax over keys j ≤ i.
V attention_ref(const V& qkv, int64_t batch, int64_t seq, int64_t heads, int64_t hidden) {
  const int64_t d = hidden / heads, ld = 3 * hidden;
  V y(static_cast<size_t>(batch * seq * hidden), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        V s(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < d; ++c)
            acc += qkv[(b * seq + i) * ld + h * d + c] * qkv[(b * seq + j) * ld + hidden + h * d + c];
          s[j] = acc / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < d; ++c)
            y[(b * seq + i) * hidden + h * d + c] += s[j] / sum * qkv[(b * seq + j) * ld + 2 * hidden + h * d + c];
      }
  return y;
}

// ---- ops ----------------------------------------------------------------------------------

TEST(TransformerOps, LayerNormForwardAndBackward) {
  auto dev = cpu_device();
  const int64_t rows = 5, cols = 12;
  auto x = random_floats(rows * cols, 1, -2, 3), g = random_floats(cols, 2, 0.5f, 1.5f), b = random_floats(cols, 3),
       dy = random_floats(rows * cols, 4);
  Tensor tx = upload(*dev, x, {rows, cols}), tg = upload(*dev, g, {cols}), tb = upload(*dev, b, {cols});
  Tensor y = dev->empty({rows, cols}, DType::f32, MemoryCategory::activations);
  Tensor mean = dev->empty({rows}, DType::f32, MemoryCategory::activations);
  Tensor rstd = dev->empty({rows}, DType::f32, MemoryCategory::activations);
  dev->layer_norm({"ln"}, tx, tg, tb, y, mean, rstd);
  expect_close(download(*dev, y), layer_norm_ref(to_double(x), rows, cols, to_double(g), to_double(b)), 1e-5, "y");

  Tensor tdy = upload(*dev, dy, {rows, cols});
  Tensor dx = dev->empty({rows, cols}, DType::f32, MemoryCategory::activations);
  Tensor dg = dev->empty({cols}, DType::f32, MemoryCategory::grads), db = dev->empty({cols}, DType::f32, MemoryCategory::grads);
  dev->layer_norm_backward({"ln"}, tdy, tx, tg, mean, rstd, dx, dg, db);
  auto loss = [&](const std::vector<V>& in) { return dot(to_double(dy), layer_norm_ref(in[0], rows, cols, in[1], in[2])); };
  expect_gradients({to_double(x), to_double(g), to_double(b)}, {download(*dev, dx), download(*dev, dg), download(*dev, db)},
                   {"x", "gamma", "beta"}, loss);

  // accumulate adds to dgamma and dbeta
  const auto dg1 = download(*dev, dg), db1 = download(*dev, db);
  dev->layer_norm_backward({"ln"}, tdy, tx, tg, mean, rstd, dx, dg, db, /*accumulate=*/true);
  const auto dg2 = download(*dev, dg), db2 = download(*dev, db);
  for (int64_t j = 0; j < cols; ++j) {
    EXPECT_FLOAT_EQ(dg2[j], 2 * dg1[j]);
    EXPECT_FLOAT_EQ(db2[j], 2 * db1[j]);
  }
}

TEST(TransformerOps, GeluForwardAndBackward) {
  auto dev = cpu_device();
  const int64_t n = 40;
  auto x = random_floats(n, 5, -4, 4), dy = random_floats(n, 6);
  x[0] = 0.0f;   // Φ(0) = ½, not y / x
  x[1] = -9.0f;  // y all but 0
  Tensor tx = upload(*dev, x, {n}), y = dev->empty({n}, DType::f32, MemoryCategory::activations);
  dev->gelu({"gelu"}, tx, y);
  expect_close(download(*dev, y), gelu_ref(to_double(x)), 1e-6, "gelu");
  Tensor tdy = upload(*dev, dy, {n});
  dev->gelu_backward({"gelu"}, tdy, tx, y, tdy);  // in place, as the block runs it
  expect_gradients({to_double(x)}, {download(*dev, tdy)}, {"x"},
                   [&](const std::vector<V>& in) { return dot(to_double(dy), gelu_ref(in[0])); });
}

TEST(TransformerOps, EmbeddingGathersAndScattersDeterministically) {
  auto dev = cpu_device();
  const int64_t B = 3, T = 4, Vocab = 5, C = 6;
  std::vector<float> ids = {0, 1, 2, 1, 4, 4, 4, 0, 3, 1, 2, 2};  // repeated ids: the scatter adds
  auto wte = random_floats(Vocab * C, 7), wpe = random_floats(T * C, 8), dy = random_floats(B * T * C, 9);
  Tensor tids = upload(*dev, ids, {B, T}), twte = upload(*dev, wte, {Vocab, C}), twpe = upload(*dev, wpe, {T, C});
  Tensor out = dev->empty({B * T, C}, DType::f32, MemoryCategory::activations);
  dev->embedding({"emb"}, tids, twte, twpe, out);
  expect_close(download(*dev, out), embedding_ref(ids, B, T, C, to_double(wte), to_double(wpe)), 0, "out");

  Tensor tdy = upload(*dev, dy, {B * T, C});
  Tensor dwte = dev->empty({Vocab, C}, DType::f32, MemoryCategory::grads), dwpe = dev->empty({T, C}, DType::f32, MemoryCategory::grads);
  dev->embedding_backward({"emb"}, tdy, tids, dwte, dwpe);
  expect_gradients({to_double(wte), to_double(wpe)}, {download(*dev, dwte), download(*dev, dwpe)}, {"wte", "wpe"},
                   [&](const std::vector<V>& in) { return dot(to_double(dy), embedding_ref(ids, B, T, C, in[0], in[1])); });
  const auto w1 = download(*dev, dwte), p1 = download(*dev, dwpe);
  dev->embedding_backward({"emb"}, tdy, tids, dwte, dwpe, /*accumulate=*/true);
  const auto w2 = download(*dev, dwte), p2 = download(*dev, dwpe);
  for (size_t i = 0; i < w1.size(); ++i) EXPECT_FLOAT_EQ(w2[i], 2 * w1[i]);
  for (size_t i = 0; i < p1.size(); ++i) EXPECT_FLOAT_EQ(p2[i], 2 * p1[i]);
  // Deterministic: the same bits again.
  dev->embedding_backward({"emb"}, tdy, tids, dwte, dwpe);
  EXPECT_EQ(download(*dev, dwte), w1);
}

TEST(TransformerOps, EmbeddingRefusesIdsOutsideTheVocabulary) {
  auto dev = cpu_device();
  const int64_t Vocab = 5, C = 2;
  Tensor twte = upload(*dev, random_floats(Vocab * C, 1), {Vocab, C}), twpe = upload(*dev, random_floats(2 * C, 2), {2, C});
  Tensor out = dev->empty({2, C}, DType::f32, MemoryCategory::activations);
  for (float bad : {5.0f, -1.0f, 2.5f, NAN}) {
    Tensor ids = upload(*dev, {0, bad}, {1, 2});
    try {
      dev->embedding({"emb"}, ids, twte, twpe, out);
      ADD_FAILURE() << "id " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.component(), "embedding");
      EXPECT_NE(e.message().find("at batch row 0, position 1 is not a whole number in [0, 5)"), std::string::npos)
          << e.message();
    }
  }
}

TEST(TransformerOps, AttentionForwardBackwardAndTheCausalMask) {
  auto dev = cpu_device();
  const int64_t B = 2, T = 5, H = 2, C = 6;
  auto qkv = random_floats(B * T * 3 * C, 11, -1.5f, 1.5f), dy = random_floats(B * T * C, 12);
  Tensor tqkv = upload(*dev, qkv, {B * T, 3 * C});
  Tensor probs = dev->empty({B * H * T, T}, DType::f32, MemoryCategory::activations);
  Tensor y = dev->empty({B * T, C}, DType::f32, MemoryCategory::activations);
  dev->attention({"attn"}, tqkv, H, probs, y);
  const auto y0 = download(*dev, y);
  expect_close(y0, attention_ref(to_double(qkv), B, T, H, C), 1e-5, "y");
  // P: rows sum to 1, zeros above the diagonal.
  const auto p = download(*dev, probs);
  for (int64_t r = 0; r < B * H * T; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < T; ++j) {
      sum += p[r * T + j];
      if (j > r % T) {
        EXPECT_EQ(p[r * T + j], 0.0f) << "row " << r << " key " << j;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }

  Tensor tdy = upload(*dev, dy, {B * T, C});
  Tensor dscores = dev->empty({B * H * T, T}, DType::f32, MemoryCategory::workspace);
  Tensor dqkv = dev->empty({B * T, 3 * C}, DType::f32, MemoryCategory::activations);
  dev->attention_backward({"attn"}, tdy, tqkv, probs, H, dscores, dqkv);
  expect_gradients({to_double(qkv)}, {download(*dev, dqkv)}, {"qkv"},
                   [&](const std::vector<V>& in) { return dot(to_double(dy), attention_ref(in[0], B, T, H, C)); });

  // A later token's q, k and v change nothing before it: change token 3 of sequence 0.
  auto changed = qkv;
  for (int64_t c = 0; c < 3 * C; ++c) changed[3 * 3 * C + c] += 10.0f;
  dev->upload({"test", Phase::data}, tqkv, changed.data());
  dev->attention({"attn"}, tqkv, H, probs, y);
  const auto y1 = download(*dev, y);
  for (int64_t i = 0; i < 3 * C; ++i) EXPECT_EQ(y1[i], y0[i]) << "token " << i / C << " saw a later one";
  bool later_changed = false;
  for (int64_t i = 3 * C; i < 4 * C; ++i) later_changed |= y1[i] != y0[i];
  EXPECT_TRUE(later_changed);
}

TEST(TransformerOps, BadShapesAndDtypesSayWhatToDo) {
  auto dev = cpu_device();
  auto f32 = [&](std::vector<int64_t> s) { return dev->zeros(std::move(s), DType::f32, MemoryCategory::activations); };
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { dev->layer_norm({"ln"}, f32({4, 8}), f32({7}), f32({8}), f32({4, 8}), f32({4}), f32({4})); })
                .find("gamma is [7] f32, expected [8] — make it that shape"),
            std::string::npos);
  Tensor half = dev->zeros({4, 8}, DType::f16, MemoryCategory::activations);
  EXPECT_NE(message([&] { dev->layer_norm({"ln"}, half, f32({8}), f32({8}), half, f32({4}), f32({4})); })
                .find("x is [4,8] f16 — this op computes in f32"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->gelu({"g"}, half, f32({4, 8})); }).find("y is [4,8] f32 beside [4,8] f16 — this op takes f32, f16 or bf16, one dtype"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->attention({"a"}, f32({8, 12}), 3, f32({24, 4}), f32({8, 4})); }).find("multiple of the 3 heads"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->attention({"a"}, f32({8, 12}), 2, f32({8, 3}), f32({8, 4})); }).find("multiple of T"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->attention({"a"}, f32({8, 12}), 2, f32({8, 4}), f32({8, 4})); }).find("expected [16,4] (B·heads·T rows)"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->embedding({"e"}, f32({8}), f32({5, 4}), f32({8, 4}), f32({8, 4})); }).find("{batch, sequence}"),
            std::string::npos);
}

TEST(TransformerOps, AttentionIsPricedAsAGemmAndDryRunsComputeNothing) {
  EventBus bus;
  auto dev = dry_sim_device(&bus);
  const int64_t B = 2, T = 16, H = 4, C = 32, d = C / H;
  Tensor qkv = dev->empty({B * T, 3 * C}, DType::f32, MemoryCategory::activations);
  Tensor probs = dev->empty({B * H * T, T}, DType::f32, MemoryCategory::activations);
  Tensor y = dev->empty({B * T, C}, DType::f32, MemoryCategory::activations);
  EXPECT_TRUE(qkv.is_meta());
  dev->attention({"attn"}, qkv, H, probs, y);
  Tensor dscores = dev->empty({B * H * T, T}, DType::f32, MemoryCategory::workspace);
  Tensor dqkv = dev->empty({B * T, 3 * C}, DType::f32, MemoryCategory::activations);
  dev->attention_backward({"attn"}, y, qkv, probs, H, dscores, dqkv);
  Tensor mean = dev->empty({B * T}, DType::f32, MemoryCategory::activations), rstd = mean;
  Tensor g = dev->empty({C}, DType::f32, MemoryCategory::params);
  dev->layer_norm({"ln"}, y, g, g, y, mean, rstd);
  dev->gelu({"gelu"}, y, y);
  const auto events = bus.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kind, "attention");
  EXPECT_DOUBLE_EQ(events[0].flops, 4.0 * B * H * T * T * d);
  EXPECT_EQ(events[1].kind, "attention_bwd");
  EXPECT_DOUBLE_EQ(events[1].flops, 8.0 * B * H * T * T * d);
  for (const Event& e : events) EXPECT_GT(e.t_end_ns, e.t_begin_ns) << e.kind << " was not priced";
  EXPECT_EQ(dev->memory().live(MemoryCategory::activations),
            4 * (2 * B * T * 3 * C + B * H * T * T + B * T * C + B * T));
}

// ---- layers -------------------------------------------------------------------------------

// Random values for every parameter of a layer (LayerNorm gains around 1), uploaded; returned in
// parameters() order as doubles for the reference.
std::vector<V> set_parameters(Layer& layer, uint64_t seed) {
  std::vector<V> values;
  for (Parameter* p : layer.parameters()) {
    const bool gain = p->name.find("ln") != std::string::npos && p->name.find(".weight") != std::string::npos;
    auto v = random_floats(static_cast<size_t>(p->value.numel()), seed++, gain ? 0.5f : -0.5f, gain ? 1.5f : 0.5f);
    layer.device().upload({"init", Phase::data}, p->value, v.data());
    values.push_back(to_double(v));
  }
  return values;
}

std::vector<std::vector<float>> gradients(Layer& layer) {
  std::vector<std::vector<float>> g;
  for (Parameter* p : layer.parameters()) g.push_back(download(layer.device(), p->grad));
  return g;
}

std::vector<std::string> parameter_names(Layer& layer) {
  std::vector<std::string> names;
  for (Parameter* p : layer.parameters()) names.push_back(p->name);
  return names;
}

// One block by its definition; p in TransformerBlock::parameters() order.
V block_ref(const V& x, int64_t batch, int64_t seq, int64_t hidden, int64_t heads, const std::vector<V>& p) {
  const int64_t rows = batch * seq, C = hidden;
  const V a = layer_norm_ref(x, rows, C, p[0], p[1]);
  const V qkv = linear_ref(a, rows, C, p[2], p[3], 3 * C);
  V h = linear_ref(attention_ref(qkv, batch, seq, heads, C), rows, C, p[4], p[5], C);
  for (size_t i = 0; i < h.size(); ++i) h[i] += x[i];
  const V b = layer_norm_ref(h, rows, C, p[6], p[7]);
  V out = linear_ref(gelu_ref(linear_ref(b, rows, C, p[8], p[9], 4 * C)), rows, 4 * C, p[10], p[11], C);
  for (size_t i = 0; i < out.size(); ++i) out[i] += h[i];
  return out;
}

TEST(TransformerLayers, BlockParametersAreNamedAsPyTorchNamesThem) {
  auto dev = cpu_device();
  TransformerBlock block(*dev, 3, 1, 8, 2, 4);
  EXPECT_EQ(parameter_names(block),
            (std::vector<std::string>{"blocks.1.ln1.weight", "blocks.1.ln1.bias", "blocks.1.attn.qkv.weight",
                                      "blocks.1.attn.qkv.bias", "blocks.1.attn.proj.weight", "blocks.1.attn.proj.bias",
                                      "blocks.1.ln2.weight", "blocks.1.ln2.bias", "blocks.1.mlp.fc.weight",
                                      "blocks.1.mlp.fc.bias", "blocks.1.mlp.proj.weight", "blocks.1.mlp.proj.bias"}));
  std::vector<std::vector<int64_t>> shapes;
  for (Parameter* p : block.parameters()) {
    shapes.push_back(p->value.shape());
    EXPECT_EQ(p->layer, 3);
  }
  EXPECT_EQ(shapes, (std::vector<std::vector<int64_t>>{{8}, {8}, {24, 8}, {24}, {8, 8}, {8}, {8}, {8}, {32, 8}, {32},
                                                       {8, 32}, {8}}));
  TokenEmbedding emb(*dev, 0, 11, 4, 8);
  EXPECT_EQ(parameter_names(emb), (std::vector<std::string>{"tok_emb.weight", "pos_emb.weight"}));
  EXPECT_EQ(emb.tok_emb.value.shape(), (std::vector<int64_t>{11, 8}));
  EXPECT_EQ(emb.pos_emb.value.shape(), (std::vector<int64_t>{4, 8}));
  LmHead head(*dev, 4, 8, 11);
  EXPECT_EQ(parameter_names(head), (std::vector<std::string>{"ln_f.weight", "ln_f.bias", "head.weight", "head.bias"}));
  EXPECT_EQ(head.head.weight.value.shape(), (std::vector<int64_t>{11, 8}));
}

TEST(TransformerLayers, BlockForwardAndBackwardOfEveryInputAndParameter) {
  auto dev = cpu_device();
  const int64_t B = 2, T = 4, C = 8, H = 2;
  TransformerBlock block(*dev, 0, 0, C, H, T);
  const std::vector<V> p = set_parameters(block, 100);
  auto x = random_floats(B * T * C, 1), dy = random_floats(B * T * C, 2);
  Tensor y = block.forward(upload(*dev, x, {B * T, C}));
  expect_close(download(*dev, y), block_ref(to_double(x), B, T, C, H, p), 1e-5, "block y");
  Tensor dx = block.backward(upload(*dev, dy, {B * T, C}), true);
  std::vector<std::vector<float>> analytic = {download(*dev, dx)};
  for (auto& g : gradients(block)) analytic.push_back(g);
  std::vector<V> inputs = {to_double(x)};
  inputs.insert(inputs.end(), p.begin(), p.end());
  std::vector<std::string> names = {"x"};
  for (auto& n : parameter_names(block)) names.push_back(n);
  expect_gradients(inputs, analytic, names, [&](const std::vector<V>& in) {
    return dot(to_double(dy), block_ref(in[0], B, T, C, H, std::vector<V>(in.begin() + 1, in.end())));
  });

  // A second micro-batch with accumulate adds the same gradients again.
  block.forward(upload(*dev, x, {B * T, C}));
  block.backward(upload(*dev, dy, {B * T, C}), false, /*accumulate=*/true);
  const auto twice = gradients(block);
  for (size_t i = 0; i < twice.size(); ++i)
    for (size_t j = 0; j < twice[i].size(); ++j)
      ASSERT_NEAR(twice[i][j], 2 * analytic[i + 1][j], 1e-6 * (1 + std::fabs(analytic[i + 1][j]))) << names[i + 1];
}

TEST(TransformerLayers, BlockIsCausalAndKeepsSequencesApart) {
  auto dev = cpu_device();
  const int64_t B = 2, T = 4, C = 8, H = 2;
  TransformerBlock block(*dev, 0, 0, C, H, T);
  set_parameters(block, 200);
  auto x = random_floats(B * T * C, 3);
  const auto y0 = download(*dev, block.forward(upload(*dev, x, {B * T, C})));
  for (int64_t j = 0; j < C; ++j) x[2 * C + j] += 5.0f;  // token 2 of sequence 0
  const auto y1 = download(*dev, block.forward(upload(*dev, x, {B * T, C})));
  block.clear_saved();
  for (int64_t row = 0; row < B * T; ++row) {
    const bool may_change = row == 2 || row == 3;  // itself and the later token of its sequence
    bool changed = false;
    for (int64_t j = 0; j < C; ++j) changed |= y0[row * C + j] != y1[row * C + j];
    EXPECT_EQ(changed, may_change) << "row " << row;
  }
}

TEST(TransformerLayers, RecomputeGivesTheSameGradientBitsWithALowerActivationPeak) {
  EventBus bus;
  auto dev = cpu_device(&bus);
  const int64_t B = 2, T = 8, C = 16, H = 4, L = 3;
  std::vector<std::unique_ptr<TransformerBlock>> blocks;
  for (int b = 0; b < L; ++b) {
    blocks.push_back(std::make_unique<TransformerBlock>(*dev, b, b, C, H, T));
    set_parameters(*blocks.back(), 300 + 20 * b);
  }
  const Tensor x = upload(*dev, random_floats(B * T * C, 4), {B * T, C});
  const auto dy = random_floats(B * T * C, 5);
  struct Run {
    std::vector<std::vector<float>> grads;
    int64_t peak = 0;
  };
  // Two micro-batches as GPipe runs them: both forwards, then both backwards (oldest first), the
  // second accumulating into the first's gradients.
  auto run = [&](bool recompute) {
    for (auto& b : blocks) b->set_recompute(recompute);
    dev->memory().reset_peaks();
    for (int mb = 0; mb < 2; ++mb) {
      Tensor h = x;
      for (auto& b : blocks) h = b->forward(h, mb);
    }
    Run r;
    for (int mb = 0; mb < 2; ++mb) {
      Tensor g = upload(*dev, dy, {B * T, C});
      for (int b = L - 1; b >= 0; --b) g = blocks[static_cast<size_t>(b)]->backward(g, true, mb == 1, mb);
      r.grads.push_back(download(*dev, g));
    }
    for (auto& b : blocks)
      for (auto& grad : gradients(*b)) r.grads.push_back(grad);
    r.peak = dev->memory().peak(MemoryCategory::activations);
    return r;
  };
  const Run plain = run(false);
  const size_t first_recompute_event = bus.event_count();
  const Run recomputed = run(true);
  EXPECT_EQ(recomputed.grads, plain.grads);  // bit for bit
  EXPECT_LT(recomputed.peak, plain.peak);
  int recompute_events = 0;
  for (const Event& e : bus.events_since(first_recompute_event))
    if (e.name.size() > 10 && e.name.compare(e.name.size() - 10, 10, ".recompute") == 0) {
      ++recompute_events;
      EXPECT_EQ(e.phase, Phase::bwd) << e.name;
    }
  EXPECT_EQ(recompute_events, 2 * L * 6);  // ln1, attention, residual, ln2, gelu, residual per block and micro-batch
  for (auto& b : blocks) b->set_recompute(false);
}

TEST(TransformerLayers, EmbeddingAndHeadForwardAndBackward) {
  auto dev = cpu_device();
  const int64_t B = 2, T = 3, C = 4, Vocab = 7;
  TokenEmbedding emb(*dev, 0, Vocab, T, C);
  const std::vector<V> ep = set_parameters(emb, 400);
  std::vector<float> ids = {6, 0, 6, 3, 3, 1};
  Tensor h = emb.forward(upload(*dev, ids, {B, T}));
  expect_close(download(*dev, h), embedding_ref(ids, B, T, C, ep[0], ep[1]), 0, "embedding");

  LmHead head(*dev, 1, C, Vocab);
  const std::vector<V> hp = set_parameters(head, 500);
  auto x = random_floats(B * T * C, 6), dy = random_floats(B * T * Vocab, 7);
  auto head_ref = [&](const V& in, const std::vector<V>& p) {
    return linear_ref(layer_norm_ref(in, B * T, C, p[0], p[1]), B * T, C, p[2], p[3], Vocab);
  };
  Tensor logits = head.forward(upload(*dev, x, {B * T, C}));
  EXPECT_EQ(logits.shape(), (std::vector<int64_t>{B * T, Vocab}));
  expect_close(download(*dev, logits), head_ref(to_double(x), hp), 1e-5, "logits");
  Tensor dx = head.backward(upload(*dev, dy, {B * T, Vocab}), true);
  std::vector<std::vector<float>> analytic = {download(*dev, dx)};
  for (auto& g : gradients(head)) analytic.push_back(g);
  std::vector<V> inputs = {to_double(x)};
  inputs.insert(inputs.end(), hp.begin(), hp.end());
  expect_gradients(inputs, analytic, {"x", "ln_f.weight", "ln_f.bias", "head.weight", "head.bias"},
                   [&](const std::vector<V>& in) {
                     return dot(to_double(dy), head_ref(in[0], std::vector<V>(in.begin() + 1, in.end())));
                   });

  auto dh = random_floats(B * T * C, 8);
  EXPECT_FALSE(emb.backward(upload(*dev, dh, {B * T, C}), true).defined());  // ids have no gradient
  expect_gradients({ep[0], ep[1]}, gradients(emb), {"tok_emb.weight", "pos_emb.weight"}, [&](const std::vector<V>& in) {
    return dot(to_double(dh), embedding_ref(ids, B, T, C, in[0], in[1]));
  });
}

TEST(TransformerLayers, ADryRunOfASmallGptHoldsNoDataAndPricesEveryOp) {
  EventBus bus;
  auto dev = dry_sim_device(&bus);
  const int64_t B = 2, T = 16, C = 32, H = 4, Vocab = 50;
  TokenEmbedding emb(*dev, 0, Vocab, T, C);
  TransformerBlock b0(*dev, 1, 0, C, H, T), b1(*dev, 2, 1, C, H, T);
  b1.set_recompute(true);
  LmHead head(*dev, 3, C, Vocab);
  Tensor ids = dev->empty({B, T}, DType::f32, MemoryCategory::activations, "ids");
  Tensor labels = dev->empty({B * T}, DType::i32, MemoryCategory::activations, "labels");
  Tensor logits = head.forward(b1.forward(b0.forward(emb.forward(ids))));
  EXPECT_TRUE(logits.is_meta());
  EXPECT_EQ(logits.shape(), (std::vector<int64_t>{B * T, Vocab}));
  Tensor dlogits = dev->empty(logits.shape(), DType::f32, MemoryCategory::activations, "dlogits");
  EXPECT_TRUE(std::isnan(dev->softmax_xent({"loss"}, logits, labels, dlogits)));
  logits = Tensor();
  emb.backward(b0.backward(b1.backward(head.backward(dlogits, true), true), true), false);
  dlogits = Tensor();
  const auto events = bus.events();
  double attention_flops = 0;
  for (const Event& e : events) {
    EXPECT_GT(e.t_end_ns, e.t_begin_ns) << e.name << " was not priced";
    if (e.kind == "attention") attention_flops += e.flops;
  }
  // Two blocks' forwards and b1's recompute: three attentions of 4·B·H·T²·d FLOPs.
  EXPECT_DOUBLE_EQ(attention_flops, 3 * 4.0 * B * H * T * T * (C / H));
  EXPECT_GT(dev->memory().peak(MemoryCategory::activations), 0);
  EXPECT_EQ(dev->memory().live(MemoryCategory::activations), ids.nbytes() + labels.nbytes());  // nothing left behind
}

// Per tensor, max |a − b| / max |b|.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

TEST(TransformerLayers, MixedPrecisionKeepsTheStreamInF32AndComesCloseToF32) {
  auto dev = cpu_device();
  const int64_t B = 2, T = 8, C = 16, H = 2, Vocab = 11;
  auto x = random_floats(B * T * C, 1), dy = random_floats(B * T * C, 2), dlogits = random_floats(B * T * Vocab, 3);
  for (DType half : {DType::f16, DType::bf16}) {
    const double tol = half == DType::f16 ? 4e-3 : 3e-2;  // a few units of the half's last place
    const std::string name = dtype_name(half);
    TransformerBlock ref(*dev, 0, 0, C, H, T), amp(*dev, 0, 0, C, H, T);
    set_parameters(ref, 600);
    set_parameters(amp, 600);
    amp.set_precision(half);
    amp.refresh_half_weights();
    Tensor y_ref = ref.forward(upload(*dev, x, {B * T, C})), y_amp = amp.forward(upload(*dev, x, {B * T, C}));
    EXPECT_EQ(y_amp.dtype(), DType::f32) << name;
    EXPECT_LT(relative_difference(download(*dev, y_amp), download(*dev, y_ref)), tol) << name << " y";
    Tensor dx_ref = ref.backward(upload(*dev, dy, {B * T, C}), true);
    Tensor dx_amp = amp.backward(upload(*dev, dy, {B * T, C}), true);
    EXPECT_EQ(dx_amp.dtype(), DType::f32) << name;
    EXPECT_LT(relative_difference(download(*dev, dx_amp), download(*dev, dx_ref)), 2 * tol) << name << " dx";
    const auto g_ref = gradients(ref), g_amp = gradients(amp);
    const auto names = parameter_names(ref);
    for (size_t i = 0; i < g_ref.size(); ++i)
      EXPECT_LT(relative_difference(g_amp[i], g_ref[i]), 2 * tol) << name << " " << names[i];

    LmHead head_ref(*dev, 1, C, Vocab), head_amp(*dev, 1, C, Vocab);
    set_parameters(head_ref, 700);
    set_parameters(head_amp, 700);
    head_amp.set_precision(half);
    head_amp.refresh_half_weights();
    Tensor l_ref = head_ref.forward(upload(*dev, x, {B * T, C})), l_amp = head_amp.forward(upload(*dev, x, {B * T, C}));
    EXPECT_EQ(l_amp.dtype(), half);  // logits in half, as softmax_xent takes them
    Tensor d_half = dev->empty({B * T, Vocab}, half, MemoryCategory::activations);
    dev->cast({"test"}, upload(*dev, dlogits, {B * T, Vocab}), d_half);
    Tensor hx_ref = head_ref.backward(upload(*dev, dlogits, {B * T, Vocab}), true), hx_amp = head_amp.backward(d_half, true);
    EXPECT_EQ(hx_amp.dtype(), DType::f32);
    EXPECT_LT(relative_difference(download(*dev, hx_amp), download(*dev, hx_ref)), 2 * tol) << name << " head dx";

    TokenEmbedding emb(*dev, 0, Vocab, T, C);
    emb.set_precision(half);  // accepted, and stays f32
    EXPECT_EQ(emb.forward(dev->zeros({B, T}, DType::f32, MemoryCategory::activations)).dtype(), DType::f32);
    emb.clear_saved();
  }
}

TEST(TransformerLayers, AGptModelFromItsSpecTrainsAStep) {
  auto dev = cpu_device();
  const ModelSpec spec = ModelSpec::parse("gpt:2-16-2-8-11");
  const HostWeights init = init_weights(spec, 7);
  Model model(*dev, init);
  ASSERT_EQ(model.layers().size(), 4u);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(model.layers()[static_cast<size_t>(l)].name(), spec.layer_name(l));
  const auto params = model.parameters();
  ASSERT_EQ(params.size(), spec.tensors().size());
  for (size_t p = 0; p < params.size(); ++p) {
    EXPECT_EQ(params[p]->name, spec.tensors()[p].name);
    EXPECT_EQ(params[p]->value.shape(), spec.tensors()[p].shape);
    EXPECT_EQ(params[p]->layer, spec.tensors()[p].layer);
  }
  EXPECT_EQ(model.download().values, init.values);

  const int64_t B = 3, T = 8, V = 11;
  Rng r(8);
  std::vector<float> ids(static_cast<size_t>(B * T));
  std::vector<int32_t> labels(static_cast<size_t>(B * T));
  for (float& id : ids) id = static_cast<float>(r.below(V));
  for (int32_t& l : labels) l = static_cast<int32_t>(r.below(V));
  Tensor logits = model.forward(upload(*dev, ids, {B, T}));
  EXPECT_EQ(logits.shape(), (std::vector<int64_t>{B * T, V}));
  Tensor tlabels = dev->empty({B * T}, DType::i32, MemoryCategory::activations);
  dev->upload({"labels", Phase::data}, tlabels, labels.data());
  Tensor dlogits = dev->empty(logits.shape(), DType::f32, MemoryCategory::activations);
  const double loss = dev->softmax_xent({"loss"}, logits, tlabels, dlogits);
  EXPECT_NEAR(loss, std::log(11.0), 0.3);  // small initial weights: near-uniform predictions
  model.backward(dlogits);
  double norm = 0;
  for (Parameter* p : params)
    for (float g : download(*dev, p->grad)) norm += static_cast<double>(g) * g;
  EXPECT_GT(norm, 0);
  EXPECT_TRUE(std::isfinite(norm));
}

// What a block keeps for its backward, in the ledger, against Korthikanti et al. (2022)'s count
// without dropout: 16·s·b·h values (32 bytes in 16-bit: LayerNorms' inputs, q k v, attention's
// output, the MLP's input, its 4h before and after GELU) + a·s²·b (the softmax), here in f32, plus
// a mean and an rstd per token for each LayerNorm. With recompute a block keeps only its output.
TEST(TransformerLayers, SavedActivationsAreTheClosedForm) {
  EventBus bus;
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile(std::string(SCALELAB_SOURCE_DIR) + "/profiles/h100-nvswitch-8.json");
  o.dry_run = true;
  auto dev = std::move(make_devices(o).front());
  const int64_t s = 256, b = 2, h = 512, a = 8, L = 3;
  for (bool recompute : {false, true}) {
    std::vector<std::unique_ptr<TransformerBlock>> blocks;
    for (int i = 0; i < L; ++i) {
      blocks.push_back(std::make_unique<TransformerBlock>(*dev, i, i, h, a, s));
      blocks.back()->set_recompute(recompute);
    }
    Tensor x = dev->empty({b * s, h}, DType::f32, MemoryCategory::activations);
    const int64_t before = dev->memory().live(MemoryCategory::activations);
    Tensor y = x;
    for (auto& block : blocks) y = block->forward(y);
    const int64_t kept = dev->memory().live(MemoryCategory::activations) - before;
    const int64_t per_block = recompute ? 4 * s * b * h : 4 * (16 * s * b * h + a * s * s * b + 4 * s * b);
    EXPECT_EQ(kept, L * per_block) << (recompute ? "with recompute" : "without recompute");
    y = Tensor();
    for (auto& block : blocks) block->clear_saved();
    EXPECT_EQ(dev->memory().live(MemoryCategory::activations), before);
  }
}

TEST(TransformerLayers, BadShapesAndMisuseSayWhatToDo) {
  auto dev = cpu_device();
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.component(), "nn");
      return e.message();
    }
    return std::string("no error");
  };
  TokenEmbedding emb(*dev, 0, 10, 4, 8);
  TransformerBlock block(*dev, 1, 0, 8, 2, 4);
  LmHead head(*dev, 2, 8, 10);
  EXPECT_NE(message([&] { emb.output_shape({2, 5}); }).find("embed expects token ids {B, 4}"), std::string::npos);
  EXPECT_NE(message([&] { block.output_shape({6, 8}); }).find("6 rows is not a multiple of the context 4"),
            std::string::npos);
  EXPECT_NE(message([&] { block.output_shape({8, 6}); }).find("block0 expects {B·T, 8} (a row per token), got [8,6]"),
            std::string::npos);
  EXPECT_NE(message([&] { head.output_shape({8, 5}); }).find("head expects {B·T, 8}"), std::string::npos);
  EXPECT_NE(message([&] { TransformerBlock(*dev, 0, 0, 10, 3, 4); }).find("10 does not split into 3 heads"),
            std::string::npos);
  EXPECT_NE(message([&] { block.backward(dev->zeros({8, 8}, DType::f32, MemoryCategory::activations), true); })
                .find("block0: backward without a forward"),
            std::string::npos);
  EXPECT_NE(message([&] { block.set_precision(DType::i32); }).find("block0 cannot compute in i32"), std::string::npos);
  block.set_precision(DType::bf16);
  EXPECT_NE(message([&] { block.forward(dev->zeros({8, 8}, DType::bf16, MemoryCategory::activations)); })
                .find("block0 takes its input in f32"),
            std::string::npos);
}

}  // namespace
