// Lab 10's checks (the instructor's test program). The grader builds it with the student's
// tensor_parallel.cpp and runs one check per process: `harness CHECK [--key value]...`, exit 0
// passed, 1 failed. A small network, embed (whole) → the student's TpMlp (+ residual) → head
// (whole), trained on N rank threads, each on the whole batch; the reference is the same network,
// its MLP whole, on one device. Memory is read from each rank's ledger, collectives from the trace.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/linear.h"
#include "core/nn/optimizer.h"
#include "core/trace/events.h"
#include "lab.h"
#include "labs/common/reference.h"
#include "labs/common/world.h"
#include "labs/common/verdict.h"

using namespace scalelab;
using lab::Args;
using lab::str;
using lab10::Range;

namespace {

// A rank that never comes makes the others give up after this long, naming it.
constexpr auto kCommTimeout = std::chrono::milliseconds(2000);
constexpr int64_t kFeatures = 12, kClasses = 5;
constexpr float kLr = 0.1f;

std::string range_text(Range r) { return "[" + str(r.begin) + ", " + str(r.end) + ")"; }
std::string ranges_text(const std::vector<Range>& v) {
  std::string s;
  for (Range r : v) s += (s.empty() ? "" : ", ") + range_text(r);
  return s.empty() ? "none" : s;
}
bool same(Range a, Range b) { return a.begin == b.begin && a.end == b.end; }

// Task 1: every rank's part of each split weight against the closed form.
void split_layout(const Args&) {
  struct Case {
    int64_t C, H;
    int N;
  };
  const std::vector<Case> cases = {{8, 4, 2},    {16, 4, 4},   {128, 4, 2}, {768, 12, 4}, {768, 12, 3},
                                   {768, 12, 12}, {12, 3, 3},  {64, 8, 1},  {1024, 16, 8}, {96, 6, 2}};
  for (const Case& c : cases)
    for (int r = 0; r < c.N; ++r) {
      const int64_t share = c.C / c.N, features = 4 * c.C / c.N;
      std::vector<Range> qkv;
      for (int64_t part = 0; part < 3; ++part) qkv.push_back({part * c.C + r * share, part * c.C + (r + 1) * share});
      const Range proj{r * share, (r + 1) * share}, fc{r * features, (r + 1) * features};
      const lab10::TpLayout got = lab10::tp_layout(c.C, c.H, c.N, r);
      const std::string what = "tp_layout(C = " + str(c.C) + ", H = " + str(c.H) + ", N = " + str(c.N) + ", rank " +
                               str(r) + ")";
      bool qkv_ok = got.qkv_rows.size() == 3;
      for (size_t k = 0; qkv_ok && k < 3; ++k) qkv_ok = same(got.qkv_rows[k], qkv[k]);
      lab::expect(qkv_ok, what + ": the rows of attn.qkv.weight {3C, C} — heads " + str(r * c.H / c.N) + "…" +
                              str((r + 1) * c.H / c.N - 1) + " of q, of k and of v",
                  ranges_text(qkv), ranges_text(got.qkv_rows));
      lab::expect(same(got.proj_cols, proj), what + ": the columns of attn.proj.weight {C, C} (row-parallel)",
                  range_text(proj), range_text(got.proj_cols));
      lab::expect(same(got.fc_rows, fc), what + ": the rows of mlp.fc.weight {4C, C} (column-parallel)",
                  range_text(fc), range_text(got.fc_rows));
      lab::expect(same(got.mlp_proj_cols, fc), what + ": the columns of mlp.proj.weight {C, 4C} (row-parallel)",
                  range_text(fc), range_text(got.mlp_proj_cols));
    }
  std::printf("passed: tp_layout on %zu (C, H, N) cases, every rank: q, k and v's rows of its heads, attn.proj's "
              "columns, the MLP's 4C/N features\n", cases.size());
}

// Task 1: heads that N does not divide are refused with a message naming both.
void heads_not_divisible(const Args&) {
  const std::vector<std::vector<int64_t>> cases = {{16, 4, 3}, {768, 12, 8}, {12, 3, 2}, {64, 8, 16}};
  for (const auto& c : cases) {
    const std::string what = "tp_layout(C = " + str(c[0]) + ", H = " + str(c[1]) + ", N = " + str(c[2]) + ", rank 0)";
    std::string message;
    try {
      lab10::tp_layout(c[0], c[1], static_cast<int>(c[2]), 0);
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    lab::expect(!message.empty(), what + ": " + str(c[1]) + " heads cannot be shared equally by " + str(c[2]) + " ranks",
                "std::invalid_argument", "no exception");
    lab::expect(message.find(str(c[1])) != std::string::npos && message.find(str(c[2])) != std::string::npos,
                what + ": the error's message", "it names the heads (" + str(c[1]) + ") and the ranks (" + str(c[2]) + ")",
                "\"" + message + "\"");
  }
  std::printf("passed: %zu shapes whose heads N does not divide refused, naming H and N\n", cases.size());
}

// The network's whole weights (seeded): embed {C, F} + {C}, the MLP, head {K, C} + {K}.
struct NetWeights {
  std::vector<float> embed_w, embed_b, head_w, head_b;
  lab10::MlpWeights mlp;
};

NetWeights make_weights(int64_t C) {
  std::mt19937 rng(7);
  auto draw = [&](int64_t n, double scale) {
    std::normal_distribution<float> d(0.0f, static_cast<float>(scale));
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng);
    return v;
  };
  NetWeights w;
  w.embed_w = draw(C * kFeatures, 1.0 / std::sqrt(kFeatures));
  w.embed_b = draw(C, 0.1);
  w.mlp.fc_w = draw(4 * C * C, 1.0 / std::sqrt(C));
  w.mlp.fc_b = draw(4 * C, 0.1);
  w.mlp.proj_w = draw(C * 4 * C, 1.0 / std::sqrt(4 * C));
  w.mlp.proj_b = draw(C, 0.5);  // large enough that a bias added N times shows
  w.head_w = draw(kClasses * C, 1.0 / std::sqrt(C));
  w.head_b = draw(kClasses, 0.1);
  return w;
}

std::string data_model(int64_t C) { return "mlp:" + str(kFeatures) + "-" + str(C) + "-" + str(kClasses); }

OptimizerConfig sgd() {
  OptimizerConfig c;
  c.kind = "sgd";
  c.lr = kLr;
  c.momentum = 0.0f;
  return c;
}

void load(Device& d, Parameter& p, const std::vector<float>& v) { d.upload({p.name, Phase::data}, p.value, v.data()); }

Tensor upload_batch(Device& device, const HostBatch& b, Tensor& y) {
  Tensor x = device.empty({b.size, b.features}, DType::f32, MemoryCategory::activations, "batch.x");
  y = device.empty({b.size}, DType::i32, MemoryCategory::activations, "batch.y");
  device.upload({"batch.x", Phase::data}, x, b.x.data());
  device.upload({"batch.y", Phase::data}, y, b.y.data());
  return x;
}

// What a run leaves: the whole weights (the MLP's put together from the ranks' parts), the MLP's
// input gradient of the first step, and per rank what the checks read.
struct Collective {
  std::string what;
  int64_t bytes = 0;  // what this rank sends (nccl-tests' count: its events' bytes added up)
};
struct RankResult {
  std::vector<std::vector<float>> mine;  // embed w, b, head w, b, then its four MLP parameters
  std::vector<float> dx0;                // the MLP's backward's result in step 0
  int64_t params_bytes = 0, grads_bytes = 0;  // the most the MLP added to each category
  std::vector<std::vector<Collective>> fwd, bwd;  // per step
};
struct Run {
  std::vector<std::vector<float>> whole;  // embed w, b, head w, b, fc w, b, proj w, b
  std::vector<float> dx0;
  std::vector<RankResult> ranks;
};

// The reference: the same network on one device, its MLP whole.
Run train_single(int64_t C, const std::vector<HostBatch>& batches) {
  EventBus bus;
  DeviceOptions o;
  o.bus = &bus;
  auto devices = make_devices(o);
  Device& d = *devices[0];
  const NetWeights w = make_weights(C);
  Linear embed(d, 0, "embed", kFeatures, C, Activation::relu), fc(d, 1, "mlp.fc", C, 4 * C, Activation::none),
      proj(d, 1, "mlp.proj", 4 * C, C, Activation::none), head(d, 2, "head", C, kClasses, Activation::none);
  load(d, embed.weight, w.embed_w), load(d, embed.bias, w.embed_b), load(d, head.weight, w.head_w),
      load(d, head.bias, w.head_b), load(d, fc.weight, w.mlp.fc_w), load(d, fc.bias, w.mlp.fc_b),
      load(d, proj.weight, w.mlp.proj_w), load(d, proj.bias, w.mlp.proj_b);
  std::vector<Parameter*> params = {&embed.weight, &embed.bias, &head.weight, &head.bias,
                                    &fc.weight,    &fc.bias,    &proj.weight, &proj.bias};
  Optimizer opt(sgd(), params);
  Run out;
  for (size_t s = 0; s < batches.size(); ++s) {
    Tensor y;
    Tensor x = upload_batch(d, batches[s], y);
    Tensor h = embed.forward(x);
    Tensor f = fc.forward(h);
    Tensor g = d.empty(f.shape(), DType::f32, MemoryCategory::activations, "gelu");
    d.gelu({"gelu", Phase::fwd}, f, g);
    Tensor m = proj.forward(g);
    d.axpy({"residual", Phase::fwd}, 1.0f, h, m);
    Tensor logits = head.forward(m);
    Tensor dlogits = d.empty(logits.shape(), DType::f32, MemoryCategory::activations, "dlogits");
    d.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);
    Tensor dm = head.backward(dlogits, true);
    Tensor dz = d.empty(dm.shape(), DType::f32, MemoryCategory::activations, "dz");
    d.copy({"dz", Phase::bwd}, dm, dz);
    Tensor dg = proj.backward(dz, true);
    d.gelu_backward({"gelu", Phase::bwd}, dg, f, g, dg);
    Tensor dh = fc.backward(dg, true);
    if (s == 0) out.dx0 = d.download_f32({"dx", Phase::bwd}, dh);
    d.axpy({"residual", Phase::bwd}, 1.0f, dm, dh);
    embed.backward(dh, false);
    opt.step();
  }
  for (Parameter* p : params) out.whole.push_back(d.download_f32({p->name, Phase::data}, p->value));
  return out;
}

