// `scalelab bench compute`: how close does a training step come to the GEMMs it is made of? The
// bound is an MLP step's GEMM shapes alone, timed in the same run: OpenBLAS sgemm on the cpu device,
// cuBLAS through the cuda executor on the cuda device. With --vs torch, PyTorch's step of the same
// model is the peer: on as many threads (cpu: an MLP, the ConvNet or a GPT), or eager on the same GPU
// (cuda, an MLP: f32 with TF32 off, or --amp bf16 under autocast with f32 master weights, as
// scalelab's --amp bf16).
#include <cblas.h>
#ifdef SCALELAB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/scalelab/bench.h"
#include "apps/scalelab/python_peer.h"
#include "calibration/calibration.h"
#include "core/data/dataset.h"
#include "core/data/text.h"
#include "core/device/device.h"
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

// ---- cuda ---------------------------------------------------------------------------------

// Waits until the GPU has run everything queued (the executor's stream is non-blocking, so the
// whole device, not the legacy default stream).
void sync_gpu() {
#ifdef SCALELAB_HAVE_CUDA
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    throw Error("cuda", std::string("bench compute: cudaDeviceSynchronize says ") + cudaGetErrorName(e) + " (" +
                            cudaGetErrorString(e) + ") — an op of the step failed on the GPU; rerun with "
                            "CUDA_LAUNCH_BLOCKING=1 to see which");
#endif
}

// A tensor on `dev` of uniform(-1, 1) values in `dtype` (drawn in f32 on the host, uploaded, cast).
Tensor random_tensor(Device& dev, std::vector<int64_t> shape, DType dtype, Rng& rng) {
  Tensor f32 = dev.empty(shape, DType::f32, MemoryCategory::workspace, "bench.gemm.operand");
  std::vector<float> host(static_cast<size_t>(f32.numel()));
  for (float& v : host) v = rng.uniform(-1, 1);
  dev.upload({"bench.gemm.operand", Phase::data}, f32, host.data());
  if (dtype == DType::f32) return f32;
  Tensor half = dev.empty(std::move(shape), dtype, MemoryCategory::workspace, "bench.gemm.operand");
  dev.cast({"bench.gemm.operand", Phase::data}, f32, half);
  return half;
}

struct CudaFigures {
  double step_t = 0, gemm_t = 0, back_to_back_t = 0;
  // Inside the step, from the device's own events (each op bracketed by CUDA events): the GPU time
  // of its GEMMs, of its other kernels and of its host<->device copies; medians over the timed steps.
  double in_step_gemm = 0, in_step_other = 0, in_step_copy = 0;
  std::string device_name;
};

