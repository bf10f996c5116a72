// scalelab: run a training strategy on cpu, cuda or simulated devices, and benchmark the parts.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <limits>

#include "apps/cli_numbers.h"
#include "apps/scalelab/bench.h"
#include "apps/scalelab/figure.h"
#include "apps/scalelab/plan_cli.h"
#include "apps/scalelab/scale.h"
#include "calibration/calibration.h"
#include "calibration/probes.h"
#include "core/checkpoint/weights_file.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/limits.h"
#include "run/train.h"
#include "strategies/strategy.h"

using namespace scalelab;

namespace {

// A bar redrawn in place on a terminal; a plain line every 10% otherwise (logs, CI, pipes).
class ProgressPrinter {
 public:
  // A dry run computes no loss (it is NaN): its line says so with "loss —".
  ProgressPrinter(bool quiet, bool dry_run) : quiet_(quiet), dry_run_(dry_run), tty_(::isatty(STDERR_FILENO) != 0) {}

  void operator()(const Progress& p) {
    if (quiet_) return;
    const double frac = p.total ? static_cast<double>(p.step) / static_cast<double>(p.total) : 1.0;
    if (p.accuracy >= 0) last_accuracy_ = p.accuracy;
    auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? static_cast<double>(p.step) / elapsed : 0;
    char acc[32] = "";
    if (last_accuracy_ >= 0) std::snprintf(acc, sizeof acc, "  test acc %.4f", last_accuracy_);
    char loss[32] = "—";
    if (!dry_run_) std::snprintf(loss, sizeof loss, "%.4f", p.loss);
    if (tty_) {
      if (p.step != p.total && now - last_draw_ < std::chrono::milliseconds(100) && p.accuracy < 0) return;
      last_draw_ = now;
      const int width = 30, filled = static_cast<int>(frac * width);
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(width, '.');
      std::fprintf(stderr, "\r[%s] %lld/%lld  epoch %lld/%lld  loss %s%s  %.0f steps/s ", bar.c_str(),
                   static_cast<long long>(p.step), static_cast<long long>(p.total), static_cast<long long>(p.epoch),
                   static_cast<long long>(p.epochs), loss, acc, rate);
      if (p.step == p.total) std::fprintf(stderr, "\n");
    } else {
      const int decile = static_cast<int>(frac * 10);
      if (decile == last_decile_ && p.step != p.total) return;
      last_decile_ = decile;
      std::fprintf(stderr, "step %lld/%lld (%3.0f%%)  epoch %lld/%lld  loss %s%s\n", static_cast<long long>(p.step),
                   static_cast<long long>(p.total), frac * 100, static_cast<long long>(p.epoch),
                   static_cast<long long>(p.epochs), loss, acc);
    }
    std::fflush(stderr);
  }

 private:
  bool quiet_, dry_run_, tty_;
  int last_decile_ = -1;
  double last_accuracy_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_draw_{};
};

// What validation of the config cannot see: an option given on the command line at its default
// value (--steps 0, --zero-stage 0, --bucket-mb 25 with a pipeline) is otherwise silently the
// same as one left out. Throws UsageError naming the option and the fix.
void check_given_options(const CLI::App& cmd, const TrainConfig& c) {
  auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  if (given("--steps") && c.steps == 0)
    throw UsageError("train", "--steps 0 would train no steps — pass --steps N ≥ 1, or --epochs N for whole passes");
  if (given("--zero-stage") && (c.zero_stage < 1 || c.zero_stage > 3))
    throw UsageError("zero", "--zero-stage " + std::to_string(c.zero_stage) +
                                 ": the stages are 1 (optimizer state sharded), 2 (gradients too) and 3 (weights too) "
                                 "— pass 1, 2 or 3");
  const StrategyInfo& info = find_strategy(c.strategy);
  const std::pair<const char*, StrategyOption> flags[] = {
      {"--bucket-mb", StrategyOption::buckets},   {"--first-bucket-mb", StrategyOption::buckets},
      {"--no-sync", StrategyOption::no_sync},     {"--micro-batches", StrategyOption::micro_batches},
      {"--schedule", StrategyOption::schedule},   {"--virtual-stages", StrategyOption::schedule},
      {"--zero-stage", StrategyOption::zero_stage}, {"--dp", StrategyOption::data_parallel}, {"--pp", StrategyOption::pipeline_parallel},
      {"--amp", StrategyOption::amp},             {"--amp-initial-scale", StrategyOption::amp},
      {"--comm", StrategyOption::comm},           {"--comm-algo", StrategyOption::comm}};
  for (const auto& [flag, option] : flags)
    if (given(flag)) info.check_takes(option, std::string(flag) + " " + cmd.get_option(flag)->as<std::string>());
  if (given("--amp-initial-scale") && c.amp != Amp::fp16)
    throw UsageError("amp", "--amp-initial-scale sets the fp16 loss scaler's first scale; --amp " +
                                std::string(amp_name(c.amp)) + " has no loss scaler — add --amp fp16, or drop --amp-initial-scale");
  if (given("--shm-sharing") && c.launch != Launch::procs && !(info.devices_per_rank == 0 && !info.synchronous))
    throw UsageError("train", "--shm-sharing chooses how processes share memory, and --launch " +
                                  std::string(launch_name(c.launch)) + " with --strategy " + c.strategy +
                                  " starts none (it would be ignored) — add --launch procs, or drop --shm-sharing");
  // A float option's text that a float reads as 0 although it is not (1e-50 underflows): refused,
  // not trained with 0 (or echoed as "got 0").
  for (const char* flag : {"--lr", "--momentum", "--weight-decay", "--adam-eps", "--adam-betas"})
    if (given(flag))
      for (const std::string& text : cmd.get_option(flag)->results()) {
        const double v = std::strtod(text.c_str(), nullptr);
        if (v != 0 && std::fabs(v) < std::numeric_limits<float>::min())
          throw UsageError("optim", std::string(flag) + " " + text + " is below the smallest float (1.2e-38): it would be "
                                        "read as 0 — pass 0 if that is meant, or a larger number");
      }
  if (given("--momentum") && c.optimizer.kind != "sgd")
    throw UsageError("optim", "--momentum is SGD's; --optimizer " + c.optimizer.kind +
                                  " has its own betas (it would be ignored) — drop --momentum, or pass --optimizer sgd");
  for (const char* flag : {"--nodes", "--devices-per-node"})
    if (given(flag) && cmd.get_option(flag)->as<int>() == 0)
      throw UsageError("train", std::string(flag) + " 0 would keep the profile's own shape (as leaving it out does) — pass " +
                                    flag + " N ≥ 1, or drop it");
  if (given("--checkpoint-every") && c.checkpoint_every == 0)
    throw UsageError("checkpoint", "--checkpoint-every 0 saves only at the end, as leaving it out does — pass "
                                   "--checkpoint-every K ≥ 1, or drop it");
}

// Options that name a file or a folder, by subcommand: one given as '' names none, and is refused
// rather than taken as left out.
void check_paths_not_empty(const std::vector<std::pair<const CLI::App*, std::vector<const char*>>>& path_options) {
  for (const auto& [cmd, names] : path_options)
    for (const char* name : names)
      for (const std::string& value : cmd->get_option(name)->results()) check_path_not_empty(name, value);
}

}  // namespace

