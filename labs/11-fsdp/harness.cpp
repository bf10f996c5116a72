// Lab 11's checks (the instructor's test program). The grader builds it with the student's fsdp.cpp
// and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed, 1 failed. The
// step is strategies/zero.cpp's stage 3 (without prefetch) with the student's Fsdp; the reference is
// a plain single-device Adam loop. Memory is read from each rank's device ledger, each change placed
// among the trace's events, so the byte counts and their moments are exact on any machine.
#include <algorithm>
#include <cmath>
#include <cstdio>
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
#include "labs/common/verdict.h"
#include "labs/common/world.h"
#include "strategies/distributed_sampler.h"

using namespace scalelab;
using lab::Args;
using lab::str;

namespace {

constexpr auto kCommTimeout = std::chrono::milliseconds(2000);
// Three units (P_u = 221, 154, 60): neither 221 nor 154 is a multiple of 4, and with three units
// "every layer gathered at once" holds more than any two of them.
const std::string kModel = "mlp:16-13-11-5";
constexpr float kLr = 0.01f;
// Adam with L2 weight decay: a sum where the average belongs shows (see lab 08).
constexpr float kWeightDecay = 0.01f;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The units' P_u of a model spec: its layers with parameters, in order.
std::vector<int64_t> unit_sizes(const std::string& model) {
  const ModelSpec spec = ModelSpec::parse(model);
  std::vector<int64_t> out;
  for (int l = 0; l < spec.layer_count(); ++l)
    if (spec.layer_parameter_count(l) > 0) out.push_back(spec.layer_parameter_count(l));
  return out;
}
std::vector<int> unit_layers(const std::string& model) {
  const ModelSpec spec = ModelSpec::parse(model);
  std::vector<int> out;
  for (int l = 0; l < spec.layer_count(); ++l)
    if (spec.layer_parameter_count(l) > 0) out.push_back(l);
  return out;
}
// 4 · Σ⌈P_u/N⌉: a rank's shard in bytes.
int64_t shard_bytes(const std::vector<int64_t>& units, int n) {
  int64_t s = 0;
  for (int64_t p : units) s += ceil_div(p, n);
  return 4 * s;
}

std::string piece_text(const lab11::Piece& p) {
  return "padded " + str(p.padded) + ", size " + str(p.size) + ", [" + str(p.begin) + ", " + str(p.end) +
         "), shard_offset " + str(p.shard_offset);
}

// Task 1: the per-unit arithmetic against the closed form.
void shard_layout(const Args&) {
  const std::vector<std::pair<std::vector<int64_t>, int>> cases = {
      {{10, 4}, 4}, {{12}, 4}, {{221, 154, 60}, 2}, {{221, 154, 60}, 4}, {{221, 154, 60}, 3},
      {{1, 1, 1}, 4}, {{7}, 1}, {{100, 3, 50}, 7}, {{200960, 32896, 1290}, 8}, {{5, 9}, 8}};
  for (const auto& [units, n] : cases)
    for (int r = 0; r < n; ++r) {
      const std::vector<lab11::Piece> got = lab11::pieces_of(units, n, r);
      lab::expect(got.size() == units.size(), "pieces_of(" + str(units.size()) + " units, N = " + str(n) + ")",
                  str(units.size()) + " pieces, one per unit", str(got.size()));
      int64_t offset = 0;
      for (size_t u = 0; u < units.size(); ++u) {
        lab11::Piece want;
        want.params = units[u];
        want.size = ceil_div(units[u], n);
        want.padded = want.size * n;
        want.begin = r * want.size;
        want.end = want.begin + want.size;
        want.shard_offset = offset;
        offset += want.size;
        const lab11::Piece& g = got[u];
        lab::expect(g.padded == want.padded && g.size == want.size && g.begin == want.begin && g.end == want.end &&
                        g.shard_offset == want.shard_offset,
                    "pieces_of: unit " + str(u) + " (P_u = " + str(units[u]) + "), N = " + str(n) + ", rank " + str(r) +
                        (units[u] % n ? " — P_u is not a multiple of N: pad each unit on its own" : ""),
                    piece_text(want), piece_text(g));
      }
    }
  std::printf("passed: pieces_of on %zu cases, every rank (each unit padded to ⌈P_u/N⌉·N, the pieces end to end)\n",
              cases.size());
}

// What a rank does in a step, in order: a collective (its bytes summed over its events), the first
// op of a unit's forward or backward ("F 0", "B 2": the layer index), or Adam.
struct Item {
  std::string what;
  int64_t bytes = 0;
  int64_t params_live = 0, comm_live = 0;  // the rank's ledger when it was issued
};

struct RankResult {
  std::vector<float> shard;  // the rank's shard of weights after the steps
  std::vector<lab11::Piece> pieces;
  std::vector<std::vector<Item>> steps;
  std::vector<int64_t> params_after, grads_after, comm_after, optimizer_after;  // after ctor, each step
  int64_t params_step_peak = 0;  // during the steps
};

struct LedgerChange {
  size_t events_before = 0;
  MemoryCategory category = MemoryCategory::params;
  int64_t live = 0;
};

std::vector<RankResult> train_fsdp(int n, const std::string& model_spec, const std::vector<HostBatch>& batches) {
  std::vector<std::vector<LedgerChange>> changes(static_cast<size_t>(n));
  auto w = lab::make_world(n, "", kCommTimeout);
  for (int r = 0; r < n; ++r)
    w->devices[static_cast<size_t>(r)]->memory().set_listener(
        [&changes, &bus = w->bus, r](MemoryCategory c, int64_t live) {
          changes[static_cast<size_t>(r)].push_back({bus.event_count(), c, live});
        });
  const HostWeights init = init_weights(ModelSpec::parse(model_spec), 7);
  std::vector<RankResult> out(static_cast<size_t>(n));
  std::vector<size_t> constructed(static_cast<size_t>(n), 0);
  lab::run_ranks(n, [&](int rank) {
    Device& device = *w->devices[static_cast<size_t>(rank)];
    ProcessGroup& group = *w->groups[static_cast<size_t>(rank)];
    RankResult& R = out[static_cast<size_t>(rank)];
    Model model(device, init);
    AdamOptions adam;
    adam.lr = kLr;
    adam.weight_decay = kWeightDecay;
    lab11::Fsdp fsdp(model, group, adam);
    auto between = [&] {
      R.params_after.push_back(device.memory().live(MemoryCategory::params));
      R.grads_after.push_back(device.memory().live(MemoryCategory::grads));
      R.comm_after.push_back(device.memory().live(MemoryCategory::comm_buffers));
      R.optimizer_after.push_back(device.memory().live(MemoryCategory::optimizer));
    };
    between();
    R.params_step_peak = R.params_after.back();
    constructed[static_cast<size_t>(rank)] = changes[static_cast<size_t>(rank)].size();
    HostBatch shard;
    for (size_t s = 0; s < batches.size(); ++s) {
      device.set_step(static_cast<int64_t>(s));
      take_shard(batches[s], rank, n, shard);
      Tensor x = device.empty({shard.size, shard.features}, DType::f32, MemoryCategory::activations, "batch.x");
      Tensor y = device.empty({shard.size}, DType::i32, MemoryCategory::activations, "batch.y");
      device.upload({"batch.x", Phase::data}, x, shard.x.data());
      device.upload({"batch.y", Phase::data}, y, shard.y.data());
      Tensor logits = fsdp.forward(x);
      Tensor dlogits = device.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
      device.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);
      logits = Tensor();
      fsdp.backward(dlogits);
      fsdp.step();
      between();
    }
    R.pieces = fsdp.pieces();
    R.shard.resize(static_cast<size_t>(fsdp.shard().numel()));
    device.download({"harness.shard", Phase::data}, R.shard.data(), fsdp.shard());
  });
  auto live_at = [&changes](int rank, size_t count, MemoryCategory cat) {
    int64_t live = 0;
    for (const LedgerChange& c : changes[static_cast<size_t>(rank)]) {
      if (c.events_before > count) break;
      if (c.category == cat) live = c.live;
    }
    return live;
  };
  for (int r = 0; r < n; ++r) {
    RankResult& R = out[static_cast<size_t>(r)];
    const auto& ch = changes[static_cast<size_t>(r)];
    for (size_t k = constructed[static_cast<size_t>(r)]; k < ch.size(); ++k)
      if (ch[k].category == MemoryCategory::params) R.params_step_peak = std::max(R.params_step_peak, ch[k].live);
  }
  const std::vector<int> layers = unit_layers(model_spec);
  const std::vector<Event> events = w->bus.events();
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.device < 0 || e.device >= n || e.step < 0) continue;
    RankResult& R = out[static_cast<size_t>(e.device)];
    if (static_cast<size_t>(e.step) >= R.steps.size()) R.steps.resize(static_cast<size_t>(e.step) + 1);
    std::vector<Item>& items = R.steps[static_cast<size_t>(e.step)];
    auto push = [&](const std::string& what, int64_t bytes) {
      items.push_back({what, bytes, live_at(e.device, i, MemoryCategory::params),
                       live_at(e.device, i, MemoryCategory::comm_buffers)});
    };
    if (e.lane == Lane::comm) {
      if (e.flow_id < 0) {
        if (!items.empty()) items.back().bytes += e.bytes;
        continue;
      }
      push(e.kind, e.bytes);
      continue;
    }
    if (e.kind == "adam") {
      push("adam", 0);
      continue;
    }
    const bool unit = std::find(layers.begin(), layers.end(), e.layer) != layers.end();
    if (!unit || (e.phase != Phase::fwd && e.phase != Phase::bwd)) continue;
    const std::string what = std::string(e.phase == Phase::fwd ? "F " : "B ") + str(e.layer);
    if (items.empty() || items.back().what != what) push(what, 0);
  }
  return out;
}

