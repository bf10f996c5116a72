#pragma once
// `scalelab plan`: what a 3D run of a GPT — D data-parallel replicas × T tensor-parallel shards ×
// P pipeline stages, ZeRO over the replicas — would cost on a cluster, priced op by op by the
// simulator's cost model, the way Megatron-LM and DeepSpeed run it (docs/planning.md):
//
//   per block and micro-batch, on one rank: the GEMMs of qkv, attention (Q·Kᵀ, P·V), proj, fc
//   and mlp.proj with T's shapes; the element-wise passes (2 LayerNorms, scale-mask-softmax,
//   bias-GeLU, 2 bias-add-residuals, fused as Megatron fuses them, 16-bit); TP's 2 all-reduces
//   forward and 2 backward of b·s·h values over the tensor group's placement. Backward is twice
//   the GEMMs and twice the element-wise bytes; --recompute runs the forward once more.
//   The embedding (vocabulary-parallel: a lookup and an all-reduce) on the first stage, the
//   head (vocabulary-parallel: a GEMM of V/T columns and the cross-entropy's passes) on the last.
//   A step: 1F1B's (m + P − 1) slots of the slowest stage's forward + backward (interleaved with
//   V chunks per GPU: m·V + P − 1 slots of 1/V of it, Narayanan et al. 2021), each with its
//   activation send to the next stage and gradient send back (1/T of them per rank, then an
//   all-gather inside the tensor group, as Megatron's scatter-gather does); then the gradients
//   over the data-parallel group (ZeRO 0: all-reduce; 1: reduce-scatter + all-gather of the
//   16-bit weights; 3: per block, gathered before its forward and its backward and reduce-
//   scattered after, each hidden under the block's compute where it is shorter) and Adam on the
//   rank's share.
//
// Not priced: dropout, the tied embedding's all-reduce between the first and last stage,
// the optimizer's gradient clipping and norms, host overheads between kernels.
#include <cstdint>
#include <string>
#include <vector>

#include "core/device/sim/profile.h"
#include "core/nn/model.h"

namespace scalelab {

// What is trained: a GPT, the global batch, and how its numbers are kept.
struct PlanWorkload {
  ModelSpec model;               // a GPT
  int64_t global_batch = 0;      // sequences per optimizer step
  DType compute = DType::bf16;   // weights, activations and the GEMMs: bf16 or f16
  int grad_bytes = 4;            // a gradient's bytes as accumulated and reduced (4: f32, 2: 16-bit)
  int optimizer_bytes = 12;      // per parameter: the f32 master copy and Adam's two moments
  int gather_bytes = 0;          // a weight's bytes in ZeRO's all-gathers; 0: the compute dtype's
                                 // (Megatron, FSDP); 4 where each rank keeps f32 weights (ours)
  // The share of the profile's kernel speed (its GEMM curves, its memory bandwidth) the framework
  // reaches: 1 prices the kernels as the profile does. Published runs lose more than the ops
  // alone account for (launches, unfused and small kernels, the host between them); fitted on one
  // run, fit_kernel_efficiency() carries that loss to another (docs/planning.md).
  double kernel_efficiency = 1.0;
};

// One way to run it.
struct PlanConfig {
  int dp = 1, tp = 1, pp = 1;
  int64_t micro_batch = 1;  // sequences per micro-batch
  bool recompute = false;   // full activation recomputation: each block keeps its input alone
  int zero_stage = 1;       // over the data-parallel group: 0, 1 or 3 (3 with pp 1 only)
  int virtual_stages = 1;   // interleaved 1F1B: chunks of blocks per GPU (V ≥ 2 needs P ≥ 2)
  bool operator==(const PlanConfig&) const = default;
};

// Bytes per GPU, the fullest stage's.
struct PlanMemory {
  double weights = 0, grads = 0, optimizer = 0, activations = 0;
  double total() const { return weights + grads + optimizer + activations; }
};

struct PlanRow {
  PlanConfig config;
  std::string invalid;        // why the configuration cannot run (then nothing else is set)
  int64_t micro_batches = 0;  // per replica per step
  int layers_per_stage = 0;   // the fullest stage's blocks
  double step_s = 0;
  // Where the step goes (seconds of the step): the slowest stage's compute of its micro-batches,
  // TP's all-reduces, the pipeline's sends, the bubble, the data-parallel reduction and the
  // optimizer (ZeRO-3's gathers hidden under compute are not counted).
  double compute_s = 0, tp_comm_s = 0, pp_comm_s = 0, bubble_s = 0, dp_comm_s = 0, optimizer_s = 0;
  double tflops_per_gpu = 0;  // Megatron's count (with recompute, its extra forward), per second
  double mfu = 0;             // 6 · weights that multiply · tokens / (step · GPUs · peak)
  PlanMemory memory;
  bool fits = false;          // memory.total() ≤ the device's memory
};

// Prices one configuration on `profile` (reshaped to the configuration's GPUs where it has fewer
// or more: whole nodes of the same kind). Never throws for a configuration that cannot run: the
// row says why (`invalid`).
PlanRow price_plan(const PlanWorkload& work, const PlanConfig& config, const HardwareProfile& profile);

// Megatron-LM's FLOPs of one step (Narayanan et al. 2021, eq. 3): 24·k·B·s·L·h²·(1 + s/6h +
// V/16Lh), k = 4 with recomputation (a second forward), 3 without. BLOOM's and OPT's published
// TFLOP/s count so.
double megatron_step_flops(const PlanWorkload& work, bool recompute);

// Every configuration of `devices` GPUs: D·T·P = devices, T dividing the heads and a node's GPUs,
// P at most the blocks, micro-batches from `micro_batches`, recompute off and on, ZeRO stages from
// `zero_stages`; sorted by step time, the ones that fit first.
struct PlanSweep {
  std::vector<int64_t> micro_batches = {1, 2, 4, 8};
  std::vector<int> zero_stages = {1, 3};
  std::vector<int> virtual_stages = {1};
  std::vector<int> tp;  // empty: every T that divides the heads and a node's GPUs
  std::vector<int> pp;  // empty: every P that divides the devices and is at most the blocks
};
std::vector<PlanRow> plan_sweep(const PlanWorkload& work, int devices, const HardwareProfile& profile,
                                const PlanSweep& sweep);

// A published training run, its configuration as its authors give it and the throughput they
// report (docs/planning.md cites each figure).
struct PublishedRun {
  std::string name, model, profile;
  int devices = 0;
  PlanWorkload work;
  PlanConfig config;
  double published_tflops = 0;  // per GPU, Megatron's count
  std::string source;
};
const std::vector<PublishedRun>& published_runs();

// The kernel_efficiency at which `run`'s prediction equals its published TFLOP/s (bisection;
// communication is not scaled).
double fit_kernel_efficiency(const PublishedRun& run);

// The rows as a table (the columns `scalelab plan` prints).
std::string plan_table(const std::vector<PlanRow>& rows);

}  // namespace scalelab