// The network on n ranks with the student's TpMlp. Each step's forward is stamped step 2s, its
// backward 2s + 1, so the trace says which pass each collective belongs to.
Run train_tp(int n, int64_t C, const std::vector<HostBatch>& batches) {
  auto w = lab::make_world(n, "", kCommTimeout);
  const NetWeights init = make_weights(C);
  const int64_t local = 4 * C / n;
  Run out;
  out.ranks.resize(static_cast<size_t>(n));
  lab::run_ranks(n, [&](int rank) {
    Device& d = *w->devices[static_cast<size_t>(rank)];
    ProcessGroup& group = *w->groups[static_cast<size_t>(rank)];
    RankResult& R = out.ranks[static_cast<size_t>(rank)];
    Linear embed(d, 0, "embed", kFeatures, C, Activation::relu), head(d, 2, "head", C, kClasses, Activation::none);
    load(d, embed.weight, init.embed_w), load(d, embed.bias, init.embed_b), load(d, head.weight, init.head_w),
        load(d, head.bias, init.head_b);
    const int64_t params_before = d.memory().live(MemoryCategory::params);
    const int64_t grads_before = d.memory().live(MemoryCategory::grads);
    lab10::TpMlp mlp(d, group, C, init.mlp);
    const std::vector<std::vector<int64_t>> shapes = {{local, C}, {local}, {C, local}, {C}};
    const std::vector<std::string> names = {"mlp.fc.weight {4C/N, C}", "mlp.fc.bias {4C/N}", "mlp.proj.weight {C, 4C/N}",
                                            "mlp.proj.bias {C}"};
    const std::vector<Parameter*> mine = mlp.parameters();
    lab::expect(mine.size() == 4, "rank " + str(rank) + ": TpMlp::parameters()", "4 parameters", str(mine.size()));
    for (size_t k = 0; k < 4; ++k)
      lab::expect(mine[k]->value.shape() == shapes[k] && mine[k]->grad.shape() == shapes[k],
                  "rank " + str(rank) + " of " + str(n) + ", C = " + str(C) + ": the shape of parameter " + str(k),
                  names[k] + " = " + shape_text(shapes[k]) + ", its gradient the same",
                  shape_text(mine[k]->value.shape()) + ", gradient " + shape_text(mine[k]->grad.shape()));
    std::vector<Parameter*> params = {&embed.weight, &embed.bias, &head.weight, &head.bias};
    params.insert(params.end(), mine.begin(), mine.end());
    Optimizer opt(sgd(), params);
    for (size_t s = 0; s < batches.size(); ++s) {
      d.set_step(static_cast<int64_t>(2 * s));
      Tensor y;
      Tensor x = upload_batch(d, batches[s], y);
      Tensor h = embed.forward(x);
      Tensor m = mlp.forward(h);
      lab::expect(m.shape() == h.shape(), "rank " + str(rank) + ": TpMlp::forward's result", shape_text(h.shape()),
                  shape_text(m.shape()));
      d.axpy({"residual", Phase::fwd}, 1.0f, h, m);
      Tensor logits = head.forward(m);
      Tensor dlogits = d.empty(logits.shape(), DType::f32, MemoryCategory::activations, "dlogits");
      d.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);
      d.set_step(static_cast<int64_t>(2 * s + 1));
      Tensor dm = head.backward(dlogits, true);
      Tensor dz = d.empty(dm.shape(), DType::f32, MemoryCategory::activations, "dz");
      d.copy({"dz", Phase::bwd}, dm, dz);
      Tensor dh = mlp.backward(dz);
      lab::expect(dh.shape() == h.shape(), "rank " + str(rank) + ": TpMlp::backward's result", shape_text(h.shape()),
                  shape_text(dh.shape()));
      if (s == 0) R.dx0 = d.download_f32({"dx", Phase::bwd}, dh);
      d.axpy({"residual", Phase::bwd}, 1.0f, dm, dh);
      embed.backward(dh, false);
      opt.step();
    }
    for (Parameter* p : params) R.mine.push_back(d.download_f32({p->name, Phase::data}, p->value));
    R.params_bytes = d.memory().peak(MemoryCategory::params) - params_before;
    R.grads_bytes = d.memory().peak(MemoryCategory::grads) - grads_before;
  });
  // The whole weights: the replicated ones rank 0's, the MLP's put together from every rank's part.
  const RankResult& R0 = out.ranks[0];
  for (size_t k = 0; k < 4; ++k) out.whole.push_back(R0.mine[k]);
  std::vector<float> fc_w, fc_b, proj_w(static_cast<size_t>(C * 4 * C));
  for (int r = 0; r < n; ++r) {
    const RankResult& R = out.ranks[static_cast<size_t>(r)];
    fc_w.insert(fc_w.end(), R.mine[4].begin(), R.mine[4].end());
    fc_b.insert(fc_b.end(), R.mine[5].begin(), R.mine[5].end());
    for (int64_t i = 0; i < C; ++i)
      for (int64_t j = 0; j < local; ++j)
        proj_w[static_cast<size_t>(i * 4 * C + r * local + j)] = R.mine[6][static_cast<size_t>(i * local + j)];
  }
  out.whole.push_back(fc_w), out.whole.push_back(fc_b), out.whole.push_back(proj_w), out.whole.push_back(R0.mine[7]);
  out.dx0 = R0.dx0;
  // Each rank's collectives per pass, in the order issued.
  for (const Event& e : w->bus.events()) {
    if (e.device < 0 || e.device >= n || e.step < 0 || e.lane != Lane::comm) continue;
    RankResult& R = out.ranks[static_cast<size_t>(e.device)];
    auto& passes = e.step % 2 == 0 ? R.fwd : R.bwd;
    const size_t s = static_cast<size_t>(e.step / 2);
    if (s >= passes.size()) passes.resize(s + 1);
    if (e.flow_id < 0) {  // a further step of the call before: its bytes are the call's
      if (!passes[s].empty()) passes[s].back().bytes += e.bytes;
      continue;
    }
    passes[s].push_back({e.kind, e.bytes});
  }
  for (RankResult& R : out.ranks) R.fwd.resize(batches.size()), R.bwd.resize(batches.size());
  return out;
}