// The whole model's weights from every rank's shard, cut by the closed-form layout.
HostWeights assemble(const std::string& model, const std::vector<RankResult>& ranks) {
  HostWeights w = init_weights(ModelSpec::parse(model), 7);
  const std::vector<int64_t> units = unit_sizes(model);
  const int n = static_cast<int>(ranks.size());
  std::vector<float> flat;  // every unit's P_u floats, end to end
  int64_t offset = 0;
  for (int64_t p : units) {
    const int64_t size = ceil_div(p, n);
    for (int64_t i = 0; i < p; ++i) {
      const std::vector<float>& shard = ranks[static_cast<size_t>(i / size)].shard;
      const size_t at = static_cast<size_t>(offset + i % size);
      flat.push_back(at < shard.size() ? shard[at] : std::nanf(""));
    }
    offset += size;
  }
  size_t at = 0;
  for (auto& values : w.values)
    for (float& v : values) v = at < flat.size() ? flat[at++] : std::nanf("");
  return w;
}

std::vector<HostBatch> make_batches(const std::string& model, int64_t batch, int steps) {
  return lab::synthetic_batches(model, batch, steps, 2048, 11);
}

HostWeights train_single(const std::string& model, const std::vector<HostBatch>& batches) {
  OptimizerConfig c;
  c.kind = "adam";
  c.lr = kLr;
  c.weight_decay = kWeightDecay;
  return lab::train_single(model, c, batches);
}

