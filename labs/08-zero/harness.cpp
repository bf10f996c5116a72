// Lab 08's checks (the instructor's test program). The grader builds it with the student's
// zero.cpp and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed,
// 1 failed. The ZeRO step is strategies/zero.cpp's rank_step with the student's ZeroAdam in place
// of the library's sharded optimizer; the reference is a plain single-device Adam loop. Memory is
// read from each rank's device ledger, so the byte counts are exact and machine-independent.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/trace/events.h"
#include "lab.h"
#include "labs/common/reference.h"
#include "labs/common/world.h"
#include "strategies/distributed_sampler.h"
#include "labs/common/verdict.h"

using namespace scalelab;
using lab::Args;
using lab::str;

namespace {

// A rank that never comes makes the others give up after this long, naming it.
constexpr auto kCommTimeout = std::chrono::milliseconds(2000);
// 16-13-4: P = 277 parameters, which neither 2, 3, 4 nor 5 divides: the padding is exercised.
const std::string kModel = "mlp:16-13-4";
constexpr float kLr = 0.01f;
// Adam with L2 weight decay (PyTorch's Adam(weight_decay=…)): the gradient's scale then matters, so
// a sum where the average belongs shows (plain Adam is nearly blind to a constant factor).
constexpr float kWeightDecay = 0.01f;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string shard_text(const lab08::Shard& s) {
  return "padded " + str(s.padded) + ", size " + str(s.size) + ", [" + str(s.begin) + ", " + str(s.end) + ")";
}

// Task 1: the shard arithmetic against the closed form, for P divisible by N and not.
void shard_layout(const Args&) {
  const std::vector<std::pair<int64_t, int>> cases = {
      {10, 4}, {12, 4}, {277, 2}, {277, 4}, {277, 3}, {1, 4}, {7, 1}, {100, 7}, {235146, 4}, {235146, 8}, {5, 8}};
  for (const auto& [p, n] : cases)
    for (int r = 0; r < n; ++r) {
      lab08::Shard want;
      want.size = ceil_div(p, n);
      want.padded = want.size * n;
      want.begin = r * want.size;
      want.end = want.begin + want.size;
      const lab08::Shard got = lab08::shard_of(p, n, r);
      lab::expect(got.padded == want.padded && got.size == want.size && got.begin == want.begin && got.end == want.end,
                  "shard_of(P = " + str(p) + ", N = " + str(n) + ", rank " + str(r) + ")" +
                      (p % n ? " — P is not a multiple of N: pad to the next one" : ""),
                  shard_text(want), shard_text(got));
    }
  std::printf("passed: shard_of on %zu (P, N) cases, every rank (P' = ⌈P/N⌉·N, rank r owns [r·S, (r+1)·S))\n",
              cases.size());
}

std::vector<HostBatch> make_batches(const std::string& model, int64_t batch, int steps) {
  return lab::synthetic_batches(model, batch, steps, 2048, 11);
}

// One thing a rank does in a step that the lecture orders: a collective call (its events' bytes
// added up: what this rank sends) or its Adam op.
struct Call {
  std::string what;   // "all_reduce", "reduce_scatter", "all_gather", … or "adam"
  int64_t bytes = 0;  // a collective: the bytes this rank sends (nccl-tests' count)
  int64_t comm_buffers_live = 0;  // the rank's comm_buffers bytes when the call was issued
};

struct RankResult {
  HostWeights weights;
  int64_t optimizer_peak = 0;  // the most the optimizer category ever held
  int64_t grads_kept = 0;      // grads + comm_buffers live between steps (after the last)
  int64_t grads_live = 0, comm_live = 0;
  int all_reduces = 0, reduce_scatters = 0, all_gathers = 0;
  // The most grads and comm_buffers held during the steps (after ZeroAdam's constructor: the
  // model's own gradients, freed by flatten_parameters, do not count).
  int64_t grads_step_peak = 0, comm_step_peak = 0;
  std::vector<std::vector<Call>> steps;  // per step, in the order issued
  int64_t padding_nonzero = -1;  // after the steps: the padding floats of the flat weights that are not 0
};

// Leaves a freed block of `floats` floats full of NaN in the cpu device's cache of blocks, so that
// the next buffer of that size the rank allocates without zeroing starts as NaN, not as whatever
// the allocator happened to hold: a bucket whose padding is never zeroed shows on every run.
void poison_next_buffer(Device& device, int64_t floats) {
  Tensor t = device.empty({floats}, DType::f32, MemoryCategory::workspace, "harness.poison");
  std::fill_n(t.data<float>(), floats, std::numeric_limits<float>::quiet_NaN());
}

// The floats of the flat weight buffer past the P parameters (the last parameter is a view of it)
// that are not exactly 0.
int64_t padding_nonzero(Model& model, int64_t params) {
  const auto& storage = model.parameters().back()->value.storage();
  const float* flat = static_cast<const float*>(storage->data);
  int64_t bad = 0;
  for (int64_t i = params; i < storage->bytes / 4; ++i) bad += flat[i] != 0.0f;
  return bad;
}

// A change of one category's live bytes on a rank's ledger, and how many events the bus held then:
// the change came after those events and before the next ones, so it can be placed among the
// rank's ops exactly (the timestamps of two threads' clocks need not agree).
struct LedgerChange {
  size_t events_before = 0;
  MemoryCategory category = MemoryCategory::params;
  int64_t live = 0;
};

// ZeRO with the student's ZeroAdam: every rank on its DistributedSampler rows of each batch.
std::vector<RankResult> train_zero(int n, int stage, const std::string& model_spec,
                                   const std::vector<HostBatch>& batches) {
  std::vector<std::vector<LedgerChange>> changes(static_cast<size_t>(n));  // outlives the devices
  auto w = lab::make_world(n, "", kCommTimeout);
  for (int r = 0; r < n; ++r)  // each rank's ledger reports to its own list (only its thread allocates)
    w->devices[static_cast<size_t>(r)]->memory().set_listener(
        [&changes, &bus = w->bus, r](MemoryCategory c, int64_t live) {
          changes[static_cast<size_t>(r)].push_back({bus.event_count(), c, live});
        });
  const HostWeights init = init_weights(ModelSpec::parse(model_spec), 7);
  const int64_t P = ModelSpec::parse(model_spec).parameter_count(), padded = ceil_div(P, n) * n;
  std::vector<RankResult> out(static_cast<size_t>(n));
  std::vector<size_t> constructed(static_cast<size_t>(n), 0);  // ledger changes before the first step
  lab::run_ranks(n, [&](int rank) {
    Device& device = *w->devices[static_cast<size_t>(rank)];
    ProcessGroup& group = *w->groups[static_cast<size_t>(rank)];
    Model model(device, init);  // the same initial weights on every rank
    AdamOptions adam;
    adam.lr = kLr;
    adam.weight_decay = kWeightDecay;
    lab08::ZeroAdam opt(model, group, stage, adam);
    RankResult& R = out[static_cast<size_t>(rank)];
    R.grads_step_peak = device.memory().live(MemoryCategory::grads);
    R.comm_step_peak = device.memory().live(MemoryCategory::comm_buffers);
    constructed[static_cast<size_t>(rank)] = changes[static_cast<size_t>(rank)].size();
    HostBatch shard;
    for (size_t s = 0; s < batches.size(); ++s) {
      device.set_step(static_cast<int64_t>(s));
      take_shard(batches[s], rank, n, shard);
      Tensor x = device.empty({shard.size, shard.features}, DType::f32, MemoryCategory::activations, "batch.x");
      Tensor y = device.empty({shard.size}, DType::i32, MemoryCategory::activations, "batch.y");
      device.upload({"batch.x", Phase::data}, x, shard.x.data());
      device.upload({"batch.y", Phase::data}, y, shard.y.data());
      Tensor logits = model.forward(x);
      Tensor dlogits = device.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
      device.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);
      poison_next_buffer(device, padded);
      opt.prepare_backward();
      model.backward(dlogits);
      opt.step();
    }
    R.weights = model.download();
    R.padding_nonzero = padding_nonzero(model, P);
    R.optimizer_peak = device.memory().peak(MemoryCategory::optimizer);
    R.grads_live = device.memory().live(MemoryCategory::grads);
    R.comm_live = device.memory().live(MemoryCategory::comm_buffers);
    R.grads_kept = R.grads_live + R.comm_live;
  });
  for (int r = 0; r < n; ++r) {
    RankResult& R = out[static_cast<size_t>(r)];
    const auto& ch = changes[static_cast<size_t>(r)];
    for (size_t k = constructed[static_cast<size_t>(r)]; k < ch.size(); ++k) {
      if (ch[k].category == MemoryCategory::grads) R.grads_step_peak = std::max(R.grads_step_peak, ch[k].live);
      if (ch[k].category == MemoryCategory::comm_buffers) R.comm_step_peak = std::max(R.comm_step_peak, ch[k].live);
    }
  }
  // The rank's comm_buffers bytes when the bus held `count` events: the last change before then.
  auto comm_live_at = [&changes](int rank, size_t count) {
    int64_t live = 0;
    for (const LedgerChange& c : changes[static_cast<size_t>(rank)]) {
      if (c.events_before > count) break;
      if (c.category == MemoryCategory::comm_buffers) live = c.live;
    }
    return live;
  };
  const std::vector<Event> events = w->bus.events();
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.device < 0 || e.device >= n || e.step < 0) continue;
    RankResult& R = out[static_cast<size_t>(e.device)];
    if (static_cast<size_t>(e.step) >= R.steps.size()) R.steps.resize(static_cast<size_t>(e.step) + 1);
    std::vector<Call>& calls = R.steps[static_cast<size_t>(e.step)];
    if (e.kind == "adam") calls.push_back({"adam", 0, comm_live_at(e.device, i)});
    if (e.lane != Lane::comm) continue;
    if (e.flow_id < 0) {  // a further step of the call before: its bytes are the call's
      if (!calls.empty()) calls.back().bytes += e.bytes;
      continue;
    }
    calls.push_back({e.kind, e.bytes, comm_live_at(e.device, i)});
    if (e.role == Role::all_reduce) ++R.all_reduces;
    if (e.role == Role::reduce_scatter) ++R.reduce_scatters;
    if (e.role == Role::all_gather) ++R.all_gathers;
  }
  return out;
}

