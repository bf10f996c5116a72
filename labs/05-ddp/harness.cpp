// Lab 05's checks (the instructor's test program). The grader builds it with the student's
// reducer.cpp and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed,
// 1 failed. The DDP step below is strategies/ddp.cpp's rank_step with the student's Reducer in
// place of the library's GradientReducer; the reference is the library itself (its bucket
// assignment, and a plain single-device training loop). Speed is checked on simulated A100s, so
// the grade does not depend on this machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/threads/threads_group.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/trace/events.h"
#include "core/trace/metrics.h"
#include "lab.h"
#include "labs/common/reference.h"
#include "labs/common/world.h"
#include "strategies/ddp_buckets.h"
#include "strategies/distributed_sampler.h"
#include "labs/common/verdict.h"

using namespace scalelab;
using lab::Args;
using lab::str;
using Buckets = std::vector<std::vector<int>>;

namespace {

// A rank that never comes makes the others give up after this long, naming it.
constexpr auto kCommTimeout = std::chrono::milliseconds(2000);

std::string text(const std::vector<int>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
  return s + "}";
}
std::string text(const Buckets& b) {
  std::string s = "{";
  for (size_t i = 0; i < b.size(); ++i) s += (i ? ", " : "") + text(b[i]);
  return s + "}";
}
std::string text(const std::vector<int64_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
  return s + "}";
}

// The gradients' bytes of an MLP, in model order (fc1.weight, fc1.bias, …).
std::vector<int64_t> mlp_bytes(const std::string& spec) {
  const ModelSpec m = ModelSpec::parse(spec);
  std::vector<int64_t> b;
  for (int l = 0; l < m.layer_count(); ++l) {
    b.push_back(4 * m.sizes[l + 1] * m.sizes[l]);
    b.push_back(4 * m.sizes[l + 1]);
  }
  return b;
}

// GPT-2 small's parameters in model order (f32 bytes): token and position embeddings, 12 blocks
// (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj; weight then bias), ln_f.
std::vector<int64_t> gpt2_small_bytes() {
  const int64_t d = 768;
  std::vector<int64_t> n = {50257 * d, 1024 * d};
  for (int b = 0; b < 12; ++b)
    for (int64_t x : {d, d, d * 3 * d, 3 * d, d * d, d, d, d, d * 4 * d, 4 * d, 4 * d * d, d}) n.push_back(x);
  n.push_back(d);
  n.push_back(d);
  for (int64_t& x : n) x *= 4;
  return n;
}

struct BucketCase {
  std::string what;
  std::vector<int64_t> bytes;
  int64_t cap, first_cap;
};

void compare_buckets(const std::vector<BucketCase>& cases) {
  for (const BucketCase& c : cases) {
    const Buckets want = compute_bucket_assignment_by_size(c.bytes, c.cap, c.first_cap);
    const Buckets got = lab05::bucket_assignment(c.bytes, c.cap, c.first_cap);
    const std::string what = "bucket_assignment of " + c.what + ", cap " + str(c.cap) + " B, first cap " +
                             str(c.first_cap) + " B";
    if (got.size() != want.size() || got != want) {
      // The first bucket that differs, with the bytes it holds.
      size_t k = 0;
      while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
      auto bytes_of = [&](const Buckets& b) {
        if (k >= b.size()) return std::string("(no bucket ") + str(k) + ")";
        int64_t sum = 0;
        for (int i : b[k]) sum += (i >= 0 && i < static_cast<int>(c.bytes.size())) ? c.bytes[static_cast<size_t>(i)] : 0;
        return "bucket " + str(k) + " = " + text(b[k]) + ", " + str(sum) + " B";
      };
      lab::fail(what + (c.bytes.size() <= 12 ? " (sizes " + text(c.bytes) + ")" : "") + ": " + str(want.size()) +
                    " buckets expected, " + str(got.size()) + " came; the first that differs is bucket " + str(k),
                bytes_of(want) + (want.size() <= 8 ? "; all: " + text(want) : ""),
                bytes_of(got) + (got.size() <= 8 ? "; all: " + text(got) : ""));
    }
  }
}

// Task 1: order and sizes on small closed-form cases.
void bucket_order(const Args&) {
  const std::vector<int64_t> small = mlp_bytes("mlp:32-24-16-12-8");
  compare_buckets({
      {"the lab.h example", {400, 40, 300, 30}, 500, 100},
      {"mlp:32-24-16-12-8", small, 2000, 600},
      {"mlp:32-24-16-12-8, the small cap for every bucket", small, 600, 600},
      {"mlp:32-24-16-12-8, everything in one bucket", small, 1 << 20, 1 << 20},
      {"three parameters that all fit", {10, 20, 30}, 1000, 1000},
      {"a parameter larger than the cap", {100, 5000, 100, 100}, 1000, 1000},
      {"a first parameter larger than the first cap", {10, 10, 900}, 1000, 100},
      {"exactly the cap", {50, 50}, 100, 100},
      {"one byte over the cap", {51, 50}, 100, 100},
      {"no parameters", {}, 100, 10},
  });
  std::printf("passed: bucket order and sizes as the library's compute_bucket_assignment_by_size on 10 cases\n");
}

// Task 1: PyTorch's defaults (25 MiB, first bucket 1 MiB) on large models: sizes only, no training.
void bucket_defaults(const Args&) {
  const int64_t cap = 25 << 20, first = 1 << 20;
  const std::vector<int64_t> gpt2 = gpt2_small_bytes();
  compare_buckets({
      {"mlp:784-256-128-10", mlp_bytes("mlp:784-256-128-10"), cap, first},
      {"mlp:1024-4096-4096-4096-4096-1000", mlp_bytes("mlp:1024-4096-4096-4096-4096-1000"), cap, first},
      {"GPT-2 small (124 M parameters, 148 tensors)", gpt2, cap, first},
  });
  const Buckets b = lab05::bucket_assignment(gpt2, cap, first);
  std::printf("passed: PyTorch's default caps (25 MiB, first 1 MiB) on three models; GPT-2 small: %zu buckets, "
              "the first holds %zu tensors, the last the token embedding alone (%s)\n",
              b.size(), b.front().size(), text(b.back()).c_str());
}

// ---------------------------------------------------------------------------------------------
// Training: DDP with the student's reducer, and the library's single-device loop as reference.



struct Run {
  std::string model = "mlp:32-24-16-12-8";
  std::string optimizer = "sgd";
  int64_t cap = 2000, first_cap = 600;  // several buckets out of the small model's 6 KiB
  int no_sync = 1;                      // K: windows of K batches (1: every step synchronises)
};

OptimizerConfig optimizer_config(const std::string& kind) {
  OptimizerConfig o;
  o.kind = kind;
  if (kind == "adam") o.lr = 0.01f;
  return o;
}

// `batches` are global batches; every rank trains on its DistributedSampler shard of each.
// Returns every rank's weights at the end.
std::vector<HostWeights> train_ddp(lab::World& w, int n, const Run& run, const std::vector<HostBatch>& batches) {
  const HostWeights init = init_weights(ModelSpec::parse(run.model), 7);
  std::vector<HostWeights> out(static_cast<size_t>(n));
  lab::run_ranks(n, [&](int rank) {
    Device& device = *w.devices[static_cast<size_t>(rank)];
    ProcessGroup& group = *w.groups[static_cast<size_t>(rank)];
    Model model(device, init);  // (DDP's constructor broadcasts rank 0's weights: here they start equal)
    Optimizer optimizer(optimizer_config(run.optimizer), model.parameters());
    lab05::Reducer reducer(model.parameters(), group, run.cap, run.first_cap);
    HostBatch shard;
    for (size_t s = 0; s < batches.size(); ++s) {
      const int64_t step = static_cast<int64_t>(s);
      device.set_step(step);
      const lab05::NoSyncWindow window = run.no_sync > 1 ? lab05::no_sync_window(run.no_sync, step) : lab05::NoSyncWindow{};
      take_shard(batches[s], rank, n, shard);
      Tensor x = device.empty({shard.size, shard.features}, DType::f32, MemoryCategory::activations, "batch.x");
      Tensor y = device.empty({shard.size}, DType::i32, MemoryCategory::activations, "batch.y");
      device.upload({"batch.x", Phase::data}, x, shard.x.data());
      device.upload({"batch.y", Phase::data}, y, shard.y.data());
      Tensor logits = model.forward(x);
      Tensor dlogits = device.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
      device.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits, window.grad_scale);
      // Backward, last layer first; each gradient is marked ready as soon as it is written.
      const LayerList& layers = model.layers();
      Tensor grad = dlogits;
      int64_t backward_end = 0;
      for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
        grad = layers[static_cast<size_t>(l)].backward(grad, l > 0, window.accumulate);
        if (window.sync) {
          Linear& layer = static_cast<Linear&>(layers[static_cast<size_t>(l)]);  // an MLP's layer
          // The hook fires when the gradient is written: the host is there in simulated time.
          lab05::detail::host_now_ns = layer.bias.grad.ready_ns();
          reducer.mark_ready(2 * l + 1);  // fc(l+1).bias
          lab05::detail::host_now_ns = layer.weight.grad.ready_ns();
          reducer.mark_ready(2 * l);      // fc(l+1).weight
          backward_end = std::max({backward_end, layer.bias.grad.ready_ns(), layer.weight.grad.ready_ns()});
        }
      }
      if (window.sync) {
        lab05::detail::host_now_ns = backward_end;
        reducer.finish();
        optimizer.step();
      }
    }
    out[static_cast<size_t>(rank)] = model.download();
  });
  return out;
}

