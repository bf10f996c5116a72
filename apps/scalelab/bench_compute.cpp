// `scalelab bench compute`: how close does a training step on the cpu device come to the GEMMs it
// is made of? The bound is OpenBLAS sgemm on exactly the step's GEMM shapes, timed in the same run;
// with --vs torch, PyTorch's step of the same MLP on as many threads is the peer.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/scalelab/bench.h"
#include "apps/scalelab/python_peer.h"
#include "core/data/dataset.h"
#include "core/error.h"
#include "core/io/file_check.h"
#include "core/kernels/cpu_kernels.h"
#include "core/nn/optimizer.h"
#include "run/train.h"
#include "core/rng.h"
#include "strategies/strategy.h"

namespace scalelab {

namespace {

using clock_type = std::chrono::steady_clock;

struct GemmShape {
  bool ta, tb;
  int64_t m, n, k;
};

// The GEMMs of one training step of an MLP, in the order the step runs them.
std::vector<GemmShape> step_gemms(const ModelSpec& spec, int64_t batch) {
  std::vector<GemmShape> g;
  for (int l = 0; l < spec.layer_count(); ++l)  // forward: y = x · Wᵀ
    g.push_back({false, true, batch, spec.sizes[l + 1], spec.sizes[l]});
  for (int l = spec.layer_count() - 1; l >= 0; --l) {
    g.push_back({true, false, spec.sizes[l + 1], spec.sizes[l], batch});  // dW = dyᵀ · x
    if (l > 0) g.push_back({false, false, batch, spec.sizes[l], spec.sizes[l + 1]});  // dx = dy · W
  }
  return g;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int bench_compute(const BenchComputeOptions& o) {
  if (!o.vs.empty() && o.vs != "torch") throw UsageError("bench", "--vs '" + o.vs + "' is unknown — the peer is torch");
  if (o.vs == "torch") check_python_peer("torch_step.py", "--vs torch");
  const ModelSpec spec = ModelSpec::parse(o.model);
  const auto gemms = step_gemms(spec, o.batch);
  double flops = 0;
  for (const auto& g : gemms) flops += 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);  // in double: a hostile --model overflows int64

  // The training step, through the same strategy code `scalelab train` runs.
  EventBus bus;
  TrainConfig config;
  config.model = o.model;
  config.batch = o.batch;
  config.optimizer.kind = "sgd";
  config.dataset = "synthetic";
  config.synthetic_train = o.batch * 4;
  config.synthetic_test = 16;
  check_host_memory(config, false);  // a clear refusal with the figure, not std::bad_alloc
  if (!o.json_path.empty()) check_output_path(o.json_path, "bench");
  DeviceOptions dopt;
  dopt.bus = &bus;
  auto devices = make_devices(dopt);
  StrategyContext ctx{config, {devices[0].get()}, bus, init_weights(spec, 1), nullptr, dopt};
  auto strategy = find_strategy(kReferenceStrategy).make(ctx);
  DataSplit data = make_synthetic(o.batch * 4, 16, spec.inputs(), static_cast<int>(spec.outputs()), 1);
  Loader loader(data.train, o.batch, 1);
  loader.set_epoch(0);
  HostBatch batch;
  loader.fill(0, batch);

  // OpenBLAS alone on the same shapes, on buffers allocated once.
  std::vector<std::vector<float>> a, b, c;
  Rng rng(7);
  for (const auto& g : gemms) {
    a.emplace_back(static_cast<size_t>(g.m * g.k));
    b.emplace_back(static_cast<size_t>(g.k * g.n));
    c.emplace_back(static_cast<size_t>(g.m * g.n));
    for (float& v : a.back()) v = rng.uniform(-1, 1);
    for (float& v : b.back()) v = rng.uniform(-1, 1);
  }
  auto run_gemms = [&] {
    for (size_t i = 0; i < gemms.size(); ++i) {
      const auto& g = gemms[i];
      kernels::gemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a[i].data(), b[i].data(), 0.0f, c[i].data());
    }
  };
  auto run_step = [&] {
    strategy->train_step(batch, 0);
    bus.clear();  // keep the event store from growing over the benchmark
  };

  // Warm up both (thread pools, page faults), then alternate them so both see the same machine.
  for (int i = 0; i < 3; ++i) {
    run_step();
    run_gemms();
  }
  std::vector<double> step_s, gemm_s;
  for (int i = 0; i < o.steps; ++i) {
    auto t0 = clock_type::now();
    run_step();
    auto t1 = clock_type::now();
    run_gemms();
    auto t2 = clock_type::now();
    step_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    gemm_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const double step_t = median(step_s), gemm_t = median(gemm_s);
  const double achieved = flops / step_t * 1e-9, sgemm = flops / gemm_t * 1e-9;
  const double ratio = achieved / sgemm;

  std::printf("# bench compute: one training step of %s at batch %lld on the cpu device\n", o.model.c_str(),
              static_cast<long long>(o.batch));
  std::printf("# bound: OpenBLAS sgemm on the step's %zu GEMM shapes, same run; GFLOP/s = GEMM FLOPs / median time\n",
              gemms.size());
  std::printf("# %-28s %12s %12s\n", "what", "time (ms)", "GFLOP/s");
  std::printf("  %-28s %12.3f %12.2f\n", "training step (scalelab)", step_t * 1e3, achieved);
  std::printf("  %-28s %12.3f %12.2f\n", "sgemm alone (OpenBLAS)", gemm_t * 1e3, sgemm);
  std::printf("  ratio %.3f  (GEMM FLOPs per step %.3f G, %d timed steps)\n", ratio, flops * 1e-9, o.steps);
  // The peer after ours, not interleaved: it is another process with a thread pool of its own.
  double torch_t = 0;
  const int threads = openblas_get_num_threads();
  if (o.vs == "torch") {
    char args[400];
    std::snprintf(args, sizeof args, "--model '%s' --batch %lld --steps %d --threads %d", o.model.c_str(),
                  static_cast<long long>(o.batch), o.steps, threads);
    torch_t = run_python_peer("torch_step.py", args, "--vs torch")["step_time_s"].get<double>();
    std::printf("  %-28s %12.3f %12.2f\n", "training step (pytorch)", torch_t * 1e3, flops / torch_t * 1e-9);
    std::printf("  pytorch / scalelab step time %.2f×  (both on %d threads; same model, batch, SGD with momentum)\n",
                torch_t / step_t, threads);
  }
  std::fflush(stdout);
  if (!o.json_path.empty()) {
    nlohmann::json j{{"model", o.model},          {"batch", o.batch},       {"flops_per_step", flops},
                     {"step_time_s", step_t},     {"sgemm_time_s", gemm_t}, {"achieved_gflops", achieved},
                     {"sgemm_gflops", sgemm},     {"ratio", ratio},         {"steps", o.steps},
                     {"threads", threads},
                     {"torch_step_time_s", o.vs == "torch" ? nlohmann::json(torch_t) : nlohmann::json(nullptr)}};
    write_file_atomically(o.json_path, j.dump(2) + "\n", "bench");
  }
  return 0;
}

}  // namespace scalelab