HostWeights train_single(const std::string& model_spec, const std::vector<HostBatch>& batches) {
  OptimizerConfig c;
  c.kind = "adam";
  c.lr = kLr;
  c.weight_decay = kWeightDecay;
  return lab::train_single(model_spec, c, batches);
}

int stage_of(const Args& a) {
  const int stage = static_cast<int>(std::stoll(a.get("stage", "1")));
  if (stage != 1 && stage != 2) throw std::invalid_argument("harness: --stage is 1 or 2");
  return stage;
}

// Task 2: after 5 Adam steps every rank holds single's weights (≤ 1e-5), replicas bit for bit
// equal, and the collectives of the stage: stage 1 one all-reduce + one all-gather per step,
// stage 2 one reduce-scatter + one all-gather.
void equivalence(const Args& a) {
  const int stage = stage_of(a);
  const auto ranks = a.ints("ranks", "2,4");
  const std::string model = a.get("model", kModel);
  const int steps = 5;
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const auto batches = make_batches(model, batch, steps);
  const HostWeights single = train_single(model, batches);
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const auto r = train_zero(n, stage, model, batches);
    const std::string what = "ZeRO stage " + str(stage) + " with your ZeroAdam, " + str(n) + " ranks, " + model +
                             ", " + str(steps) + " Adam steps of batch " + str(batch);
    const double diff = max_relative_difference(r[0].weights, single);
    char line[160];
    std::snprintf(line, sizeof line, "%d ranks: max relative difference %.3g", n, diff);
    lab::expect(std::isfinite(diff) && diff <= 1e-5, what + ": rank 0's weights against single's Adam",
                "max relative difference ≤ 1e-5", line);
    for (int k = 1; k < n; ++k)
      lab::expect(weights_checksum(r[static_cast<size_t>(k)].weights) == weights_checksum(r[0].weights),
                  what + ": rank " + str(k) + "'s weights",
                  "rank 0's, bit for bit (every rank all-gathers the same shards)",
                  "max relative difference " + str(max_relative_difference(r[static_cast<size_t>(k)].weights, r[0].weights)));
    for (int k = 0; k < n; ++k) {
      const RankResult& R = r[static_cast<size_t>(k)];
      const int want_ar = stage == 1 ? steps : 0, want_rs = stage == 2 ? steps : 0;
      lab::expect(R.all_reduces == want_ar && R.reduce_scatters == want_rs && R.all_gathers == steps,
                  what + ": the collectives of rank " + str(k),
                  "per step: " + std::string(stage == 1 ? "one all-reduce" : "one reduce-scatter (no all-reduce)") +
                      " and one all-gather — " + str(want_ar) + " all-reduces, " + str(want_rs) +
                      " reduce-scatters, " + str(steps) + " all-gathers",
                  str(R.all_reduces) + " all-reduces, " + str(R.reduce_scatters) + " reduce-scatters, " +
                      str(R.all_gathers) + " all-gathers");
    }
    report += std::string("  ") + line + "\n";
  }
  std::printf("passed: ZeRO stage %d with your ZeroAdam trains as single's Adam does\n%s", stage, report.c_str());
}

