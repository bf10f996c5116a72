#include "core/run/config.h"

#include "core/error.h"

namespace scalelab {

DType TrainConfig::amp_dtype() const {
  if (amp == "fp16") return DType::f16;
  if (amp == "bf16") return DType::bf16;
  return DType::f32;
}

void TrainConfig::validate() const {
  if (devices < 1) throw UsageError("train", "--devices must be ≥ 1, got " + std::to_string(devices));
  if (batch < 1) throw UsageError("train", "--batch must be ≥ 1, got " + std::to_string(batch));
  if (steps < 0) throw UsageError("train", "--steps must be ≥ 0, got " + std::to_string(steps));
  if (steps == 0 && epochs < 1) throw UsageError("train", "--epochs must be ≥ 1 (or pass --steps), got " + std::to_string(epochs));
  if (dataset != "fashion-mnist" && dataset != "synthetic")
    throw UsageError("data", "--dataset '" + dataset + "' is unknown — use fashion-mnist or synthetic");
  if (device == DeviceKind::sim && hw.empty())
    throw UsageError("train", "--device sim needs --hw PROFILE (see `scalelab profiles`)");
  if (device != DeviceKind::sim && !hw.empty())
    throw UsageError("train", "--hw prices ops on simulated devices only — add --device sim, or drop --hw");
  if (dry_run && device != DeviceKind::sim)
    throw UsageError("train", "--dry-run runs no numerics, so it needs --device sim");
  optimizer.validate();
  if (launch != "threads" && launch != "procs" && launch != "mpi")
    throw UsageError("train", "--launch '" + launch + "' is unknown — use threads, procs or mpi");
  if (!comm.empty() && comm != "threads" && comm != "shm" && comm != "mpi" && comm != "nccl")
    throw UsageError("train", "--comm '" + comm + "' is unknown — use threads, shm, mpi or nccl");
  if (comm_timeout_ms < 1) throw UsageError("train", "--comm-timeout must be ≥ 1 ms");
  if (comm_algo != "ring" && comm_algo != "direct")
    throw UsageError("train", "--comm-algo '" + comm_algo + "' is unknown — use ring or direct");
  if (shm_sharing != "fd_passing" && shm_sharing != "named_file")
    throw UsageError("train", "--shm-sharing '" + shm_sharing + "' is unknown — use fd_passing or named_file");
  if (!(bucket_mb > 0) || !(first_bucket_mb > 0))
    throw UsageError("ddp", "--bucket-mb and --first-bucket-mb must be > 0");
  if (no_sync < 1) throw UsageError("ddp", "--no-sync must be ≥ 1 (1: all-reduce every step)");
  if (micro_batches < 1) throw UsageError("pipeline", "--micro-batches must be ≥ 1");
  if (schedule != "gpipe" && schedule != "1f1b")
    throw UsageError("pipeline", "--schedule '" + schedule + "' is unknown — use gpipe or 1f1b");
  if (zero_stage < 0 || zero_stage > 2) throw UsageError("zero", "--zero-stage must be 1 or 2");
  // Options that belong to one family of strategies: elsewhere they would be silently ignored.
  if (no_sync > 1 && strategy != "single" && strategy != "ddp" && strategy != "ddp-mp")
    throw UsageError("ddp", "--no-sync " + std::to_string(no_sync) + " is DDP's gradient accumulation; " + strategy +
                                " does not accumulate — use --strategy ddp (or ddp-mp, single), or drop --no-sync");
  if ((micro_batches > 1 || schedule != "gpipe") && strategy != "pipeline")
    throw UsageError("pipeline", "--micro-batches and --schedule shape a pipeline; " + strategy +
                                     " has none — use --strategy pipeline, or drop them");
  if (zero_stage != 0 && strategy != "zero")
    throw UsageError("zero", "--zero-stage " + std::to_string(zero_stage) + " shards the optimizer of --strategy zero; " +
                                 strategy + " keeps a whole optimizer on every rank — add --strategy zero, or drop --zero-stage");
  if (amp != "off" && amp != "fp16" && amp != "bf16")
    throw UsageError("amp", "--amp '" + amp + "' is unknown — use off, fp16 or bf16");
  if (!(amp_initial_scale > 0) || !(amp_initial_scale <= 3.0e38))
    throw UsageError("amp", "--amp-initial-scale must be a positive float, got " + std::to_string(amp_initial_scale) +
                                " — use a power of two such as 65536");
  if (amp_initial_scale != 65536 && amp != "fp16")
    throw UsageError("amp", "--amp-initial-scale sets the fp16 loss scaler's first scale; --amp " + amp +
                                " has no loss scaler — add --amp fp16, or drop --amp-initial-scale");
  if (checkpoint_every < 0) throw UsageError("checkpoint", "--checkpoint-every must be ≥ 0");
  if (checkpoint_every > 0 && checkpoint_path.empty())
    throw UsageError("checkpoint", "--checkpoint-every needs --checkpoint FILE");
}

}  // namespace scalelab
