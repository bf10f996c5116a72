#pragma once
// Everything a training run is told, as the CLI and the dashboard's launch panel set it. It lives
// with the strategies, which read their options from it (bucket_mb, micro_batches, zero_stage …);
// run/ carries a run out, and core knows none of it.
#include <cstdint>
#include <string>

#include "core/comm/shm/shm_segment.h"
#include "core/device/device.h"
#include "core/nn/optimizer.h"

namespace scalelab {

// The choices a run is given as words on the command line, parsed once (parse_* throw a
// UsageError naming the option and the words it takes) and kept typed from then on.
enum class Launch : uint8_t { threads, procs, mpi };          // how ranks start
enum class CommBackend : uint8_t { automatic, threads, shm, mpi, nccl };  // automatic: the launch's own
// pipeline: all F then all B; 1F1B; interleaved 1F1B; ZB-H1 (1F1B with each backward split in B and W)
enum class Schedule : uint8_t { gpipe, one_f_one_b, interleaved, zero_bubble };
enum class Amp : uint8_t { off, fp16, bf16 };                 // mixed precision

const char* launch_name(Launch launch);
const char* comm_backend_name(CommBackend comm);  // "" for automatic
const char* schedule_name(Schedule schedule);     // gpipe | 1f1b | interleaved | zero-bubble
const char* amp_name(Amp amp);
Launch parse_launch(const std::string& name);
CommBackend parse_comm_backend(const std::string& name);
Schedule parse_schedule(const std::string& name);
Amp parse_amp(const std::string& name);

struct TrainConfig;

// The typed choices as a command line gives them, in words; apply() parses each once (a
// UsageError names the option) and stores it typed.
struct ChoiceWords {
  std::string launch = "threads";
  std::string comm;  // empty: the launch's own
  std::string schedule = "gpipe";
  std::string amp = "off";
  std::string shm_sharing = "fd_passing";
  void apply(TrainConfig& config) const;
};

struct TrainConfig {
  std::string strategy = "single";
  DeviceKind device = DeviceKind::cpu;
  std::string hw;  // hardware profile name or path (sim)
  int hw_nodes = 0;             // sim: the profile reshaped to this many nodes (0: its own)
  int hw_devices_per_node = 0;  // sim: … and devices per node (0: its own)
  int devices = 1;
  bool dry_run = false;
  bool recompute = false;  // activation checkpointing of each transformer block (a GPT)
  float dropout = 0;       // the model's dropout probability (ModelSpec::dropout), 0: none
  bool tf32 = false;  // f32 GEMMs as TF32: run so on cuda (cuBLAS), priced so on sim (the profile's TF32 peak and curve)
  std::string model = "mlp:784-256-128-10";
  std::string dataset = "fashion-mnist";  // fashion-mnist | text (a GPT's corpus) | synthetic
  std::string data_dir;                   // empty: the Debian package's directory (text: a file or folder)
  int64_t epochs = 1;
  int64_t steps = 0;  // > 0 overrides epochs
  int64_t batch = 128;
  OptimizerConfig optimizer;
  uint64_t seed = 42;
  std::string trace_path;
  int64_t trace_first_step = -1;  // --trace-steps A:B keeps steps A…B (numbered from 0) in the trace;
  int64_t trace_last_step = -1;   // -1: every step
  // --predict PROFILE: the profile (JSON) this measured run is priced on beside it; its trace
  // names it (TraceInfo::predicted_with). Set by the prediction, not an option of its own.
  std::string trace_predicted_with;
  std::string json_path;
  std::string dump_batches_path;  // the sample indices of each step's global batch and shards (JSON)
  int64_t synthetic_train = 8192;  // sizes of the synthetic set
  int64_t synthetic_test = 2048;

  // How ranks are started and how they talk (strategies with ranks: ddp, ddp-mp, pipeline, zero,
  // multiprocessing).
  Launch launch = Launch::threads;
  CommBackend comm = CommBackend::automatic;
  int64_t comm_timeout_ms = 60000;
  std::string comm_algo = "ring";  // ring | direct (host backends' all-reduce)
  ShmSharing shm_sharing = ShmSharing::fd_passing;  // how processes share memory (procs, multiprocessing)

  // Strategy options.
  double bucket_mb = 25;        // ddp: gradient bucket cap
  double first_bucket_mb = 1;   // ddp: the first bucket is small, so communication starts early
  int no_sync = 1;              // ddp: all-reduce every K-th backward; accumulate in between
  int micro_batches = 1;        // pipeline: chunks of the batch
  Schedule schedule = Schedule::gpipe;  // pipeline
  int virtual_stages = 1;       // pipeline, --schedule interleaved: chunks of layers per device
  int zero_stage = 0;           // 1: shard optimizer state; 2: gradients too; 3: weights too (strategy zero)
  bool sequence_parallel = false;  // tensor-parallel: LayerNorms, dropout and residuals split along the sequence
  int dp = 1;                   // tensor-parallel: data-parallel replicas, each of --devices / dp ranks
  int pp = 1;                   // tensor-parallel: pipeline stages (3D: --devices = dp · tp · pp)
  Amp amp = Amp::off;           // mixed precision (see core/nn/loss_scaler.h)
  double amp_initial_scale = 65536;  // fp16: the loss scaler's first scale (GradScaler's 2^16)
  std::string checkpoint_path;  // written every checkpoint_every steps (and at the end)
  int64_t checkpoint_every = 0;
  std::string resume_path;      // continue a run from this checkpoint
  std::string init_weights_path;  // start from these weights (.npz, PyTorch's names) instead of the seed's
  bool check_equivalence = false;  // also train `single` on the same global batches and compare
  // A threads launch on more devices keeps every op of its first `detailed_devices` (two nodes of 8
  // GPUs: what a timeline can show) and tallies the
  // others (EventBus::tally_devices): the trace and the timeline show those, the summary all.
  int detailed_devices = 16;
  bool allow_divergence = false;   // a non-finite loss ends the run with an error unless this is set

  // The dtype the layers compute in: f32 (--amp off), f16 or bf16.
  DType amp_dtype() const;

  // The checks that hold for every strategy; throws UsageError naming the option and the fix.
  // (What a strategy takes — its options, launches, devices — is checked against its registry
  // entry: StrategyInfo::validate in strategies/strategy.h.)
  void validate() const;
};

// What a trace's title adds for a tensor-parallel run, " --dp D --pp P" (the dashboard's Layout
// panel reads its shape there, T from --devices); "" for the other strategies.
std::string layout_words(const TrainConfig& config);

// The dataset a model trains on when --dataset is not given: text for a GPT, Fashion-MNIST otherwise.
std::string default_dataset(const std::string& model);

}  // namespace scalelab
