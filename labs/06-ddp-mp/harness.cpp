// Lab 06's checks (the instructor's test program). The grader builds it with the student's
// ddp_mp.cpp and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed,
// 1 failed. N ranks are threads, each with a process group and TWO devices (cpu, or sim devices of
// a hardware profile: real numerics either way), as strategies/ddp_mp.cpp runs them; the step of a
// rank is the student's. The reference is a plain single-device loop; the moves are read from the
// trace (copies between devices, all-reduces and the device each ran on), the memory from every
// device's ledger, so every number checked is exact and machine-independent.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/threads/threads_group.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/device/sim/profile.h"
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
// 4 layers: fc1, fc2 on the first device (P₁ = 1192), fc3, fc4 on the second (P₂ = 308).
const std::string kModel = "mlp:32-24-16-12-8";

int first_half(int layers) { return (layers + 1) / 2; }

// The parameters of the first device's layers and of the second's.
std::pair<int64_t, int64_t> side_parameters(const ModelSpec& m) {
  int64_t p[2] = {0, 0};
  for (int l = 0; l < m.layer_count(); ++l) p[l < first_half(m.layer_count()) ? 0 : 1] += m.layer_parameter_count(l);
  return {p[0], p[1]};
}

// ---------------------------------------------------------------------------------------------
// Task 1: the device map, against the closed form.

std::string pair_text(const lab06::RankDevices& d) { return "{" + str(d.first) + ", " + str(d.second) + "}"; }

void placement(const Args& a) {
  const auto ranks = a.ints("ranks", "1-8");
  const auto layer_counts = a.ints("layers", "2-12");
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    for (int r = 0; r < n; ++r) {
      const lab06::RankDevices got = lab06::rank_devices(r);
      lab::expect(got.first == 2 * r && got.second == 2 * r + 1,
                  "rank_devices(" + str(r) + ") with " + str(n) + " ranks (" + str(2 * n) + " devices)",
                  pair_text({2 * r, 2 * r + 1}) + " (rank r owns devices 2r and 2r + 1)", pair_text(got));
    }
  }
  for (long long ll : layer_counts) {
    const int layers = static_cast<int>(ll);
    std::string want, got;
    for (int l = 0; l < layers; ++l) {
      want += str(l < first_half(layers) ? 0 : 1);
      got += str(lab06::layer_side(l, layers));
    }
    lab::expect(got == want,
                "layer_side(l, " + str(layers) + ") for l = 0…" + str(layers - 1) +
                    " (0: the rank's first device, 1: its second)",
                want + " (layers [0, ⌈L/2⌉ = " + str(first_half(layers)) + ") on the first device, the rest on the second)",
                got);
  }
  std::printf("passed: rank_devices for %s ranks (rank r: devices 2r, 2r + 1), layer_side for %s layers "
              "(the first ⌈L/2⌉ on the first device)\n",
              lab::list_text(ranks).c_str(), lab::list_text(layer_counts).c_str());
}

// ---------------------------------------------------------------------------------------------
// Training: N ranks over 2N devices with the student's map, buckets and step.

// N ranks (threads, a process group each) over 2N devices, the events on one bus. Each rank is its
// own host (one process per rank): its two devices share that host, waiting for no other rank's.
std::unique_ptr<lab::World> make_world_mp(int n, const std::string& profile) {
  auto w = std::make_unique<lab::World>();
  CommOptions copt;
  copt.timeout = kCommTimeout;
  w->groups = make_threads_groups(n, copt);
  DeviceOptions o;
  o.count = 2 * n;
  o.bus = &w->bus;
  if (!profile.empty()) {
    o.kind = DeviceKind::sim;
    o.profile = load_profile(profile);
  }
  w->devices = make_devices(o);
  return w;
}