CudaFigures measure_cuda(const BenchComputeOptions& o, const ModelSpec& spec, const std::vector<GemmShape>& gemms,
                         const TrainConfig& config, int warmup) {
  CudaFigures f;
  EventBus bus;
  DeviceOptions dopt;
  dopt.kind = DeviceKind::cuda;
  dopt.count = 1;
  dopt.bus = &bus;
  auto devices = make_devices(dopt);
  Device& dev = *devices[0];
  const std::string gpu = cuda_device_name(0);
  f.device_name = dev.name() + " (" + (gpu.empty() ? "?" : gpu) + ")";
  // The training step, through the same strategy code `scalelab train --strategy single` runs.
  StrategyContext ctx{config, {&dev}, bus, init_weights(spec, 1), nullptr, dopt};
  auto strategy = find_strategy(kReferenceStrategy).make(ctx);
  DataSplit data = make_synthetic(o.batch * 4, 16, spec.inputs(), static_cast<int>(spec.outputs()), 1);
  Loader loader(data.train, o.batch, 1);
  loader.set_epoch(0);
  HostBatch batch;
  loader.fill(0, batch);

  // cuBLAS alone on the same shapes, in the step's dtype (--amp bf16: A, B and C in bf16, as the
  // layers' GEMMs under AMP), on operands allocated once; queued back to back on the device's stream.
  const DType dtype = config.amp == Amp::bf16 ? DType::bf16 : DType::f32;
  struct Operands {
    Tensor a, b, c;
  };
  std::vector<Operands> operands;
  Rng rng(7);
  for (const auto& g : gemms) {
    Operands op;
    op.a = random_tensor(dev, g.ta ? std::vector<int64_t>{g.k, g.m} : std::vector<int64_t>{g.m, g.k}, dtype, rng);
    op.b = random_tensor(dev, g.tb ? std::vector<int64_t>{g.n, g.k} : std::vector<int64_t>{g.k, g.n}, dtype, rng);
    op.c = dev.empty({g.m, g.n}, dtype, MemoryCategory::workspace, "bench.gemm.c");
    operands.push_back(std::move(op));
  }
  bus.clear();
  Executor& exec = dev.executor();
  auto run_gemms = [&] {
    for (size_t i = 0; i < gemms.size(); ++i)
      exec.gemm(gemms[i].ta, gemms[i].tb, 1.0f, operands[i].a, operands[i].b, 0.0f, operands[i].c);
  };
  auto run_step = [&] { strategy->train_step(batch, 0); };

  // Warm up both (cuBLAS's heuristics, first-touch allocations, clocks), then alternate them.
  for (int i = 0; i < warmup; ++i) {
    run_step();
    bus.clear();
    run_gemms();
    sync_gpu();
  }
  std::vector<double> step_s, gemm_s, in_gemm, in_other, in_copy;
  for (int i = 0; i < o.steps; ++i) {
    sync_gpu();
    auto t0 = clock_type::now();
    run_step();
    sync_gpu();
    auto t1 = clock_type::now();
    run_gemms();
    sync_gpu();
    auto t2 = clock_type::now();
    step_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    gemm_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    double g = 0, other = 0, copy = 0;
    for (const Event& e : bus.events()) {
      const double d = static_cast<double>(e.t_end_ns - e.t_begin_ns) * 1e-9;
      if (e.lane == Lane::copy) copy += d;
      else if (e.kind == "gemm") g += d;
      else if (e.lane == Lane::compute) other += d;
    }
    bus.clear();  // keep the event store from growing over the benchmark
    in_gemm.push_back(g);
    in_other.push_back(other);
    in_copy.push_back(copy);
  }
  // Back to back: one synchronization after all the steps (what queueing ahead can hide).
  sync_gpu();
  auto t0 = clock_type::now();
  for (int i = 0; i < o.steps; ++i) {
    run_step();
    bus.clear();
  }
  sync_gpu();
  f.back_to_back_t = std::chrono::duration<double>(clock_type::now() - t0).count() / o.steps;
  f.step_t = median(step_s);
  f.gemm_t = median(gemm_s);
  f.in_step_gemm = median(in_gemm);
  f.in_step_other = median(in_other);
  f.in_step_copy = median(in_copy);
  return f;
}

