// Lab 03's checks (the instructor's test program). The grader builds it with the student's dp.cpp
// and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed, 1 failed. The
// controller owns N devices (cpu, or sim devices of a hardware profile: real numerics either way)
// and a replica on each, as strategies/data_parallel.cpp does; the reference is a plain
// single-device loop. The moves are read from the trace (each copy's role), the memory from each
// device's ledger, so every number checked is exact and machine-independent.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/nn/model.h"
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
  // Each device's activations and comm_buffers still held when a step returned, by step.
  std::vector<std::vector<int64_t>> left_after_step;
  int controller_thread = -1;    // the host thread that called data_parallel_step
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
  std::vector<std::unique_ptr<Model>> replicas;
  lab03::Controller c;
  for (int i = 0; i < n; ++i) {
    // Replicas 1…n−1 start from OTHER weights: only replicating device 0's makes them right.
    replicas.push_back(std::make_unique<Model>(*devices[static_cast<size_t>(i)], init_weights(spec, i == 0 ? 7 : 100 + i)));
    c.devices.push_back(devices[static_cast<size_t>(i)].get());
    c.replicas.push_back(replicas.back().get());
  }
  Optimizer optimizer(sgd(), replicas[0]->parameters());
  c.optimizer = &optimizer;
  std::vector<std::vector<int64_t>> left;
  for (size_t s = 0; s < batches.size(); ++s) {
    for (Device* d : c.devices) d->set_step(static_cast<int64_t>(s));
    const double loss = lab03::data_parallel_step(c, batches[s]);
    lab::expect(std::isfinite(loss), "step " + str(s) + ": the loss data_parallel_step returned", "a finite number",
                str(loss));
    left.emplace_back();
    for (Device* d : c.devices)
      left.back().push_back(d->memory().live(MemoryCategory::activations) + d->memory().live(MemoryCategory::comm_buffers));
  }
  Run r;
  r.left_after_step = std::move(left);
  r.controller_thread = host_thread_index();
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

bool is_move(Role r) { return r == Role::scatter || r == Role::replicate || r == Role::gather || r == Role::reduce; }

// One step as the trace has it.
struct StepMoves {
  // DataParallel's copies by role, and the loss ("loss"), in the order issued; a run of the same
  // one counted once. The lecture's order: scatter, replicate, gather, loss, scatter, reduce.
  std::vector<std::string> runs;
  std::vector<int> loss_devices;  // the device of each softmax_xent
  // The bytes each device received by copies between devices (copy_p2p), by role; and by local
  // copies that scatter or replicate made.
  std::map<Role, std::vector<int64_t>> received;
};

StepMoves step_moves(const Run& r, int n, int step) {
  StepMoves m;
  for (Role role : {Role::scatter, Role::replicate, Role::gather, Role::reduce}) m.received[role].assign(static_cast<size_t>(n), 0);
  for (const Event& e : r.events) {
    const bool loss = e.kind == "softmax_xent";
    if (e.step != step || (!loss && !is_move(e.role))) continue;
    const std::string what = loss ? "loss" : role_name(e.role);
    if (m.runs.empty() || m.runs.back() != what) m.runs.push_back(what);
    if (loss) m.loss_devices.push_back(e.device);
    // Between devices; and device 0's copies of its own rows or weights, which scatter and replicate
    // must not make (gather's copy of device 0's own outputs into the batch's logits is its place).
    const bool local_waste = e.kind == "copy" && (e.role == Role::scatter || e.role == Role::replicate);
    if (!loss && (e.kind == "copy_p2p" || local_waste) && e.device >= 0 && e.device < n)
      m.received[e.role][static_cast<size_t>(e.device)] += e.bytes;  // not the reduce's additions
  }
  return m;
}

template <typename T>
std::string joined(const std::vector<T>& v) {
  std::string s;
  for (const T& x : v) s += (s.empty() ? "" : ", ") + str(x);
  return s.empty() ? "none" : s;
}

// The trace checks train kMoveSteps steps of --model, batch --batch, on each --devices count of cpu
// devices, and hand each run to check(n, spec, batch, run, "DataParallel, n cpu devices, …").
constexpr int kMoveSteps = 2;
using RunCheck = std::function<void(int n, const ModelSpec& spec, int64_t batch, const Run& r, const std::string& what)>;
void each_run(const Args& a, const RunCheck& check) {
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const ModelSpec spec = ModelSpec::parse(model);
  for (long long nl : a.ints("devices", "2,4")) {
    const int n = static_cast<int>(nl);
    const Run r = train_dp(n, "", model, make_batches(model, batch, kMoveSteps));
    check(n, spec, batch, r, "DataParallel, " + str(n) + " cpu devices, " + model + ", batch " + str(batch));
  }
}