// The student's map must name each rank two devices of its own before anything can be built on it.
void expect_usable_map(int n, int layers) {
  std::set<int> used;
  for (int r = 0; r < n; ++r) {
    const lab06::RankDevices d = lab06::rank_devices(r);
    const bool ok = d.first >= 0 && d.first < 2 * n && d.second >= 0 && d.second < 2 * n && d.first != d.second &&
                    used.insert(d.first).second && used.insert(d.second).second;
    lab::expect(ok, "rank_devices(" + str(r) + ") with " + str(n) + " ranks (make `placement` pass first)",
                "two devices of the " + str(2 * n) + ", used by no other rank", pair_text(d));
  }
  for (int l = 0; l < layers; ++l) {
    const int side = lab06::layer_side(l, layers);
    lab::expect(side == 0 || side == 1, "layer_side(" + str(l) + ", " + str(layers) + ") (make `placement` pass first)",
                "0 or 1", str(side));
  }
}

OptimizerConfig optimizer_config(const std::string& kind) {
  OptimizerConfig o;  // sgd: lr 0.03, momentum 0.9 (one momentum buffer per parameter)
  o.kind = kind;
  if (kind == "adam") o.lr = 0.01f;
  return o;
}

struct Run {
  std::vector<HostWeights> weights;                  // every rank's, after the last step
  std::vector<std::vector<int64_t>> peaks;            // each device's ledger peak by category
  std::vector<Event> events;                          // the whole trace
  std::vector<int64_t> held_after_step;               // each device's most live activations after a step
  std::vector<std::vector<double>> losses;            // [step][rank]: what rank_step returned
};

// Called on each rank's thread just before its rank_step of `step`, with the run's trace so far.
using BeforeStep = std::function<void(int rank, int64_t step, const EventBus& bus)>;

// `batches` are global batches; every rank trains on its DistributedSampler shard of each.
Run train_ddp_mp(int n, const std::string& profile, const std::string& model_spec, const std::string& optimizer,
                 const std::vector<HostBatch>& batches, const BeforeStep& before_step = nullptr) {
  const HostWeights init = init_weights(ModelSpec::parse(model_spec), 7);
  const int layers = init.spec.layer_count();
  expect_usable_map(n, layers);
  auto w = make_world_mp(n, profile);
  for (int r = 0; r < n; ++r) {
    const lab06::RankDevices d = lab06::rank_devices(r);
    Device& first = *w->devices[static_cast<size_t>(d.first)];
    first.use_own_host();
    w->devices[static_cast<size_t>(d.second)]->share_host_with(first);
    w->groups[static_cast<size_t>(r)]->set_device(&first);
  }
  Run out;
  out.weights.resize(static_cast<size_t>(n));
  out.held_after_step.assign(static_cast<size_t>(2 * n), 0);
  out.losses.assign(batches.size(), std::vector<double>(static_cast<size_t>(n)));
  lab::run_ranks(n, [&](int rank) {
    const lab06::RankDevices d = lab06::rank_devices(rank);
    Device* first = w->devices[static_cast<size_t>(d.first)].get();
    Device* second = w->devices[static_cast<size_t>(d.second)].get();
    std::vector<Device*> place;
    for (int l = 0; l < layers; ++l) place.push_back(lab06::layer_side(l, layers) == 0 ? first : second);
    Model model(place, init);  // (DDP's constructor broadcasts rank 0's weights: here they start equal)
    Optimizer step(optimizer_config(optimizer), model.parameters());
    lab06::Replica r;
    r.rank = rank;
    r.world_size = n;
    r.group = w->groups[static_cast<size_t>(rank)].get();
    r.first = first;
    r.second = second;
    r.model = &model;
    r.optimizer = &step;
    r.buckets = lab06::make_buckets(model.parameters());
    HostBatch shard;
    for (size_t s = 0; s < batches.size(); ++s) {
      first->set_step(static_cast<int64_t>(s));
      second->set_step(static_cast<int64_t>(s));
      take_shard(batches[s], rank, n, shard);
      if (before_step) before_step(rank, static_cast<int64_t>(s), w->bus);
      const double loss = lab06::rank_step(r, shard);
      lab::expect(std::isfinite(loss), "step " + str(s) + ": the loss rank_step returned", "a finite number", str(loss));
      out.losses[s][static_cast<size_t>(rank)] = loss;
      for (int dev : {d.first, d.second}) {
        int64_t& held = out.held_after_step[static_cast<size_t>(dev)];
        held = std::max(held, w->devices[static_cast<size_t>(dev)]->memory().live(MemoryCategory::activations));
      }
    }
    out.weights[static_cast<size_t>(rank)] = model.download();
  });
  for (const auto& d : w->devices) {
    out.peaks.emplace_back();
    for (int k = 0; k < kMemoryCategoryCount; ++k) out.peaks.back().push_back(d->memory().peak(static_cast<MemoryCategory>(k)));
  }
  out.events = w->bus.events();
  return out;
}