int bench_compute_cuda(const BenchComputeOptions& o) {
  if (!cuda_available()) {
#ifdef SCALELAB_HAVE_CUDA
    throw UsageError("bench", "--device cuda: no CUDA GPU is visible (cudaGetDeviceCount finds none) — run on a machine "
                              "with an NVIDIA GPU and driver (check nvidia-smi and CUDA_VISIBLE_DEVICES), or use --device cpu");
#else
    throw UsageError("bench", "--device cuda: this scalelab was built without CUDA — build it with the CUDA toolkit "
                              "(`cmake --preset cuda`) on the GPU machine, or use --device cpu");
#endif
  }
  const bool vs_torch = o.vs == "torch";
  if (vs_torch) check_python_peer("torch_step.py", "--vs torch", /*need_cuda=*/true);
  const ModelSpec spec = ModelSpec::parse(o.model);
  const auto gemms = step_gemms(spec, o.batch);
  double flops = 0;
  for (const auto& g : gemms) flops += 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  const int warmup = o.warmup > 0 ? o.warmup : 10;

  TrainConfig config;
  config.model = o.model;
  config.batch = o.batch;
  config.device = DeviceKind::cuda;
  config.amp = o.amp == "bf16" ? Amp::bf16 : Amp::off;
  config.optimizer.kind = "sgd";
  config.dataset = "synthetic";
  config.synthetic_train = o.batch * 4;
  config.synthetic_test = 16;
  check_host_memory(config, false);
  if (!o.json_path.empty()) check_output_path(o.json_path, "bench");

  // Ours first, its devices (and GPU memory) released before the peer starts on the same GPU.
  const CudaFigures f = measure_cuda(o, spec, gemms, config, warmup);
  const char* precision = config.amp == Amp::bf16 ? "bf16 (autocast: bf16 GEMMs summed in f32, f32 master weights)"
                                                  : "f32 (TF32 off)";
  std::printf("# bench compute: one training step of %s at batch %lld on %s, %s\n", o.model.c_str(),
              static_cast<long long>(o.batch), f.device_name.c_str(), precision);
  std::printf("# the step of `train --strategy single --device cuda`: upload the batch, forward, loss, backward, "
              "SGD (momentum 0.9)\n");
  std::printf("# bound: cuBLAS alone on the step's %zu GEMM shapes, back to back on the device's stream, same run\n",
              gemms.size());
  std::printf("# median of %d timed steps after %d warm-up, each between two device synchronizations\n", o.steps, warmup);
  std::printf("# %-32s %12s %10s\n", "what", "time (ms)", "TFLOP/s");
  std::printf("  %-32s %12.3f %10.2f\n", "training step (scalelab)", f.step_t * 1e3, flops / f.step_t * 1e-12);
  std::printf("  %-32s %12.3f %10.2f\n", "GEMMs alone (cuBLAS)", f.gemm_t * 1e3, flops / f.gemm_t * 1e-12);
  const double ratio = f.gemm_t / f.step_t;
  std::printf("  ratio %.3f  (GEMMs alone / step; GEMM FLOPs per step %.3f G)\n", ratio, flops * 1e-9);
  const double busy = f.in_step_gemm + f.in_step_other + f.in_step_copy;
  std::printf("  inside the step, GPU time of its ops (CUDA events per op): GEMMs %.3f ms, other kernels %.3f ms, "
              "copies %.3f ms; the rest, %.3f ms, is host time between ops (launch, synchronize, allocation)\n",
              f.in_step_gemm * 1e3, f.in_step_other * 1e3, f.in_step_copy * 1e3, std::max(0.0, f.step_t - busy) * 1e3);
  std::printf("  %-32s %12.3f\n", "step, back to back (scalelab)", f.back_to_back_t * 1e3);
  std::fflush(stdout);

  nlohmann::json torch = nullptr;
  if (vs_torch) {
    char args[512];
    std::snprintf(args, sizeof args, "--model '%s' --batch %lld --steps %d --warmup %d --device cuda --amp %s --gemms",
                  o.model.c_str(), static_cast<long long>(o.batch), o.steps, warmup, o.amp.c_str());
    torch = run_python_peer("torch_step.py", args, "--vs torch", /*need_cuda=*/true);
    const double t = torch.value("step_time_s", 0.0), tg = torch.value("gemm_time_s", 0.0);
    std::printf("  %-32s %12.3f %10.2f\n", "training step (pytorch)", t * 1e3, t > 0 ? flops / t * 1e-12 : 0.0);
    if (tg > 0) std::printf("  %-32s %12.3f %10.2f\n", "GEMMs alone (torch.mm)", tg * 1e3, flops / tg * 1e-12);
    if (torch.contains("step_time_back_to_back_s"))
      std::printf("  %-32s %12.3f\n", "step, back to back (pytorch)", torch["step_time_back_to_back_s"].get<double>() * 1e3);
    std::printf("  pytorch / scalelab step time %.2f×  (goal ≥ 1.00; torch %s eager on %s; both copy the batch from "
                "host memory each step)\n",
                t / f.step_t, torch.value("torch", std::string("?")).c_str(),
                torch.value("device_name", std::string("?")).c_str());
  }
  std::fflush(stdout);
  if (!o.json_path.empty()) {
    const double tt = vs_torch ? torch.value("step_time_s", 0.0) : 0.0;
    nlohmann::json j{{"device", "cuda"},
                     {"device_name", f.device_name},
                     {"amp", o.amp},
                     {"model", o.model},
                     {"batch", o.batch},
                     {"flops_per_step", flops},
                     {"steps", o.steps},
                     {"warmup", warmup},
                     {"step_time_s", f.step_t},
                     {"gemm_time_s", f.gemm_t},
                     {"ratio", ratio},
                     {"achieved_gflops", flops / f.step_t * 1e-9},
                     {"gemm_gflops", flops / f.gemm_t * 1e-9},
                     {"step_back_to_back_s", f.back_to_back_t},
                     {"in_step_gemm_s", f.in_step_gemm},
                     {"in_step_other_kernels_s", f.in_step_other},
                     {"in_step_copy_s", f.in_step_copy},
                     {"torch_step_time_s", vs_torch ? nlohmann::json(tt) : nlohmann::json(nullptr)},
                     {"torch_over_scalelab", vs_torch && f.step_t > 0 ? nlohmann::json(tt / f.step_t) : nlohmann::json(nullptr)},
                     {"torch_gemm_time_s", vs_torch && torch.contains("gemm_time_s") ? torch["gemm_time_s"] : nlohmann::json(nullptr)},
                     {"torch_step_back_to_back_s",
                      vs_torch && torch.contains("step_time_back_to_back_s") ? torch["step_time_back_to_back_s"] : nlohmann::json(nullptr)},
                     {"torch", torch}};
    write_file_atomically(o.json_path, j.dump(2) + "\n", "bench");
  }
  return 0;
}

}  // namespace

