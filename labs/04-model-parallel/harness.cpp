// Lab 04's checks (the instructor's test program). The grader builds it with the student's mp.cpp
// and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed, 1 failed. The
// controller owns p devices (cpu, or sim devices of a hardware profile) and one model whose layers
// are placed as strategies/model_parallel.cpp places them; the reference is a plain single-device
// loop. The moves are read from the trace, the speed from the simulated clock (dry runs on sim:
// no numerics, the cost model's time), so every number checked is machine-independent.
#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <cstdio>
#include <map>
#include <memory>
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

const std::string kModel = "mlp:32-24-16-12-8";  // four layers of different widths: a misplaced gradient shows
constexpr int kSteps = 5;

// The experiment's model: a narrow input and output, 6 wide layers between them, so that the 2
// devices' halves cost about the same and the batch's upload is small beside the step.
const std::string kTimingModel = "mlp:256-2048-2048-2048-2048-2048-2048-2048-10";
constexpr int64_t kTimingBatch = 2048;
const std::string kTimingHw = "a100-nvlink-8";
const std::string kGrid = "8,16,32,64,128,256,512,1024,2048";

OptimizerConfig sgd() {
  OptimizerConfig c;
  c.kind = "sgd";
  c.lr = 0.05f;
  c.momentum = 0.9f;
  return c;
}

// The library's placement (strategies/model_parallel.cpp): layer l of L on device ⌊l·p / L⌋.
std::vector<int> reference_placement(int layers, int devices) {
  std::vector<int> out;
  for (int l = 0; l < layers; ++l) out.push_back(l * devices / layers);
  return out;
}

std::string text(const std::vector<int>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
  return s + "}";
}

// The split sizes a check runs: 0 stands for model_parallel_step (the unsplit step).
std::string step_name(int64_t split) {
  return split == 0 ? "model_parallel_step" : "pipelined_step(split_size " + str(split) + ")";
}

int64_t chunks_of(int64_t batch, int64_t split) { return split == 0 ? 1 : (batch + split - 1) / split; }

struct Run {
  HostWeights weights;        // after the last step
  std::vector<Event> events;  // the whole trace
  std::vector<double> losses;
  // Per step, per device: the activations, comm_buffers and workspace bytes still held after it.
  std::vector<std::vector<int64_t>> held_after;
  // Per device: the ledger's peak of params, grads and optimizer.
  std::vector<std::array<int64_t, 3>> state_peaks;
};

// The student's steps on p devices (cpu, or sim of `profile`; a dry run on sim: no numerics).
Run train_mp(int p, const std::string& profile, bool dry_run, const std::string& model,
             const std::vector<HostBatch>& batches, int64_t split) {
  EventBus bus;
  DeviceOptions o;
  o.count = p;
  o.bus = &bus;
  o.dry_run = dry_run;
  if (!profile.empty()) {
    o.kind = DeviceKind::sim;
    o.profile = load_profile(profile);
  }
  auto devices = make_devices(o);
  const ModelSpec spec = ModelSpec::parse(model);
  std::vector<Device*> placed;
  for (int d : reference_placement(spec.layer_count(), p)) placed.push_back(devices[static_cast<size_t>(d)].get());
  Model mlp(placed, init_weights(spec, 7));
  Optimizer optimizer(sgd(), mlp.parameters());
  lab04::Controller c;
  for (auto& d : devices) c.devices.push_back(d.get());
  c.model = &mlp;
  c.optimizer = &optimizer;
  Run r;
  for (size_t s = 0; s < batches.size(); ++s) {
    for (Device* d : c.devices) d->set_step(static_cast<int64_t>(s));
    const double loss = split == 0 ? lab04::model_parallel_step(c, batches[s]) : lab04::pipelined_step(c, batches[s], split);
    if (!dry_run)
      lab::expect(std::isfinite(loss), "step " + str(s) + ": the loss " + step_name(split) + " returned",
                  "a finite number", str(loss));
    r.losses.push_back(loss);
    std::vector<int64_t> held;
    for (Device* d : c.devices)
      held.push_back(d->memory().live(MemoryCategory::activations) + d->memory().live(MemoryCategory::comm_buffers) +
                     d->memory().live(MemoryCategory::workspace));
    r.held_after.push_back(held);
  }
  for (Device* d : c.devices)
    r.state_peaks.push_back({d->memory().peak(MemoryCategory::params), d->memory().peak(MemoryCategory::grads),
                             d->memory().peak(MemoryCategory::optimizer)});
  for (Device* d : c.devices) d->set_step(-1);  // reading the weights back is not part of a step
  if (!dry_run) r.weights = mlp.download();
  r.events = bus.events();
  return r;
}