HostWeights train_single(const Run& run, const std::vector<HostBatch>& batches) {
  return lab::train_single(run.model, optimizer_config(run.optimizer), batches);
}

std::vector<HostBatch> make_batches(const std::string& model, int64_t batch, int steps) {
  // 8192 samples: no gradient sits at a kink (tests/support/small_config.h), round-off stays small.
  return lab::synthetic_batches(model, batch, steps, 8192, 11);
}

// Every rank's replica equal to rank 0's, bit for bit (the same averaged gradients, the same step).
// Task 2: after 5 steps the replicas hold single's weights (≤ 1e-5), for 2 and 4 ranks on cpu and sim.
void equivalence(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const std::string kinds = a.get("devices", "cpu,sim");
  Run run;
  run.optimizer = a.get("optimizer", "sgd");
  const int steps = 5;
  const int64_t batch = std::stoll(a.get("batch", "32"));
  const auto batches = make_batches(run.model, batch, steps);
  const HostWeights single = train_single(run, batches);
  std::string report;
  for (const std::string kind : {"cpu", "sim"}) {
    if (kinds.find(kind) == std::string::npos) continue;
    for (long long nl : ranks) {
      const int n = static_cast<int>(nl);
      auto w = lab::make_world(n, kind == "sim" ? "a100-nvlink-8" : "", kCommTimeout, /*own_hosts=*/true);
      const auto weights = train_ddp(*w, n, run, batches);
      const std::string what = "DDP with your Reducer, " + str(n) + " ranks on " + kind + ", " + run.optimizer +
                               ", " + str(steps) + " steps of batch " + str(batch);
      const double diff = max_relative_difference(weights[0], single);
      char line[160];
      std::snprintf(line, sizeof line, "%d ranks on %s: max relative difference %.3g", n, kind.c_str(), diff);
      lab::expect(std::isfinite(diff) && diff <= 1e-5, what + ": the weights against single's",
                  "max relative difference ≤ 1e-5", line);
      lab::expect_replicas_equal(weights, what);
      // One all-reduce per bucket per step on every rank.
      int expected_buckets = static_cast<int>(compute_bucket_assignment_by_size(mlp_bytes(run.model), run.cap, run.first_cap).size());
      std::vector<int> all_reduces(static_cast<size_t>(n));
      for (const Event& e : w->bus.events())
        if (e.role == Role::all_reduce && e.flow_id >= 0) ++all_reduces[static_cast<size_t>(e.device)];  // a call's first event
      for (int r = 0; r < n; ++r)
        lab::expect(all_reduces[static_cast<size_t>(r)] == steps * expected_buckets,
                    what + ": all-reduces of rank " + str(r),
                    "one per bucket per step: " + str(steps) + " × " + str(expected_buckets) + " buckets",
                    str(all_reduces[static_cast<size_t>(r)]));
      report += std::string("  ") + line + "\n";
    }
  }
  std::printf("passed: DDP with your Reducer trains as single does (%s)\n%s", run.optimizer.c_str(), report.c_str());
}