// Task 2: after 5 Adam steps the shards, put together, are single's weights (≤ 1e-5).
void equivalence(const Args& a) {
  const std::string model = a.get("model", kModel);
  const int steps = 5;
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const auto batches = make_batches(model, batch, steps);
  const HostWeights single = train_single(model, batches);
  std::string report;
  for (long long nl : a.ints("ranks", "2,4")) {
    const int n = static_cast<int>(nl);
    const auto r = train_fsdp(n, model, batches);
    const HostWeights got = assemble(model, r);
    int64_t not_finite = 0;  // NaN compares false: a NaN weight would slip past the difference
    for (const auto& values : got.values)
      for (float v : values) not_finite += !std::isfinite(v);
    lab::expect(not_finite == 0, "ZeRO-3 with your Fsdp, " + str(n) + " ranks, " + model + ": the ranks' shards put together",
                "every weight finite", str(not_finite) + " weights NaN or infinite");
    const double diff = max_relative_difference(got, single);
    char line[160];
    std::snprintf(line, sizeof line, "%d ranks: max relative difference %.3g", n, diff);
    lab::expect(std::isfinite(diff) && diff <= 1e-5,
                "ZeRO-3 with your Fsdp, " + str(n) + " ranks, " + model + ", " + str(steps) + " Adam steps of batch " +
                    str(batch) + ": the ranks' shards put together against single's Adam",
                "max relative difference ≤ 1e-5", line);
    report += std::string("  ") + line + "\n";
  }
  std::printf("passed: ZeRO-3 with your Fsdp trains as single's Adam does\n%s", report.c_str());
}