// Task 2: per rank, the optimizer state's peak in the ledger is Adam's m and v for one shard:
// 2 · 4 · ⌈P/N⌉ bytes exactly, stages 1 and 2.
void optimizer_bytes(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const std::string model = a.get("model", kModel);
  const int64_t P = ModelSpec::parse(model).parameter_count();
  const auto batches = make_batches(model, std::stoll(a.get("batch", "32")), 2);  // a multiple of every N
  std::string report;
  for (int stage : {1, 2})
    for (long long nl : ranks) {
      const int n = static_cast<int>(nl);
      const auto r = train_zero(n, stage, model, batches);
      const int64_t want = 2 * 4 * ceil_div(P, n);
      for (int k = 0; k < n; ++k)
        lab::expect(r[static_cast<size_t>(k)].optimizer_peak == want,
                    "ZeRO stage " + str(stage) + ", " + str(n) + " ranks, " + model + " (P = " + str(P) +
                        "): the optimizer memory of rank " + str(k) + " (its ledger's peak, category optimizer)",
                    "2 · 4 · ⌈P/N⌉ = " + str(want) + " bytes (Adam's m and v for its shard only; single keeps " +
                        str(2 * 4 * P) + ")",
                    str(r[static_cast<size_t>(k)].optimizer_peak) + " bytes");
      report += "  stage " + str(stage) + ", " + str(n) + " ranks: " + str(want) + " bytes per rank\n";
    }
  std::printf("passed: optimizer state per rank = 2 · 4 · ⌈P/N⌉ bytes (P = %lld; single: %lld)\n%s",
              static_cast<long long>(P), static_cast<long long>(2 * 4 * P), report.c_str());
}