std::vector<HostBatch> make_batches(const std::string& model, int64_t batch, int steps) {
  return lab::synthetic_batches(model, batch, steps, 2048, 5);
}

// After `steps` steps, the weights are single's within 1e-5; and the losses are the batch means.
std::string expect_equivalent(int p, const std::string& profile, const std::string& model, int64_t batch,
                              int64_t split) {
  const auto batches = make_batches(model, batch, kSteps);
  std::vector<double> single_losses;
  const HostWeights single = lab::train_single(model, sgd(), batches, &single_losses);
  const Run r = train_mp(p, profile, false, model, batches, split);
  // The loss each step returns is the batch's mean, as single's (chunks weighted by their rows).
  for (size_t s = 0; s < single_losses.size() && s < r.losses.size(); ++s)
    lab::expect(std::fabs(r.losses[s] - single_losses[s]) <= 1e-5 * std::max(1.0, std::fabs(single_losses[s])),
                "step " + str(s) + ": the loss your " + step_name(split) + " returned, " + str(p) + " devices",
                "single's, the batch's mean: " + str(single_losses[s]), str(r.losses[s]));
  const double diff = max_relative_difference(r.weights, single);
  const std::string where = str(p) + (profile.empty() ? " cpu" : " sim (" + profile + ")") + " devices";
  char line[200];
  std::snprintf(line, sizeof line, "%s, %s: max relative difference %.3g", where.c_str(), step_name(split).c_str(), diff);
  const int64_t m = chunks_of(batch, split);
  const bool short_last = split > 0 && batch % split != 0;
  lab::expect(std::isfinite(diff) && diff <= 1e-5,
              "model parallel with your " + step_name(split) + " (" + str(m) + (m == 1 ? " chunk" : " chunks") +
                  (short_last ? ", the last of " + str(batch - (m - 1) * split) + " rows" : "") + "), " + where + ", " +
                  model + ", " + str(kSteps) + " SGD steps (momentum 0.9) of batch " + str(batch) +
                  ": the weights against single's" +
                  (m > 1 ? " (are the chunks' gradients added up, each weighted by its share of the batch?)" : ""),
              "max relative difference ≤ 1e-5", line);
  return line;
}

// Tasks 2 and 3: the unsplit step and the pipelined one train as single does.
void equivalence(const Args& a) {
  const std::string profile = a.get("hw", "");
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  std::string report;
  for (long long p : a.ints("devices", "2,4"))
    for (long long split : a.ints("splits", "0,32,8,12"))
      report += "  " + expect_equivalent(static_cast<int>(p), profile, model, batch, split) + "\n";
  std::printf("passed: model parallel with your steps trains as single does (split 0: model_parallel_step)\n%s",
              report.c_str());
}

// Task 1: the placement, for many (layers, devices): contiguous groups in order, each device at
// least one layer, sizes differing by at most one.
void placement(const Args& a) {
  int cases = 0;
  for (long long L : a.ints("layers", "1-12"))
    for (long long p = 1; p <= std::min<long long>(L, 8); ++p) {
      const std::vector<int> got = lab04::layer_devices(static_cast<int>(L), static_cast<int>(p));
      const std::string call = "layer_devices(" + str(L) + ", " + str(p) + ") = " + text(got);
      lab::expect(got.size() == static_cast<size_t>(L), call, "one device per layer: " + str(L) + " entries",
                  str(got.size()) + " entries");
      std::vector<int> count(static_cast<size_t>(p), 0);
      for (size_t l = 0; l < got.size(); ++l) {
        const int d = got[l];
        lab::expect(d >= 0 && d < p, call + ": layer " + str(l), "a device 0 … " + str(p - 1), str(d));
        if (l == 0)
          lab::expect(d == 0, call + ": the first layer", "on device 0 (it gets the batch)", "on device " + str(d));
        else
          lab::expect(d == got[l - 1] || d == got[l - 1] + 1, call + ": layer " + str(l) + " after layer " + str(l - 1),
                      "on the same device or the next one (contiguous groups, in order: activations only go forward "
                      "to the next device)",
                      "device " + str(got[l - 1]) + ", then device " + str(d));
        ++count[static_cast<size_t>(d)];
      }
      const auto [lo, hi] = std::minmax_element(count.begin(), count.end());
      lab::expect(*lo >= 1, call, "every device holds at least one layer", "device " + str(lo - count.begin()) + " holds none");
      lab::expect(*hi - *lo <= 1, call, "groups whose sizes differ by at most one (⌊L/p⌋ or ⌈L/p⌉ layers each)",
                  "device " + str(hi - count.begin()) + " holds " + str(*hi) + " layers, device " + str(lo - count.begin()) +
                      " " + str(*lo));
      ++cases;
    }
  std::printf("passed: contiguous groups in order, sizes differing by at most one, on %d (layers, devices) cases "
              "(5 layers on 2 devices: %s)\n",
              cases, text(lab04::layer_devices(5, 2)).c_str());
}