struct Run {
  int n = 2;
  std::string model;
  std::vector<int64_t> units;
  std::vector<RankResult> ranks;
  std::string what() const { return "ZeRO-3, " + str(n) + " ranks, " + model; }
};

template <typename Check>
void for_each_run(const Args& a, Check check) {
  const std::string model = a.get("model", kModel);
  const auto batches = make_batches(model, std::stoll(a.get("batch", "32")), 2);
  for (long long n : a.ints("ranks", "2,4"))
    check(Run{static_cast<int>(n), model, unit_sizes(model), train_fsdp(static_cast<int>(n), model, batches)});
}

std::string items_text(const std::vector<Item>& items) {
  std::string s;
  for (const Item& c : items)
    s += (s.empty() ? "" : ", ") + c.what + (c.what[0] == 'a' || c.what[0] == 'r' ? " " + str(c.bytes) + " B" : "");
  return s.empty() ? "nothing" : s;
}

// Order and bytes: per step, for each unit in order: all-gather (P'_u), its forward; then last unit
// first: all-gather (P'_u), its backward, reduce-scatter (P'_u); then Adam. Each all-gather and
// reduce-scatter sends (N−1)/N · 4P'_u: three times a unit's share, where data parallel's all-reduce
// is two.
void collectives(const Args& a) {
  std::string report;
  for_each_run(a, [&](const Run& run) {
    const std::vector<int> layers = unit_layers(run.model);
    std::vector<Item> want;
    int64_t sent = 0;
    auto bytes = [&](size_t u) { return (run.n - 1) * 4 * ceil_div(run.units[u], run.n); };
    for (size_t u = 0; u < layers.size(); ++u) {
      want.push_back({"all_gather", bytes(u)});
      want.push_back({"F " + str(layers[u])});
    }
    for (size_t k = layers.size(); k-- > 0;) {
      want.push_back({"all_gather", bytes(k)});
      want.push_back({"B " + str(layers[k])});
      want.push_back({"reduce_scatter", bytes(k)});
      sent += 3 * bytes(k);
    }
    want.push_back({"adam"});
    for (int k = 0; k < run.n; ++k)
      for (size_t s = 0; s < 2; ++s) {
        const auto& steps = run.ranks[static_cast<size_t>(k)].steps;
        const std::vector<Item> got = s < steps.size() ? steps[s] : std::vector<Item>{};
        bool same = got.size() == want.size();
        for (size_t i = 0; same && i < got.size(); ++i) same = got[i].what == want[i].what && got[i].bytes == want[i].bytes;
        lab::expect(same,
                    run.what() + ": what rank " + str(k) + " issues in step " + str(s) +
                        ", in order (F l / B l: layer l's forward / backward), with the bytes each collective sends",
                    items_text(want) + " (each unit gathered before its forward and again before its backward, its "
                                       "gradient reduce-scattered right after its backward)",
                    items_text(got));
      }
    report += "  " + str(run.n) + " ranks: " + items_text(want) + "; " + str(sent) + " B sent per rank a step\n";
  });
  std::printf("passed: per layer and step two all-gathers and one reduce-scatter, in order\n%s", report.c_str());
}

// Between steps a rank holds its shard alone: params 4 · Σ⌈P_u/N⌉, its gradient shard as much,
// Adam's m and v twice that, no communication buffer.
void shard_memory(const Args& a) {
  std::string report;
  for_each_run(a, [&](const Run& run) {
    const int64_t S = shard_bytes(run.units, run.n);
    for (int k = 0; k < run.n; ++k) {
      const RankResult& R = run.ranks[static_cast<size_t>(k)];
      for (size_t s = 0; s < R.params_after.size(); ++s) {
        const std::string when = s == 0 ? "after Fsdp's constructor" : "after step " + str(s - 1);
        const std::string got = "params " + str(R.params_after[s]) + ", grads " + str(R.grads_after[s]) +
                                ", optimizer " + str(R.optimizer_after[s]) + ", comm_buffers " + str(R.comm_after[s]);
        lab::expect(R.params_after[s] == S && R.grads_after[s] == S && R.optimizer_after[s] == 2 * S &&
                        R.comm_after[s] == 0,
                    run.what() + ": rank " + str(k) + "'s ledger " + when + " (bytes live)",
                    "params " + str(S) + " (4 · Σ⌈P_u/N⌉: its shard alone — no layer's whole weights kept), grads " +
                        str(S) + ", optimizer " + str(2 * S) + ", comm_buffers 0",
                    got);
      }
    }
    report += "  " + str(run.n) + " ranks: params " + str(S) + " B, grads " + str(S) + " B, optimizer " + str(2 * S) +
              " B per rank\n";
  });
  std::printf("passed: between steps each rank holds its shard only\n%s", report.c_str());
}

