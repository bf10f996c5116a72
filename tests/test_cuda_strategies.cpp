// Every strategy on the cuda device: logical devices on one GPU (their names, their share of the
// memory), the threads backend's collectives in GPU memory against their closed forms, each
// strategy against `single` on the same GPU (fp32 weights within 1e-5 after 5 steps), the same
// run's losses against the cpu's, the GPT and the ConvNet through the strategies that split them
// (3D included), mixed precision, a checkpoint resumed bit for bit, and a
// one-rank NCCL communicator in a run. Skipped, saying why, where there is no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>

#include "comm_checks.h"
#include "core/comm/threads/threads_group.h"
#include "core/error.h"
#include "run/train.h"
#include "support/small_config.h"

using namespace scalelab;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device here (a build without CUDA, or no GPU and driver)"

TrainResult run(const TrainConfig& c) {
  EventBus bus;
  return train(c, bus);
}

struct StrategyCase {
  std::string strategy;
  int devices;
  std::string schedule = "gpipe";
  int micro_batches = 1;
  int zero_stage = 0;
};

std::string case_name(const StrategyCase& k) {
  std::string s = k.strategy + "_" + std::to_string(k.devices) + "dev";
  if (k.strategy == "pipeline") s += "_" + k.schedule + "_" + std::to_string(k.micro_batches) + "mb";
  if (k.strategy == "zero") s += "_stage" + std::to_string(k.zero_stage);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

TrainConfig config_for(const StrategyCase& k, DeviceKind kind, const std::string& optimizer = "sgd") {
  TrainConfig c = test::small_config(k.strategy, k.devices, kind, optimizer);
  c.schedule = parse_schedule(k.schedule);
  c.micro_batches = k.micro_batches;
  if (k.strategy == "zero") c.zero_stage = k.zero_stage;
  return c;
}

double max_relative_loss_difference(const TrainResult& a, const TrainResult& b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.losses.size(), b.losses.size()); ++i)
    worst = std::max(worst, std::fabs(a.losses[i] - b.losses[i]) / std::max(std::fabs(b.losses[i]), 1e-12));
  return worst;
}

}  // namespace

TEST(CudaLogicalDevices, MoreDevicesThanGpusShareThemRoundRobin) {
  // Placement is arithmetic: it needs no GPU.
  const CudaPlacement a = place_cuda_device(2, 4, 1);
  EXPECT_EQ(a.gpu, 0);
  EXPECT_EQ(a.local, 2);
  EXPECT_EQ(a.sharing, 4);
  EXPECT_EQ(a.name(), "cuda:0.2");
  const CudaPlacement b = place_cuda_device(3, 5, 2);  // GPU 1 holds devices 1 and 3
  EXPECT_EQ(b.gpu, 1);
  EXPECT_EQ(b.local, 1);
  EXPECT_EQ(b.sharing, 2);
  EXPECT_EQ(place_cuda_device(4, 5, 2).sharing, 3);  // GPU 0 holds 0, 2 and 4
  EXPECT_EQ(place_cuda_device(1, 2, 2).name(), "cuda:1");  // a GPU each: plain names
  EXPECT_THROW(place_cuda_device(0, 1, 0), UsageError);
}

TEST(CudaLogicalDevices, EachHasItsNameItsStreamAndItsShareOfTheMemory) {
  SKIP_WITHOUT_GPU();
  const int gpus = cuda_device_count();
  DeviceOptions o;
  o.kind = DeviceKind::cuda;
  o.count = 4 * gpus;
  auto devices = make_devices(o);
  ASSERT_EQ(devices.size(), static_cast<size_t>(4 * gpus));
  EXPECT_EQ(devices[0]->name(), "cuda:0.0");
  EXPECT_EQ(devices[static_cast<size_t>(gpus)]->name(), "cuda:0.1");
  o.count = 1;
  const int64_t whole = make_devices(o)[0]->memory().capacity();
  EXPECT_EQ(devices[0]->memory().capacity(), whole / 4);
  // A copy from one logical device to another of the same GPU lands whole.
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  Tensor src = devices[0]->empty({1000}, DType::f32, MemoryCategory::activations);
  Tensor dst = devices[1]->empty({1000}, DType::f32, MemoryCategory::activations);
  devices[0]->upload({"test"}, src, v.data());
  devices[1]->copy({"copy"}, src, dst);
  EXPECT_EQ(devices[1]->download_f32({"test"}, dst), v);
}