// Tasks 2 and 3: the moves, read from the trace. Per step: every layer computes on its device; the
// loss is on the last device; the only copies between devices cross a boundary between neighbours,
// forward (activations, received by the next device) and back (their gradient, received by the one
// before), one per chunk each way, the batch's rows × the boundary's width × 4 bytes in all.
void moves(const Args& a) {
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const ModelSpec spec = ModelSpec::parse(model);
  const int L = spec.layer_count();
  std::string report;
  for (long long pl : a.ints("devices", "2,4")) {
    const int p = static_cast<int>(pl);
    const std::vector<int> place = reference_placement(L, p);
    std::map<int, int64_t> width;  // boundary k (between devices k and k + 1) → the activations' width there
    for (int l = 1; l < L; ++l)
      if (place[l] != place[l - 1]) width[place[l - 1]] = spec.sizes[static_cast<size_t>(l)];
    for (long long split : a.ints("splits", "0,8,12")) {
      const int64_t m = chunks_of(batch, split);
      const Run r = train_mp(p, "", false, model, make_batches(model, batch, 2), split);
      const std::string what = "your " + step_name(split) + ", " + str(p) + " cpu devices, " + model + " (layers on " +
                               text(place) + "), batch " + str(batch);
      for (int s = 0; s < 2; ++s) {
        std::map<std::pair<int, int>, std::pair<int64_t, int64_t>> crossed;  // (to, from) → (copies, bytes)
        int losses = 0;
        for (const Event& e : r.events) {
          if (e.step != s) continue;
          const std::string at = what + ", step " + str(s) + ": ";
          if (e.kind == "gemm" && e.layer >= 0 && e.layer < L)
            lab::expect(e.device == place[static_cast<size_t>(e.layer)], at + "the GEMM \"" + e.name + "\" of layer fc" + str(e.layer + 1),
                        "on device " + str(place[static_cast<size_t>(e.layer)]) + ", where the layer lives",
                        "on device " + str(e.device));
          if (e.kind == "softmax_xent") {
            ++losses;
            lab::expect(e.device == p - 1, at + "the loss (\"" + e.name + "\")",
                        "on the last device, " + str(p - 1) + ", where the logits are and the labels go",
                        "on device " + str(e.device));
          }
          if (e.kind != "copy_p2p") continue;
          const bool forward = e.peer == e.device - 1, back = e.peer == e.device + 1;
          const int boundary = forward ? e.peer : e.device;
          lab::expect((forward || back) && width.count(boundary) > 0, at + "a copy between devices (\"" + e.name + "\")",
                      "only across a boundary between neighbours: activations from device k to k + 1, their gradient "
                      "from k + 1 back to k",
                      "from device " + str(e.peer) + " to device " + str(e.device) + ", " + str(e.bytes) + " bytes");
          auto& [copies, bytes] = crossed[{e.device, e.peer}];
          ++copies;
          bytes += e.bytes;
        }
        lab::expect(losses >= 1, what + ", step " + str(s) + ": the loss", "computed on the last device",
                    "no softmax_xent at all");
        for (const auto& [k, w] : width)
          for (const bool forward : {true, false}) {
            const std::pair<int, int> key = forward ? std::make_pair(k + 1, k) : std::make_pair(k, k + 1);
            const auto it = crossed.find(key);
            const int64_t copies = it == crossed.end() ? 0 : it->second.first;
            const int64_t bytes = it == crossed.end() ? 0 : it->second.second;
            const std::string dir = forward ? "activations from device " + str(k) + " to device " + str(k + 1)
                                            : "gradients from device " + str(k + 1) + " back to device " + str(k);
            lab::expect(copies == m && bytes == batch * w * 4, what + ", step " + str(s) + ": the " + dir,
                        str(m) + (m == 1 ? " copy" : " copies (one per chunk)") + ", " + str(batch) + " rows × " + str(w) +
                            " × 4 = " + str(batch * w * 4) + " bytes in all",
                        str(copies) + " copies, " + str(bytes) + " bytes");
          }
      }
    }
    report += "  " + str(p) + " devices (layers on " + text(place) + "): each layer on its device, the loss on device " +
              str(p - 1) + ", one copy per chunk each way across " + str(width.size()) +
              (width.size() == 1 ? " boundary\n" : " boundaries\n");
  }
  std::printf("passed: the moves of model parallel, unsplit and in chunks\n%s", report.c_str());
}