// Per tensor the largest difference over the tensor's largest magnitude (as max_relative_difference).
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff > 0 ? diff / std::max(scale, 1e-30) : 0.0;
}

const char* kTensorNames[] = {"embed.weight", "embed.bias", "head.weight", "head.bias",
                              "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"};

int64_t hidden_of(const Args& a) { return std::stoll(a.get("hidden", "16")); }
std::vector<HostBatch> make_batches(const Args& a, int64_t C, int steps) {
  return lab::synthetic_batches(data_model(C), std::stoll(a.get("batch", "24")), steps, 2048, 11);
}

// Task 2: after 4 SGD steps the weights (the MLP's put together from the ranks' parts) are the
// single device's within 1e-5, and every rank's replicated weights are rank 0's, bit for bit.
void equivalence(const Args& a) {
  const int64_t C = hidden_of(a);
  const int steps = 4;
  const auto batches = make_batches(a, C, steps);
  const Run single = train_single(C, batches);
  std::string report;
  for (long long nl : a.ints("ranks", "2,4")) {
    const int n = static_cast<int>(nl);
    const Run tp = train_tp(n, C, batches);
    const std::string what = "embed → your TpMlp (C = " + str(C) + ", 4C = " + str(4 * C) + ") → head on " + str(n) +
                             " ranks, " + str(steps) + " SGD steps of batch " + str(batches[0].size);
    double worst = 0;
    for (size_t k = 0; k < 8; ++k) {
      const double diff = relative_difference(tp.whole[k], single.whole[k]);
      worst = std::max(worst, diff);
      lab::expect(std::isfinite(diff) && diff <= 1e-5, what + ": " + kTensorNames[k] + " against the single device's" +
                  (k < 4 ? " (rank 0's)" : " (every rank's part put together)"),
                  "max relative difference ≤ 1e-5", "max relative difference " + str(diff));
    }
    for (int r = 1; r < n; ++r)
      for (size_t k : {0, 1, 2, 3, 7}) {
        const std::vector<float>& mine = tp.ranks[static_cast<size_t>(r)].mine[k];
        lab::expect(mine == tp.ranks[0].mine[k], what + ": rank " + str(r) + "'s " + kTensorNames[k] + " (replicated)",
                    "rank 0's, bit for bit (every rank computes the same gradient for it)",
                    "max relative difference " + str(relative_difference(mine, tp.ranks[0].mine[k])));
      }
    char line[120];
    std::snprintf(line, sizeof line, "  %d ranks: max relative difference %.3g\n", n, worst);
    report += line;
  }
  std::printf("passed: the network with your TpMlp trains as the single device's does\n%s", report.c_str());
}