// Task 2: on 4 simulated A100s (NVLink), the share of the bucket all-reduces' time that runs while
// backward still computes: per step and rank, the all-reduce intervals inside [the first backward
// GEMM's begin, the last one's end), over all the all-reduce time. Launched as each bucket fills,
// most of it is; launched at finish(), none.
void overlap(const Args& a) {
  const std::string profile = a.get("hw", "a100-nvlink-8");
  const int n = static_cast<int>(std::stoll(a.get("ranks", "4")));
  const double threshold = std::stod(a.get("threshold", "10"));
  Run run;
  run.model = "mlp:784-256-128-10";
  run.cap = 256 << 10;       // 256 KiB: fc1.weight (784 KiB) alone, the rest in smaller buckets
  run.first_cap = 50 << 10;  // 50 KiB
  const int64_t batch = std::stoll(a.get("batch", "512"));
  const auto batches = make_batches(run.model, batch, 3);
  auto w = lab::make_world(n, profile, kCommTimeout, /*own_hosts=*/true);
  train_ddp(*w, n, run, batches);
  std::map<std::pair<int64_t, int>, std::pair<int64_t, int64_t>> backward;  // (step, rank) → [begin, end)
  const std::vector<Event> events = w->bus.events();
  for (const Event& e : events)
    if (e.kind == "gemm" && e.phase == Phase::bwd) {
      auto it = backward.try_emplace({e.step, e.device}, e.t_begin_ns, e.t_end_ns).first;
      it->second.first = std::min(it->second.first, e.t_begin_ns);
      it->second.second = std::max(it->second.second, e.t_end_ns);
    }
  int64_t total = 0, under = 0;
  for (const Event& e : events) {
    if (e.role != Role::all_reduce || e.bucket < 0) continue;
    total += e.t_end_ns - e.t_begin_ns;
    auto it = backward.find({e.step, e.device});
    if (it == backward.end()) continue;
    under += std::max<int64_t>(0, std::min(e.t_end_ns, it->second.second) - std::max(e.t_begin_ns, it->second.first));
  }
  const double pct = total > 0 ? 100.0 * static_cast<double>(under) / static_cast<double>(total) : 0.0;
  char line[200];
  std::snprintf(line, sizeof line, "%.1f %% of the bucket all-reduce time while backward computes (%.1f of %.1f µs "
                "simulated, all ranks and steps)", pct, under * 1e-3, total * 1e-3);
  lab::expect(total > 0 && pct >= threshold,
              "overlap of the bucket all-reduces with backward, " + str(n) + " ranks on " + profile +
                  ", mlp:784-256-128-10, batch " + str(batch) + ", caps 256 KiB (first 50 KiB)",
              "≥ " + str(threshold) + " % of the all-reduce time before backward ends (each bucket launched as soon "
              "as it fills)",
              line);
  std::printf("passed: %s\n", line);
}