// Task 2: the gradient memory each rank keeps between steps (grads + comm_buffers live after the
// last step): stage 2, its shard only, 4 · ⌈P/N⌉; stage 1, the whole padded gradient, 4 · P'.
void gradient_bytes(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const std::string model = a.get("model", kModel);
  const int64_t P = ModelSpec::parse(model).parameter_count();
  const auto batches = make_batches(model, std::stoll(a.get("batch", "32")), 2);  // a multiple of every N
  std::string report;
  for (int stage : {2, 1})
    for (long long nl : ranks) {
      const int n = static_cast<int>(nl);
      const auto r = train_zero(n, stage, model, batches);
      const int64_t S = ceil_div(P, n), want = stage == 2 ? 4 * S : 4 * S * n;
      for (int k = 0; k < n; ++k) {
        const RankResult& R = r[static_cast<size_t>(k)];
        lab::expect(R.grads_kept == want,
                    "ZeRO stage " + str(stage) + ", " + str(n) + " ranks, " + model + " (P = " + str(P) +
                        "): the gradient bytes rank " + str(k) + " keeps between steps (live grads + comm_buffers)",
                    stage == 2 ? "4 · ⌈P/N⌉ = " + str(want) + " bytes (its shard of the averaged gradient; the bucket "
                                 "backward wrote is freed after the reduce-scatter)"
                               : "4 · P' = " + str(want) + " bytes (the whole padded flat gradient)",
                    str(R.grads_kept) + " bytes (grads " + str(R.grads_live) + ", comm_buffers " + str(R.comm_live) + ")");
      }
      report += "  stage " + str(stage) + ", " + str(n) + " ranks: " + str(want) + " bytes per rank\n";
    }
  std::printf("passed: gradient bytes kept per rank (P = %lld)\n%s", static_cast<long long>(P), report.c_str());
}