// One entry of a device's GEMMs in issue order: forward or backward, the layer, the rows of the
// chunk (a GEMM's FLOPs / (2 · in · out): forward, dW and dX alike). Consecutive equal entries are
// one (a layer's backward runs two GEMMs), so the list reads as the passes of chunks over layers.
struct Pass {
  bool forward = true;
  int layer = 0;
  int64_t rows = 0;
  bool operator==(const Pass&) const = default;
};

void add_pass(std::vector<Pass>& passes, const Pass& p) {
  if (passes.empty() || !(passes.back() == p)) passes.push_back(p);
}

std::string passes_text(const std::vector<Pass>& passes) {
  std::string s;
  for (const Pass& p : passes)
    s += (s.empty() ? "" : " ") + std::string(p.forward ? "F" : "B") + "fc" + str(p.layer + 1) + "×" + str(p.rows);
  return s;
}

// Task 3, the order the lecture pipelines in: on each device, every chunk's forward before any
// backward (GPipe); the chunks in the batch's order (the last, shorter one last); each chunk through
// all the device's layers before the next chunk starts (the tutorial's seq1(s_next) then
// .to('cuda:1'): device k + 1 can take chunk i while device k is on chunk i + 1); the backwards
// in the forwards' order, each chunk through the layers last first. Read from the trace of cpu
// runs, whose events are in the order issued.
void order(const Args& a) {
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const ModelSpec spec = ModelSpec::parse(model);
  const int L = spec.layer_count();
  std::string report;
  for (long long pl : a.ints("devices", "2,4"))
    for (long long split : a.ints("splits", "12,8")) {
      const int p = static_cast<int>(pl);
      const std::vector<int> place = reference_placement(L, p);
      const Run r = train_mp(p, "", false, model, make_batches(model, batch, 1), split);
      for (int d = 0; d < p; ++d) {
        const int lo = static_cast<int>(std::find(place.begin(), place.end(), d) - place.begin());
        const int hi = static_cast<int>(place.rend() - std::find(place.rbegin(), place.rend(), d)) - 1;
        std::vector<Pass> want, got;
        for (const bool forward : {true, false})
          for (int64_t begin = 0; begin < batch; begin += split)
            for (int k = 0; k <= hi - lo; ++k)
              add_pass(want, {forward, forward ? lo + k : hi - k, std::min<int64_t>(split, batch - begin)});
        for (const Event& e : r.events)
          if (e.device == d && e.step == 0 && e.kind == "gemm" && e.layer >= 0 && e.layer < L) {
            const double per_row = 2.0 * static_cast<double>(spec.sizes[static_cast<size_t>(e.layer)]) *
                                   static_cast<double>(spec.sizes[static_cast<size_t>(e.layer) + 1]);
            add_pass(got, {e.phase == Phase::fwd, e.layer, std::llround(e.flops / per_row)});
          }
        lab::expect(got == want,
                    "your " + step_name(split) + ", " + str(p) + " cpu devices, " + model + ", batch " + str(batch) +
                        ": device " + str(d) + "'s GEMMs in the order issued (F/B forward/backward, fcN×rows: the "
                        "chunk's rows through layer N)",
                    passes_text(want) + " — every chunk's forward first, the chunks in the batch's order, each "
                    "through all the device's layers before the next; then the backwards in the same order",
                    passes_text(got));
      }
      report += "  " + str(p) + " devices, split " + str(split) + ": chunks in order, chunk by chunk\n";
    }
  std::printf("passed: the chunks launched in the lecture's order on every device\n%s", report.c_str());
}