// Task 3: W windows of K steps of batch B under no_sync give the weights of W steps of batch K·B:
// each window starts its gradients afresh, and only its last step all-reduces (one per bucket).
void no_sync(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const int k = static_cast<int>(std::stoll(a.get("k", "4")));
  const int windows = static_cast<int>(std::stoll(a.get("windows", "1")));
  const int64_t batch = 32;
  Run run;
  const auto small = make_batches(run.model, batch, k * windows);
  std::vector<HostBatch> big(static_cast<size_t>(windows));  // each window's K batches in one
  for (size_t s = 0; s < small.size(); ++s) {
    HostBatch& b = big[s / static_cast<size_t>(k)];
    b.features = small[s].features;
    b.size += small[s].size;
    b.x.insert(b.x.end(), small[s].x.begin(), small[s].x.end());
    b.y.insert(b.y.end(), small[s].y.begin(), small[s].y.end());
  }
  const int buckets = static_cast<int>(compute_bucket_assignment_by_size(mlp_bytes(run.model), run.cap, run.first_cap).size());
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    Run window = run;
    window.no_sync = k;
    auto w = lab::make_world(n, "", kCommTimeout, /*own_hosts=*/true);
    const auto accumulated = train_ddp(*w, n, window, small);
    auto w1 = lab::make_world(n, "", kCommTimeout, /*own_hosts=*/true);
    const auto one = train_ddp(*w1, n, run, big);
    const std::string what = str(n) + " ranks, no_sync over " + str(windows) + " window(s) of K = " + str(k) +
                             " batches of " + str(batch);
    // Inside a window nothing travels: only its last step all-reduces, each bucket once.
    std::map<std::pair<int64_t, int>, int> calls;  // (step, rank) → all-reduce calls
    for (const Event& e : w->bus.events())
      if (e.role == Role::all_reduce && e.flow_id >= 0) ++calls[{e.step, e.device}];
    for (int s = 0; s < k * windows; ++s)
      for (int r = 0; r < n; ++r) {
        const int want = s % k == k - 1 ? buckets : 0;
        lab::expect(calls[{s, r}] == want, what + ": rank " + str(r) + "'s all-reduces in step " + str(s),
                    str(want) + (want ? " (the window's last step: one per bucket)" : " (inside the window gradients only accumulate)"),
                    str(calls[{s, r}]));
      }
    const double diff = max_relative_difference(accumulated[0], one[0]);
    char line[160];
    std::snprintf(line, sizeof line, "%d ranks: max relative difference %.3g", n, diff);
    lab::expect(std::isfinite(diff) && diff <= 1e-6,
                what + ": the weights against " + str(windows) + " step(s) of batch " + str(k * batch),
                "max relative difference ≤ 1e-6", line);
    lab::expect_replicas_equal(accumulated, what);
    report += std::string("  ") + line + "\n";
  }
  std::printf("passed: %d window(s) of K = %d no_sync steps give %d step(s) of K× the batch\n%s", windows, k, windows,
              report.c_str());
}