int bench_compute(const BenchComputeOptions& options) {
  BenchComputeOptions o = options;
  if (o.batch == 0) {
    const ModelFamily family = ModelSpec::parse(o.model).family;
    o.batch = family == ModelFamily::mlp ? 512 : family == ModelFamily::convnet ? 64 : 8;
  }
  if (!o.vs.empty() && o.vs != "torch") throw UsageError("bench", "--vs '" + o.vs + "' is unknown — the peer is torch");
  if (o.device != "cpu" && o.device != "cuda")
    throw UsageError("bench", "--device '" + o.device + "': bench compute measures cpu or cuda (a sim device's times "
                              "are modelled, not measured) — use --device cpu or --device cuda");
  if (o.amp != "off" && o.amp != "bf16")
    throw UsageError("bench", "--amp '" + o.amp + "': bench compute measures off (f32) or bf16" +
                                  (o.amp == "fp16" ? " (fp16's loss scaler would need PyTorch's GradScaler in the peer)" : "") +
                                  " — use --amp off or --amp bf16");
  if (o.device == "cpu" && o.amp != "off")
    throw UsageError("bench", "--amp " + o.amp + " on --device cpu: the cpu bound is OpenBLAS sgemm (f32) — use --amp off, "
                              "or --device cuda");
  const ModelSpec spec = ModelSpec::parse(o.model);
  const bool mlp = spec.family == ModelFamily::mlp;
  if (o.device == "cuda" && !mlp)
    throw UsageError("bench", "--model " + o.model + " on --device cuda: the cuda bound lists an MLP's GEMMs — use "
                              "--device cpu for the ConvNet or a GPT, or an mlp:… model");
  if (o.device == "cuda") return bench_compute_cuda(o);
  if (o.vs == "torch") check_python_peer("torch_step.py", "--vs torch");
  // An MLP's bound is its GEMMs alone; the ConvNet's and a GPT's steps are more than GEMMs (im2col,
  // attention's softmax, LayerNorm, GELU): their GFLOP/s count the model's FLOPs, PyTorch is the peer.
  const auto gemms = mlp ? step_gemms(spec, o.batch) : std::vector<GemmShape>{};
  double flops = mlp ? 0.0 : spec.train_flops_per_sample() * static_cast<double>(o.batch);
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
  DataSplit data = spec.family == ModelFamily::gpt
                       ? make_synthetic_tokens(o.batch * 4, 16, spec.gpt.context, spec.gpt.vocab, 1)
                       : make_synthetic(o.batch * 4, 16, spec.inputs(), static_cast<int>(spec.outputs()), 1);
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
  for (int i = 0; i < (o.warmup > 0 ? o.warmup : 3); ++i) {
    run_step();
    run_gemms();
  }
  std::vector<double> step_s, gemm_s;
  std::map<std::string, std::vector<double>> op_s;  // per op kind, its time in each timed step
  for (int i = 0; i < o.steps; ++i) {
    auto t0 = clock_type::now();
    strategy->train_step(batch, 0);
    auto t1 = clock_type::now();
    std::map<std::string, double> in_step;
    for (const Event& e : bus.events())
      if (e.lane == Lane::compute) in_step[e.kind] += static_cast<double>(e.t_end_ns - e.t_begin_ns) * 1e-9;
    for (const auto& [kind, t] : in_step) op_s[kind].push_back(t);
    bus.clear();
    run_gemms();
    auto t2 = clock_type::now();
    step_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    gemm_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const double step_t = median(step_s), gemm_t = mlp ? median(gemm_s) : 0.0;
  const double achieved = flops / step_t * 1e-9, sgemm = mlp ? flops / gemm_t * 1e-9 : 0.0;
  const double ratio = mlp ? achieved / sgemm : 0.0;
  const auto [step_min, step_max] = std::minmax_element(step_s.begin(), step_s.end());

  std::printf("# bench compute: one training step of %s at batch %lld on the cpu device\n", o.model.c_str(),
              static_cast<long long>(o.batch));
  if (mlp)
    std::printf("# bound: OpenBLAS sgemm on the step's %zu GEMM shapes, same run; GFLOP/s = GEMM FLOPs / median time\n",
                gemms.size());
  else
    std::printf("# GFLOP/s = the model's training FLOPs (%.3f G a step) / median time; forward, loss, backward, SGD\n",
                flops * 1e-9);
  std::printf("# %-28s %12s %12s %21s\n", "what", "time (ms)", "GFLOP/s", "spread (min–max, ms)");
  std::printf("  %-28s %12.3f %12.2f %10.3f–%.3f\n", "training step (scalelab)", step_t * 1e3, achieved, *step_min * 1e3,
              *step_max * 1e3);
  // Where the step's time goes: the ops of each kind, median over the timed steps, the largest first.
  std::vector<std::pair<double, std::string>> kinds;
  for (auto& [kind, t] : op_s) kinds.push_back({median(t), kind});
  std::sort(kinds.rbegin(), kinds.rend());
  std::printf("  in the step (ms):");
  for (size_t i = 0; i < kinds.size() && i < 8; ++i)
    std::printf(" %s %.1f%s", kinds[i].second.c_str(), kinds[i].first * 1e3, i + 1 < std::min<size_t>(kinds.size(), 8) ? "," : "");
  std::printf("\n");
  if (mlp) {
    std::printf("  %-28s %12.3f %12.2f\n", "sgemm alone (OpenBLAS)", gemm_t * 1e3, sgemm);
    std::printf("  ratio %.3f  (GEMM FLOPs per step %.3f G, %d timed steps)\n", ratio, flops * 1e-9, o.steps);
  }
  // The peer after ours, not interleaved: it is another process with a thread pool of its own.
  double torch_t = 0;
  const int threads = openblas_get_num_threads();
  if (!mlp) std::printf("  %d timed steps after %d warm-up, on %d threads\n", o.steps, o.warmup > 0 ? o.warmup : 3, threads);
  if (o.vs == "torch") {
    char args[400];
    std::snprintf(args, sizeof args, "--model '%s' --batch %lld --steps %d --warmup %d --threads %d", o.model.c_str(),
                  static_cast<long long>(o.batch), o.steps, o.warmup > 0 ? o.warmup : 3, threads);
    const nlohmann::json peer = run_python_peer("torch_step.py", args, "--vs torch");
    torch_t = peer["step_time_s"].get<double>();
    std::printf("  %-28s %12.3f %12.2f %10.3f–%.3f\n", "training step (pytorch)", torch_t * 1e3, flops / torch_t * 1e-9,
                peer.value("step_time_min_s", 0.0) * 1e3, peer.value("step_time_max_s", 0.0) * 1e3);
    std::printf("  pytorch / scalelab step time %.2f×  (both on %d threads; same model, batch, SGD with momentum)\n",
                torch_t / step_t, threads);
  }
  std::fflush(stdout);
  if (!o.json_path.empty()) {
    auto bound = [&](double v) { return mlp ? nlohmann::json(v) : nlohmann::json(nullptr); };  // an MLP's alone
    nlohmann::json j{{"device", "cpu"},
                     {"amp", "off"},
                     {"model", o.model},
                     {"batch", o.batch},
                     {"flops_per_step", flops},
                     {"step_time_s", step_t},
                     {"step_time_min_s", *step_min},
                     {"step_time_max_s", *step_max},
                     {"achieved_gflops", achieved},
                     {"gemm_time_s", bound(gemm_t)},
                     {"sgemm_time_s", bound(gemm_t)},
                     {"sgemm_gflops", bound(sgemm)},
                     {"ratio", bound(ratio)},
                     {"steps", o.steps},
                     {"threads", threads},
                     {"torch_step_time_s", o.vs == "torch" ? nlohmann::json(torch_t) : nlohmann::json(nullptr)}};
    write_file_atomically(o.json_path, j.dump(2) + "\n", "bench");
  }
  return 0;
}

}  // namespace scalelab