// What the trace says of each op (the dashboard draws from it): a chunk's ops tagged with its
// micro-batch (none, −1, when the batch goes whole), a copy between devices named for the layer it
// feeds, and no gradient computed for the input (layer 0's backward has no dx GEMM). Batch 33 in
// splits of 32 or 16 ends with a chunk of one row.
void labels(const Args& a) {
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "33"));
  std::string report;
  for (long long pl : a.ints("devices", "2,4"))
    for (long long split : a.ints("splits", "0,64,32,16,8")) {
      const int p = static_cast<int>(pl);
      const Run r = train_mp(p, "", false, model, make_batches(model, batch, 1), split);
      const int64_t chunks = split == 0 || split >= batch ? 1 : chunks_of(batch, split);
      const std::string what = "your " + step_name(split) + ", " + str(p) + " cpu devices, " + model + ", batch " + str(batch);
      std::set<int> tags;
      int layer0_backward_gemms = 0;
      for (const Event& e : r.events) {
        if (e.step != 0) continue;
        if (e.kind == "gemm") tags.insert(e.micro_batch);
        if (e.kind == "gemm" && e.layer == 0 && e.phase == Phase::bwd) ++layer0_backward_gemms;
        if (e.kind == "copy_p2p" && e.layer >= 0) {
          const std::string fc = "fc" + str(e.layer + 1);
          const size_t at = e.name.find("fc");
          const std::string named = at == std::string::npos ? "no layer" : e.name.substr(at);
          lab::expect(named == fc || named.rfind(fc + ".", 0) == 0 || named.rfind(fc + " ", 0) == 0,
                      what + ": the copy \"" + e.name + "\" (tagged layer " + str(e.layer) + ")",
                      "named for the layer it feeds: " + fc, named);
        }
      }
      std::set<int> want;
      for (int64_t i = 0; i < chunks; ++i) want.insert(chunks == 1 ? -1 : static_cast<int>(i));
      auto text = [](const std::set<int>& s) {
        std::string t;
        for (int v : s) t += (t.empty() ? "" : ", ") + str(v);
        return "{" + t + "}";
      };
      lab::expect(tags == want, what + " (" + str(chunks) + (chunks == 1 ? " chunk" : " chunks") + "): the micro-batch tags of its GEMMs",
                  chunks == 1 ? "{-1}: the batch goes whole, no micro-batch" : text(want) + ": chunk i's ops tagged i", text(tags));
      lab::expect(layer0_backward_gemms == chunks, what + ": layer 0's backward GEMMs",
                  str(chunks) + ", dW alone for each chunk: nothing needs the gradient of the input (need_dx false)",
                  str(layer0_backward_gemms));
      report += "  " + str(p) + " devices, " + step_name(split) + ": " + str(chunks) + " chunk(s) tagged, copies named\n";
    }
  std::printf("passed: the trace's tags: micro-batches, copies, no input gradient\n%s", report.c_str());
}