std::vector<HostBatch> make_batches(const std::string& model, int64_t batch, int steps) {
  // 8192 samples: no gradient sits at a kink (tests/support/small_config.h), round-off stays small.
  return lab::synthetic_batches(model, batch, steps, 8192, 11);
}

// Every rank's replica equal to rank 0's, bit for bit (the same averaged gradients, the same step).
// Task 3: after 5 steps every replica holds single's weights (≤ 1e-5), on 2 and 4 ranks (4 and 8
// devices), cpu and sim.
void equivalence(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const std::string kinds = a.get("devices", "cpu,sim");
  const std::string model = a.get("model", kModel);
  const std::string optimizer = a.get("optimizer", "sgd");
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const int steps = 5;
  const auto batches = make_batches(model, batch, steps);
  const HostWeights single = lab::train_single(model, optimizer_config(optimizer), batches);
  std::string report;
  for (const std::string kind : {"cpu", "sim"}) {
    if (kinds.find(kind) == std::string::npos) continue;
    for (long long nl : ranks) {
      const int n = static_cast<int>(nl);
      const Run run = train_ddp_mp(n, kind == "sim" ? "a100-nvlink-8" : "", model, optimizer, batches);
      const std::string what = "DDP with model parallel, " + str(n) + " ranks (" + str(2 * n) + " " + kind +
                               " devices), " + model + ", " + optimizer + ", " + str(steps) + " steps of batch " +
                               str(batch);
      const double diff = max_relative_difference(run.weights[0], single);
      char line[160];
      std::snprintf(line, sizeof line, "%d ranks (%d %s devices): max relative difference %.3g", n, 2 * n,
                    kind.c_str(), diff);
      lab::expect(std::isfinite(diff) && diff <= 1e-5, what + ": rank 0's weights against single's",
                  "max relative difference ≤ 1e-5", line);
      lab::expect_replicas_equal(run.weights, what);
      report += std::string("  ") + line + "\n";
    }
  }
  std::printf("passed: DDP whose replica spans two devices trains as single does (%s)\n%s", optimizer.c_str(),
              report.c_str());
}

