#pragma once
// Everything a training run is told, as the CLI (and later the dashboard) sets it.
#include <cstdint>
#include <string>

#include "core/device/device.h"
#include "core/nn/optimizer.h"

namespace scalelab {

struct TrainConfig {
  std::string strategy = "single";
  DeviceKind device = DeviceKind::cpu;
  std::string hw;  // hardware profile name or path (sim)
  int devices = 1;
  bool dry_run = false;
  std::string model = "mlp:784-256-128-10";
  std::string dataset = "fashion-mnist";  // fashion-mnist | synthetic
  std::string data_dir;                   // empty: the Debian package's directory
  int64_t epochs = 1;
  int64_t steps = 0;  // > 0 overrides epochs
  int64_t batch = 128;
  OptimizerConfig optimizer;
  uint64_t seed = 42;
  std::string trace_path;
  std::string json_path;
  int64_t synthetic_train = 8192;  // sizes of the synthetic set
  int64_t synthetic_test = 2048;

  // How ranks are started and how they talk (strategies with ranks: ddp, ddp-mp, pipeline, zero,
  // multiprocessing).
  std::string launch = "threads";  // threads | procs | mpi
  std::string comm;                // threads | shm | mpi | nccl; empty: the launch's natural one
  int64_t comm_timeout_ms = 60000;
  std::string comm_algo = "ring";  // ring | direct (host backends' all-reduce)
  std::string shm_sharing = "fd_passing";  // fd_passing | named_file (procs, multiprocessing)

  // Strategy options.
  double bucket_mb = 25;        // ddp: gradient bucket cap
  double first_bucket_mb = 1;   // ddp: the first bucket is small, so communication starts early
  int no_sync = 1;              // ddp: all-reduce every K-th backward; accumulate in between
  int micro_batches = 1;        // pipeline: chunks of the batch
  std::string schedule = "gpipe";  // pipeline: gpipe | 1f1b
  int zero_stage = 0;           // 1: shard optimizer state; 2: gradients too (strategy zero)
  std::string amp = "off";      // off | fp16 | bf16: mixed precision (see core/nn/loss_scaler.h)
  double amp_initial_scale = 65536;  // fp16: the loss scaler's first scale (GradScaler's 2^16)
  std::string checkpoint_path;  // written every checkpoint_every steps (and at the end)
  int64_t checkpoint_every = 0;
  std::string resume_path;      // continue a run from this checkpoint
  bool check_equivalence = false;  // also train `single` on the same global batches and compare

  // The dtype the layers compute in: f32 (--amp off), f16 or bf16.
  DType amp_dtype() const;

  // Throws UsageError naming the option and the fix.
  void validate() const;
};

}  // namespace scalelab