// The threads backend with every rank's buffers on one GPU: the same algorithms, their moves as
// copies and kernels on each device's comm stream.
class CudaThreadsClosedForm : public ::testing::TestWithParam<std::tuple<int, CommAlgorithm>> {};

TEST_P(CudaThreadsClosedForm, EveryCollectiveEveryDtypeAwkwardCounts) {
  SKIP_WITHOUT_GPU();
  const int n = std::get<0>(GetParam());
  CommOptions options;
  options.algorithm = std::get<1>(GetParam());
  auto groups = make_threads_groups(n, options);
  DeviceOptions o;
  o.kind = DeviceKind::cuda;
  o.count = n;
  auto devices = make_devices(o);
  std::vector<std::vector<std::string>> failures(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        groups[r]->set_device(devices[r].get());
        comm_test::CollectiveChecker check(*groups[r], *devices[r]);
        failures[static_cast<size_t>(r)] = check.run_all({0, 1, 7, 1000 + 3, (1 << 20) + 5});
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    for (const auto& f : failures[static_cast<size_t>(r)]) ADD_FAILURE() << f;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CudaThreadsClosedForm,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(CommAlgorithm::ring, CommAlgorithm::direct)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  comm_algorithm_name(std::get<1>(info.param));
                         });

class CudaStrategy : public ::testing::TestWithParam<StrategyCase> {};