// Task 3: the moves, read from the trace. Per step and rank: between its two devices exactly one
// copy each way — the activation onto the second device, its gradient back onto the first (R rows
// of the width at the split, 4 bytes each); one all-reduce on each of its devices; and over all
// ranks the all-reduces on the first devices carry 4·P₁ bytes each, those on the second 4·P₂ — the
// ring moves 2(N − 1) times each payload in all: the gradients, and nothing else.
void moves(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const int steps = 2;
  const ModelSpec spec = ModelSpec::parse(model);
  const auto [p1, p2] = side_parameters(spec);
  const int64_t width = spec.sizes[static_cast<size_t>(first_half(spec.layer_count()))];
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const int64_t rows = batch / n;
    const int64_t act_bytes = rows * width * 4;
    const Run run = train_ddp_mp(n, "", model, "sgd", make_batches(model, batch, steps));
    const std::string what = "DDP with model parallel, " + str(n) + " ranks (" + str(2 * n) + " cpu devices), " + model +
                             ", batch " + str(batch);
    for (int s = 0; s < steps; ++s) {
      std::vector<int> copies(static_cast<size_t>(2 * n), 0), calls(static_cast<size_t>(2 * n), 0);
      std::vector<int64_t> copied(static_cast<size_t>(2 * n), 0);
      int64_t reduced[2] = {0, 0};  // all-reduce bytes over the first devices, over the second
      for (const Event& e : run.events) {
        if (e.step != s || e.device < 0 || e.device >= 2 * n) continue;
        const size_t d = static_cast<size_t>(e.device);
        if (e.kind == "copy_p2p") {
          ++copies[d];
          copied[d] += e.bytes;
        }
        if (e.role == Role::all_reduce) {
          if (e.flow_id >= 0) ++calls[d];  // a call's first event
          reduced[e.device % 2] += e.bytes;
        }
      }
      const std::string at = what + ", step " + str(s);
      for (int r = 0; r < n; ++r) {
        const size_t f = static_cast<size_t>(2 * r), g = f + 1;
        lab::expect(copies[g] == 1 && copied[g] == act_bytes,
                    at + ": the copies device " + str(g) + " (rank " + str(r) + "'s second) receives from another device",
                    "one: the activation at the split, " + str(rows) + " rows × " + str(width) + " × 4 = " +
                        str(act_bytes) + " bytes (forward)",
                    str(copies[g]) + " copies, " + str(copied[g]) + " bytes");
        lab::expect(copies[f] == 1 && copied[f] == act_bytes,
                    at + ": the copies device " + str(f) + " (rank " + str(r) + "'s first) receives from another device",
                    "one: the gradient w.r.t. the activation, " + str(act_bytes) + " bytes (backward)",
                    str(copies[f]) + " copies, " + str(copied[f]) + " bytes");
        lab::expect(calls[f] == 1 && calls[g] == 1,
                    at + ": the all-reduces rank " + str(r) + " runs on its devices " + str(f) + " and " + str(g),
                    "one on each: every device all-reduces the gradients it holds, where they are",
                    str(calls[f]) + " on device " + str(f) + ", " + str(calls[g]) + " on device " + str(g));
      }
      const int64_t want1 = 2 * (n - 1) * 4 * p1, want2 = 2 * (n - 1) * 4 * p2;
      lab::expect(reduced[0] == want1 && reduced[1] == want2,
                  at + ": the bytes the all-reduces move, summed over the ranks (a ring moves 2(N − 1) × its payload)",
                  "first devices 2 · " + str(n - 1) + " · 4 · P₁ = " + str(want1) + ", second devices 2 · " + str(n - 1) +
                      " · 4 · P₂ = " + str(want2) + " (P₁ = " + str(p1) + ", P₂ = " + str(p2) +
                      " parameters: the gradients, nothing else)",
                  "first devices " + str(reduced[0]) + ", second devices " + str(reduced[1]));
    }
    report += "  " + str(n) + " ranks: per step and rank one activation copy each way (" + str(act_bytes) +
              " bytes), all-reduces of 4 · " + str(p1) + " bytes on the first device and 4 · " + str(p2) +
              " on the second\n";
  }
  std::printf("passed: the moves of DDP with model parallel\n%s", report.c_str());
}