// One run of the checks that read the trace and the ledgers: a stage, a world size, its ranks.
struct ZeroRun {
  int stage = 1, n = 2;
  std::string model;
  int64_t P = 0;
  size_t steps = 0;
  std::vector<RankResult> ranks;
  std::string what() const {
    return "ZeRO stage " + str(stage) + ", " + str(n) + " ranks, " + model + " (P = " + str(P) + ")";
  }
};

// Trains 2 steps for each stage of `stages` and each world size of --ranks, and hands each run to
// `check`.
template <typename Check>
void for_each_run(const Args& a, const std::vector<int>& stages, Check check) {
  const std::string model = a.get("model", kModel);
  const auto batches = make_batches(model, std::stoll(a.get("batch", "32")), 2);
  for (int stage : stages)
    for (long long n : a.ints("ranks", "2,4"))
      check(ZeroRun{stage, static_cast<int>(n), model, ModelSpec::parse(model).parameter_count(), batches.size(),
                    train_zero(static_cast<int>(n), stage, model, batches)});
}

// The calls of one step as text: "reduce_scatter 834 B, adam, all_gather 834 B".
std::string calls_text(const std::vector<Call>& calls) {
  std::string s;
  for (const Call& c : calls) s += (s.empty() ? "" : ", ") + c.what + (c.what == "adam" ? "" : " " + str(c.bytes) + " B");
  return s.empty() ? "nothing" : s;
}

// Order and bytes moved: per step, each rank issues the gradient's collective (stage 1 an
// all-reduce of the P' floats, stage 2 a reduce-scatter of them), then Adam on its shard, then one
// all-gather of the shards — and sends what a ring sends for those, nccl-tests' count: all-reduce
// 2(N−1)/N · 4P', reduce-scatter and all-gather (N−1)/N · 4P' each. So stage 2 moves exactly one
// all-reduce's bytes (ZeRO puts Adam between its two halves), stage 1 half as much again.
void collectives(const Args& a) {
  std::string report;
  for_each_run(a, {1, 2}, [&](const ZeroRun& run) {
    const int64_t padded = ceil_div(run.P, run.n) * run.n, half = (run.n - 1) * 4 * padded / run.n;
    const bool one = run.stage == 1;
    const std::vector<Call> want = {
        {one ? "all_reduce" : "reduce_scatter", one ? 2 * half : half}, {"adam", 0}, {"all_gather", half}};
    for (int k = 0; k < run.n; ++k)
      for (size_t s = 0; s < run.steps; ++s) {
        const auto& steps = run.ranks[static_cast<size_t>(k)].steps;
        const std::vector<Call> got = s < steps.size() ? steps[s] : std::vector<Call>{};
        bool same = got.size() == want.size();
        for (size_t i = 0; same && i < got.size(); ++i) same = got[i].what == want[i].what && got[i].bytes == want[i].bytes;
        lab::expect(same,
                    run.what() + ", P' = " + str(padded) + ": what rank " + str(k) + " issues in step " + str(s) +
                        ", in order, with the bytes it sends",
                    calls_text(want) + " (the gradient averaged, Adam on the shard, the shards gathered; " +
                        (one ? "one all-reduce of the flat gradient and one all-gather of the weights"
                             : "a reduce-scatter and an all-gather send one all-reduce's bytes") +
                        ")",
                    calls_text(got));
      }
    report += "  stage " + str(run.stage) + ", " + str(run.n) + " ranks: " + calls_text(want) + " a step: " +
              str(want[0].bytes + want[2].bytes) + " B sent per rank (one all-reduce: " + str(2 * half) + " B)\n";
  });
  std::printf("passed: per step the gradient's collective, Adam on the shard, the all-gather, in this order\n%s",
              report.c_str());
}

