#include "strategies/train_config.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"

namespace scalelab {

namespace {

// One table per choice: its words, in enum order, and the option that takes them.
template <typename E, size_t N>
E parse_choice(const std::string& name, const char* const (&names)[N], const char* option) {
  std::string known;
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i] && names[i][0] != '\0') return static_cast<E>(i);
    if (names[i][0] == '\0') continue;
    known += std::string(known.empty() ? "" : (i + 1 == N ? " or " : ", ")) + names[i];
  }
  throw UsageError("train", std::string(option) + " '" + name + "' is unknown — use " + known);
}

constexpr const char* kLaunchNames[] = {"threads", "procs", "mpi"};
constexpr const char* kCommNames[] = {"", "threads", "shm", "mpi", "nccl"};
constexpr const char* kScheduleNames[] = {"gpipe", "1f1b", "interleaved", "zero-bubble"};
constexpr const char* kAmpNames[] = {"off", "fp16", "bf16"};

}  // namespace

const char* launch_name(Launch l) { return kLaunchNames[static_cast<size_t>(l)]; }
const char* comm_backend_name(CommBackend c) { return kCommNames[static_cast<size_t>(c)]; }
const char* schedule_name(Schedule s) { return kScheduleNames[static_cast<size_t>(s)]; }
const char* amp_name(Amp a) { return kAmpNames[static_cast<size_t>(a)]; }
Launch parse_launch(const std::string& name) { return parse_choice<Launch>(name, kLaunchNames, "--launch"); }
CommBackend parse_comm_backend(const std::string& name) {
  return name.empty() ? CommBackend::automatic : parse_choice<CommBackend>(name, kCommNames, "--comm");
}
Schedule parse_schedule(const std::string& name) { return parse_choice<Schedule>(name, kScheduleNames, "--schedule"); }
Amp parse_amp(const std::string& name) { return parse_choice<Amp>(name, kAmpNames, "--amp"); }

void ChoiceWords::apply(TrainConfig& c) const {
  c.launch = parse_launch(launch);
  c.comm = parse_comm_backend(comm);
  c.schedule = parse_schedule(schedule);
  c.amp = parse_amp(amp);
  c.shm_sharing = parse_shm_sharing(shm_sharing);
}

DType TrainConfig::amp_dtype() const {
  if (amp == Amp::fp16) return DType::f16;
  if (amp == Amp::bf16) return DType::bf16;
  return DType::f32;
}

std::string default_dataset(const std::string& model) {
  return model.rfind("gpt:", 0) == 0 ? "text" : "fashion-mnist";
}