// Task 2 and 3: from the ledgers, each device holds its own half: params, grads, the optimizer's
// momentum and the bucket's buffer, 4 bytes per parameter of ITS layers each.
void memory(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const ModelSpec spec = ModelSpec::parse(model);
  const auto [p1, p2] = side_parameters(spec);
  const MemoryCategory categories[] = {MemoryCategory::params, MemoryCategory::grads, MemoryCategory::optimizer,
                                       MemoryCategory::comm_buffers};
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const Run run = train_ddp_mp(n, "", model, "sgd", make_batches(model, batch, 2));
    for (int r = 0; r < n; ++r)
      for (int side = 0; side < 2; ++side) {
        const size_t d = static_cast<size_t>(2 * r + side);
        const int64_t p = side == 0 ? p1 : p2;
        std::string want, got;
        bool ok = true;
        for (MemoryCategory c : categories) {
          const int64_t peak = run.peaks[d][static_cast<size_t>(c)];
          ok = ok && peak == 4 * p;
          want += (want.empty() ? "" : ", ") + std::string(memory_category_name(c)) + " " + str(4 * p);
          got += (got.empty() ? "" : ", ") + std::string(memory_category_name(c)) + " " + str(peak);
        }
        lab::expect(ok,
                    "DDP with model parallel, " + str(n) + " ranks, " + model + ", SGD with momentum: the ledger peaks of device " +
                        str(d) + " (rank " + str(r) + "'s " + (side == 0 ? "first" : "second") + ")",
                    "4 · P" + std::string(side == 0 ? "₁" : "₂") + " = " + str(4 * p) +
                        " bytes in each — its own layers' weights, gradients, momentum and ONE bucket of exactly "
                        "its gradients: " + want,
                    got);
      }
    report += "  " + str(n) + " ranks: each first device " + str(4 * p1) + " bytes per category, each second " +
              str(4 * p2) + "; activations peak " + str(run.peaks[0][static_cast<size_t>(MemoryCategory::activations)]) +
              " and " + str(run.peaks[1][static_cast<size_t>(MemoryCategory::activations)]) + " bytes (rank 0)\n";
  }
  std::printf("passed: each device holds its half of the replica (params, grads, momentum, bucket: 4 · P₁ = %lld "
              "and 4 · P₂ = %lld bytes)\n%s",
              static_cast<long long>(4 * p1), static_cast<long long>(4 * p2), report.c_str());
}

// Order and timing, from the trace's order (the events one rank's thread issues reach the bus in
// the order it issues them): per step and rank, the second device's bucket is packed and launched
// before the first device's backward begins, so its all-reduce runs while the first device computes.
void launch_order(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const std::string model = a.get("model", kModel);
  const int steps = 2;
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const Run run = train_ddp_mp(n, "", model, "sgd", make_batches(model, 32, steps));
    for (int s = 0; s < steps; ++s)
      for (int r = 0; r < n; ++r) {
        const int f = 2 * r, g = f + 1;
        long first_pack = -1, first_backward = -1;  // positions in the trace
        for (size_t i = 0; i < run.events.size(); ++i) {
          const Event& e = run.events[i];
          if (e.step != s) continue;
          if (first_pack < 0 && e.device == g && e.phase == Phase::comm && e.kind == "copy" && e.bucket >= 0)
            first_pack = static_cast<long>(i);
          if (first_backward < 0 && e.device == f && e.phase == Phase::bwd && e.lane == Lane::compute)
            first_backward = static_cast<long>(i);
        }
        lab::expect(first_pack >= 0 && first_backward >= 0 && first_pack < first_backward,
                    str(n) + " ranks, " + model + ", step " + str(s) + ": when rank " + str(r) +
                        " packs and launches the bucket of its second device (" + str(g) + ")",
                    "before the first device's backward begins (the all-reduce of device " + str(g) +
                        "'s gradients runs while device " + str(f) + " computes)",
                    first_pack < 0 ? std::string("no bucket packed on device ") + str(g)
                                   : "after the first device's backward had begun (trace position " +
                                         str(first_pack) + " > " + str(first_backward) + ")");
      }
    report += "  " + str(n) + " ranks: the second device's bucket launched before the first device's backward\n";
  }
  std::printf("passed: the second device's bucket goes first, while the first device computes\n%s", report.c_str());
}