// During the step a rank's weights are its shard plus the units it has gathered: never more than
// two units' at once (one computing, one prefetched), however many units the model has.
void gather_peak(const Args& a) {
  std::string report;
  for_each_run(a, [&](const Run& run) {
    const int64_t S = shard_bytes(run.units, run.n);
    std::vector<int64_t> padded;
    int64_t all = 0;
    for (int64_t p : run.units) {
      padded.push_back(4 * ceil_div(p, run.n) * run.n);
      all += padded.back();
    }
    std::sort(padded.rbegin(), padded.rend());
    const int64_t bound = S + padded[0] + (padded.size() > 1 ? padded[1] : 0);
    for (int k = 0; k < run.n; ++k) {
      const int64_t peak = run.ranks[static_cast<size_t>(k)].params_step_peak;
      lab::expect(peak <= bound,
                  run.what() + ": the most rank " + str(k) + "'s ledger held in category params during the steps",
                  "≤ " + str(bound) + " B: the shard (" + str(S) + ") and at most two units' gathered weights (the "
                  "whole model gathered at once would be " + str(S + all) + ")",
                  str(peak) + " B");
    }
    report += "  " + str(run.n) + " ranks: peak ≤ " + str(bound) + " B (shard " + str(S) + " B)\n";
  });
  std::printf("passed: gathered weights never exceed two units on top of the shard\n%s", report.c_str());
}

// A gathered buffer is freed after its use: when a unit's all-gather is issued the rank's params are
// its shard and that unit's buffer alone (the unit before freed), and no gradient buffer but that
// unit's own is live (the one before freed after its reduce-scatter); when Adam runs, the shard alone.
void freed(const Args& a) {
  for_each_run(a, [&](const Run& run) {
    const int64_t S = shard_bytes(run.units, run.n);
    const std::vector<int> layers = unit_layers(run.model);
    for (int k = 0; k < run.n; ++k) {
      const auto& steps = run.ranks[static_cast<size_t>(k)].steps;
      for (size_t s = 0; s < steps.size(); ++s)
        for (size_t i = 0; i < steps[s].size(); ++i) {
          const Item& c = steps[s][i];
          int64_t unit = 0;  // an all-gather: the padded bytes of the unit computed next
          if (c.what == "all_gather") {
            for (size_t j = i + 1; j < steps[s].size() && unit == 0; ++j)
              for (size_t u = 0; u < layers.size(); ++u)
                if (steps[s][j].what.size() > 2 && steps[s][j].what.substr(2) == str(layers[u]))
                  unit = 4 * ceil_div(run.units[u], run.n) * run.n;
          } else if (c.what != "adam") {
            continue;
          }
          lab::expect(c.params_live == S + unit && (c.comm_live == 0 || c.comm_live == unit),
                      run.what() + ": rank " + str(k) + "'s ledger when it issues " + c.what + " (#" + str(i) +
                          " of step " + str(s) + ": " + items_text(steps[s]) + ")",
                      "params " + str(S + unit) + " B (the shard" +
                          (unit ? " and this unit's " + str(unit) + " B buffer: the unit before freed)" : ")") +
                          ", comm_buffers " + (unit ? "0 or this unit's gradient buffer" : std::string("0")) +
                          " (the gradient buffer before freed after its reduce-scatter)",
                      "params " + str(c.params_live) + " B, comm_buffers " + str(c.comm_live) + " B");
        }
    }
  });
  std::printf("passed: each gathered unit and gradient buffer freed before the next unit is gathered\n");
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                          {{"shard_layout", shard_layout},
                           {"equivalence", equivalence},
                           {"collectives", collectives},
                           {"shard_memory", shard_memory},
                           {"gather_peak", gather_peak},
                           {"freed", freed}});
}