// The buckets of the small model and the order backward writes its gradients (the last layer's
// bias first): mark_ready's order in train_ddp.
Buckets small_buckets(const Run& run) {
  return compute_bucket_assignment_by_size(mlp_bytes(run.model), run.cap, run.first_cap);
}
std::vector<int> backward_order(const Buckets& b) {
  std::vector<int> order;
  for (const auto& bucket : b) order.insert(order.end(), bucket.begin(), bucket.end());
  return order;
}

// Task 2, order and timing: 2 ranks on cpu mark the gradients ready by hand, in backward's order and
// in orders where a later bucket completes first (a parameter unused in this forward, or used
// twice). After every mark_ready the launched buckets (a new bucket.work) must be exactly the
// complete ones with every bucket before them complete — launched by the hook that completes them,
// never later, never ahead of an earlier bucket; and the all-reduces reach the group in bucket order.
void launch_order(const Args&) {
  const Run run;
  const Buckets b = small_buckets(run);  // {7, 6, 5}, {4, 3}, {2, 1}, {0}
  const std::vector<int> bwd = backward_order(b);
  std::vector<std::vector<int>> orders = {bwd};
  std::vector<int> late_first;  // every later bucket complete before bucket 0
  for (size_t k = 1; k < b.size(); ++k) late_first.insert(late_first.end(), b[k].begin(), b[k].end());
  late_first.insert(late_first.end(), b[0].begin(), b[0].end());
  orders.push_back(late_first);
  std::vector<int> swapped = bwd;  // bucket 2 complete before bucket 1
  std::rotate(swapped.begin() + static_cast<long>(b[0].size()),
              swapped.begin() + static_cast<long>(b[0].size() + b[1].size()),
              swapped.begin() + static_cast<long>(b[0].size() + b[1].size() + b[2].size()));
  orders.push_back(swapped);
  const int n = 2;
  auto w = lab::make_world(n, "", kCommTimeout, /*own_hosts=*/true);
  const HostWeights init = init_weights(ModelSpec::parse(run.model), 7);
  struct Wrong {
    std::string when, expected, got;
  };
  std::vector<Wrong> problem(static_cast<size_t>(n));  // each rank's first wrong launch
  lab::run_ranks(n, [&](int rank) {
    Device& device = *w->devices[static_cast<size_t>(rank)];
    Model model(device, init);
    lab05::Reducer reducer(model.parameters(), *w->groups[static_cast<size_t>(rank)], run.cap, run.first_cap);
    for (size_t s = 0; s < orders.size(); ++s) {
      device.set_step(static_cast<int64_t>(s));
      std::vector<const Work*> before;  // each bucket's work before this step (a stale one is not a launch)
      for (const lab05::Bucket& x : reducer.buckets()) before.push_back(x.work.get());
      std::vector<int> left;
      for (const auto& bucket : b) left.push_back(static_cast<int>(bucket.size()));
      std::string marked;
      for (int i : orders[s]) {
        reducer.mark_ready(i);
        marked += (marked.empty() ? "" : ", ") + str(i);
        for (size_t k = 0; k < b.size(); ++k)
          if (std::find(b[k].begin(), b[k].end(), i) != b[k].end()) --left[k];
        std::vector<int> want, got;
        for (size_t k = 0; k < b.size() && left[k] == 0; ++k) want.push_back(static_cast<int>(k));
        const auto& now = reducer.buckets();
        for (size_t k = 0; k < now.size() && k < before.size(); ++k)
          if (now[k].work && now[k].work.get() != before[k]) got.push_back(static_cast<int>(k));
        if (got != want && problem[static_cast<size_t>(rank)].when.empty())
          problem[static_cast<size_t>(rank)] = {"after mark_ready of " + marked + " in step " + str(s), text(want),
                                                text(got)};
      }
      reducer.finish();  // every rank goes on, so a wrong launch fails here instead of timing out
    }
  });
  const Wrong& wrong = problem[0];
  if (!wrong.when.empty())
    lab::fail("the buckets rank 0 has launched (a new bucket.work) " + wrong.when + ", 2 ranks, buckets " + text(b) +
                  " (mlp:32-24-16-12-8, caps 2000 B, first 600 B)",
              wrong.expected + " — every bucket complete with all the buckets before it, launched by the hook that "
              "completes it, in bucket order",
              wrong.got);
  // The group saw the all-reduces in bucket order, every step, on every rank.
  std::map<std::pair<int64_t, int>, std::vector<int>> seen;  // (step, rank) → buckets in order
  for (const Event& e : w->bus.events())
    if (e.role == Role::all_reduce && e.flow_id >= 0) seen[{e.step, e.device}].push_back(e.bucket);
  std::vector<int> in_order(b.size());
  for (size_t k = 0; k < b.size(); ++k) in_order[k] = static_cast<int>(k);
  for (const auto& [key, buckets] : seen)
    lab::expect(buckets == in_order, "the all-reduces of rank " + str(key.second) + " in step " + str(key.first),
                text(in_order) + " (bucket 0 first: every rank issues the same collectives in the same order)",
                text(buckets));
  std::printf("passed: each bucket launched by the mark_ready that completes it and the buckets before it, in "
              "bucket order, in 3 marking orders (%s)\n", text(b).c_str());
}

