// Lab 08's checks (the instructor's test program). The grader builds it with the student's
// zero.cpp and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed,
// 1 failed. The ZeRO step is strategies/zero.cpp's rank_step with the student's ZeroAdam in place
// of the library's sharded optimizer; the reference is a plain single-device Adam loop. Memory is
// read from each rank's device ledger, so the byte counts are exact and machine-independent.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/mlp.h"
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

struct RankResult {
  HostWeights weights;
  int64_t optimizer_peak = 0;  // the most the optimizer category ever held
  int64_t grads_kept = 0;      // grads + comm_buffers live between steps (after the last)
  int64_t grads_live = 0, comm_live = 0;
  int all_reduces = 0, reduce_scatters = 0, all_gathers = 0;
};

// ZeRO with the student's ZeroAdam: every rank on its DistributedSampler rows of each batch.
std::vector<RankResult> train_zero(int n, int stage, const std::string& model_spec,
                                   const std::vector<HostBatch>& batches) {
  auto w = lab::make_world(n, "", kCommTimeout);
  const HostWeights init = init_weights(ModelSpec::parse(model_spec), 7);
  std::vector<RankResult> out(static_cast<size_t>(n));
  lab::run_ranks(n, [&](int rank) {
    Device& device = *w->devices[static_cast<size_t>(rank)];
    ProcessGroup& group = *w->groups[static_cast<size_t>(rank)];
    Mlp model(device, init);  // the same initial weights on every rank
    AdamOptions adam;
    adam.lr = kLr;
    adam.weight_decay = kWeightDecay;
    lab08::ZeroAdam opt(model, group, stage, adam);
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
      opt.prepare_backward();
      model.backward(dlogits);
      opt.step();
    }
    RankResult& R = out[static_cast<size_t>(rank)];
    R.weights = model.download();
    R.optimizer_peak = device.memory().peak(MemoryCategory::optimizer);
    R.grads_live = device.memory().live(MemoryCategory::grads);
    R.comm_live = device.memory().live(MemoryCategory::comm_buffers);
    R.grads_kept = R.grads_live + R.comm_live;
  });
  for (const Event& e : w->bus.events()) {
    if (e.flow_id < 0 || e.device < 0 || e.device >= n) continue;  // a collective call's first event
    RankResult& R = out[static_cast<size_t>(e.device)];
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

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                        {{"shard_layout", shard_layout},
                         {"equivalence", equivalence},
                         {"optimizer_bytes", optimizer_bytes},
                         {"gradient_bytes", gradient_bytes}});
}