// Task 2: the MLP's input gradient (f's backward) in the first step: on every rank the whole
// gradient — the sum of the ranks' parts — within 1e-5 of the single device's.
void input_gradient(const Args& a) {
  const int64_t C = hidden_of(a);
  const auto batches = make_batches(a, C, 1);
  const Run single = train_single(C, batches);
  for (long long nl : a.ints("ranks", "2,4")) {
    const int n = static_cast<int>(nl);
    const Run tp = train_tp(n, C, batches);
    for (int r = 0; r < n; ++r) {
      const double diff = relative_difference(tp.ranks[static_cast<size_t>(r)].dx0, single.dx0);
      lab::expect(std::isfinite(diff) && diff <= 1e-5,
                  str(n) + " ranks: rank " + str(r) + "'s TpMlp::backward result (the gradient of the MLP's input), step 0",
                  "the single device's within 1e-5: every rank's fc_r gives a part, f's backward adds them",
                  "max relative difference " + str(diff));
    }
  }
  std::printf("passed: every rank's input gradient is the whole one (f's all-reduce)\n");
}

std::string calls_text(const std::vector<Collective>& calls) {
  std::string s;
  for (const Collective& c : calls) s += (s.empty() ? "" : ", ") + c.what + " " + str(c.bytes) + " B";
  return s.empty() ? "nothing" : s;
}