// Task 2, timing: mark_ready must return at once — the all-reduce runs beside backward. Rank 0
// marks all its gradients ready while rank 1 has not marked any: an all-reduce cannot complete
// then, so a hook that waits for one never returns until rank 1 gives up waiting (1 s) and joins.
void hook_async(const Args&) {
  const Run run;
  const std::vector<int> bwd = backward_order(small_buckets(run));
  const int n = 2;
  auto w = lab::make_world(n, "", kCommTimeout, /*own_hosts=*/true);
  const HostWeights init = init_weights(ModelSpec::parse(run.model), 7);
  std::mutex m;
  std::condition_variable cv;
  bool marked = false;  // rank 0's mark_ready calls have all returned
  bool waited = false;  // rank 1 gave up waiting for them
  lab::run_ranks(n, [&](int rank) {
    Device& device = *w->devices[static_cast<size_t>(rank)];
    Model model(device, init);
    lab05::Reducer reducer(model.parameters(), *w->groups[static_cast<size_t>(rank)], run.cap, run.first_cap);
    if (rank == 1) {
      std::unique_lock<std::mutex> lock(m);
      waited = !cv.wait_for(lock, std::chrono::milliseconds(1000), [&] { return marked; });
    }
    for (int i : bwd) reducer.mark_ready(i);
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(m);
      marked = true;
      cv.notify_all();
    }
    reducer.finish();
  });
  lab::expect(!waited, "rank 0 marks every gradient ready while rank 1 has not begun its backward (2 ranks, cpu)",
              "every mark_ready returns at once: the all-reduce is launched and runs beside backward (waited for "
              "in finish() only)",
              "rank 0's mark_ready calls had not returned after 1 s: a hook waits for an all-reduce, which "
              "cannot end before every rank has joined it");
  std::printf("passed: mark_ready returns at once on rank 0 while rank 1 has not started (nothing waited for in the hook)\n");
}

