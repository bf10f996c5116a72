// Lab 03's checks (the instructor's test program). The grader builds it with the student's dp.cpp
// and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed, 1 failed. The
// controller owns N devices (cpu, or sim devices of a hardware profile: real numerics either way)
// and a replica on each, as strategies/data_parallel.cpp does; the reference is a plain
// single-device loop. The moves are read from the trace (each copy's role), the memory from each
// device's ledger, so every number checked is exact and machine-independent.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/nn/mlp.h"
#include "core/nn/optimizer.h"
#include "core/trace/events.h"
#include "lab.h"
#include "labs/common/reference.h"
#include "labs/common/verdict.h"

using namespace scalelab;
using lab::Args;
using lab::str;

namespace {

const std::string kModel = "mlp:20-16-4";
constexpr int kSteps = 5;

OptimizerConfig sgd() {
  OptimizerConfig c;
  c.kind = "sgd";
  c.lr = 0.05f;
  c.momentum = 0.9f;
  return c;
}

std::vector<HostBatch> make_batches(const std::string& model, int64_t batch, int steps) {
  return lab::synthetic_batches(model, batch, steps, 2048, 3);
}

struct Run {
  HostWeights weights;           // replicas[0]'s, after the last step
  std::vector<Event> events;     // the whole trace
  std::vector<std::vector<int64_t>> peaks;  // each device's ledger peak by category
};

// The student's DataParallel: n devices (cpu, or sim of `profile`), `steps` steps.
Run train_dp(int n, const std::string& profile, const std::string& model, const std::vector<HostBatch>& batches) {
  EventBus bus;
  DeviceOptions o;
  o.count = n;
  o.bus = &bus;
  if (!profile.empty()) {
    o.kind = DeviceKind::sim;
    o.profile = load_profile(profile);
  }
  auto devices = make_devices(o);
  const ModelSpec spec = ModelSpec::parse(model);
  std::vector<std::unique_ptr<Mlp>> replicas;
  lab03::Controller c;
  for (int i = 0; i < n; ++i) {
    // Replicas 1…n−1 start from OTHER weights: only replicating device 0's makes them right.
    replicas.push_back(std::make_unique<Mlp>(*devices[static_cast<size_t>(i)], init_weights(spec, i == 0 ? 7 : 100 + i)));
    c.devices.push_back(devices[static_cast<size_t>(i)].get());
    c.replicas.push_back(replicas.back().get());
  }
  Optimizer optimizer(sgd(), replicas[0]->parameters());
  c.optimizer = &optimizer;
  for (size_t s = 0; s < batches.size(); ++s) {
    for (Device* d : c.devices) d->set_step(static_cast<int64_t>(s));
    const double loss = lab03::data_parallel_step(c, batches[s]);
    lab::expect(std::isfinite(loss), "step " + str(s) + ": the loss data_parallel_step returned", "a finite number",
                str(loss));
  }
  Run r;
  r.weights = replicas[0]->download();
  for (Device* d : c.devices) {
    r.peaks.emplace_back();
    for (int k = 0; k < kMemoryCategoryCount; ++k) r.peaks.back().push_back(d->memory().peak(static_cast<MemoryCategory>(k)));
  }
  replicas.clear();
  r.events = bus.events();
  return r;
}

HostWeights train_single(const std::string& model, const std::vector<HostBatch>& batches) {
  return lab::train_single(model, sgd(), batches);
}

std::string expect_equivalent(int n, const std::string& profile, const std::string& model, int64_t batch, int steps) {
  const auto batches = make_batches(model, batch, steps);
  const HostWeights single = train_single(model, batches);
  const Run r = train_dp(n, profile, model, batches);
  const double diff = max_relative_difference(r.weights, single);
  char line[200];
  std::snprintf(line, sizeof line, "%d %s devices: max relative difference %.3g", n,
                profile.empty() ? "cpu" : (profile + " sim").c_str(), diff);
  lab::expect(std::isfinite(diff) && diff <= 1e-5,
              "DataParallel with your data_parallel_step, " + str(n) + (profile.empty() ? " cpu" : " sim (" + profile + ")") +
                  " devices, " + model + ", " + str(steps) + " SGD steps (momentum 0.9) of batch " + str(batch) +
                  ": device 0's weights against single's" +
                  " (a difference from step 2 on: are the replicas refreshed from device 0 every step?)",
              "max relative difference ≤ 1e-5", line);
  return line;
}

// Task 1: after 5 steps, device 0's weights are single's (≤ 1e-5).
void equivalence(const Args& a) {
  const std::string profile = a.get("hw", "");
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  std::string report;
  for (long long n : a.ints("devices", "2,4")) report += "  " + expect_equivalent(static_cast<int>(n), profile, model, batch, kSteps) + "\n";
  std::printf("passed: DataParallel with your step trains as single does\n%s", report.c_str());
}

const char* move_name(Role r) { return role_name(r); }

// Task 1: the moves, read from the trace. Per step, the copies with a DataParallel role, in the
// order they were issued, come in runs: scatter, replicate, gather, scatter, reduce. Each device
// i ≥ 1 receives 4·P bytes of replicated weights; device 0 receives every gather and reduce: the
// outputs of the other devices' rows, and (N−1)·4·P bytes of gradients.
void moves(const Args& a) {
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const int steps = 2;
  const ModelSpec spec = ModelSpec::parse(model);
  const int64_t P = spec.parameter_count(), C = spec.outputs();
  std::string report;
  for (long long nl : a.ints("devices", "2,4")) {
    const int n = static_cast<int>(nl);
    const int64_t rows = batch / n;
    const Run r = train_dp(n, "", model, make_batches(model, batch, steps));
    const std::string what = "DataParallel, " + str(n) + " cpu devices, " + model + ", batch " + str(batch);
    for (int s = 0; s < steps; ++s) {
      std::vector<Role> runs;
      std::vector<int64_t> replicated(static_cast<size_t>(n), 0);
      int64_t gathered = 0, reduced = 0;
      for (const Event& e : r.events) {
        if (e.step != s) continue;
        if (e.role != Role::scatter && e.role != Role::replicate && e.role != Role::gather && e.role != Role::reduce) continue;
        if (runs.empty() || runs.back() != e.role) runs.push_back(e.role);
        if (e.kind != "copy_p2p") continue;  // moves between devices only (not the reduce's additions)
        if (e.role == Role::replicate && e.device >= 0 && e.device < n) replicated[static_cast<size_t>(e.device)] += e.bytes;
        if ((e.role == Role::gather || e.role == Role::reduce) && e.device != 0)
          lab::fail(what + ", step " + str(s) + ": a " + move_name(e.role) + " copy (\"" + e.name + "\")",
                    "received by device 0 (the controller's device gathers and reduces)",
                    "received by device " + str(e.device));
        if (e.role == Role::gather) gathered += e.bytes;
        if (e.role == Role::reduce) reduced += e.bytes;
      }
      std::string got;
      for (Role x : runs) got += (got.empty() ? "" : ", ") + std::string(move_name(x));
      lab::expect(runs == std::vector<Role>{Role::scatter, Role::replicate, Role::gather, Role::scatter, Role::reduce},
                  what + ", step " + str(s) + ": the moves (copies by role, in the order issued)",
                  "scatter, replicate, gather, scatter, reduce (the batch's rows out, the weights out, the outputs in, "
                  "their gradient out, the weight gradients in)",
                  got.empty() ? "no copies with those roles" : got);
      for (int i = 1; i < n; ++i)
        lab::expect(replicated[static_cast<size_t>(i)] == 4 * P,
                    what + ", step " + str(s) + ": the weights device " + str(i) + " receives (replicate)",
                    "4 · P = " + str(4 * P) + " bytes, every step", str(replicated[static_cast<size_t>(i)]) + " bytes");
      lab::expect(gathered == (n - 1) * rows * C * 4,
                  what + ", step " + str(s) + ": the outputs device 0 gathers from the other devices",
                  "(N − 1) · " + str(rows) + " rows · " + str(C) + " classes · 4 = " + str((n - 1) * rows * C * 4) +
                      " bytes, into one [batch, classes] tensor on device 0",
                  str(gathered) + " bytes");
      lab::expect(reduced == (n - 1) * 4 * P, what + ", step " + str(s) + ": the gradients device 0 receives (reduce)",
                  "(N − 1) · 4 · P = " + str((n - 1) * 4 * P) + " bytes", str(reduced) + " bytes");
    }
    report += "  " + str(n) + " devices: scatter, replicate, gather, scatter, reduce; device 0 reduces " +
              str((n - 1) * 4 * P) + " bytes a step\n";
  }
  std::printf("passed: the moves of DataParallel, in order\n%s", report.c_str());
}

// Task 2: the numeric question, against what the ledgers measure with the student's own step (which
// must train right first).
void device0_memory(const Args& a) {
  const std::string model = a.get("model", "mlp:784-512-256-10");
  const int64_t batch = std::stoll(a.get("batch", "512"));
  const int n = static_cast<int>(std::stoll(a.get("devices", "4")));
  const double tolerance = 0.01;
  const int64_t answer = lab03::device0_extra_peak_bytes();
  const auto batches = make_batches(model, batch, 2);
  const HostWeights single = train_single(model, batches);
  const Run r = train_dp(n, "", model, batches);
  const double diff = max_relative_difference(r.weights, single);
  lab::expect(std::isfinite(diff) && diff <= 1e-5, "your step on " + model + ", batch " + str(batch) + ", " + str(n) +
                  " devices (the question is about YOUR DataParallel: make `equivalence` pass first)",
              "device 0's weights within 1e-5 of single's", "max relative difference " + str(diff));
  int64_t measured = 0;
  for (int k = 0; k < kMemoryCategoryCount; ++k) measured += r.peaks[0][static_cast<size_t>(k)] - r.peaks[1][static_cast<size_t>(k)];
  const double off = std::abs(static_cast<double>(answer - measured)) / static_cast<double>(measured);
  lab::expect(measured > 0 && off <= tolerance,
              "device0_extra_peak_bytes(): the sum over the ledger's categories of device 0's peak minus device 1's, " + model + ", batch " + str(batch) +
                  ", " + str(n) + " cpu devices, SGD with momentum, 2 steps",
              "within 1 % of what the ledgers measure (not shown: compute it — README.md, \"The numeric question\")",
              str(answer) + " bytes, " + str(static_cast<int>(std::lround(off * 100))) + " % off");
  std::string by;
  for (int k = 0; k < kMemoryCategoryCount; ++k) {
    const int64_t d = r.peaks[0][static_cast<size_t>(k)] - r.peaks[1][static_cast<size_t>(k)];
    if (d != 0) by += "  " + std::string(memory_category_name(static_cast<MemoryCategory>(k))) + ": +" + str(d) + " bytes\n";
  }
  std::printf("passed: device 0's peaks exceed device 1's by %lld bytes (your answer: %lld)\n%s",
              static_cast<long long>(measured), static_cast<long long>(answer), by.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv, {{"equivalence", equivalence}, {"moves", moves}, {"device0_memory", device0_memory}});
}