// The bytes from the host: per step, the batch's x once to the first device (batch × features × 4)
// and its labels once to the last (batch × 4), where the loss is — and nothing else.
void uploads(const Args& a) {
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const ModelSpec spec = ModelSpec::parse(model);
  for (long long pl : a.ints("devices", "2,4"))
    for (long long split : a.ints("splits", "0,8,12")) {
      const int p = static_cast<int>(pl);
      const Run r = train_mp(p, "", false, model, make_batches(model, batch, 2), split);
      const std::string want = "device 0: 1 upload, " + str(batch * spec.inputs() * 4) + " B; device " + str(p - 1) +
                               ": 1 upload, " + str(batch * 4) + " B";
      for (int s = 0; s < 2; ++s) {
        std::map<std::pair<int, bool>, std::pair<int, int64_t>> got;  // (device, download?) → (count, bytes)
        for (const Event& e : r.events)
          if (e.step == s && (e.role == Role::upload || e.role == Role::download)) {
            auto& [count, bytes] = got[{e.device, e.role == Role::download}];
            ++count;
            bytes += e.bytes;
          }
        std::string text;
        for (const auto& [key, cb] : got)
          text += (text.empty() ? "" : "; ") + std::string("device ") + str(key.first) + ": " + str(cb.first) +
                  (key.second ? " download" : " upload") + (cb.first == 1 ? ", " : "s, ") + str(cb.second) + " B";
        lab::expect(text == want,
                    "your " + step_name(split) + ", " + str(p) + " cpu devices, " + model + ", batch " + str(batch) +
                        ", step " + str(s) + ": the transfers between host and devices",
                    want + " (x to the first layer's device, the labels to the loss's, each once)",
                    text.empty() ? "none" : text);
      }
    }
  std::printf("passed: the batch uploaded once to the first device, the labels once to the last\n");
}

// Memory held per category: each device holds the weights, gradients and momentum of its own
// layers only (4 bytes a parameter each: the point of model parallel), the copies made for it
// are activations, and nothing a step allocates is held after it.
void memory(const Args& a) {
  const std::string model = a.get("model", kModel);
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const ModelSpec spec = ModelSpec::parse(model);
  const int L = spec.layer_count();
  const char* names[3] = {"params", "grads", "optimizer"};
  std::string report;
  for (long long pl : a.ints("devices", "2,4"))
    for (long long split : a.ints("splits", "0,12")) {
      const int p = static_cast<int>(pl);
      const std::vector<int> place = reference_placement(L, p);
      const Run r = train_mp(p, "", false, model, make_batches(model, batch, 2), split);
      const std::string what = "your " + step_name(split) + ", " + str(p) + " cpu devices, " + model + " (layers on " +
                               text(place) + "), batch " + str(batch);
      for (int d = 0; d < p; ++d) {
        int64_t own = 0;  // the device's layers' parameters, in bytes
        for (int l = 0; l < L; ++l)
          if (place[static_cast<size_t>(l)] == d)
            own += 4 * (spec.sizes[static_cast<size_t>(l)] + 1) * spec.sizes[static_cast<size_t>(l) + 1];
        for (int c = 0; c < 3; ++c)
          lab::expect(r.state_peaks[static_cast<size_t>(d)][static_cast<size_t>(c)] == own,
                      what + ": device " + str(d) + "'s peak of " + names[c] + " on its ledger",
                      str(own) + " B, its own layers' (the activations and gradients copied between devices are "
                      "activations)",
                      str(r.state_peaks[static_cast<size_t>(d)][static_cast<size_t>(c)]) + " B");
        for (size_t s = 0; s < r.held_after.size(); ++s)
          lab::expect(r.held_after[s][static_cast<size_t>(d)] == 0,
                      what + ": device " + str(d) + " after step " + str(s) + ", activations + comm_buffers + workspace",
                      "0 B (every chunk's activations and copies freed by the end of the step)",
                      str(r.held_after[s][static_cast<size_t>(d)]) + " B still held");
      }
      report += "  " + str(p) + " devices, split " + str(split) + ": each device its own layers' state\n";
    }
  std::printf("passed: memory per device and category\n%s", report.c_str());
}

// ---------------------------------------------------------------------------------------------
// Speed, on simulated devices: dry runs (no numerics) of the experiment's model.

struct Timing {
  int64_t step_ns = 0;    // the simulated time the third step adds: from the second step's end to its own
  double concurrent = 0;  // the share of that time in which ≥ 2 devices compute at once
};