// Memory held, from each rank's ledger after 2 steps: every gradient sits in exactly one bucket
// buffer (comm_buffers), allocated once and reused, so comm_buffers peaks at the gradients' bytes
// 4 · P, as grads do.
void buffers(const Args& a) {
  const auto ranks = a.ints("ranks", "2,4");
  const Run run;
  const ModelSpec spec = ModelSpec::parse(run.model);
  int64_t p = 0;
  for (int l = 0; l < spec.layer_count(); ++l) p += spec.layer_parameter_count(l);
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    auto w = lab::make_world(n, "", kCommTimeout, /*own_hosts=*/true);
    train_ddp(*w, n, run, make_batches(run.model, 32, 2));
    for (int r = 0; r < n; ++r) {
      const MemoryLedger& ledger = w->devices[static_cast<size_t>(r)]->memory();
      const int64_t comm = ledger.peak(MemoryCategory::comm_buffers), grads = ledger.peak(MemoryCategory::grads);
      lab::expect(comm == 4 * p && grads == 4 * p,
                  str(n) + " ranks, " + run.model + ", 2 steps: the ledger peaks of rank " + str(r),
                  "comm_buffers " + str(4 * p) + ", grads " + str(4 * p) +
                      " (4 · P, P = " + str(p) + ": each gradient in one bucket buffer, made once with make_bucket and "
                      "reused every step)",
                  "comm_buffers " + str(comm) + ", grads " + str(grads));
    }
    report += "  " + str(n) + " ranks: comm_buffers and grads peak at " + str(4 * p) + " bytes on every rank\n";
  }
  std::printf("passed: the bucket buffers hold each gradient once, allocated once\n%s", report.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                        {{"bucket_order", bucket_order},
                         {"bucket_defaults", bucket_defaults},
                         {"equivalence", equivalence},
                         {"overlap", overlap},
                         {"no_sync", no_sync},
                         {"launch_order", launch_order},
                         {"hook_async", hook_async},
                         {"buffers", buffers}});
}