// Task 1, order: per step the copies come in runs scatter, replicate, gather, scatter, reduce; the
// loss comes once, on device 0, between the gather and the gradient's scatter; device 0 alone
// receives the gathers and the reduces.
void moves(const Args& a) {
  each_run(a, [](int n, const ModelSpec&, int64_t, const Run& r, const std::string& what) {
    for (int s = 0; s < kMoveSteps; ++s) {
      const StepMoves m = step_moves(r, n, s);
      const std::string at = what + ", step " + str(s);
      const std::vector<std::string> order = {"scatter", "replicate", "gather", "loss", "scatter", "reduce"};
      lab::expect(m.runs == order, at + ": the moves (copies by role) and the loss, in the order issued",
                  "scatter, replicate, gather, loss, scatter, reduce (the batch's rows out, the weights out, the outputs "
                  "in, the loss on device 0, its gradient out, the weight gradients in)",
                  joined(m.runs));
      lab::expect(m.loss_devices == std::vector<int>{0}, at + ": the loss (softmax_xent), by device",
                  "once, on device 0, on the whole gathered batch", "on devices " + joined(m.loss_devices));
      for (Role role : {Role::gather, Role::reduce})
        for (int i = 1; i < n; ++i)
          lab::expect(m.received.at(role)[static_cast<size_t>(i)] == 0,
                      at + ": " + role_name(role) + " copies received by device " + str(i),
                      "none (device 0, the controller's device, gathers and reduces)",
                      str(m.received.at(role)[static_cast<size_t>(i)]) + " bytes");
    }
  });
  std::printf("passed: scatter, replicate, gather, loss, scatter, reduce every step; the loss once, on device 0\n");
}

// Task 1, bytes moved per step: each device i ≥ 1 receives its rows only (of the batch, then of the
// outputs' gradient: R · (F + C) · 4) and every weight (4 · P); device 0 receives the other
// devices' outputs ((N − 1) · R · C · 4) and their gradients ((N − 1) · 4 · P).
void bytes(const Args& a) {
  std::string report;
  each_run(a, [&](int n, const ModelSpec& spec, int64_t batch, const Run& r, const std::string& what) {
    const int64_t P = spec.parameter_count(), F = spec.inputs(), C = spec.outputs(), R = batch / n;
    const std::string sizes = " (R = " + str(R) + " rows, F = " + str(F) + ", C = " + str(C) + ", P = " + str(P) + ")";
    struct Want {
      Role role;
      int device;
      int64_t bytes;
      std::string why;
    };
    std::vector<Want> wants;
    for (int i = 1; i < n; ++i) {
      wants.push_back({Role::scatter, i, R * (F + C) * 4,
                       "its rows only, of the batch and of the outputs' gradient: R · (F + C) · 4 = " + str(R * (F + C) * 4)});
      wants.push_back({Role::replicate, i, 4 * P, "every weight, every step: 4 · P = " + str(4 * P)});
    }
    // Device 0 keeps its own rows and weights where they are: nothing scattered or replicated to it.
    wants.push_back({Role::scatter, 0, 0, "nothing: its rows of the batch and of the gradient stay where they are"});
    wants.push_back({Role::replicate, 0, 0, "nothing: its replica is the model itself"});
    wants.push_back({Role::gather, 0, (n - 1) * R * C * 4, "the other devices' outputs: (N − 1) · R · C · 4 = " + str((n - 1) * R * C * 4)});
    wants.push_back({Role::reduce, 0, (n - 1) * 4 * P, "the other devices' gradients: (N − 1) · 4 · P = " + str((n - 1) * 4 * P)});
    for (int s = 0; s < kMoveSteps; ++s) {
      const StepMoves m = step_moves(r, n, s);
      for (const Want& w : wants) {
        const int64_t got = m.received.at(w.role)[static_cast<size_t>(w.device)];
        lab::expect(got == w.bytes,
                    what + ", step " + str(s) + ": the " + role_name(w.role) + " bytes device " + str(w.device) + " receives" + sizes,
                    w.why, str(got) + " bytes");
      }
    }
    report += "  " + str(n) + " devices: each other device receives " + str(R * (F + C) * 4) + " bytes of rows and " +
              str(4 * P) + " of weights; device 0 " + str((n - 1) * R * C * 4) + " of outputs and " + str((n - 1) * 4 * P) +
              " of gradients, a step\n";
  });
  std::printf("passed: the bytes of every move\n%s", report.c_str());
}

