// `scalelab plan`: a 3D run of a GPT priced op by op by the cost model (run/plan.h says what is
// priced and what is not; docs/planning.md walks through BLOOM-176B).
#include "run/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/device/sim/cost_model.h"
#include "core/error.h"

namespace scalelab {
namespace {

// The shapes of one rank's share of a micro-batch: b sequences of s tokens, hidden h, a heads,
// vocabulary V, split T ways.
struct Shapes {
  double b, s, h, a, V, T, e;  // e: bytes of a 16-bit value
  double tokens() const { return b * s; }
  double heads_here() const { return a / T; }
};

class Pricer {
 public:
  Pricer(const HardwareProfile& profile, DType compute, double kernel_efficiency)
      : cm_(profile), compute_(compute), efficiency_(kernel_efficiency) {}

  double gemm(double m, double n, double k) const {
    OpCost c;
    c.cls = OpClass::gemm;
    c.flops = 2 * m * n * k;
    c.m = m, c.n = n, c.k = k;
    c.dtype = compute_;
    c.bytes = (m * k + k * n + m * n) * static_cast<double>(dtype_size(compute_));
    return cm_.seconds(c) / efficiency_;
  }
  double elementwise(double bytes) const {
    OpCost c;
    c.cls = OpClass::elementwise;
    c.bytes = bytes;
    c.dtype = compute_;
    return cm_.seconds(c) / efficiency_;
  }
  double collective(Collective op, double bytes, int n, RankPlacement where, bool crosses_nodes = false) const {
    if (n <= 1 && op != Collective::send) return 0;
    return cm_.collective_seconds(op, bytes, n, where, crosses_nodes);
  }
  const CostModel& model() const { return cm_; }