// Three steps of a dry run; the third one timed. A step's end is its last event's end; the time a
// step adds is from the end of the step before to its own (the host issues the next step's upload
// as soon as it has read the loss, so a step's first event may begin before the last one ends).
Timing time_step(int p, const std::string& profile, const std::string& model, int64_t batch, int64_t split) {
  const ModelSpec spec = ModelSpec::parse(model);
  HostBatch b;
  b.size = batch;
  b.features = spec.inputs();
  b.x.assign(static_cast<size_t>(batch * spec.inputs()), 0.0f);
  b.y.assign(static_cast<size_t>(batch), 0);
  const Run r = train_mp(p, profile, true, model, {b, b, b}, split);
  std::vector<int64_t> end(3, 0);
  for (const Event& e : r.events)
    if (e.step >= 0 && e.step < 3) end[static_cast<size_t>(e.step)] = std::max(end[static_cast<size_t>(e.step)], e.t_end_ns);
  Timing t;
  const int64_t from = end[1], to = end[2];
  if (to <= from) return t;
  t.step_ns = to - from;
  // Each device's compute lane, busy within [from, to): the time covered by at least two of them.
  std::vector<std::pair<int64_t, int>> edges;
  for (int d = 0; d < p; ++d) {
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Event& e : r.events)
      if (e.device == d && e.lane == Lane::compute && std::min(e.t_end_ns, to) > std::max(e.t_begin_ns, from))
        busy.emplace_back(std::max(e.t_begin_ns, from), std::min(e.t_end_ns, to));
    std::sort(busy.begin(), busy.end());
    int64_t b0 = -1, e0 = -1;  // merged intervals: a lane runs one op at a time, but be safe
    for (const auto& [bb, ee] : busy) {
      if (bb <= e0) {
        e0 = std::max(e0, ee);
        continue;
      }
      if (e0 > b0) edges.emplace_back(b0, +1), edges.emplace_back(e0, -1);
      b0 = bb;
      e0 = ee;
    }
    if (e0 > b0) edges.emplace_back(b0, +1), edges.emplace_back(e0, -1);
  }
  std::sort(edges.begin(), edges.end());
  int64_t both = 0, last = from;
  int active = 0;
  for (const auto& [at, delta] : edges) {
    if (active >= 2) both += at - last;
    active += delta;
    last = at;
  }
  t.concurrent = static_cast<double>(both) / static_cast<double>(t.step_ns);
  return t;
}

// The pipelined step must train right before its speed means anything.
void expect_trains(int p, int64_t split) {
  const auto batches = make_batches(kModel, 32, kSteps);
  const HostWeights single = lab::train_single(kModel, sgd(), batches);
  const double diff = max_relative_difference(train_mp(p, "", false, kModel, batches, split).weights, single);
  lab::expect(std::isfinite(diff) && diff <= 1e-5,
              "your " + step_name(split) + " on " + kModel + ", batch 32, " + str(p) +
                  " cpu devices (speed is measured on a step that trains right: make `equivalence` pass first)",
              "the weights within 1e-5 of single's", "max relative difference " + str(diff));
}

// Task 3: the chunks overlap. With the batch in m chunks on p simulated devices, at least two devices
// compute at the same time for a good share of the step, and the step is faster than the unsplit one.
void overlap(const Args& a) {
  const std::string profile = a.get("hw", kTimingHw);
  const std::string model = a.get("model", kTimingModel);
  const int64_t batch = std::stoll(a.get("batch", str(kTimingBatch)));
  const int64_t chunks = std::stoll(a.get("chunks", "8"));
  const double threshold = std::stod(a.get("threshold", "40"));
  const double speedup = std::stod(a.get("speedup", "1.25"));
  const int64_t split = batch / chunks;
  std::string report;
  for (long long pl : a.ints("devices", "2,4")) {
    const int p = static_cast<int>(pl);
    expect_trains(p, 8);
    const Timing whole = time_step(p, profile, model, batch, 0);
    const Timing piped = time_step(p, profile, model, batch, split);
    char line[300];
    std::snprintf(line, sizeof line,
                  "%d devices, %lld chunks of %lld rows: %.1f %% of the step with ≥ 2 devices computing; step %.1f µs "
                  "against %.1f µs unsplit (%.2f×)",
                  p, static_cast<long long>(chunks), static_cast<long long>(split), 100 * piped.concurrent,
                  piped.step_ns * 1e-3, whole.step_ns * 1e-3,
                  piped.step_ns > 0 ? static_cast<double>(whole.step_ns) / static_cast<double>(piped.step_ns) : 0.0);
    const std::string what = "your pipelined_step(split_size " + str(split) + ") on " + str(p) + " simulated devices (" +
                             profile + "), " + model + ", batch " + str(batch);
    lab::expect(piped.step_ns > 0 && 100 * piped.concurrent >= threshold,
                what + ": the time the devices compute at once (device k on chunk i + 1 while device k + 1 is on chunk i)",
                "≥ " + str(threshold) + " % of the step (issue every chunk's forward before the backwards: a chunk's "
                "forward and backward one after the other leave only one device busy at a time)",
                line);
    lab::expect(piped.step_ns > 0 && static_cast<double>(whole.step_ns) >= speedup * static_cast<double>(piped.step_ns),
                what + ": the step time against your model_parallel_step's",
                "at least " + str(speedup) + "× faster", line);
    report += std::string("  ") + line + "\n";
  }
  std::printf("passed: the chunks overlap\n%s", report.c_str());
}