// Task 1, memory held: the reduce holds one comm_buffers tensor at a time on device 0 (the largest
// parameter's), the other devices none, and a step leaves no activation or buffer behind.
void memory_held(const Args& a) {
  std::string report;
  each_run(a, [&](int n, const ModelSpec& spec, int64_t, const Run& r, const std::string& what) {
    int64_t largest = 0;
    for (int l = 0; l < spec.layer_count(); ++l)
      largest = std::max({largest, spec.sizes[l + 1] * spec.sizes[l], spec.sizes[l + 1]});
    const size_t comm = static_cast<size_t>(MemoryCategory::comm_buffers);
    lab::expect(r.peaks[0][comm] == 4 * largest, what + ": device 0's comm_buffers peak",
                "one reduce buffer at a time, freed before the next: the largest parameter's, 4 · " + str(largest) + " = " +
                    str(4 * largest) + " bytes",
                str(r.peaks[0][comm]) + " bytes");
    for (int i = 1; i < n; ++i)
      lab::expect(r.peaks[static_cast<size_t>(i)][comm] == 0, what + ": device " + str(i) + "'s comm_buffers peak",
                  "0 (its rows land in activations, the weights in its parameters; it reduces nothing)",
                  str(r.peaks[static_cast<size_t>(i)][comm]) + " bytes");
    for (size_t s = 0; s < r.left_after_step.size(); ++s)
      for (int i = 0; i < n; ++i)
        lab::expect(r.left_after_step[s][static_cast<size_t>(i)] == 0,
                    what + ", step " + str(s) + ": activations and comm_buffers device " + str(i) +
                        " still held when data_parallel_step returned",
                    "0 bytes (each buffer freed once used)", str(r.left_after_step[s][static_cast<size_t>(i)]) + " bytes");
    report += "  " + str(n) + " devices: device 0's comm_buffers peak " + str(4 * largest) + " bytes, the others' 0\n";
  });
  std::printf("passed: one reduce buffer at a time, nothing kept past its step\n%s", report.c_str());
}

// Task 1, what runs at once: each replica's forward and backward run on a host thread of its own
// (parallel_apply), and every move is issued by the controller's thread, in order.
void parallel(const Args& a) {
  each_run(a, [](int n, const ModelSpec&, int64_t, const Run& r, const std::string& what) {
    const std::string controller = "the controller's thread " + str(r.controller_thread);
    for (int s = 0; s < kMoveSteps; ++s) {
      const std::string at = what + ", step " + str(s);
      for (Phase phase : {Phase::fwd, Phase::bwd}) {
        std::vector<std::set<int>> threads(static_cast<size_t>(n));  // the threads of each replica's layers
        for (const Event& e : r.events)
          if (e.step == s && e.lane == Lane::compute && e.phase == phase && e.layer >= 0 && e.role == Role::none &&
              e.device >= 0 && e.device < n)
            threads[static_cast<size_t>(e.device)].insert(e.thread);
        for (int i = 0; i < n; ++i) {
          const std::set<int>& t = threads[static_cast<size_t>(i)];
          lab::expect(t.size() == 1 && *t.begin() != r.controller_thread,
                      at + ": the host threads that ran replica " + str(i) + "'s " + phase_name(phase),
                      "one thread of parallel_apply's, not " + controller,
                      "threads " + joined(std::vector<int>(t.begin(), t.end())));
          for (int j = 0; j < i; ++j)
            lab::expect(t != threads[static_cast<size_t>(j)], at + ": replicas " + str(j) + " and " + str(i) + "'s " + phase_name(phase),
                        "a thread each, so that they run at once", "both on thread " + joined(std::vector<int>(t.begin(), t.end())));
        }
      }
      for (const Event& e : r.events)
        if (e.step == s && is_move(e.role) && e.thread != r.controller_thread)
          lab::fail(at + ": the " + role_name(e.role) + " \"" + e.name + "\" on device " + str(e.device),
                    "issued by " + controller + " (only forward and backward go through parallel_apply)",
                    "issued by thread " + str(e.thread));
    }
  });
  std::printf("passed: each replica's forward and backward on a thread of its own; every move from the controller\n");
}

// Task 2: the numeric question, against what the ledgers measure with the student's own step (which
// must train right first).
void device0_memory(const Args& a) {
  const std::string model = a.get("model", "mlp:784-512-256-10");
  const int64_t batch = std::stoll(a.get("batch", "512"));
  const int n = static_cast<int>(std::stoll(a.get("devices", "4")));
  // Exact: every term is a whole number of f32s, and a 1 % tolerance let a forgotten term pass
  // (the labels, 2 KiB; the gathered outputs, 40 KiB — of 4.99 MB).
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
  lab::expect(measured > 0 && answer == measured,
              "device0_extra_peak_bytes(): the sum over the ledger's categories of device 0's peak minus device 1's, " + model + ", batch " + str(batch) +
                  ", " + str(n) + " cpu devices, SGD with momentum, 2 steps",
              "exactly what the ledgers measure (not shown: compute it — README.md, \"The numeric question\")",
              str(answer) + " bytes, " + (off < 0.01 ? "less than 1 % off: a term of the sum is missing or wrong"
                                                      : str(static_cast<int>(std::lround(off * 100))) + " % off"));
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
  return lab::graded_main(argc, argv,
                          {{"equivalence", equivalence},
                           {"moves", moves},
                           {"bytes", bytes},
                           {"memory_held", memory_held},
                           {"parallel", parallel},
                           {"device0_memory", device0_memory}});
}