void TrainConfig::validate() const {
  if (devices < 1) throw UsageError("train", "--devices must be ≥ 1, got " + std::to_string(devices));
  if (batch < 1) throw UsageError("train", "--batch must be ≥ 1, got " + std::to_string(batch));
  if (steps < 0) throw UsageError("train", "--steps must be ≥ 0, got " + std::to_string(steps));
  if (steps == 0 && epochs < 1) throw UsageError("train", "--epochs must be ≥ 1 (or pass --steps), got " + std::to_string(epochs));
  if (dataset != "fashion-mnist" && dataset != "text" && dataset != "synthetic")
    throw UsageError("data", "--dataset '" + dataset + "' is unknown — use fashion-mnist, text or synthetic");
  const bool tokens = model.rfind("gpt:", 0) == 0;
  if (tokens && dataset == "fashion-mnist")
    throw UsageError("data", "--model " + model + " reads tokens, not images — pass --dataset text (a corpus: "
                             "--data-dir FILE|DIR, fortunes by default) or --dataset synthetic");
  if (!tokens && dataset == "text")
    throw UsageError("data", "--dataset text is tokens for a GPT, but --model " + model +
                                 " reads images — pass --dataset fashion-mnist or synthetic, or --model gpt:L-C-H-T-V");
  if (device == DeviceKind::sim && hw.empty())
    throw UsageError("train", "--device sim needs --hw PROFILE (see `scalelab profiles`)");
  if (device != DeviceKind::sim && !hw.empty())
    throw UsageError("train", "--hw prices ops on simulated devices only — add --device sim, or drop --hw");
  if (dry_run && device != DeviceKind::sim)
    throw UsageError("train", "--dry-run runs no numerics, so it needs --device sim");
  if ((hw_nodes != 0 || hw_devices_per_node != 0) && device != DeviceKind::sim)
    throw UsageError("train", "--nodes / --devices-per-node reshape a simulated cluster — add --device sim --hw PROFILE");
  if (hw_nodes < 0 || hw_devices_per_node < 0)
    throw UsageError("train", "--nodes and --devices-per-node must be ≥ 1, got " + std::to_string(hw_nodes) + " and " +
                                  std::to_string(hw_devices_per_node));
  if (trace_first_step != -1 || trace_last_step != -1) {
    if (trace_path.empty()) throw UsageError("train", "--trace-steps chooses the steps of a trace — add --trace FILE");
    if (trace_first_step < 0 || trace_last_step < trace_first_step)
      throw UsageError("train", "--trace-steps " + std::to_string(trace_first_step) + ":" + std::to_string(trace_last_step) +
                                    ": give A:B with 0 ≤ A ≤ B (steps numbered from 0)");
    if (steps > 0 && trace_first_step >= steps)
      throw UsageError("train", "--trace-steps " + std::to_string(trace_first_step) + ":" + std::to_string(trace_last_step) +
                                    " starts after the run's last step: --steps " + std::to_string(steps) + " runs steps 0–" +
                                    std::to_string(steps - 1) + " — choose a window inside them (e.g. --trace-steps 0:" +
                                    std::to_string(steps - 1) + "), or raise --steps");
  }
  if (!init_weights_path.empty() && !resume_path.empty())
    throw UsageError("train", "--init-weights and --resume both give the weights — a resumed run has its checkpoint's; drop one");
  if (!init_weights_path.empty() && dry_run)
    throw UsageError("train", "--init-weights gives values, and a dry run computes none — drop --dry-run");
  if (dry_run && check_equivalence)
    throw UsageError("train", "--check-equivalence compares weights, but --dry-run computes none — drop one of them");
  if (!data_dir.empty() && dataset == "synthetic")
    throw UsageError("data", "--data-dir names where the data are, but --dataset synthetic reads no files (it would be "
                             "ignored) — drop --data-dir, or pass --dataset fashion-mnist (images) or text (a corpus)");
  if (recompute && model.rfind("gpt:", 0) != 0)
    throw UsageError("train", "--recompute drops a transformer block's activations after forward and recomputes them "
                              "in backward, but --model " + model + " has no blocks — use --model gpt:L-C-H-T-V, or drop --recompute");
  if (!(dropout >= 0.0f && dropout < 1.0f)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", static_cast<double>(dropout));
    throw UsageError("train", std::string("--dropout ") + got + " is not a probability in [0, 1) (1 would drop every "
                              "activation, so nothing reaches the head) — use 0 ≤ p < 1, e.g. 0.1; 0 turns it off");
  }
  optimizer.validate();
  // A day at most: a longer wait is no timeout, and past ~292 years in ns the deadline overflows.
  if (comm_timeout_ms < 1 || comm_timeout_ms > 86400000)
    throw UsageError("train", "--comm-timeout must be between 1 ms and 86400000 ms (a day), got " + std::to_string(comm_timeout_ms));
  // Steps are counted in int64 (epochs × batches per epoch, at most 70000 a epoch).
  if (epochs > (int64_t{1} << 40) || steps > (int64_t{1} << 50))
    throw UsageError("train", "--epochs " + std::to_string(epochs) + " / --steps " + std::to_string(steps) +
                                  ": more than a run can count — pass fewer");
  if (comm_algo != "ring" && comm_algo != "direct")
    throw UsageError("train", "--comm-algo '" + comm_algo + "' is unknown — use ring or direct");
  // At most 1 TiB (2^20 MiB): a cap past int64's bytes would round to a 1-byte bucket per tensor.
  if (!(bucket_mb > 0) || !(first_bucket_mb > 0) || !(bucket_mb <= 1 << 20) || !(first_bucket_mb <= 1 << 20))
    throw UsageError("ddp", "--bucket-mb and --first-bucket-mb must be numbers > 0 and at most 1048576 (1 TiB) — e.g. "
                            "--bucket-mb 25");
  if (no_sync < 1) throw UsageError("ddp", "--no-sync must be ≥ 1 (1: all-reduce every step)");
  if (micro_batches < 1) throw UsageError("pipeline", "--micro-batches must be ≥ 1");
  if (virtual_stages < 1) throw UsageError("pipeline", "--virtual-stages must be ≥ 1, got " + std::to_string(virtual_stages));
  if (virtual_stages > 1 && schedule != Schedule::interleaved)
    throw UsageError("pipeline", "--virtual-stages " + std::to_string(virtual_stages) + " cuts each device's layers into "
                                 "chunks for the interleaved schedule, but --schedule is " + schedule_name(schedule) +
                                 " — add --schedule interleaved, or drop --virtual-stages");
  if (virtual_stages == 1 && schedule == Schedule::interleaved)
    throw UsageError("pipeline", "--schedule interleaved needs --virtual-stages V ≥ 2 chunks per device (with one it is "
                                 "1F1B) — add --virtual-stages 2, or use --schedule 1f1b");
  if (zero_stage < 0 || zero_stage > 3) throw UsageError("zero", "--zero-stage must be 1, 2 or 3");
  if (dp < 1 || devices % dp != 0)
    throw UsageError("tensor-parallel", "--dp " + std::to_string(dp) + " replicas of --devices " + std::to_string(devices) +
                                            ": --dp must be ≥ 1 and divide --devices (each replica --devices / --dp ranks)");
  // A normal float, as the scaler keeps it: 1e-300 would be 0 (its inverse inf), 1e39 inf.
  if (!(amp_initial_scale >= std::numeric_limits<float>::min()) || !(amp_initial_scale <= 3.0e38)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", amp_initial_scale);
    throw UsageError("amp", "--amp-initial-scale must be a positive float from 1.2e-38 to 3e38, got " + std::string(got) +
                                " — use a power of two such as 65536");
  }
  if (amp_initial_scale != 65536 && amp != Amp::fp16)
    throw UsageError("amp", "--amp-initial-scale sets the fp16 loss scaler's first scale; --amp " +
                                std::string(amp_name(amp)) + " has no loss scaler — add --amp fp16, or drop --amp-initial-scale");
  if (checkpoint_every < 0) throw UsageError("checkpoint", "--checkpoint-every must be ≥ 0");
  if (checkpoint_every > 0 && checkpoint_path.empty())
    throw UsageError("checkpoint", "--checkpoint-every needs --checkpoint FILE");
}

std::string layout_words(const TrainConfig& config) {
  if (config.strategy != "tensor-parallel") return "";
  return " --dp " + std::to_string(config.dp) + " --pp " + std::to_string(config.pp);
}

}  // namespace scalelab