// Timing: rank_step must not wait for an all-reduce before the first device's backward. Rank 1
// starts its step only once rank 0's first device has begun its backward (or after 1 s): no
// all-reduce can end before rank 1 joins it, so a step that waits for one there stalls.
void no_wait(const Args&) {
  const int n = 2;
  const int first0 = lab06::rank_devices(0).first;
  bool gave_up = false;
  train_ddp_mp(n, "", kModel, "sgd", make_batches(kModel, 32, 1), [&](int rank, int64_t step, const EventBus& bus) {
    if (rank != 1) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
    for (size_t seen = 0;;) {
      const std::vector<Event> events = bus.events_since(seen);
      seen += events.size();
      for (const Event& e : events)
        if (e.step == step && e.device == first0 && e.phase == Phase::bwd && e.lane == Lane::compute) return;
      if (std::chrono::steady_clock::now() > deadline) {
        gave_up = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  lab::expect(!gave_up, "2 ranks, " + kModel + ": rank 0 steps while rank 1 has not started",
              "rank 0's first device begins its backward at once (the second device's all-reduce is launched, "
              "not waited for, until the gradients are averaged)",
              "nothing on device " + str(first0) + "'s backward after 1 s: rank 0 waits for an all-reduce that "
              "cannot end before rank 1 joins it");
  std::printf("passed: rank 0's first device goes on with backward while its second device's all-reduce waits for rank 1\n");
}

// Memory held: after each step no activation is left on either device (the batch, the activation
// and its gradient, the logits are the step's own, freed when it returns).
void released(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const Run run = train_ddp_mp(n, "", kModel, "sgd", make_batches(kModel, 32, 2));
    for (int d = 0; d < 2 * n; ++d)
      lab::expect(run.held_after_step[static_cast<size_t>(d)] == 0,
                  str(n) + " ranks, " + kModel + ": the activations device " + str(d) + " (rank " + str(d / 2) +
                      "'s " + (d % 2 == 0 ? "first" : "second") + ") still holds after rank_step returns",
                  "0 bytes (nothing of a step is kept past it)", str(run.held_after_step[static_cast<size_t>(d)]) + " bytes");
    report += "  " + str(n) + " ranks: 0 bytes of activations left on every device after each step\n";
  }
  std::printf("passed: a step keeps nothing past its end\n%s", report.c_str());
}

// Single's mean loss on each rank's shard before each step: what rank_step must return, since every
// replica holds single's weights (within round-off). [step][rank]
std::vector<std::vector<double>> shard_losses(const std::string& model, const std::vector<HostBatch>& batches, int n) {
  EventBus bus;
  DeviceOptions o;
  o.bus = &bus;
  auto devices = make_devices(o);
  Device& device = *devices[0];
  Model m(device, init_weights(ModelSpec::parse(model), 7));
  Optimizer step(optimizer_config("sgd"), m.parameters());
  std::vector<std::vector<double>> out(batches.size());
  HostBatch shard;
  for (size_t s = 0; s < batches.size(); ++s) {
    Model now(device, m.download());  // this step's weights, for the shards' forwards alone
    for (int r = 0; r < n; ++r) {
      take_shard(batches[s], r, n, shard);
      out[s].push_back(lab::forward_backward(device, now, shard));  // (now's gradients are thrown away)
    }
    lab::forward_backward(device, m, batches[s]);
    step.step();
  }
  return out;
}

// The loss each rank_step returns: its rank's mean over its own rows, as single's on that shard.
void loss(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const int steps = 3;
  const auto batches = make_batches(kModel, 32, steps);
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const Run run = train_ddp_mp(n, "", kModel, "sgd", batches);
    const auto want = shard_losses(kModel, batches, n);
    for (int s = 0; s < steps; ++s)
      for (int r = 0; r < n; ++r) {
        const double got = run.losses[static_cast<size_t>(s)][static_cast<size_t>(r)];
        const double w = want[static_cast<size_t>(s)][static_cast<size_t>(r)];
        lab::expect(std::abs(got - w) <= 1e-5 * std::abs(w),
                    str(n) + " ranks, " + kModel + ", step " + str(s) + ": the loss rank " + str(r) + "'s rank_step returned",
                    str(w) + " (within 1e-5 relative: the mean loss over this rank's " + str(32 / n) +
                        " rows, as single computes it on them)",
                    str(got));
      }
    report += "  " + str(n) + " ranks: every step's loss as single's on the rank's shard (step 0, rank 0: " +
              str(run.losses[0][0]) + ")\n";
  }
  std::printf("passed: rank_step returns its rank's mean loss\n%s", report.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                          {{"placement", placement}, {"equivalence", equivalence}, {"moves", moves}, {"memory", memory},
                           {"launch_order", launch_order}, {"no_wait", no_wait}, {"released", released},
                           {"loss", loss}});
}