// The experiment (not graded by itself): the simulated step time of the student's pipelined_step
// over the grid of split sizes. `harness sweep` prints it; the student's answer is read off it.
std::vector<Timing> sweep_times(int p, const std::string& profile, const std::string& model, int64_t batch,
                                const std::vector<long long>& grid) {
  std::vector<Timing> out;
  for (long long s : grid) out.push_back(time_step(p, profile, model, batch, s));
  return out;
}

void sweep(const Args& a) {
  const int p = static_cast<int>(std::stoll(a.get("devices", "2")));
  const std::string profile = a.get("hw", kTimingHw);
  const std::string model = a.get("model", kTimingModel);
  const int64_t batch = std::stoll(a.get("batch", str(kTimingBatch)));
  const auto grid = a.ints("splits", kGrid);
  const Timing whole = time_step(p, profile, model, batch, 0);
  std::printf("%s, batch %lld, %d simulated devices (%s); model_parallel_step: %.1f µs\n", model.c_str(),
              static_cast<long long>(batch), p, profile.c_str(), whole.step_ns * 1e-3);
  std::printf("%10s %8s %12s %10s %12s\n", "split_size", "chunks", "step (µs)", "speed-up", "≥2 busy (%)");
  const std::vector<Timing> t = sweep_times(p, profile, model, batch, grid);
  for (size_t k = 0; k < grid.size(); ++k)
    std::printf("%10lld %8lld %12.1f %10.2f %12.1f\n", grid[k], static_cast<long long>(chunks_of(batch, grid[k])),
                t[k].step_ns * 1e-3, t[k].step_ns > 0 ? static_cast<double>(whole.step_ns) / t[k].step_ns : 0.0,
                100 * t[k].concurrent);
}

// The question: the split size of the grid that minimises YOUR pipelined step's simulated time, on 2
// devices; the answer within one grid point of the measured best (between its neighbours).
void optimum(const Args& a) {
  const double answer = lab::answer_number("best_split");
  const int p = static_cast<int>(std::stoll(a.get("devices", "2")));
  const std::string profile = a.get("hw", kTimingHw);
  const std::string model = a.get("model", kTimingModel);
  const int64_t batch = std::stoll(a.get("batch", str(kTimingBatch)));
  const auto grid = a.ints("splits", kGrid);
  expect_trains(p, 8);
  const std::vector<Timing> t = sweep_times(p, profile, model, batch, grid);
  size_t best = 0;
  for (size_t k = 1; k < grid.size(); ++k)
    if (t[k].step_ns < t[best].step_ns) best = k;
  const double lo = static_cast<double>(grid[best > 0 ? best - 1 : 0]);
  const double hi = static_cast<double>(grid[std::min(best + 1, grid.size() - 1)]);
  lab::expect(answer >= lo && answer <= hi,
              "answers.json \"best_split\": the split size that minimises your pipelined_step's simulated step time, " +
                  str(p) + " devices (" + profile + "), " + model + ", batch " + str(batch) + ", split sizes " +
                  lab::list_text(std::vector<long long>(grid.begin(), grid.end())),
              "within one grid point of the measured best (not shown: run the experiment — README.md, \"The "
              "experiment\")",
              lab::str(answer));
  std::printf("passed: the best split size is %lld (%.1f µs a step against %.1f µs unsplit); your answer: %s\n",
              grid[best], t[best].step_ns * 1e-3, t.back().step_ns * 1e-3, str(answer).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                        {{"placement", placement},
                         {"equivalence", equivalence},
                         {"moves", moves},
                         {"overlap", overlap},
                         {"optimum", optimum},
                         {"sweep", sweep},
                         {"order", order},
                         {"uploads", uploads},
                         {"labels", labels},
                         {"memory", memory}});
}