// The program: main() below runs it through main_within_limits.
static int run_main(int argc, char** argv) {
  remove_temporaries_on_signals();  // a run's ranks write checkpoints: SIGTERM of the run removes theirs too
  CLI::App app{"scalelab: run and watch how neural-network training is scaled across GPUs"};
  app.require_subcommand(1);

  TrainConfig c;
  ChoiceWords choice;  // --launch, --comm, --schedule, --amp as given; parsed into c after the command line
  std::string device_name = "cpu";
  bool quiet = false;
  auto* train_cmd = app.add_subcommand("train", "train a model with a strategy and print a summary");
  train_cmd->add_option("--strategy", c.strategy, "single (see `scalelab strategies`)")->capture_default_str();
  train_cmd->add_option("--device", device_name, "cpu | sim | cuda")->capture_default_str();
  train_cmd->add_option("--hw", c.hw, "hardware profile for --device sim (see `scalelab profiles`)");
  train_cmd->add_option("--nodes", c.hw_nodes, "sim: the profile's cluster reshaped to this many nodes");
  train_cmd->add_option("--devices-per-node", c.hw_devices_per_node, "sim: … of this many devices each");
  train_cmd->add_option("--devices", c.devices, "number of devices")->capture_default_str();
  train_cmd->add_flag("--dry-run", c.dry_run, "sim only: shapes and times, no numerics");
  train_cmd->add_option("--model", c.model, "mlp:IN-HIDDEN...-CLASSES | convnet | gpt:L-C-H-T-V (see `scalelab models`)")->capture_default_str();
  auto* dataset_opt = train_cmd->add_option("--dataset", c.dataset, "fashion-mnist | text | synthetic (a GPT: text unless given)")->capture_default_str();
  train_cmd->add_option("--data-dir", c.data_dir, "directory of the Fashion-MNIST IDX files; text: a corpus file or folder");
  auto* epochs_opt = train_cmd->add_option("--epochs", c.epochs, "passes over the training set")->capture_default_str();
  train_cmd->add_option("--steps", c.steps, "number of steps (instead of --epochs)")->excludes(epochs_opt);
  train_cmd->add_option("--batch", c.batch, "global batch size")->capture_default_str();
  train_cmd->add_option("--optimizer", c.optimizer.kind, "sgd | adam")->capture_default_str();
  auto* lr_opt = train_cmd->add_option("--lr", c.optimizer.lr, "learning rate (default 0.03 for sgd, 0.001 for adam)");
  train_cmd->add_option("--momentum", c.optimizer.momentum, "sgd momentum")->capture_default_str();
  train_cmd->add_option("--weight-decay", c.optimizer.weight_decay, "L2 weight decay")->capture_default_str();
  std::vector<float> adam_betas;
  auto* betas_opt = train_cmd->add_option("--adam-betas", adam_betas, "adam: β1,β2 (default 0.9,0.999)")
                        ->delimiter(',')->expected(2);
  auto* eps_opt = train_cmd->add_option("--adam-eps", c.optimizer.eps, "adam: ε (default 1e-8)");
  train_cmd->add_option("--init-weights", c.init_weights_path, "start from these weights: an .npz with PyTorch's "
                                                                 "nn.Sequential names (`scalelab export`, numpy.savez)");
  train_cmd->add_option("--seed", c.seed, "seed for weights and data order")->check(at_least(0))->capture_default_str();
  train_cmd->add_option("--trace", c.trace_path, "write a Chrome trace (open in Perfetto); FILE.gz: gzip-compressed");
  std::string trace_steps;
  train_cmd->add_option("--trace-steps", trace_steps, "A:B — keep only steps A to B (from 0) in the trace");
  train_cmd->add_option("--json", c.json_path, "write the summary as JSON");
  train_cmd->add_option("--dump-batches", c.dump_batches_path, "write each step's sample indices (the global batch, "
                                                                "each rank's shard) as JSON");
  train_cmd->add_flag("--quiet", quiet, "no progress bar");
  train_cmd->add_flag("--check-equivalence", c.check_equivalence,
                      "also train single on the same batches and compare weights; a second single, taking each batch "
                      "in two halves, measures float32 round-off alone");
  train_cmd->add_option("--launch", choice.launch, "threads | procs | mpi: how ranks start (ddp, ddp-mp, pipeline, zero)")
      ->capture_default_str();
  train_cmd->add_option("--comm", choice.comm, "threads | shm | mpi | nccl (default: the launch's own)");
  train_cmd->add_option("--comm-timeout", c.comm_timeout_ms, "ms a rank waits for the others before failing")
      ->capture_default_str();
  train_cmd->add_option("--comm-algo", c.comm_algo, "ring | direct: how the host backends all-reduce")->capture_default_str();
  train_cmd->add_option("--shm-sharing", choice.shm_sharing, "fd_passing | named_file: how processes share memory (--launch procs, --strategy multiprocessing)")->capture_default_str();
  train_cmd->add_option("--bucket-mb", c.bucket_mb, "ddp: gradient bucket cap in MB")->capture_default_str();
  train_cmd->add_option("--first-bucket-mb", c.first_bucket_mb, "ddp: cap of the first bucket in MB")->capture_default_str();
  train_cmd->add_option("--no-sync", c.no_sync, "ddp: all-reduce every K-th backward, accumulate in between")
      ->capture_default_str();
  train_cmd->add_option("--micro-batches", c.micro_batches, "pipeline: chunks per batch")->capture_default_str();
  train_cmd->add_option("--schedule", choice.schedule, "pipeline: gpipe | 1f1b | interleaved | zero-bubble")->capture_default_str();
  train_cmd->add_option("--virtual-stages", c.virtual_stages,
                        "pipeline, --schedule interleaved: chunks of layers per device (V ≥ 2)")
      ->capture_default_str();
  train_cmd->add_option("--zero-stage", c.zero_stage, "zero: 1 shards optimizer state, 2 gradients too, 3 weights too; tensor-parallel: 1 with --dp, over each data-parallel group");
  train_cmd->add_flag("--sequence-parallel", c.sequence_parallel,
                      "tensor-parallel: LayerNorms, dropout and residual adds on T/N positions per rank; all-gather and "
                      "reduce-scatter in place of each all-reduce");
  train_cmd->add_option("--dp", c.dp, "tensor-parallel: data-parallel replicas, each a tensor-parallel group of --devices / --dp")
      ->capture_default_str();
  train_cmd->add_option("--pp", c.pp, "tensor-parallel: pipeline stages, each of the blocks' equal share (3D: --devices = "
                                      "dp · tp · pp; with --micro-batches and --schedule gpipe or 1f1b)")
      ->capture_default_str()
      ->check(at_least(1));
  train_cmd->add_option("--amp", choice.amp, "off | fp16 | bf16: mixed precision (f32 master weights, half compute)")
      ->capture_default_str();
  train_cmd->add_option("--amp-initial-scale", c.amp_initial_scale, "fp16: the dynamic loss scaler's first scale")
      ->capture_default_str();
  train_cmd->add_option("--checkpoint", c.checkpoint_path, "write a checkpoint here");
  train_cmd->add_option("--checkpoint-every", c.checkpoint_every, "steps between checkpoints");
  train_cmd->add_option("--resume", c.resume_path, "continue from this checkpoint");
  std::string predict_profile;
  train_cmd->add_option("--predict", predict_profile, "cpu or cuda: also price this run on PROFILE (`scalelab calibrate`) and "
                                                      "print predicted next to measured, with the error");
  train_cmd->add_flag("--recompute", c.recompute, "activation checkpointing: each transformer block keeps only its input "
                                                  "and recomputes the rest in backward (a GPT)");
  train_cmd->add_option("--dropout", c.dropout, "dropout probability: an MLP's hidden activations, the ConvNet's features "
                                               "before its head, a GPT's embedding output; the mask follows each sample, so "
                                               "every strategy drops what single does")
      ->capture_default_str();
  train_cmd->add_flag("--tf32", c.tf32, "f32 GEMMs as TF32 on the tensor cores (PyTorch's allow_tf32): run so on cuda, "
                                        "priced so on sim where the profile has a TF32 peak; off by default, as PyTorch");
  train_cmd->add_flag("--allow-divergence", c.allow_divergence, "keep training when the loss is nan or infinite "
                                                                "(default: stop with an error naming the step)");

  auto* bench_cmd = app.add_subcommand("bench", "benchmarks that print their bound next to the figure");
  bench_cmd->require_subcommand(1);
  BenchComputeOptions bc;
  auto* compute_cmd = bench_cmd->add_subcommand("compute", "training step time vs its GEMMs alone (OpenBLAS sgemm on cpu, "
                                                            "cuBLAS on cuda), same shapes");
  compute_cmd->add_option("--model", bc.model, "mlp:IN-HIDDEN…-CLASSES, convnet or gpt:L-C-H-T-V (cuda: an MLP)")
      ->capture_default_str();
  compute_cmd->add_option("--batch", bc.batch, "samples a step (0: 512 for an MLP, 64 for the ConvNet, 8 sequences for a GPT)")
      ->capture_default_str()->check(at_least(0));
  compute_cmd->add_option("--device", bc.device, "cpu | cuda (one GPU, as train --strategy single)")->capture_default_str();
  compute_cmd->add_option("--amp", bc.amp, "cuda: off (f32, TF32 off) | bf16 (autocast, f32 master weights)")
      ->capture_default_str();
  compute_cmd->add_option("--steps", bc.steps, "timed steps")->capture_default_str()->check(at_least(1));
  compute_cmd->add_option("--warmup", bc.warmup, "untimed steps first (0: 3 on cpu, 10 on cuda)")
      ->capture_default_str()->check(at_least(0));
  compute_cmd->add_option("--vs", bc.vs, "torch: PyTorch's step of the same model (cpu: on as many threads; cuda: eager "
                                         "on the same GPU; the python: $SCALELAB_PYTHON, else /usr/bin/python3 or "
                                         "PATH's python3, whichever imports torch), same run");
  compute_cmd->add_option("--json", bc.json_path, "write the figures as JSON");

  BenchCommOptions bm;
  auto* comm_cmd = bench_cmd->add_subcommand("comm", "collectives like nccl-tests, next to the memory bound and Open MPI");
  comm_cmd->add_option("--comm", bm.comm, "threads | shm | mpi | nccl")->capture_default_str();
  comm_cmd->add_option("--ranks", bm.ranks, "number of ranks (default 4; mpirun's -np with --comm mpi)");
  comm_cmd->add_option("--op", bm.op, "all_reduce | broadcast | reduce | all_gather | reduce_scatter | scatter | gather | send | barrier")
      ->capture_default_str();
  comm_cmd->add_option("--redop", bm.redop, "sum | avg | max")->capture_default_str();
  comm_cmd->add_option("--dtype", bm.dtype, "f32 | f16 | bf16")->capture_default_str();
  comm_cmd->add_option("--min-bytes", bm.min_bytes, "smallest size, like 1K or 8M (sizes double up to --max-bytes)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  comm_cmd->add_option("--max-bytes", bm.max_bytes, "largest size, like 64M")->transform(CLI::AsSizeValue(false))->capture_default_str();
  comm_cmd->add_option("--iters", bm.iters, "timed calls per size (fewer for large sizes)")->capture_default_str();
  comm_cmd->add_option("--warmup", bm.warmup, "untimed calls per size")->capture_default_str();
  comm_cmd->add_option("--vs", bm.vs, "mpi: Open MPI's collective on the same sizes and ranks, same run; gloo: torch.distributed's");
  comm_cmd->add_option("--device", bm.device, "cpu (measured) | cuda (measured: --comm threads on cuda devices, or nccl) | sim (modelled on --hw)")
      ->capture_default_str();
  comm_cmd->add_option("--hw", bm.hw, "hardware profile for --device sim");
  comm_cmd->add_option("--shm-sharing", bm.shm_sharing, "fd_passing | named_file (--comm shm)")->capture_default_str();
  comm_cmd->add_option("--comm-algo", bm.algorithm, "ring | direct: how the host backends all-reduce")->capture_default_str();
  comm_cmd->add_option("--comm-timeout", bm.timeout_ms, "ms a rank waits for the others before failing")->capture_default_str();
  comm_cmd->add_flag("--quiet", bm.quiet, "no table (JSON only)");
  comm_cmd->add_option("--json", bm.json_path, "write {rows:[...]} as JSON");

  BenchSimOptions bs;
  auto* sim_cmd = bench_cmd->add_subcommand("sim", "dry runs at scale: DDP of a 1e9-parameter MLP on 1024 and 4096 "
                                                   "simulated H100s and GPT-3 on 1024, wall time and peak RSS next to "
                                                   "their budgets");
  sim_cmd->add_option("--devices", bs.devices, "run these device counts instead (repeatable)");
  sim_cmd->add_option("--model", bs.model)->capture_default_str();
  sim_cmd->add_option("--hw", bs.hw, "hardware profile")->capture_default_str();
  sim_cmd->add_option("--steps", bs.steps, "steps per case")->capture_default_str()->check(at_least(1));
  sim_cmd->add_option("--batch-per-device", bs.per_device_batch, "rows per device (the global batch is this × devices)")
      ->capture_default_str()
      ->check(at_least(1));
  sim_cmd->add_option("--json", bs.json_path, "write the figures as JSON");

  TourOptions tour;
  auto* tour_cmd = app.add_subcommand("tour", "every strategy on the same simulated machine, side by side (make demo)");
  tour_cmd->add_option("--hw", tour.hw, "hardware profile")->capture_default_str();
  tour_cmd->add_option("--devices", tour.devices, "devices per strategy")->capture_default_str()->check(at_least(1));
  tour_cmd->add_option("--model", tour.model, "mlp:…, convnet or gpt:L-C-H-T-V")->capture_default_str();
  auto* tour_dataset_opt = tour_cmd->add_option("--dataset", tour.dataset, "fashion-mnist | text | synthetic (a GPT: text unless given)")->capture_default_str();
  tour_cmd->add_option("--batch", tour.batch)->capture_default_str();
  tour_cmd->add_option("--steps", tour.steps)->capture_default_str()->check(at_least(1));
  tour_cmd->add_option("--seed", tour.seed)->check(at_least(0))->capture_default_str();
  tour_cmd->add_option("--out", tour.out_dir, "folder for traces and summaries")->capture_default_str();

  std::string export_checkpoint, export_out;
  auto* export_cmd = app.add_subcommand("export", "a checkpoint's weights and optimizer state as numpy's .npz, with "
                                                  "PyTorch's names (0.weight, 0.bias, 2.weight, …)");
  export_cmd->add_option("checkpoint", export_checkpoint, "a checkpoint written by train --checkpoint")->required();
  export_cmd->add_option("--out", export_out, "the .npz to write")->required();

  ScaleOptions sc;
  bool strong = false;
  auto* scale_cmd = app.add_subcommand("scale", "one strategy dry-run on simulated clusters of growing size: step time, "
                                                "efficiency, communication, memory per device (a table, JSON, an SVG plot)");
  scale_cmd->add_option("--strategy", sc.strategy, "the strategy (see `scalelab strategies`)")->capture_default_str();
  scale_cmd->add_option("--hw", sc.hw, "the hardware profile (see `scalelab profiles`)")->capture_default_str();
  scale_cmd->add_option("--model", sc.model)->capture_default_str();
  scale_cmd->add_option("--devices", sc.devices, "the cluster sizes: 8,16,32 or doubling, 8..4096")->capture_default_str();
  scale_cmd->add_option("--micro-batches", sc.micro_batches, "pipeline: several values (1,2,4 or 1..32) sweep m at one --devices");
  scale_cmd->add_flag("--weak", sc.weak, "keep the batch per device: the global batch grows with N (default)");
  scale_cmd->add_flag("--strong", strong, "keep the global batch");
  scale_cmd->add_option("--batch", sc.batch, "per device (weak) or global (strong)")->capture_default_str()->check(at_least(1));
  scale_cmd->add_option("--steps", sc.steps, "steps per point; the last is reported")->capture_default_str();
  scale_cmd->add_option("--optimizer", sc.optimizer)->capture_default_str();
  scale_cmd->add_option("--zero-stage", sc.zero_stage, "zero: 1, 2 or 3; tensor-parallel: 1 with --dp")->capture_default_str();
  scale_cmd->add_option("--schedule", sc.schedule, "pipeline: gpipe, 1f1b, interleaved or zero-bubble")->capture_default_str();
  scale_cmd->add_option("--virtual-stages", sc.virtual_stages,
                        "pipeline, --schedule interleaved: chunks of layers per device (V ≥ 2)")
      ->capture_default_str();
  scale_cmd->add_option("--amp", sc.amp, "off, fp16 or bf16")->capture_default_str();
  scale_cmd->add_option("--json", sc.json_path, "write the rows as JSON");
  scale_cmd->add_option("--plot", sc.plot_path, "write an SVG: efficiency (or the bubble) and memory per device");

  PlanOptions po;
  auto* plan_cmd = app.add_subcommand("plan", "every way to run a GPT on a cluster (D × T × P, micro-batch, recompute, "
                                              "ZeRO) priced by the cost model, the fastest that fit first; --published: "
                                              "BLOOM-176B and OPT-175B predicted next to their published throughput");
  plan_cmd->add_option("--model", po.model, "a GPT, gpt:L-C-H-T-V (default BLOOM-176B)")->capture_default_str();
  plan_cmd->add_option("--hw", po.hw, "the hardware profile (see `scalelab profiles`)")->capture_default_str();
  plan_cmd->add_option("--devices", po.devices, "the cluster's GPUs")->capture_default_str();
  plan_cmd->add_option("--batch", po.batch, "the global batch, in sequences")->capture_default_str();
  plan_cmd->add_option("--amp", po.amp, "bf16 (gradients kept in f32) or fp16 (in fp16)")->capture_default_str();
  plan_cmd->add_option("--tp", po.tp, "tensor-parallel degrees to try: 1,2,4 (default: those dividing the heads and a node)");
  plan_cmd->add_option("--pp", po.pp, "pipeline degrees to try (default: those dividing the GPUs, up to the blocks)");
  plan_cmd->add_option("--micro-batch", po.micro_batch, "sequences per micro-batch to try (default 1,2,4,8)");
  plan_cmd->add_option("--virtual-stages", po.virtual_stages, "interleaved 1F1B: chunks of blocks per GPU to try, 1,2,4 "
                                                              "(default 1)");
  plan_cmd->add_option("--zero-stage", po.zero, "ZeRO stages to try: 0, 1, 3 (default 1,3)");
  plan_cmd->add_option("--kernel-efficiency", po.kernel_efficiency, "the share of the profile's kernel speed reached "
                                                                    "(0–1; `plan --published` fits it on published runs)")
      ->capture_default_str();
  plan_cmd->add_option("--top", po.top, "rows shown, the fastest first (0: all)")->capture_default_str();
  plan_cmd->add_flag("--published", po.published, "the published runs next to their prediction");
  plan_cmd->add_option("--json", po.json_path, "write the rows as JSON");

  FigureOptions fig;
  auto* figure_cmd = app.add_subcommand("figure", "an SVG chart from scalelab's own JSON next to its formula: bubble "
                                                  "(scale --json of a pipeline), zero-memory (scale --json of ddp, zero "
                                                  "1, 2), busbw (bench comm --json), step-time (scale --json of ddp)");
  figure_cmd->add_option("kind", fig.kind, "bubble | zero-memory | busbw | step-time")->required();
  figure_cmd->add_option("--json", fig.json, "the input file(s)")->required();
  figure_cmd->add_option("--out", fig.out, "the SVG to write")->required();

  GradeCliOptions grade_opts;
  auto* grade_cmd = app.add_subcommand("grade", "build a lab submission and run its checks (labs/): a table, "
                                                "Gradescope's results.json, JUnit XML");
  grade_cmd->add_option("lab", grade_opts.lab, "the lab, e.g. 01-collectives (none: list the labs)");
  grade_cmd->add_option("--submission", grade_opts.submission, "folder (or one file) with the student's files "
                                                               "(default: the lab's own stubs)");
  grade_cmd->add_option("--submissions", grade_opts.class_dir, "a folder of submissions, one sub-folder (or file) per "
                                                               "student: grade them all, write grades.csv");
  grade_cmd->add_option("--out", grade_opts.out_dir, "with --submissions: where each student's results.json, report "
                                                     "and grades.csv go (default grades-LAB)");
  grade_cmd->add_option("--results", grade_opts.results_path, "write Gradescope's results.json here");
  grade_cmd->add_option("--junit", grade_opts.junit_path, "write JUnit XML here");
  grade_cmd->add_flag("--json", grade_opts.json, "print results.json instead of the table");
  grade_cmd->add_flag("--details", grade_opts.details, "the table shows what the passed checks measured too");
  grade_cmd->add_option("--check", grade_opts.only, "run only this check (repeatable)");
  grade_cmd->add_option("--labs-dir", grade_opts.labs_dir, "where the labs are (default: labs/ beside the sources)");
  grade_cmd->add_option("--toolchain", grade_opts.toolchain, "grade-toolchain.txt of a build (default: beside this scalelab)");
  grade_cmd->add_option("--release", grade_opts.release_path, "write the student hand-out (stubs, READMEs, public checks) "
                                                              "to this .tar.gz instead of grading");
  grade_cmd->add_option("--timeout", grade_opts.timeout_s, "seconds: every check's time limit instead of the rubric's "
                                                          "(above 0, at most a day)");
  grade_cmd->add_flag("--keep", grade_opts.keep_scratch, "keep the scratch build folder (its path is printed)");
  grade_cmd->add_flag("--mutants", grade_opts.mutants, "grade the lab's shipped mutants (mutants/*.patch): each must be "
                                                       "caught by the check its header names");
  grade_cmd->add_flag("--mutation-score", grade_opts.mutation_score, "mutate the reference solution automatically "
                                                                     "and report the share the rubric catches, with the survivors");

  CalibrateOptions cal;
  auto* calibrate_cmd = app.add_subcommand("calibrate", "measure this machine (GEMMs by shape, element-wise ops, copies, "
                                                        "hot and cold, its cache, collectives) and write a profile for --device sim --hw FILE");
  calibrate_cmd->add_option("--device", cal.device, "cpu | cuda (the device measured; cuda: the GPU, its collectives on --devices logical devices)")
      ->capture_default_str();
  calibrate_cmd->add_option("--out", cal.out, "the profile to write (default: calibrated-<host>.json here)");
  calibrate_cmd->add_flag("--quick", cal.quick, "a smaller grid, shorter timings (~15 s)");
  bool list_probes = false;
  calibrate_cmd->add_flag("--list", list_probes, "print the probes calibrate runs (what each measures, the profile fields it "
                                                 "writes, on which device) and exit");
  calibrate_cmd->add_option("--devices", cal.devices, "ranks of the threads all-reduce measured (the collectives' α and bandwidth)")
      ->capture_default_str();

  BenchPredictOptions bp;
  auto* predict_cmd = bench_cmd->add_subcommand("predict", "every strategy on the cpu device, measured, next to the cost "
                                                           "model's prediction on a calibrated profile, with the error");
  predict_cmd->add_option("--hw", bp.hw, "profiles of this machine (`scalelab calibrate`; repeatable: "
                                         "each run is priced on every one, side by side)")->required();
  predict_cmd->add_option("--model", bp.models, "models (repeatable; default: the tour's and two larger)");
  predict_cmd->add_option("--devices", bp.devices, "devices per strategy (as its rule allows)")->capture_default_str()->check(at_least(1));
  predict_cmd->add_option("--device", bp.device, "cpu | cuda: the device the strategies are measured on (cuda: logical devices of "
                                                  "the GPU, collectives over the threads backend; price them on a `calibrate --device cuda` profile)")
      ->capture_default_str();
  predict_cmd->add_option("--batch", bp.batch)->capture_default_str()->check(at_least(1));
  predict_cmd->add_option("--steps", bp.steps, "steps per run")->capture_default_str()->check(CLI::Range(3, 100000));
  predict_cmd->add_option("--repeat", bp.repeats, "measured runs per config (the median is compared, the spread shown)")
      ->capture_default_str()->check(CLI::Range(1, 100));
  predict_cmd->add_option("--json", bp.json_path, "write the rows as JSON");
  predict_cmd->add_option("--measured", bp.measured_path,
                          "price the measured runs of a table written before (--json) again, running nothing: a change "
                          "to the cost model, or another calibration, tried on measurements already taken");
  predict_cmd->add_flag("--retime-gemms", bp.retime_gemms,
                        "also price each model on the profiles with their GEMMs re-timed just before its runs (columns P1*, …): "
                        "a shared machine's speed moves between a calibration and the runs");

  std::vector<std::string> repeat_tables;
  auto* repeat_cmd = bench_cmd->add_subcommand("repeat", "how far this machine's measurements repeat: tables of bench predict "
                                                         "(--json), each one's measured step times as the prediction of the others'");
  repeat_cmd->add_option("tables", repeat_tables, "two tables or more, written by `bench predict --json` minutes apart")->required();

  auto* profiles_cmd = app.add_subcommand("profiles", "list the hardware profiles for --device sim");
  auto* strategies_cmd = app.add_subcommand("strategies", "list the strategies");
  auto* models_cmd = app.add_subcommand("models", "list model presets with their parameters and training FLOPs");

  strict_numbers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ConversionError& e) {
    // "Could not convert: --devices = 99999999999" alone does not say why.
    std::cerr << "[cli] " << e.what() << ": not a number of the option's kind, or out of its range (counts are whole "
              << "numbers up to 2147483647) — see `scalelab " << (argc > 1 ? argv[1] : "") << " --help`\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    std::cerr << "[cli] " << e.what() << " — see `scalelab " << (argc > 1 ? argv[1] : "") << " --help`\n";
    return 2;
  }

  try {
    check_paths_not_empty({{train_cmd, {"--hw", "--data-dir", "--init-weights", "--trace", "--json", "--dump-batches",
                                        "--checkpoint", "--resume", "--predict"}},
                           {compute_cmd, {"--json"}},
                           {comm_cmd, {"--json", "--hw"}},
                           {sim_cmd, {"--json", "--hw"}},
                           {tour_cmd, {"--hw", "--out"}},
                           {export_cmd, {"checkpoint", "--out"}},
                           {scale_cmd, {"--hw", "--json", "--plot"}},
                           {figure_cmd, {"--json", "--out"}},
                           {grade_cmd, {"--submission", "--submissions", "--out", "--results", "--junit", "--labs-dir",
                                        "--toolchain", "--release"}},
                           {calibrate_cmd, {"--out"}},
                           {predict_cmd, {"--hw", "--json", "--measured"}},
                           {repeat_cmd, {"tables"}}});
    if (*train_cmd) {
      c.device = parse_device_kind(device_name);
      choice.apply(c);
      if (!trace_steps.empty()) {
        const size_t colon = trace_steps.find(':');
        try {
          if (colon == std::string::npos) throw std::invalid_argument("no colon");
          size_t used_a = 0, used_b = 0;
          c.trace_first_step = std::stoll(trace_steps.substr(0, colon), &used_a);
          c.trace_last_step = std::stoll(trace_steps.substr(colon + 1), &used_b);
          if (used_a != colon || used_b != trace_steps.size() - colon - 1) throw std::invalid_argument("trailing text");
        } catch (const std::exception&) {
          throw UsageError("train", "--trace-steps '" + trace_steps + "': give A:B, e.g. --trace-steps 100:109");
        }
      }
      if (!*lr_opt && c.optimizer.kind == "adam") c.optimizer.lr = 1e-3f;
      if (!*dataset_opt) c.dataset = default_dataset(c.model);
      if ((*betas_opt || *eps_opt) && c.optimizer.kind != "adam")
        throw UsageError("train", "--adam-betas / --adam-eps set Adam's moments — add --optimizer adam, or drop them");
      resolve_strategy_alias(c.strategy, c.zero_stage);
      if (*betas_opt) {
        c.optimizer.beta1 = adam_betas[0];
        c.optimizer.beta2 = adam_betas[1];
      }
      check_given_options(*train_cmd, c);
      EventBus bus;
      // Under mpirun every rank runs this; rank 0 speaks for all.
      const char* mpi_rank = std::getenv("OMPI_COMM_WORLD_RANK");
      const bool speaker = !mpi_rank || std::string(mpi_rank) == "0" || c.launch != Launch::mpi;
      ProgressPrinter printer(quiet || !speaker, c.dry_run);
      if (!predict_profile.empty()) return train_with_prediction(c, predict_profile, [&](const Progress& p) { printer(p); });
      TrainResult r = train(c, bus, [&](const Progress& p) { printer(p); });
      if (!speaker) return 0;
      std::cout << format_summary(r);
      if (!c.trace_path.empty()) std::cout << "  trace           " << c.trace_path << " (open in https://ui.perfetto.dev)\n";
      if (!c.json_path.empty()) std::cout << "  json            " << c.json_path << "\n";
      return 0;
    }
    if (*compute_cmd) return bench_compute(bc);
    if (*predict_cmd) {
      if (!bp.measured_path.empty() && predict_cmd->count("--model") == 0) bp.models.clear();  // the table's
      return bench_predict(bp);
    }
    if (*repeat_cmd) return bench_repeat(repeat_tables);
    if (*calibrate_cmd && list_probes) {
      std::fputs(format_calibration_probes().c_str(), stdout);
      return 0;
    }
    if (*calibrate_cmd) {
      cal.time_collective = [](const CollectiveTiming& t) {
        BenchCommOptions b;
        b.comm = t.comm;
        b.device = t.device;
        b.ranks = t.ranks;
        b.op = t.op;
        b.min_bytes = t.min_bytes;
        b.max_bytes = t.max_bytes;
        b.iters = t.iters;
        b.warmup = t.warmup;
        b.quiet = true;
        b.json_path = t.json_path;
        bench_comm(b);
      };
      return run_calibrate(cal);
    }
    if (*comm_cmd) {
      // 0 would silently become the default 4; a --shm-sharing without --comm shm would be ignored.
      if (comm_cmd->count("--ranks") && bm.ranks == 0)
        throw UsageError("bench", "--ranks 0: a collective needs ≥ 1 rank — pass --ranks N, or leave it out for " +
                                      std::string(bm.comm == "mpi" ? "mpirun's -np" : "4"));
      if (comm_cmd->count("--redop") && bm.op != "all_reduce" && bm.op != "reduce" && bm.op != "reduce_scatter")
        throw UsageError("bench", "--redop " + bm.redop + ": --op " + bm.op + " reduces nothing (it would be ignored) — "
                                      "pass --op all_reduce, reduce or reduce_scatter, or drop --redop");
      for (const char* flag : {"--min-bytes", "--max-bytes", "--dtype"})
        if (comm_cmd->count(flag) && bm.op == "barrier")
          throw UsageError("bench", std::string(flag) + " " + comm_cmd->get_option(flag)->as<std::string>() +
                                        ": --op barrier moves no data (it would be ignored) — drop " + flag);
      if (comm_cmd->count("--comm-algo") && bm.comm != "threads" && bm.comm != "shm")
        throw UsageError("bench", "--comm-algo " + bm.algorithm + " chooses how the host backends (threads, shm) all-reduce; "
                                      "--comm " + bm.comm + " has its own (it would be ignored) — drop --comm-algo");
      if (comm_cmd->count("--shm-sharing") && bm.comm != "shm")
        throw UsageError("bench", "--shm-sharing chooses how --comm shm shares memory; --comm " + bm.comm +
                                      " does not (it would be ignored) — add --comm shm, or drop --shm-sharing");
      return bench_comm(bm);
    }
    if (*sim_cmd) return bench_sim(bs);
    if (*tour_cmd) {
      if (!*tour_dataset_opt) tour.dataset = default_dataset(tour.model);
      return run_tour(tour);
    }
    if (*grade_cmd) {
      if (grade_cmd->count("--timeout") && !(grade_opts.timeout_s > 0 && grade_opts.timeout_s <= 86400))
        throw UsageError("grade", "--timeout " + grade_cmd->get_option("--timeout")->as<std::string>() +
                                      ": a check's time limit in seconds is above 0 and at most a day (86400) — pass "
                                      "e.g. --timeout 60, or leave it out for the rubric's");
      return run_grade(grade_opts);
    }
    if (*export_cmd) {
      check_distinct_paths({{"checkpoint", export_checkpoint, false}, {"--out", export_out, true}}, "export");
      const Checkpoint ck = load_checkpoint(export_checkpoint);
      const std::vector<NpzArray> arrays = export_arrays(ck);
      write_npz(export_out, arrays);
      std::printf("[export] %s: %s at step %lld, %zu arrays (weights and %s state) → %s\n", export_checkpoint.c_str(),
                  ck.header.model.c_str(), static_cast<long long>(ck.header.step), arrays.size(),
                  ck.header.optimizer.kind.c_str(), export_out.c_str());
      return 0;
    }
    if (*figure_cmd) return run_figure(fig);
    if (*scale_cmd) {
      if (strong && scale_cmd->count("--weak")) throw UsageError("scale", "--weak and --strong: choose one");
      // As train: an option the strategy does not take is refused, not ignored.
      if (sc.strategy == "fsdp" && !scale_cmd->count("--zero-stage")) sc.zero_stage = 3;
      // The default stage is zero's; tensor-parallel shards nothing unless --zero-stage 1 is given.
      if (sc.strategy != "zero" && sc.strategy != "fsdp" && !scale_cmd->count("--zero-stage")) sc.zero_stage = 0;
      resolve_strategy_alias(sc.strategy, sc.zero_stage);
      const StrategyInfo& info = find_strategy(sc.strategy);
      const std::pair<const char*, StrategyOption> flags[] = {{"--micro-batches", StrategyOption::micro_batches},
                                                              {"--schedule", StrategyOption::schedule},
                                                              {"--virtual-stages", StrategyOption::schedule},
                                                              {"--zero-stage", StrategyOption::zero_stage},
                                                              {"--amp", StrategyOption::amp}};
      for (const auto& [flag, option] : flags)
        if (scale_cmd->count(flag))
          info.check_takes(option, std::string(flag) + " " + scale_cmd->get_option(flag)->as<std::string>());
      sc.weak = !strong;
      return run_scale(sc);
    }
    if (*plan_cmd) return run_plan(po);
    if (*profiles_cmd) {
      for (const auto& name : list_profiles()) {
        HardwareProfile p = load_profile(name);
        std::printf("%-18s %4d × %-26s %s\n", name.c_str(), p.device_count(), p.device_model.c_str(), p.description.c_str());
      }
      return 0;
    }
    if (*strategies_cmd) {
      std::fputs(describe_strategies().c_str(), stdout);
      return 0;
    }
    if (*models_cmd) {
      // FLOPs per token for a GPT are 6·P + 12·L·C·T (PaLM's count, what MFU is taken with).
      std::printf("%-28s %8s %7s %14s  %s\n", "model", "params", "layers", "train FLOPs", "");
      for (const ModelPreset& preset : model_presets()) {
        const ModelSpec spec = ModelSpec::parse(preset.spec);
        const bool gpt = spec.family == ModelFamily::gpt;
        const double flops = spec.train_flops_per_sample() / (gpt ? static_cast<double>(spec.tokens_per_sample()) : 1.0);
        std::printf("%-28s %8.3g %7d %9.3g/%-4s  %s\n", preset.spec, static_cast<double>(spec.parameter_count()),
                    spec.layer_count(), flops, gpt ? "tok" : "img", preset.what);
      }
      return 0;
    }
  } catch (const UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << kOutOfHostMemory << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) { return scalelab::main_within_limits(argc, argv, run_main); }