// Memory held per category during the steps, from each rank's ledger: the gradient the rank keeps
// is `grads` (stage 1 the whole padded flat gradient 4 · P', stage 2 only its shard 4 · ⌈P/N⌉), and
// the bucket backward writes before the reduce-scatter is a communication buffer (stage 2 4 · P' of
// comm_buffers; stage 1 none: its flat gradient is the one it keeps).
void memory_categories(const Args& a) {
  std::string report;
  for_each_run(a, {1, 2}, [&](const ZeroRun& run) {
    const int64_t S = ceil_div(run.P, run.n);
    const bool one = run.stage == 1;
    const int64_t want_grads = one ? 4 * S * run.n : 4 * S, want_comm = one ? 0 : 4 * S * run.n;
    for (int k = 0; k < run.n; ++k) {
      const RankResult& R = run.ranks[static_cast<size_t>(k)];
      lab::expect(R.grads_step_peak == want_grads && R.comm_step_peak == want_comm,
                  run.what() + ": the most rank " + str(k) + "'s ledger held during the steps, categories grads and "
                  "comm_buffers",
                  "grads " + str(want_grads) + " B, comm_buffers " + str(want_comm) + " B (" +
                      (one ? "the flat gradient of P' floats is kept: grads; no bucket"
                           : "the kept shard of S floats is grads; the P'-float bucket backward writes is comm_buffers") +
                      ")",
                  "grads " + str(R.grads_step_peak) + " B, comm_buffers " + str(R.comm_step_peak) + " B");
    }
    report += "  stage " + str(run.stage) + ", " + str(run.n) + " ranks: grads " + str(want_grads) +
              " B, comm_buffers " + str(want_comm) + " B\n";
  });
  std::printf("passed: gradient memory in the right categories during the steps\n%s", report.c_str());
}

// A buffer is not kept past its use: stage 2's bucket is read by the reduce-scatter and by nothing
// after it, so it is gone (comm_buffers 0 on the ledger) before Adam runs and the all-gather moves
// the weights — the memory the stage saves is free for the rest of the step.
void bucket_lifetime(const Args& a) {
  for_each_run(a, {2}, [&](const ZeroRun& run) {
    for (int k = 0; k < run.n; ++k)
      for (size_t s = 0; s < run.ranks[static_cast<size_t>(k)].steps.size(); ++s)
        for (const Call& c : run.ranks[static_cast<size_t>(k)].steps[s])
          if (c.what == "adam")
            lab::expect(c.comm_buffers_live == 0,
                        run.what() + ": rank " + str(k) + "'s comm_buffers when its Adam op runs in step " + str(s),
                        "0 B (the gradient bucket freed as soon as the reduce-scatter has read it)",
                        str(c.comm_buffers_live) + " B still held");
  });
  std::printf("passed: stage 2's bucket is freed right after the reduce-scatter, before Adam and the all-gather\n");
}

// The padding stays zero: its gradient is zero (backward never writes it; the bucket's padding
// is zeroed before the reduce-scatter reads it), so Adam leaves its weights at zero. Each step the
// rank's next buffer of P' floats starts as NaN (poison_next_buffer): a bucket whose padding is not
// zeroed puts NaN in the last shard's padding, which the all-gather then hands to every rank.
void padding(const Args& a) {
  std::string report;
  for_each_run(a, {1, 2}, [&](const ZeroRun& run) {
    const int64_t padded = ceil_div(run.P, run.n) * run.n;
    for (int k = 0; k < run.n; ++k)
      lab::expect(run.ranks[static_cast<size_t>(k)].padding_nonzero == 0,
                  run.what() + ": the " + str(padded - run.P) + " padding floats of rank " + str(k) +
                      "'s flat weights after the steps (each step's fresh buffer of P' floats started as NaN)",
                  "all 0 (zero the bucket's padding before backward: the reduce-scatter reads it)",
                  str(run.ranks[static_cast<size_t>(k)].padding_nonzero) + " not 0");
    report += "  stage " + str(run.stage) + ", " + str(run.n) + " ranks: " + str(padded - run.P) + " padding floats, 0\n";
  });
  std::printf("passed: the padding stays zero\n%s", report.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                        {{"shard_layout", shard_layout},
                         {"equivalence", equivalence},
                         {"optimizer_bytes", optimizer_bytes},
                         {"gradient_bytes", gradient_bytes},
                         {"collectives", collectives},
                         {"memory_categories", memory_categories},
                         {"bucket_lifetime", bucket_lifetime},
                         {"padding", padding}});
}