// Task 2: per rank per step, from the trace: forward exactly one all-reduce of the rows · C partial
// sums (g), backward exactly one of the rows · C input-gradient parts (f), each sending what a ring
// sends, 2(N−1)/N · 4 · rows · C bytes — and no other collective.
void collectives(const Args& a) {
  const int64_t C = hidden_of(a);
  const int steps = 2;
  const auto batches = make_batches(a, C, steps);
  std::string report;
  for (long long nl : a.ints("ranks", "2,4")) {
    const int n = static_cast<int>(nl);
    const Run tp = train_tp(n, C, batches);
    const int64_t rows = batches[0].size, bytes = 2 * (n - 1) * 4 * rows * C / n;
    const std::vector<Collective> want = {{"all_reduce", bytes}};
    auto same_calls = [&](const std::vector<Collective>& got) {
      return got.size() == 1 && got[0].what == want[0].what && got[0].bytes == want[0].bytes;
    };
    for (int r = 0; r < n; ++r)
      for (int s = 0; s < steps; ++s) {
        const RankResult& R = tp.ranks[static_cast<size_t>(r)];
        const std::string what = str(n) + " ranks, rows = " + str(rows) + ", C = " + str(C) + ": the collectives rank " +
                                 str(r) + " issues in step " + str(s) + "'s ";
        lab::expect(same_calls(R.fwd[static_cast<size_t>(s)]), what + "forward, with the bytes it sends",
                    calls_text(want) + " (g: one all-reduce of the partial sums Z_r, rows · C floats; f's forward is "
                                       "the identity)",
                    calls_text(R.fwd[static_cast<size_t>(s)]));
        lab::expect(same_calls(R.bwd[static_cast<size_t>(s)]), what + "backward, with the bytes it sends",
                    calls_text(want) + " (f: one all-reduce of the input gradient's parts, rows · C floats; g's "
                                       "backward is the identity)",
                    calls_text(R.bwd[static_cast<size_t>(s)]));
      }
    report += "  " + str(n) + " ranks: forward and backward one all_reduce of " + str(rows * C) + " floats each, " +
              str(bytes) + " B sent per rank\n";
  }
  std::printf("passed: per step one all-reduce forward (g) and one backward (f), nothing else\n%s", report.c_str());
}