 private:
  CostModel cm_;
  DType compute_;
  double efficiency_;
};

// Where the members of a group sit: the fullest node's count, and the nodes.
RankPlacement placement_of(const std::vector<int>& ranks, int per_node) {
  std::map<int, int> on_node;
  for (int r : ranks) ++on_node[r / per_node];
  RankPlacement p;
  p.nodes = static_cast<int>(on_node.size());
  p.per_node = 0;
  for (const auto& [node, count] : on_node) p.per_node = std::max(p.per_node, count);
  return p;
}

// Megatron's layout (core/comm/parallel_layout.h): rank = pp·(D·T) + dp·T + tp.
std::vector<int> tp_group_of_rank0(const PlanConfig& c) {
  std::vector<int> g;
  for (int t = 0; t < c.tp; ++t) g.push_back(t);
  return g;
}
std::vector<int> dp_group_of_rank0(const PlanConfig& c) {
  std::vector<int> g;
  for (int d = 0; d < c.dp; ++d) g.push_back(d * c.tp);
  return g;
}

// One block's forward and backward, on one rank, for one micro-batch.
struct BlockTimes {
  double forward = 0, backward = 0;        // compute alone
  double tp_forward = 0, tp_backward = 0;  // TP's all-reduces
};

BlockTimes price_block(const Pricer& p, const Shapes& x, RankPlacement tp_where) {
  const double n = x.tokens(), h = x.h, T = x.T, e = x.e;
  const double hd = h / x.a, batched = x.b * x.heads_here();
  // The GEMMs: qkv (column-parallel), Q·Kᵀ and P·V per head (priced as one GEMM of the heads'
  // rows stacked), proj (row-parallel), fc (column-parallel), mlp.proj (row-parallel).
  const double gemms = p.gemm(n, 3 * h / T, h) + p.gemm(batched * x.s, x.s, hd) + p.gemm(batched * x.s, hd, x.s) +
                       p.gemm(n, h, h / T) + p.gemm(n, 4 * h / T, h) + p.gemm(n, h, 4 * h / T);
  // The passes over memory, reads and writes, fused as Megatron fuses them: two LayerNorms, the
  // scale-mask-softmax over the scores, bias + GeLU, two bias + residual adds.
  const double passes = 2 * p.elementwise(2 * n * h * e) + p.elementwise(2 * batched * x.s * x.s * e) +
                        p.elementwise(2 * n * 4 * h / T * e) + 2 * p.elementwise(3 * n * h * e);
  BlockTimes t;
  t.forward = gemms + passes;
  t.backward = 2 * gemms + 2 * passes;  // each GEMM's two (dX, dW); each pass reads its input and gradient
  const double all_reduce = p.collective(Collective::all_reduce, n * h * e, static_cast<int>(T), tp_where);
  t.tp_forward = 2 * all_reduce;  // g after attention's proj and after mlp.proj
  t.tp_backward = 2 * all_reduce;  // f before qkv and before fc
  return t;
}

// The weights of one block, and of the vocabulary-parallel embedding (tied to the head), per rank.
double block_params(const Shapes& x) {
  return 12 * x.h * x.h / x.T + (3 * x.h + 4 * x.h) / x.T + 2 * x.h + 4 * x.h;
}
double embedding_params(const Shapes& x) { return x.V * x.h / x.T + x.s * x.h; }

std::string check_config(const PlanWorkload& w, const PlanConfig& c, const HardwareProfile& profile) {
  const GptShape& g = w.model.gpt;
  auto str = [](auto v) { return std::to_string(v); };
  if (c.dp < 1 || c.tp < 1 || c.pp < 1 || c.micro_batch < 1) return "every degree and the micro-batch must be ≥ 1";
  if (g.heads % c.tp != 0) return "T " + str(c.tp) + " does not divide the " + str(g.heads) + " heads";
  if (g.hidden % c.tp != 0) return "T " + str(c.tp) + " does not divide the hidden size " + str(g.hidden);
  if (c.tp > profile.devices_per_node || profile.devices_per_node % c.tp != 0)
    return "T " + str(c.tp) + " does not divide a node's " + str(profile.devices_per_node) + " GPUs";
  if (c.pp > g.layers) return "P " + str(c.pp) + " exceeds the " + str(g.layers) + " blocks";
  if (w.global_batch % (c.dp * c.micro_batch) != 0)
    return "D · micro-batch = " + str(c.dp * c.micro_batch) + " does not divide the global batch " + str(w.global_batch);
  if (c.zero_stage != 0 && c.zero_stage != 1 && c.zero_stage != 3) return "ZeRO stage " + str(c.zero_stage) + " (0, 1 or 3)";
  if (c.zero_stage == 3 && c.pp > 1) return "ZeRO-3 with a pipeline (FSDP runs with P = 1)";
  if (c.virtual_stages < 1) return "V " + str(c.virtual_stages) + " (chunks per GPU, ≥ 1)";
  if (c.virtual_stages > 1) {
    if (c.pp < 2) return "V " + str(c.virtual_stages) + " interleaves a pipeline: it needs P ≥ 2";
    if (g.layers % (c.pp * c.virtual_stages) != 0)
      return "P · V = " + str(c.pp * c.virtual_stages) + " does not divide the " + str(g.layers) + " blocks";
    if ((w.global_batch / (c.dp * c.micro_batch)) % c.pp != 0)
      return "interleaving needs the micro-batches per replica to be a multiple of P " + str(c.pp);
  }
  return "";
}

}  // namespace

double megatron_step_flops(const PlanWorkload& w, bool recompute) {
  const GptShape& g = w.model.gpt;
  const double B = static_cast<double>(w.global_batch), s = static_cast<double>(g.context),
               L = static_cast<double>(g.layers), h = static_cast<double>(g.hidden), V = static_cast<double>(g.vocab);
  const double k = recompute ? 4 : 3;
  return 24 * k * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
}

PlanRow price_plan(const PlanWorkload& w, const PlanConfig& c, const HardwareProfile& given) {
  PlanRow row;
  row.config = c;
  if (w.model.family != ModelFamily::gpt) throw UsageError("plan", "--model " + w.model.text + " is not a GPT — plan prices gpt:L-C-H-T-V");
  if (w.compute != DType::bf16 && w.compute != DType::f16)
    throw UsageError("plan", "plan prices 16-bit training (bf16 or f16), not " + std::string(dtype_name(w.compute)));
  if (!(w.kernel_efficiency > 0 && w.kernel_efficiency <= 1))
    throw UsageError("plan", "kernel efficiency " + std::to_string(w.kernel_efficiency) + " must lie in (0, 1]");
  row.invalid = check_config(w, c, given);
  if (!row.invalid.empty()) return row;

  const int world = c.dp * c.tp * c.pp;
  const int per_node = given.devices_per_node;
  const HardwareProfile profile =
      world == given.device_count() ? given : reshaped(given, (world + per_node - 1) / per_node, per_node);
  const Pricer p(profile, w.compute, w.kernel_efficiency);
  const GptShape& g = w.model.gpt;
  const Shapes x{static_cast<double>(c.micro_batch), static_cast<double>(g.context), static_cast<double>(g.hidden),
                 static_cast<double>(g.heads),       static_cast<double>(g.vocab),   static_cast<double>(c.tp),
                 static_cast<double>(dtype_size(w.compute))};
  const RankPlacement tp_where = placement_of(tp_group_of_rank0(c), per_node);
  const RankPlacement dp_where = placement_of(dp_group_of_rank0(c), per_node);

  // The stages: L/P blocks each, the odd ones on the middle stages (the ends hold the embedding
  // and the head besides).
  const int m = static_cast<int>(w.global_batch / (c.dp * c.micro_batch));
  row.micro_batches = m;
  const int base = static_cast<int>(g.layers / c.pp), extra = static_cast<int>(g.layers % c.pp);
  auto blocks_on = [&](int stage) {
    if (c.pp == 1) return static_cast<int>(g.layers);
    const int middle = c.pp - 2;  // stages 1 … P−2 take the extra blocks first
    const int to_middle = std::min(extra, middle);
    if (stage > 0 && stage < c.pp - 1) return base + (stage - 1 < to_middle ? 1 : 0);
    const int left = extra - to_middle;  // 0, 1 or 2: then the ends take one each
    return base + (stage == 0 ? (left > 0 ? 1 : 0) : (left > 1 ? 1 : 0));
  };

  const BlockTimes block = price_block(p, x, tp_where);
  const double n = x.tokens(), e = x.e;
  // The embedding: a lookup of this rank's vocabulary rows and an all-reduce of b·s·h; backward
  // the rows' gradient added in.
  const double embed_tp = p.collective(Collective::all_reduce, n * x.h * e, c.tp, tp_where);
  const double embed_f = p.elementwise(2 * n * x.h * e) + embed_tp;
  const double embed_b = p.elementwise(2 * n * x.h * e);
  // The head: logits for V/T of the vocabulary, the cross-entropy's passes over them in f32 and
  // its three all-reduces of a value per token (the max, the sum, the target's logit).
  const double head_gemm = p.gemm(n, x.V / x.T, x.h);
  const double head_ce = p.elementwise(3 * n * x.V / x.T * 4);
  const double head_tp = 3 * p.collective(Collective::all_reduce, n * 4, c.tp, tp_where);
  const double head_f = head_gemm + head_ce + head_tp;
  const double head_b = 2 * head_gemm + head_ce;

  // One stage's forward and backward of one micro-batch (with --recompute its forward again).
  struct Stage {
    double f = 0, b = 0, tp = 0;
  };
  auto stage_times = [&](int s) {
    const double L = blocks_on(s);
    Stage t;
    t.f = L * (block.forward + block.tp_forward);
    t.b = L * (block.backward + block.tp_backward + (c.recompute ? block.forward + block.tp_forward : 0));
    t.tp = L * (block.tp_forward + block.tp_backward + (c.recompute ? block.tp_forward : 0));
    if (s == 0) t.f += embed_f, t.b += embed_b, t.tp += embed_tp;
    if (s == c.pp - 1) t.f += head_f, t.b += head_b, t.tp += head_tp;
    return t;
  };
  Stage slowest;
  for (int s = 0; s < c.pp; ++s) {
    const Stage t = stage_times(s);
    if (t.f + t.b > slowest.f + slowest.b) slowest = t;
    row.layers_per_stage = std::max(row.layers_per_stage, blocks_on(s));
  }

  // The pipeline's sends: each rank sends 1/T of the b·s·h activations to the next stage's rank of
  // its shard, which all-gathers them inside its tensor group (and the gradient back the same way).
  // Stage s's rank r sends to rank r + D·T: on a cluster of more than one node, some boundary's
  // pair lies on two nodes, and the slowest boundary paces the pipeline.
  double p2p = 0;
  if (c.pp > 1) {
    const bool crosses = world > per_node;
    p2p = p.collective(Collective::send, n * x.h * e / x.T, 2, RankPlacement{1, crosses ? 2 : 1}, crosses) +
          p.collective(Collective::all_gather, n * x.h * e, c.tp, tp_where);
  }
  // 1F1B: m + P − 1 slots of the slowest stage's forward and backward; the P − 1 beyond m are the
  // bubble. Each slot waits on its two sends. Interleaved, each GPU holds V chunks of 1/V of its
  // blocks: m·V + P − 1 slots of a chunk's work, so the bubble is V times smaller, and V times as
  // many sends.
  const double V = c.virtual_stages;
  const double slot = (slowest.f + slowest.b) / V + 2 * p2p;
  const double pipeline = (m * V + c.pp - 1) * slot;
  row.bubble_s = (c.pp - 1) * slot;
  row.pp_comm_s = m * V * 2 * p2p;
  row.tp_comm_s = m * slowest.tp;
  row.compute_s = m * (slowest.f + slowest.b) - row.tp_comm_s;

  // The data-parallel group's gradients, after the pipeline's flush, and Adam on this rank's share.
  // (The head is tied to the embedding: with P = 1 one copy; else the first and last stage each hold one.)
  const double stage_params = row.layers_per_stage * block_params(x) + embedding_params(x);
  const double D = c.dp;
  double dp_comm = 0, zero3_exposed = 0;
  const double gathered = w.gather_bytes > 0 ? w.gather_bytes : e;  // a weight's bytes in an all-gather
  if (c.zero_stage == 0) {
    dp_comm = p.collective(Collective::all_reduce, stage_params * w.grad_bytes, c.dp, dp_where);
  } else if (c.zero_stage == 1) {
    dp_comm = p.collective(Collective::reduce_scatter, stage_params * w.grad_bytes, c.dp, dp_where) +
              p.collective(Collective::all_gather, stage_params * gathered, c.dp, dp_where);
  } else {
    // ZeRO-3 / FSDP: per block and micro-batch, an all-gather of its 16-bit weights before the
    // forward and again before the backward, a reduce-scatter of its gradient after; prefetched,
    // each is hidden under the block's compute where it is the shorter.
    const double gather = p.collective(Collective::all_gather, block_params(x) * gathered, c.dp, dp_where);
    const double scatter = p.collective(Collective::reduce_scatter, block_params(x) * w.grad_bytes, c.dp, dp_where);
    const double f = block.forward + block.tp_forward;
    const double b = block.backward + block.tp_backward + (c.recompute ? f : 0);
    zero3_exposed = g.layers * m * (std::max(0.0, gather - f) + std::max(0.0, gather + scatter - b));
    dp_comm = zero3_exposed;
  }
  row.dp_comm_s = dp_comm;
  const double shard = c.zero_stage >= 1 ? stage_params / D : stage_params;
  // Adam on f32 masters: read and write the master, m and v (24 bytes), read the gradient, write
  // the 16-bit weight.
  row.optimizer_s = p.elementwise(shard * (24 + w.grad_bytes + e));
  row.step_s = pipeline + dp_comm + row.optimizer_s;

  row.tflops_per_gpu = megatron_step_flops(w, c.recompute) / (row.step_s * world) / 1e12;
  const double multiplying = 12.0 * g.layers * g.hidden * g.hidden + static_cast<double>(g.vocab) * g.hidden;
  row.mfu = 6 * multiplying * static_cast<double>(w.global_batch * g.context) /
            (row.step_s * world * profile.peak_flops(w.compute));

  // Memory of the fullest stage's rank: 16-bit weights, gradients as accumulated, the optimizer's
  // f32 state (ZeRO-1: 1/D; ZeRO-3: all three 1/D, plus two blocks gathered whole).
  PlanMemory& mem = row.memory;
  mem.weights = stage_params * e;
  mem.grads = stage_params * w.grad_bytes;
  mem.optimizer = stage_params * w.optimizer_bytes / (c.zero_stage >= 1 ? D : 1);
  if (c.zero_stage == 3) {
    mem.weights = stage_params * e / D + 2 * block_params(x) * e;
    mem.grads = stage_params * w.grad_bytes / D + 2 * block_params(x) * w.grad_bytes;
  }
  // Activations (Korthikanti et al. 2022, with tensor parallelism): per block and micro-batch
  // s·b·h·(10 + 24/T) + 5·a·s²·b/T bytes; 1F1B keeps min(P, m) micro-batches in flight on stage 0.
  // With recomputation a block keeps its input alone (2·s·b·h), and one block's full set lives
  // again during its backward.
  const double full_block = x.s * x.b * x.h * (10 + 24 / x.T) + 5 * x.a * x.s * x.s * x.b / x.T;
  // Interleaved: (1 + (P − 1)/(P·V)) times as many in flight (Korthikanti et al. 2022, §4.2.3).
  const double in_flight = std::min<double>(c.pp, m) * (V > 1 ? 1 + (c.pp - 1) / (c.pp * V) : 1);
  const double kept = c.recompute ? 2 * x.s * x.b * x.h : full_block;
  const double logits = 2 * n * x.V / x.T * 4;  // the head's f32 logits and their gradient
  mem.activations = row.layers_per_stage * kept * in_flight + (c.recompute ? full_block : 0) + (c.pp == 1 ? logits : 0);
  if (c.pp > 1) mem.activations = std::max(mem.activations, blocks_on(c.pp - 1) * kept + logits);
  row.fits = mem.total() <= static_cast<double>(profile.mem_capacity_bytes);
  return row;
}

std::vector<PlanRow> plan_sweep(const PlanWorkload& w, int devices, const HardwareProfile& profile, const PlanSweep& sweep) {
  const GptShape& g = w.model.gpt;
  std::vector<int> tps = sweep.tp, pps = sweep.pp;
  if (tps.empty())
    for (int t = 1; t <= profile.devices_per_node; t *= 2)
      if (g.heads % t == 0) tps.push_back(t);
  if (pps.empty())
    for (int q = 1; q <= std::min<int64_t>(devices, g.layers); ++q)
      if (devices % q == 0) pps.push_back(q);
  std::vector<PlanRow> rows;
  for (int t : tps)
    for (int q : pps) {
      if (devices % (t * q) != 0) continue;
      for (int64_t mb : sweep.micro_batches)
        for (bool recompute : {false, true})
          for (int z : sweep.zero_stages)
            for (int v : sweep.virtual_stages) {
              if (v > 1 && q == 1) continue;
              const PlanConfig c{devices / (t * q), t, q, mb, recompute, z, v};
              PlanRow r = price_plan(w, c, profile);
              if (r.invalid.empty()) rows.push_back(std::move(r));
            }
    }
  std::stable_sort(rows.begin(), rows.end(), [](const PlanRow& a, const PlanRow& b) {
    if (a.fits != b.fits) return a.fits;
    return a.step_s < b.step_s;
  });
  return rows;
}

const std::vector<PublishedRun>& published_runs() {
  static const std::vector<PublishedRun> runs = [] {
    std::vector<PublishedRun> r;
    {
      PublishedRun bloom;
      bloom.name = "BLOOM-176B";
      bloom.model = "gpt:70-14336-112-2048-250880";
      bloom.profile = "a100-80gb-opa-48x8";
      bloom.devices = 384;
      bloom.work.model = ModelSpec::parse(bloom.model);
      bloom.work.global_batch = 2048;
      bloom.work.compute = DType::bf16;
      bloom.work.grad_bytes = 4;  // DeepSpeed's BF16_Optimizer accumulates and reduces in f32
      bloom.config = PlanConfig{8, 4, 12, 2, true, 1};
      bloom.published_tflops = 150;
      bloom.source = "BigScience, \"BigScience 176B Model\" (training throughput about 150 TFLOPs); HF blog \"The Technology Behind BLOOM Training\" (TP 4, PP 12, DP 8, micro-batch 2, ZeRO-1, BF16)";
      r.push_back(std::move(bloom));
    }
    {
      PublishedRun opt;
      opt.name = "OPT-175B";
      opt.model = "gpt:96-12288-96-2048-50272";
      opt.profile = "a100-80gb-ib-124x8";
      opt.devices = 992;
      opt.work.model = ModelSpec::parse(opt.model);
      opt.work.global_batch = 992;  // 2M tokens a step: 8 sequences of 2048 per replica, 124 replicas
      opt.work.compute = DType::f16;
      opt.work.grad_bytes = 2;      // FSDP reduce-scatters the fp16 gradients
      opt.config = PlanConfig{124, 8, 1, 8, true, 3};
      opt.published_tflops = 147;
      opt.source = "Zhang et al. 2022, OPT (arXiv 2205.01068) §2.4: 992 A100 80GB, FSDP with Megatron-LM tensor parallelism, up to 147 TFLOP/s per GPU";
      r.push_back(std::move(opt));
    }
    return r;
  }();
  return runs;
}

double fit_kernel_efficiency(const PublishedRun& run) {
  const HardwareProfile profile = load_profile(run.profile);
  PlanWorkload w = run.work;
  double lo = 0.05, hi = 1.0;  // the prediction grows with the efficiency
  for (int i = 0; i < 50; ++i) {
    w.kernel_efficiency = (lo + hi) / 2;
    const PlanRow r = price_plan(w, run.config, profile);
    (r.tflops_per_gpu > run.published_tflops ? hi : lo) = w.kernel_efficiency;
  }
  return (lo + hi) / 2;
}

std::string plan_table(const std::vector<PlanRow>& rows) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%4s %3s %3s %2s %4s %5s %4s %4s %9s %8s %6s %7s %6s %6s %6s %9s %4s\n", "D", "T", "P", "V", "mb",
                "m", "rec", "ZeRO", "step", "TFLOP/s", "MFU", "bubble", "TP", "PP", "DP", "GiB/GPU", "fits");
  out += line;
  const double gib = 1024.0 * 1024 * 1024;
  for (const PlanRow& r : rows) {
    const PlanConfig& c = r.config;
    if (!r.invalid.empty()) {
      std::snprintf(line, sizeof line, "%4d %3d %3d %4lld  cannot run: %s\n", c.dp, c.tp, c.pp,
                    static_cast<long long>(c.micro_batch), r.invalid.c_str());
      out += line;
      continue;
    }
    auto share = [&](double s) { return 100 * s / r.step_s; };
    char step[32];
    if (r.step_s >= 1) std::snprintf(step, sizeof step, "%.2f s", r.step_s);
    else std::snprintf(step, sizeof step, "%.1f ms", 1e3 * r.step_s);
    std::snprintf(line, sizeof line, "%4d %3d %3d %2d %4lld %5lld %4s %4d %9s %8.1f %5.1f%% %6.1f%% %5.1f%% %5.1f%% %5.1f%% %9.1f %4s\n",
                  c.dp, c.tp, c.pp, c.virtual_stages, static_cast<long long>(c.micro_batch),
                  static_cast<long long>(r.micro_batches),
                  c.recompute ? "yes" : "no", c.zero_stage, step, r.tflops_per_gpu, 100 * r.mfu, share(r.bubble_s),
                  share(r.tp_comm_s), share(r.pp_comm_s), share(r.dp_comm_s), r.memory.total() / gib, r.fits ? "yes" : "NO");
    out += line;
  }
  return out;
}

}  // namespace scalelab