// The contract (DESIGN.md): fp32 weights within relative 1e-5 of single's on the same device; and
// the cuda run computes what the cpu run computes, to fp32 round-off (cuBLAS sums in another order).
TEST_P(CudaStrategy, MatchesSingleOnTheGpuAndTheCpuRun) {
  SKIP_WITHOUT_GPU();
  const StrategyCase k = GetParam();
  for (const char* optimizer : {"sgd", "adam"}) {
    TrainConfig c = config_for(k, DeviceKind::cuda, optimizer);
    c.check_equivalence = true;
    const TrainResult gpu = run(c);
    ASSERT_GE(gpu.max_rel_diff, 0.0);
    EXPECT_LE(gpu.max_rel_diff, 1e-5) << case_name(k) << " " << optimizer;
    const TrainResult cpu = run(config_for(k, DeviceKind::cpu, optimizer));
    ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
    const double vs_cpu = max_relative_loss_difference(gpu, cpu);
    EXPECT_LE(vs_cpu, 1e-5) << case_name(k) << " " << optimizer;
    std::printf("    %-36s %-4s vs single %.3g   loss vs cpu %.3g   (%s)\n", case_name(k).c_str(), optimizer,
                gpu.max_rel_diff, vs_cpu, gpu.placement.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, CudaStrategy,
    ::testing::Values(StrategyCase{"single", 1}, StrategyCase{"data-parallel", 4}, StrategyCase{"model-parallel", 4},
                      StrategyCase{"ddp", 4}, StrategyCase{"ddp-mp", 4}, StrategyCase{"pipeline", 4, "gpipe", 4},
                      StrategyCase{"pipeline", 4, "1f1b", 4}, StrategyCase{"zero", 4, "gpipe", 1, 1},
                      StrategyCase{"zero", 4, "gpipe", 1, 2}, StrategyCase{"zero", 4, "gpipe", 1, 3}),
    [](const auto& info) { return case_name(info.param); });

// The models people scale, through the strategies that split them, on logical devices of one GPU
// (the threads backend's collectives in GPU memory): the GPT through tensor parallelism (2D and
// 3D, ZeRO-1 over the data-parallel groups, sequence parallel), FSDP, the interleaved and the
// zero-bubble pipelines; the ConvNet through DDP and a pipeline. Each against single on the GPU
// (weights within 1e-5 after 5 steps) and against the same run on the cpu (losses within 1e-5).
// SGD; Adam on the ConvNet too (on a GPT its first steps divide gradients that cancel to near zero
// by |g| + eps: single itself moves by 3e-4 taking the batch in halves, test_model_families.cpp).
struct ModelCase {
  std::string name, model, strategy;
  int devices;
  void (*shape)(TrainConfig&) = nullptr;  // what else the case sets
};

class CudaModels : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CudaModels, MatchSingleOnTheGpuAndTheCpuRun) {
  SKIP_WITHOUT_GPU();
  const ModelCase& k = GetParam();
  for (const char* optimizer : {"sgd", "adam"}) {
    if (std::string(optimizer) == "adam" && k.model != "convnet") continue;
    TrainConfig c = test::small_config(k.strategy, k.devices, DeviceKind::cuda, optimizer);
    c.model = k.model;
    c.batch = 16;
    c.synthetic_train = 512;
    c.synthetic_test = 32;
    if (k.shape) k.shape(c);
    c.check_equivalence = true;
    const TrainResult gpu = run(c);
    ASSERT_GE(gpu.max_rel_diff, 0.0) << k.name;
    EXPECT_LE(gpu.max_rel_diff, 1e-5) << k.name << " " << optimizer;
    c.device = DeviceKind::cpu;
    c.check_equivalence = false;
    const TrainResult cpu = run(c);
    ASSERT_EQ(gpu.losses.size(), cpu.losses.size()) << k.name;
    const double vs_cpu = max_relative_loss_difference(gpu, cpu);
    EXPECT_LE(vs_cpu, 1e-5) << k.name << " " << optimizer;
    std::printf("    %-32s %-4s vs single %.3g   loss vs cpu %.3g   (%s)\n", k.name.c_str(), optimizer, gpu.max_rel_diff,
                vs_cpu, gpu.placement.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(
    ModelsThatScale, CudaModels,
    ::testing::Values(
        ModelCase{"gpt_single", "gpt:2-32-4-16-96", "single", 1},
        ModelCase{"gpt_ddp_4", "gpt:2-32-4-16-96", "ddp", 4},
        ModelCase{"gpt_fsdp_4", "gpt:2-32-4-16-96", "zero", 4, [](TrainConfig& c) { c.zero_stage = 3; }},
        ModelCase{"gpt_tp_2", "gpt:2-32-4-16-96", "tensor-parallel", 2},
        ModelCase{"gpt_tp_2_sequence_parallel", "gpt:2-32-4-16-96", "tensor-parallel", 2,
                  [](TrainConfig& c) { c.sequence_parallel = true; }},
        ModelCase{"gpt_dp2_tp2_zero1", "gpt:2-32-4-16-96", "tensor-parallel", 4,
                  [](TrainConfig& c) {
                    c.dp = 2;
                    c.zero_stage = 1;
                  }},
        ModelCase{"gpt_dp2_tp2_pp2_1f1b_zero1", "gpt:2-32-4-16-96", "tensor-parallel", 8,
                  [](TrainConfig& c) {
                    c.dp = 2;
                    c.pp = 2;
                    c.micro_batches = 2;
                    c.schedule = Schedule::one_f_one_b;
                    c.zero_stage = 1;
                  }},
        ModelCase{"gpt_pipeline_4_zero_bubble", "gpt:2-32-4-16-96", "pipeline", 4,
                  [](TrainConfig& c) {
                    c.micro_batches = 4;
                    c.schedule = Schedule::zero_bubble;
                  }},
        ModelCase{"gpt_pipeline_2_interleaved", "gpt:2-32-4-16-96", "pipeline", 2,
                  [](TrainConfig& c) {
                    c.micro_batches = 2;
                    c.schedule = Schedule::interleaved;
                    c.virtual_stages = 2;
                  }},
        ModelCase{"convnet_ddp_2", "convnet", "ddp", 2},
        ModelCase{"convnet_pipeline_2_1f1b", "convnet", "pipeline", 2,
                  [](TrainConfig& c) {
                    c.micro_batches = 4;
                    c.schedule = Schedule::one_f_one_b;
                  }}),
    [](const auto& info) { return info.param.name; });

TEST(CudaAmp, HalfPrecisionRunsEveryDataParallelStrategyAndStaysCloseToF32) {
  SKIP_WITHOUT_GPU();
  for (const StrategyCase& k : {StrategyCase{"single", 1}, StrategyCase{"ddp", 4}, StrategyCase{"zero", 4, "gpipe", 1, 2},
                                StrategyCase{"pipeline", 4, "1f1b", 4}})
    for (const char* amp : {"fp16", "bf16"}) {
      TrainConfig c = config_for(k, DeviceKind::cuda);
      const TrainResult f32 = run(c);
      c.amp = parse_amp(amp);
      const TrainResult half = run(c);
      for (double l : half.losses) EXPECT_TRUE(std::isfinite(l)) << case_name(k) << " " << amp;
      EXPECT_EQ(half.skipped_steps, 0) << case_name(k) << " " << amp;
      const double diff = max_relative_loss_difference(half, f32);
      EXPECT_GT(diff, 0.0) << case_name(k) << " " << amp << ": the half run computed nothing in half";
      EXPECT_LE(diff, std::string(amp) == "fp16" ? 1e-2 : 5e-2) << case_name(k) << " " << amp;
      // The same half run on the cpu: the GPU's tensor cores round as the cpu executor does.
      TrainConfig on_cpu = c;
      on_cpu.device = DeviceKind::cpu;
      const double vs_cpu = max_relative_loss_difference(half, run(on_cpu));
      EXPECT_LE(vs_cpu, 1e-3) << case_name(k) << " " << amp;
      std::printf("    %-28s %s   vs f32 %.3g   vs cpu %.3g\n", case_name(k).c_str(), amp, diff, vs_cpu);
    }
}

TEST(CudaTf32, AllowedItRoundsTheProductsOffByDefaultItDoesNot) {
  // --tf32 runs f32 GEMMs on the tensor cores with 10-bit mantissas: close to f32, not equal. Off
  // (the default, as PyTorch >= 1.12) the run is the cpu's to fp32 round-off (CudaStrategy above).
  TrainConfig c = test::small_config("single", 1, DeviceKind::cpu);
  c.model = "mlp:784-512-512-10";  // wide enough that a GEMM rounds its products visibly
  c.batch = 128;
  c.device = DeviceKind::cpu;
  const TrainResult cpu = run(c);
  c.tf32 = true;
  EXPECT_THROW(run(c), UsageError);  // the cpu computes in f32
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device here (a build without CUDA, or no GPU and driver)";
  c.device = DeviceKind::cuda;
  const TrainResult tf32 = run(c);
  c.tf32 = false;
  const TrainResult f32 = run(c);
  const double off = max_relative_loss_difference(f32, cpu), on = max_relative_loss_difference(tf32, cpu);
  EXPECT_LE(off, 1e-5);
  EXPECT_GT(on, off);
  EXPECT_LE(on, 1e-2);
  EXPECT_NE(tf32.placement.find("TF32"), std::string::npos) << tf32.placement;
  std::printf("    loss vs cpu: f32 %.3g, tf32 %.3g\n", off, on);
}

TEST(CudaCheckpoint, AResumedRunEndsBitIdenticalToOneThatNeverStopped) {
  SKIP_WITHOUT_GPU();
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("scalelab-cuda-ckpt-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  for (const StrategyCase& k : {StrategyCase{"single", 1}, StrategyCase{"ddp", 4}, StrategyCase{"zero", 4, "gpipe", 1, 2}}) {
    TrainConfig c = config_for(k, DeviceKind::cuda, "adam");
    c.steps = 8;
    const TrainResult straight = run(c);
    TrainConfig first = c;
    first.steps = 4;
    first.checkpoint_path = dir + "/" + case_name(k) + ".ckpt";
    run(first);
    TrainConfig second = c;
    second.resume_path = first.checkpoint_path;
    const TrainResult resumed = run(second);
    ASSERT_EQ(resumed.losses.size(), 4u) << case_name(k);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed.losses[i], straight.losses[4 + i]) << case_name(k) << " step " << 5 + i;
    EXPECT_EQ(resumed.weights_checksum, straight.weights_checksum) << case_name(k);
  }
  std::filesystem::remove_all(dir);
}

TEST(CudaNccl, ARunOnOneGpuPerDeviceUsesNccl) {
  SKIP_WITHOUT_GPU();
  // ddp on one device: one rank, one GPU, so the automatic backend is a one-rank NCCL communicator.
  TrainConfig c = config_for({"ddp", 1}, DeviceKind::cuda);
  c.check_equivalence = true;
  c.comm = CommBackend::nccl;
  const TrainResult r = run(c);
  EXPECT_LE(r.max_rel_diff, 1e-5);
  // More devices than GPUs cannot use NCCL: a clear error, not a hang.
  TrainConfig shared = config_for({"ddp", cuda_device_count() + 1}, DeviceKind::cuda);
  shared.comm = CommBackend::nccl;
  try {
    run(shared);
    ADD_FAILURE() << "nccl on logical devices was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--comm threads"), std::string::npos) << e.what();
  }
}