// Task 2: what the MLP adds to each rank's ledger — params and grads each: 1/N of the split
// weights (fc's and proj's) and proj's bias whole, 4 · (2 · 4C · C/N + 4C/N + C) bytes.
void param_bytes(const Args& a) {
  const int64_t C = hidden_of(a);
  const auto batches = make_batches(a, C, 2);
  std::string report;
  for (long long nl : a.ints("ranks", "2,4")) {
    const int n = static_cast<int>(nl);
    const Run tp = train_tp(n, C, batches);
    const int64_t want = 4 * (2 * 4 * C * C / n + 4 * C / n + C), whole = 4 * (2 * 4 * C * C + 4 * C + C);
    for (int r = 0; r < n; ++r) {
      const RankResult& R = tp.ranks[static_cast<size_t>(r)];
      const std::string what = str(n) + " ranks, C = " + str(C) + ": the bytes your TpMlp added to rank " + str(r) + "'s ";
      const std::string expected = str(want) + " B = 4 · (2 · 4C · C/N + 4C/N + C): its parts of fc and proj, proj.bias "
                                   "whole (the whole MLP: " + str(whole) + " B)";
      lab::expect(R.params_bytes == want, what + "params (the ledger's peak, from the constructor to the last step)",
                  expected, str(R.params_bytes) + " B");
      lab::expect(R.grads_bytes == want, what + "grads (the ledger's peak)", expected, str(R.grads_bytes) + " B");
    }
    report += "  " + str(n) + " ranks: " + str(want) + " B of params and of grads per rank (the whole MLP " +
              str(4 * (2 * 4 * C * C + 4 * C + C)) + " B)\n";
  }
  std::printf("passed: each rank holds 1/N of the MLP's split weights and their gradients\n%s", report.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                          {{"split_layout", split_layout},
                           {"heads_not_divisible", heads_not_divisible},
                           {"equivalence", equivalence},
                           {"input_gradient", input_gradient},
                           {"collectives", collectives},
                           {"param_bytes", param_bytes}});
}
