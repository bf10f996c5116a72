// tensor-parallel: Megatron-LM's tensor model parallelism (Shoeybi et al. 2019, §3) for the GPT.
// Every rank sees the WHOLE batch; what is split is each transformer block's weights, so that N
// devices share every GEMM of a block instead of holding whole layers (pipeline) or whole copies
// (ddp).
//
// The MLP, Y = GeLU(X·A) then Z = Y·B (paper eq. 3): split A by its columns (output features)
// and every rank computes GeLU(X·A_r) on its own — GeLU is element-wise, so no communication is
// needed before it. Split B by its rows (input features): rank r's Y_r·B_r is a PARTIAL sum of Z,
// and one all-reduce adds the N partials. Attention the same way: the heads are independent, so
// rank r holds heads [r·H/N, (r+1)·H/N) of q, k and v (the qkv columns of those heads), runs
// attention on them alone, and the output projection is split by rows, then all-reduced.
// ("Columns" and "rows" are of A in X·A; our weights are out × in, A transposed, so a column-
// parallel layer holds rows of its weight and a row-parallel one columns.)
//
// Two operators mark where the ranks talk (the paper's figure 3):
//
//   f  before a column-parallel layer: forward the identity (every rank already holds the same
//      LayerNorm output); backward an all-reduce — each rank's qkv or fc gives only its part of
//      the gradient of that shared input, and the ranks need the sum.
//   g  after a row-parallel layer: forward an all-reduce of the partial sums; backward the
//      identity (the output's gradient is the same on every rank).
//
//     x ─ ln1 ─ f ─ qkv_r ─ attention(heads of r) ─ proj_r ─ g ─ + bias ─ (+x) ─ ln2 ─ f ─ fc_r ─ gelu ─ mlp.proj_r ─ g ─ + bias ─ (+h)
//
// So each block costs 2 all-reduces forward and 2 backward, each of the B·T·C activations: the
// price of splitting, paid on the fast links inside a node (where Megatron keeps it). The row-
// parallel layers' biases are added once, after g: added by every rank before the sum, they would
// count N times.
//
// What each rank holds: the embedding, the LayerNorms, the final LayerNorm and the LM head whole
// (replicated), and 1/N of every block's qkv, proj, fc and mlp.proj weights (and their optimizer
// state). Replicated parameters need no gradient all-reduce: their inputs and the gradients
// flowing into them are the same on every rank (both g's outputs and f's all-reduced gradients
// are), so every rank computes the same gradient and takes the same step with its own optimizer.
//
// weights(), state() and load_state() put the shards together into the model's whole tensors (and
// cut them out again), under single's names, so checkpoints, --check-equivalence and export see
// one model: the split tensors are all-gathered. The ranks are threads, processes or MPI ranks.
//
// With --amp the block computes as TransformerBlock does (LayerNorms and the residual stream f32,
// the projections, attention and GELU in half), so f and g all-reduce half activations: half the
// bytes. With fp16 a gradient may overflow in one rank's shards alone; the ranks agree on every
// overflow and skip together. With --recompute each block keeps its input alone and reruns its
// forward in backward, its two g all-reduces included.
//
// --sequence-parallel (Korthikanti et al. 2022, §4.2.2). Between the row-parallel and the next
// column-parallel layer — the residual adds, the LayerNorms, the dropout — every rank above runs
// the same ops on the same B·T rows: N copies of one computation, and N copies of its activations.
// Split those regions along the sequence instead: rank r keeps positions [r·T/N, (r+1)·T/N) of
// every sequence, and f and g change collective:
//
//   g  forward a reduce-scatter: each rank receives the sum of the partials for its own positions
//      alone (it needs no more: what follows, to the next f, is per position); backward an
//      all-gather of the output gradient's shards (the row-parallel layer reads every position).
//   f  forward an all-gather of the LayerNorm output's shards (the column-parallel layer reads
//      every position); backward a reduce-scatter: each rank's partial gradient, summed, and only
//      its own positions kept.
//
//     x_r ─ ln1 ─ f ─ qkv_r ─ attention ─ proj_r ─ g ─ + bias ─ (+x_r) ─ ln2 ─ f ─ fc_r ─ gelu ─ mlp.proj_r ─ g ─ + bias ─ (+h_r)
//
// An all-reduce is a reduce-scatter followed by an all-gather, so the wire carries the same bytes
// as before (a ring: (N−1)/N of B·T·C each way, twice); what changes is that the LayerNorms,
// residual adds and dropout compute and keep T/N positions per rank, not all T. (Megatron also
// keeps the column-parallel layers' inputs as shards and gathers them again in backward; here
// qkv and fc keep the gathered input, as without sequence parallelism.)
//
// A rank's rows are b·T + t, sequence-major; its shard is T/N rows of each sequence, in sequence
// order. An all-gather returns the ranks' shards one after another (rank, sequence, position);
// attention needs whole sequences, so around the attention half the gathered rows are regrouped
// into (sequence, rank, position) — Device::regroup_rows, a local copy — and back before the
// reduce-scatter. The MLP half is per row: it runs on the rows in the order they come. (Megatron
// lays activations out [s, b, h], so its shard is contiguous and needs no regroup.)
//
// The ends. The embedding stays replicated and runs on the whole batch (a lookup, cheap); each
// rank keeps its own positions of the output (no communication) and drops them out with the mask
// single draws for those positions: each element's hash takes its global row b·T + r·T/N + i.
// Backward, the embedding's gradient is all-gathered first, so that every rank's embedding
// gradient is the whole one. The final LayerNorm and the head are replicated too: the last
// block's output is all-gathered, and every rank computes the whole logits as before; backward,
// each keeps its own positions of the head's input gradient (no communication).
//
// The LayerNorms' weights and biases stay replicated, but each rank's gradient of them now sums
// over its T/N positions alone: a partial sum. They are all-reduced over the group after backward
// (Megatron does the same) — without it the ranks' copies drift apart at the first step. The
// row-parallel biases need none: their gradient is taken on the all-gathered output gradient.
//
// --dp D puts data parallelism on top, as Megatron does: the world's D·T ranks are D replicas of a
// tensor-parallel group of T (core/comm/parallel_layout.h: each group T consecutive ranks, inside
// a node), each replica trains on its shard of the batch (rows d, d+D, …, as ddp's), and after
// backward every rank averages its gradients with the ranks holding the same shards in the other
// replicas — its data-parallel group, strided by T.
//
// --pp P adds pipeline stages (3D: the world is D·T·P ranks, rank = pp·D·T + dp·T + tp, as
// Megatron lays them out). Stage s holds blocks [s·L/P, (s+1)·L/P), stage 0 the embedding too and
// stage P − 1 the final LayerNorm and head; each replica's batch is cut into --micro-batches m, run
// with the pipeline strategy's schedules (GPipe or 1F1B, strategies/pipeline_schedule.h). A stage's
// output of a micro-batch, B·T·C activations (its gradient backward), goes to the rank of the same
// shard in the next stage over the pipeline group: every rank of a tensor group sends its own copy.
// The gradients add up over the micro-batches; then the data-parallel average and the step, as
// without stages.
//
// --zero-stage 1 with --dp D shards the optimizer state over the data-parallel group, as
// Megatron's distributed optimizer does (and as strategies/zero.cpp's stage 1 over the world):
// each rank's parameters sit in one flat, padded buffer, its gradients in another; one
// reduce-scatter over the dp group gives rank d the average of part d of the gradients alone, it
// steps part d of the weights with the optimizer state of part d alone, and an all-gather over the
// group brings every rank the others' updated parts. The same bytes as plain averaging's
// all-reduce (a reduce-scatter and an all-gather); Adam's two state tensors shrink D times.
#include <deque>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/comm/parallel_layout.h"
#include "core/comm/ranks.h"
#include "core/error.h"
#include "core/nn/dropout.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/nn/transformer_layers.h"
#include "strategies/registry.h"
#include "strategies/distributed_sampler.h"
#include "strategies/pipeline_schedule.h"
#include "strategies/sharded_state.h"

namespace scalelab {
namespace {

constexpr const char* kName = "tensor-parallel";

// ---- what rank r holds of each of the model's tensors -----------------------------------------

// A tensor {R, K} (a bias {R}: K = 1) is whole on every rank, or split by rows (output features)
// in `groups` equal groups — qkv is q;k;v, and rank r takes its heads' rows of each — or by columns
// (input features).
struct Split {
  enum Kind { whole, rows, cols } kind = whole;
  int groups = 1;
};

Split split_of(const std::string& name) {
  auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends_with("attn.qkv.weight") || ends_with("attn.qkv.bias")) return {Split::rows, 3};  // column-parallel
  if (ends_with("mlp.fc.weight") || ends_with("mlp.fc.bias")) return {Split::rows, 1};      // column-parallel
  if (ends_with("attn.proj.weight") || ends_with("mlp.proj.weight")) return {Split::cols, 1};  // row-parallel
  return {};  // the embedding, LayerNorms, the row-parallel biases, the head
}

// Calls at(i) with the whole tensor's flat index of each element rank r of n holds, in the order
// the rank keeps them.
template <class At>
void for_each_element_of(const std::vector<int64_t>& shape, Split s, int r, int n, At at) {
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  if (s.kind == Split::rows) {
    const int64_t group = rows / s.groups, mine = group / n;
    for (int g = 0; g < s.groups; ++g)
      for (int64_t i = g * group + r * mine; i < g * group + (r + 1) * mine; ++i)
        for (int64_t j = 0; j < cols; ++j) at(i * cols + j);
  } else if (s.kind == Split::cols) {
    const int64_t mine = cols / n;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = r * mine; j < (r + 1) * mine; ++j) at(i * cols + j);
  } else {
    for (int64_t i = 0; i < rows * cols; ++i) at(i);
  }
}

// Rank r's part of a whole tensor's floats (none in a dry run).
std::vector<float> shard_of(const std::vector<float>& whole, const std::vector<int64_t>& shape, Split s, int r, int n) {
  if (s.kind == Split::whole || whole.empty()) return whole;
  std::vector<float> part;
  part.reserve(whole.size() / static_cast<size_t>(n));
  for_each_element_of(shape, s, r, n, [&](int64_t i) { part.push_back(whole[static_cast<size_t>(i)]); });
  return part;
}

// The whole tensor from every rank's part (the inverse of shard_of; none in a dry run).
std::vector<float> whole_of(const std::vector<std::vector<float>>& parts, const std::vector<int64_t>& shape, Split s) {
  if (s.kind == Split::whole || parts.front().empty()) return parts.front();  // replicated: rank 0's is every rank's
  const int n = static_cast<int>(parts.size());
  std::vector<float> whole(parts.front().size() * static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    size_t k = 0;
    for_each_element_of(shape, s, r, n, [&](int64_t i) { whole[static_cast<size_t>(i)] = parts[static_cast<size_t>(r)][k++]; });
  }
  return whole;
}

// Tensor p's floats, or none (a dry run's weights are shapes only).
const std::vector<float>& values_of(const HostWeights& w, size_t p) {
  static const std::vector<float> none;
  return w.has_values() ? w.values[p] : none;
}

// ---- the block of one rank -------------------------------------------------------------------

// A row-parallel Linear: its weight shard {out, in/N} and its bias {out}, whole. Its forward is
// only the partial product x_r · W_rᵀ — the block sums the ranks' partials (g) and then adds the
// bias once. Under --amp it computes from half copies of its f32 masters, as Linear does.
class RowParallelLinear : public Layer {
 public:
  RowParallelLinear(Device& device, int index, const std::string& name, int64_t in_local, int64_t out)
      : Layer(device, index, name),
        weight(make_parameter(device, index, name + ".weight", {out, in_local})),
        bias(make_parameter(device, index, name + ".bias", {out})),
        out_(out) {}

  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override {
    return {input.at(0), out_};
  }
  std::vector<Parameter*> parameters() override { return {&weight, &bias}; }
  void set_precision(DType compute) override { set_half_copies(compute); }
  void refresh_half_weights(int micro_batch = -1) override { refresh_half_copies(micro_batch); }

  // The partial product x_r · W_rᵀ {rows, out} (x in the compute dtype); keeps x for backward.
  Tensor forward(const Tensor& x, int micro_batch = -1) override {
    check_half_copies_cast();
    Tensor y = device_->empty({x.rows(), out_}, compute_, MemoryCategory::activations, name_ + ".out");
    device_->gemm({name_ + ".fwd", Phase::fwd, index_, micro_batch}, false, true, x, compute_value(weight, 0), y);
    saved_x_.push_back(x);
    return y;
  }
  // y += b, after the ranks' partials are summed: added before, it would count N times.
  void add_bias(const Tensor& y, int micro_batch) {
    device_->bias_act({name_ + ".fwd", Phase::fwd, index_, micro_batch}, y, compute_value(bias, 1), Activation::none);
  }
  // db = Σ dy and dW_r = dyᵀ · x_r (this rank's columns of W's gradient); returns dx_r = dy · W_r.
  // dy (in the compute dtype) is the same on every rank, so db is too: the bias stays whole and
  // equal without talking.
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override {
    if (saved_x_.empty()) throw Error("nn", name_ + ": backward without a forward");
    const Tensor x = saved_x_.front();
    saved_x_.pop_front();
    const OpTag t{name_ + ".bwd", Phase::bwd, index_, micro_batch};
    if (compute_ == DType::f32) {
      device_->bias_act_backward(t, dy, dy, bias.grad, Activation::none, accumulate);  // leaves dy as it is
      device_->gemm(t, true, false, dy, x, weight.grad, accumulate ? 1.0f : 0.0f);
    } else {  // in half, then into the f32 master gradients
      Tensor db = device_->empty(bias.value.shape(), compute_, MemoryCategory::workspace, bias.name + ".grad.half");
      Tensor dW = device_->empty(weight.value.shape(), compute_, MemoryCategory::workspace, weight.name + ".grad.half");
      device_->bias_act_backward(t, dy, dy, db, Activation::none);
      device_->gemm(t, true, false, dy, x, dW);
      to_master_grad(db, bias, accumulate, micro_batch);
      to_master_grad(dW, weight, accumulate, micro_batch);
    }
    if (!need_dx) return Tensor();
    Tensor dx = device_->empty(x.shape(), compute_, MemoryCategory::activations, name_ + ".dx");
    device_->gemm(t, false, false, dy, compute_value(weight, 0), dx);
    return dx;
  }
  void clear_saved() override { saved_x_.clear(); }

  Parameter weight, bias;

 private:
  int64_t out_;
  std::deque<Tensor> saved_x_;
};

// One rank's block. Under --amp as TransformerBlock: LayerNorms and the residual stream in f32,
// the projections, attention and GELU in half — and so the all-reduces too (half the bytes).
class TensorParallelBlock : public Layer {
 public:
  TensorParallelBlock(Device& device, int index, int block, int64_t hidden, int64_t heads, int64_t context,
                      ProcessGroup& group, bool sequence_parallel)
      : Layer(device, index, "block" + std::to_string(block)),
        prefix_("blocks." + std::to_string(block)),
        group_(group),
        hidden_(hidden),
        local_heads_(heads / group.size()),
        context_(context),
        sequence_parallel_(sequence_parallel),
        ln1_{make_parameter(device, index, prefix_ + ".ln1.weight", {hidden}),
             make_parameter(device, index, prefix_ + ".ln1.bias", {hidden})},
        ln2_{make_parameter(device, index, prefix_ + ".ln2.weight", {hidden}),
             make_parameter(device, index, prefix_ + ".ln2.bias", {hidden})},
        // Column-parallel: this rank's heads' q, k and v (3C/N outputs), its 4C/N of the MLP.
        qkv_(device, index, prefix_ + ".attn.qkv", hidden, 3 * hidden / group.size(), Activation::none),
        fc_(device, index, prefix_ + ".mlp.fc", hidden, 4 * hidden / group.size(), Activation::none),
        // Row-parallel: C/N and 4C/N input features.
        proj_(device, index, prefix_ + ".attn.proj", hidden / group.size(), hidden),
        mlp_proj_(device, index, prefix_ + ".mlp.proj", 4 * hidden / group.size(), hidden) {}

  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override {
    if (input.size() != 2 || input[1] != hidden_ || input[0] % positions() != 0)
      throw Error("nn", name_ + " expects {B·" + std::to_string(positions()) + ", " + std::to_string(hidden_) + "}" +
                            (sequence_parallel_ ? " (T/N positions of each sequence)" : " (whole sequences)") +
                            ", got " + shape_text(input));
    return input;
  }
  // The LayerNorms' parameters: with sequence parallelism, their gradients are partial sums.
  std::vector<Parameter*> layer_norm_parameters() { return {&ln1_.weight, &ln1_.bias, &ln2_.weight, &ln2_.bias}; }

  // The same order as TransformerBlock's, so the i-th is the model's i-th tensor of this block.
  std::vector<Parameter*> parameters() override {
    return {&ln1_.weight, &ln1_.bias, &qkv_.weight, &qkv_.bias, &proj_.weight, &proj_.bias,
            &ln2_.weight, &ln2_.bias, &fc_.weight,  &fc_.bias,  &mlp_proj_.weight, &mlp_proj_.bias};
  }
  void set_precision(DType compute) override {
    if (compute != DType::f32 && compute != DType::f16 && compute != DType::bf16)
      throw Error("nn", name_ + " cannot compute in " + dtype_name(compute) + " — use f32, or f16 / bf16");
    compute_ = compute;
    for (Layer* l : std::initializer_list<Layer*>{&qkv_, &proj_, &fc_, &mlp_proj_}) l->set_precision(compute);
  }
  void refresh_half_weights(int micro_batch = -1) override {
    for (Layer* l : std::initializer_list<Layer*>{&qkv_, &proj_, &fc_, &mlp_proj_}) l->refresh_half_weights(micro_batch);
  }

  // --recompute: forward keeps the block's input alone; backward runs the forward again first, its
  // two g all-reduces included (Megatron's activation checkpointing pays them twice as well).
  void set_recompute(bool on) override { recompute_ = on; }

  Tensor forward(const Tensor& x, int micro_batch = -1) override {
    output_shape(x.shape());
    Saved s;
    Tensor out = run_forward(x, micro_batch, false, s);
    if (recompute_) {
      // What the layers and `s` hold is freed here and made again in backward (each earlier
      // forward of a recomputing block cleared its own).
      for (Layer* l : std::initializer_list<Layer*>{&qkv_, &proj_, &fc_, &mlp_proj_}) l->clear_saved();
      s = Saved{};
      s.x = x;
    }
    saved_.push_back(std::move(s));
    return out;
  }

  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override {
    if (saved_.empty()) throw Error("nn", name_ + ": backward without a forward");
    Saved s = std::move(saved_.front());
    saved_.pop_front();
    if (!s.qkv.defined()) {  // the forward kept x alone (recompute)
      const Tensor x = s.x;
      run_forward(x, micro_batch, true, s);
    }
    return run_backward(dy, need_dx, accumulate, micro_batch, s);
  }

  void clear_saved() override {
    saved_.clear();
    for (Layer* l : std::initializer_list<Layer*>{&qkv_, &proj_, &fc_, &mlp_proj_}) l->clear_saved();
  }

 private:
  struct Saved {
    Tensor x, mean1, rstd1, qkv, probs, h, mean2, rstd2, f, g;
  };

  // The forward's ops; returns the output and fills `s`. recomputing: a rerun in backward.
  Tensor run_forward(const Tensor& x, int micro_batch, bool recomputing, Saved& s) {
    const int64_t rows = x.rows(), C = hidden_, N = group_.size();
    auto tag = [&](const std::string& what, Phase phase, int mb) { return this->tag(what, phase, mb, recomputing); };
    s.x = x;
    // Attention half: h = x + g(proj_r(attention_r(qkv_r(f(ln1(x)))))) + proj.bias.
    Tensor a = act({rows, C}, "ln1.out");
    s.mean1 = act({rows}, "ln1.mean");
    s.rstd1 = act({rows}, "ln1.rstd");
    device_->layer_norm(tag("ln1", Phase::fwd, micro_batch), x, ln1_.weight.value, ln1_.bias.value, a, s.mean1, s.rstd1);
    // {B·T, 3C/N}: this rank's heads of q | k | v, for every position (sequence parallel: gathered)
    s.qkv = qkv_.forward(f_forward(a, "attn", micro_batch, recomputing), micro_batch);
    const int64_t all_rows = s.qkv.rows();
    s.probs = act({all_rows * local_heads_, context_}, "attn.probs", compute_);
    Tensor att = act({all_rows, C / N}, "attn.out", compute_);
    device_->attention(tag("attn", Phase::fwd, micro_batch), s.qkv, local_heads_, s.probs, att);
    Tensor branch = g_forward(proj_.forward(att, micro_batch), "attn", micro_batch, recomputing);
    proj_.add_bias(branch, micro_batch);
    s.h = add_residual(x, branch, tag("attn.residual", Phase::fwd, micro_batch), "attn.residual");
    // MLP half: out = h + g(mlp.proj_r(gelu(fc_r(f(ln2(h)))))) + mlp.proj.bias.
    Tensor b = act({rows, C}, "ln2.out");
    s.mean2 = act({rows}, "ln2.mean");
    s.rstd2 = act({rows}, "ln2.rstd");
    device_->layer_norm(tag("ln2", Phase::fwd, micro_batch), s.h, ln2_.weight.value, ln2_.bias.value, b, s.mean2,
                        s.rstd2);
    s.f = fc_.forward(f_forward(b, "mlp", micro_batch, recomputing), micro_batch);  // {B·T, 4C/N}
    s.g = act(s.f.shape(), "mlp.gelu", compute_);
    device_->gelu(tag("mlp.gelu", Phase::fwd, micro_batch), s.f, s.g);  // element-wise: on the shard alone
    branch = g_forward(mlp_proj_.forward(s.g, micro_batch), "mlp", micro_batch, recomputing);
    mlp_proj_.add_bias(branch, micro_batch);
    return add_residual(s.h, branch, tag("mlp.residual", Phase::fwd, micro_batch), "mlp.residual");
  }

  Tensor run_backward(const Tensor& dy, bool need_dx, bool accumulate, int micro_batch, const Saved& s) {
    const int64_t rows = dy.rows(), C = hidden_;
    // MLP half. g's backward is the identity: dy, the same on every rank, goes into mlp.proj_r
    // (in the compute dtype; dy itself stays the residual's gradient).
    Tensor dg = mlp_proj_.backward(
        g_backward(in_dtype(dy, compute_, tag("mlp.proj.dy", Phase::bwd, micro_batch), "mlp.dy"), "mlp", micro_batch),
        true, accumulate, micro_batch);
    device_->gelu_backward(tag("mlp.gelu", Phase::bwd, micro_batch), dg, s.f, s.g, dg);
    const OpTag ln2_tag = tag("ln2", Phase::bwd, micro_batch);
    Tensor db = in_dtype(f_backward(fc_.backward(dg, true, accumulate, micro_batch), "mlp", micro_batch), DType::f32,
                         ln2_tag, "ln2.dy");
    Tensor dh = act({rows, C}, "ln2.dx");
    device_->layer_norm_backward(ln2_tag, db, s.h, ln2_.weight.value, s.mean2, s.rstd2, dh, ln2_.weight.grad,
                                 ln2_.bias.grad, accumulate);
    device_->axpy(tag("mlp.residual", Phase::bwd, micro_batch), 1.0f, dy, dh);  // h fed the MLP and the output
    // Attention half, the same way.
    Tensor datt = proj_.backward(
        g_backward(in_dtype(dh, compute_, tag("attn.proj.dy", Phase::bwd, micro_batch), "attn.dy"), "attn", micro_batch),
        true, accumulate, micro_batch);
    Tensor dqkv = act({datt.rows(), qkv_.out_features()}, "attn.dqkv", compute_);
    {
      Tensor dscores = device_->empty(s.probs.shape(), compute_, MemoryCategory::workspace, prefix_ + ".attn.dscores");
      device_->attention_backward(tag("attn", Phase::bwd, micro_batch), datt, s.qkv, s.probs, local_heads_, dscores,
                                  dqkv);
    }
    const OpTag ln1_tag = tag("ln1", Phase::bwd, micro_batch);
    Tensor da = in_dtype(f_backward(qkv_.backward(dqkv, true, accumulate, micro_batch), "attn", micro_batch), DType::f32,
                         ln1_tag, "ln1.dy");
    Tensor dx = act({rows, C}, "ln1.dx");
    device_->layer_norm_backward(ln1_tag, da, s.x, ln1_.weight.value, s.mean1, s.rstd1, dx, ln1_.weight.grad,
                                 ln1_.bias.grad, accumulate);
    device_->axpy(tag("attn.residual", Phase::bwd, micro_batch), 1.0f, dh, dx);
    return need_dx ? dx : Tensor();
  }

  // slide: tensor-parallel-f
  // f, forward: the identity — every rank's LayerNorm output is the same, and each column-parallel
  // layer reads all of it. Backward: each rank's column-parallel layer gives its part of the
  // input's gradient; the LayerNorm below needs the whole: one all-reduce of B·T·C values.
  Tensor f_forward(const Tensor& x, const std::string& half, int micro_batch, bool recomputing) {
    if (!sequence_parallel_) return x;
    const OpTag cast = tag(half + ".f", Phase::fwd, micro_batch, recomputing);
    const Tensor mine = in_dtype(x, compute_, cast, half + ".f.in");  // --amp: half the bytes
    return gather_positions(mine, half, "f", Phase::fwd, micro_batch, recomputing);
  }
  Tensor f_backward(const Tensor& partial, const std::string& half, int micro_batch) {
    if (sequence_parallel_) return scatter_positions(partial, half, "f", Phase::bwd, micro_batch);
    const std::string name = prefix_ + "." + half + ".f";
    group_.all_reduce(partial, ReduceOp::sum, {.name = name, .micro_batch = micro_batch});
    return partial;
  }
  // end slide
  // slide: tensor-parallel-g
  // g, forward: each rank's row-parallel layer gives a partial sum of the output; one all-reduce
  // of B·T·C values adds them. Backward: the identity (the output's gradient is every rank's).
  Tensor g_forward(const Tensor& partial, const std::string& half, int micro_batch, bool recomputing) {
    if (sequence_parallel_)
      return scatter_positions(partial, half, "g", Phase::fwd, micro_batch, recomputing);
    const std::string name = prefix_ + "." + half + ".g" + (recomputing ? ".recompute" : "");
    group_.all_reduce(partial, ReduceOp::sum, {.name = name, .micro_batch = micro_batch});
    return partial;
  }
  Tensor g_backward(const Tensor& dy, const std::string& half, int micro_batch) {
    return sequence_parallel_ ? gather_positions(dy, half, "g", Phase::bwd, micro_batch) : dy;
  }
  // end slide

  // slide: sequence-parallel-collectives
  // Sequence parallel: between a g and the next f each rank holds T/N positions of each sequence.
  // f forward and g backward all-gather them (what reads them next needs every position); f
  // backward and g forward reduce-scatter (each rank keeps the sums for its own positions). The
  // gathered rows come rank by rank: attention, which reads whole sequences, regroups them.
  Tensor gather_positions(const Tensor& mine, const std::string& half, const std::string& op,
                          Phase phase, int micro_batch, bool recomputing = false) {
    const int64_t rows = mine.rows() * group_.size();
    Tensor all = act({rows, hidden_}, half + "." + op + ".gathered", mine.dtype());
    const std::string name = collective(half, op + ": all-gather", recomputing);
    group_.all_gather(mine, all, {.name = name, .micro_batch = micro_batch});
    if (half != "attn") return all;
    return whole_sequences(all, tag(half + "." + op + ".regroup", phase, micro_batch, recomputing));
  }
  Tensor scatter_positions(const Tensor& partial, const std::string& half, const std::string& op,
                           Phase phase, int micro_batch, bool recomputing = false) {
    const OpTag regroup = tag(half + "." + op + ".regroup", phase, micro_batch, recomputing);
    const Tensor in = half == "attn" ? rank_major(partial, regroup) : partial;
    const int64_t rows = partial.rows() / group_.size();
    Tensor mine = act({rows, hidden_}, half + "." + op + ".mine", partial.dtype());
    const std::string name = collective(half, op + ": reduce-scatter", recomputing);
    group_.reduce_scatter(in, mine, ReduceOp::sum, {.name = name, .micro_batch = micro_batch});
    return mine;
  }
  // end slide

  // A collective's name as the trace and the dashboard show it: "blocks.0.attn g: reduce-scatter".
  std::string collective(const std::string& half, const std::string& what, bool recomputing) const {
    return prefix_ + "." + half + (recomputing ? ".recompute " : " ") + what;
  }
  // The gathered rows (rank, sequence, position) regrouped into whole sequences (sequence, rank,
  // position) for attention, and back.
  Tensor whole_sequences(const Tensor& gathered, const OpTag& t) {
    Tensor out = act(gathered.shape(), "seq.regrouped", gathered.dtype());
    device_->regroup_rows(t, gathered, out, group_.size(), gathered.rows() / context_);
    return out;
  }
  Tensor rank_major(const Tensor& sequences, const OpTag& t) {
    Tensor out = act(sequences.shape(), "seq.regrouped", sequences.dtype());
    device_->regroup_rows(t, sequences, out, sequences.rows() / context_, group_.size());
    return out;
  }
  // The rows per sequence this rank holds between the collectives: T, or T/N.
  int64_t positions() const { return sequence_parallel_ ? context_ / group_.size() : context_; }

  // The residual stream stays f32: an f32 branch takes the stream in place, a half one is added
  // into a new f32 copy of it.
  Tensor add_residual(const Tensor& stream, const Tensor& branch, const OpTag& t, const std::string& what) {
    if (branch.dtype() == DType::f32) {
      device_->axpy(t, 1.0f, stream, branch);
      return branch;
    }
    Tensor sum = act(stream.shape(), what);
    device_->copy(t, stream, sum);
    device_->axpy(t, 1.0f, branch, sum);
    return sum;
  }
  // t itself, or a copy cast to `dtype` (where the half and f32 parts meet under --amp).
  Tensor in_dtype(const Tensor& t, DType dtype, const OpTag& op, const std::string& what) {
    if (t.dtype() == dtype) return t;
    Tensor out = act(t.shape(), what + "." + dtype_name(dtype), dtype);
    device_->cast(op, t, out);
    return out;
  }

  Tensor act(std::vector<int64_t> shape, const std::string& what, DType dtype = DType::f32) {
    return device_->empty(std::move(shape), dtype, MemoryCategory::activations, prefix_ + "." + what);
  }
  OpTag tag(const std::string& what, Phase phase, int micro_batch, bool recomputing = false) const {
    // A rerun of the forward belongs to the backward pass: that is when it runs, and what it costs.
    if (recomputing) return {prefix_ + "." + what + ".recompute", Phase::bwd, index_, micro_batch};
    return {prefix_ + "." + what + (phase == Phase::fwd ? ".fwd" : ".bwd"), phase, index_, micro_batch};
  }

  std::string prefix_;  // "blocks.<block>", as single names the block's parameters
  ProcessGroup& group_;
  int64_t hidden_, local_heads_, context_;
  bool sequence_parallel_;
  bool recompute_ = false;
  LayerNormParameters ln1_, ln2_;
  Linear qkv_, fc_;                       // column-parallel
  RowParallelLinear proj_, mlp_proj_;     // row-parallel
  std::deque<Saved> saved_;
};

// ---- the strategy ----------------------------------------------------------------------------

// One rank: its layers (the embedding and head whole, each block's shards), in the model's order,
// and its own optimizer over them.
struct TpRank {
  int rank = 0;
  Device* device = nullptr;
  // Its tensor-parallel group (the world's with --dp 1) and its place there; with --dp D > 1 its
  // data-parallel group and its replica's index, and its shard of the batch.
  ProcessGroup* tp = nullptr;
  int tp_rank = 0, tp_size = 1;
  ParallelLayout::Groups groups;
  int replica = 0;
  int stage = 0;  // --pp: its pipeline stage (its place in groups.pp)
  HostBatch shard;
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<Parameter*> params;  // params[k] is rank's part of the model's tensor tensor_index[k]
  std::vector<size_t> tensor_index;  // every tensor of the model, or (--pp) its stage's
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LossScaler> scaler;  // --amp fp16; it does nothing otherwise
  // --sequence-parallel with --dropout: the embedding output's dropout, on this rank's positions.
  std::unique_ptr<Dropout> embed_drop;
  // --sequence-parallel: every block's LayerNorm gradients, one flat tensor (each a view of it),
  // all-reduced in one call.
  Tensor layer_norm_grads;
  // --zero-stage 1: its parameters and gradients in flat buffers padded to D equal parts (each
  // parameter a view), and `optimizer_part`, its part d of the weights (a view) with the averaged
  // gradient of that part (its own tensor): the one parameter its optimizer sees. `flat_order`:
  // params' indices in the buffers' order (with --sequence-parallel the blocks' LayerNorms first,
  // so that their gradients are one run of the buffer: `layer_norm_grads`).
  Tensor flat_params, flat_grads;
  Parameter optimizer_part;
  std::vector<size_t> flat_order;
};

class TensorParallel : public Strategy {
 public:
  explicit TensorParallel(StrategyContext& ctx) : config_(ctx.config), ranks_(*ctx.ranks), spec_(ctx.initial_weights.spec) {
    const int n = ranks_.world_size();
    const std::vector<TensorSpec>& tensors = spec_.tensors();
    ranks_by_index_.resize(static_cast<size_t>(n));
    ranks_.run([&](int rank) {
      auto r = std::make_unique<TpRank>();
      r->rank = rank;
      r->device = &ranks_.device(rank);
      Device& dev = *r->device;
      r->tp = &ranks_.group(rank);
      const int P = config_.pp;
      if (config_.dp > 1 || P > 1) {
        const ParallelLayout layout(config_.dp, n / (config_.dp * P), P);
        r->groups = layout.split(ranks_.group(rank));
        r->tp = r->groups.tp.get();
        r->replica = layout.coords(rank).dp;
        r->stage = layout.coords(rank).pp;
      }
      r->tp_rank = r->tp->rank();
      r->tp_size = r->tp->size();
      // Its stage's layers: the model's [first, last) (every layer without --pp).
      const int L = spec_.layer_count(), per_stage = (L - 2) / P;
      const int first = r->stage == 0 ? 0 : 1 + r->stage * per_stage;
      const int last = r->stage == P - 1 ? L : 1 + (r->stage + 1) * per_stage;
      for (size_t p = 0; p < tensors.size(); ++p)
        if (tensors[p].layer >= first && tensors[p].layer < last) r->tensor_index.push_back(p);
      for (int l = first; l < last; ++l) {
        const bool block = l > 0 && l < L - 1;
        if (block)
          r->layers.push_back(std::make_unique<TensorParallelBlock>(dev, l, l - 1, spec_.gpt.hidden, spec_.gpt.heads,
                                                                    spec_.gpt.context, *r->tp,
                                                                    config_.sequence_parallel));
        else
          r->layers.push_back(make_layer(spec_, l, dev));
        for (Parameter* p : r->layers.back()->parameters()) r->params.push_back(p);
      }
      // Sequence parallel drops the embedding's output on this rank's T/N positions, not inside
      // the embedding on all T: the same mask, as a "sample" of T/N rows — rank r's shard of
      // sequence b is shard b·N + r, whose row i is global row (b·N + r)·T/N + i = b·T + r·T/N + i
      // (N the tensor-parallel group's size; with --dp, b the sequence's place in the whole batch).
      if (config_.sequence_parallel && spec_.dropout > 0) {
        static_cast<TokenEmbedding&>(*r->layers.front()).set_output_dropout(0, 0);
        r->embed_drop = std::make_unique<Dropout>(dev, 0, "embed.drop", spec_.dropout, layer_dropout_seed(spec_, 0),
                                                  spec_.gpt.context / r->tp_size);
      }
      // Every rank cuts its part out of the same initial weights (drawn from the run's seed).
      for (size_t k = 0; k < r->params.size(); ++k) {
        const size_t p = r->tensor_index.at(k);
        Parameter& q = *r->params[k];
        if (q.name != tensors[p].name)
          throw Error(kName, "rank " + std::to_string(rank) + " holds " + q.name + " where the model has " +
                                 tensors[p].name + " — please report this");
        const std::vector<float> part =
            shard_of(values_of(ctx.initial_weights, p), tensors[p].shape, split_of(q.name), r->tp_rank, r->tp_size);
        dev.upload({q.name, Phase::data, q.layer}, q.value, part.empty() ? nullptr : part.data());
      }
      if (zero1()) seat_in_flat_buffers(*r);
      else if (config_.sequence_parallel) gather_layer_norm_grads(*r);
      r->optimizer = std::make_unique<Optimizer>(config_.optimizer, zero1() ? std::vector<Parameter*>{&r->optimizer_part} : r->params);
      // --amp: every layer computes in half from half copies of its f32 masters. With fp16 an
      // overflow may show in one rank's shards alone: the ranks agree on it through their group.
      for (auto& layer : r->layers) {
        layer->set_precision(config_.amp_dtype());
        layer->set_recompute(config_.recompute);
      }
      r->scaler = std::make_unique<LossScaler>(make_loss_scaler(config_));
      r->scaler->agree_over(ranks_.group(rank), dev);
      ranks_by_index_[static_cast<size_t>(rank)] = std::move(r);
    });
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    std::vector<double> losses(ranks_by_index_.size());
    ranks_.run([&](int rank) { losses[static_cast<size_t>(rank)] = rank_step(local(rank), batch, step); });
    // Every rank of a tensor-parallel group computed the same loss on the same rows; with --dp the
    // replicas' losses (each its shard's mean) are averaged — by the group where ranks are elsewhere.
    if (config_.dp == 1 || ranks_.ranks_elsewhere()) return losses[static_cast<size_t>(reporter())];
    double sum = 0;
    int replicas = 0;
    for (int rank : ranks_.local_ranks())
      if (local(rank).tp_rank == 0) {
        sum += losses[static_cast<size_t>(rank)];
        ++replicas;
      }
    return sum / replicas;
  }

  // Every rank takes part (the split tensors are all-gathered); one per process keeps the result.
  HostWeights weights() override {
    HostWeights w;
    w.spec = spec_;
    w.values.resize(spec_.tensors().size());
    ranks_.run([&](int rank) {
      TpRank& r = local(rank);
      std::vector<Tensor> mine;
      for (const Parameter* q : r.params) mine.push_back(q->value);
      std::vector<std::vector<float>> whole = gather_whole(r, mine, "weights");
      if (keeps_whole(r))
        for (size_t k = 0; k < whole.size(); ++k) w.values[r.tensor_index[k]] = std::move(whole[k]);
    });
    if (!w.values.empty() && w.values.front().empty()) w.values.clear();  // a dry run's: shapes only
    return w;
  }

  TrainingState state() override {
    TrainingState s;
    s.weights = weights();
    const size_t count = spec_.tensors().size();
    s.optimizer.resize(count);
    ranks_.run([&](int rank) {
      TpRank& r = local(rank);
      const size_t k = static_cast<size_t>(r.optimizer->state_tensors_per_parameter());
      const std::vector<Tensor> all = r.optimizer->state();  // per parameter its k tensors
      const size_t held = r.params.size();
      for (size_t t = 0; t < k; ++t) {
        std::vector<Tensor> mine;
        if (zero1()) {  // its part d of state tensor t: the dp group's parts gathered, then each parameter's view
          Tensor flat = r.device->empty({flat_length(r)}, DType::f32, MemoryCategory::comm_buffers, "dp.state");
          r.groups.dp->all_gather(all[t], flat, {.name = "dp state"});
          mine.resize(held);
          int64_t offset = 0;
          for (size_t k : r.flat_order) {
            mine[k] = flat.view(offset, r.params[k]->value.shape());
            offset += r.params[k]->value.numel();
          }
        } else {
          for (size_t p = 0; p < held; ++p) mine.push_back(all[p * k + t]);
        }
        std::vector<std::vector<float>> whole = gather_whole(r, mine, "state");
        if (keeps_whole(r))
          for (size_t p = 0; p < held; ++p) s.optimizer[r.tensor_index[p]].push_back(std::move(whole[p]));
      }
    });
    s.optimizer_steps = local(reporter()).optimizer->steps_taken();
    s.loss_scale = local(reporter()).scaler->state_scale();  // every rank's scaler decides alike
    s.scaler_good_steps = local(reporter()).scaler->good_steps();
    return s;
  }

  // Each local rank cuts its parts out of the whole state (one that fits the model: validate_resume).
  void load_state(const TrainingState& s) override {
    const std::vector<TensorSpec>& tensors = spec_.tensors();
    for (int rank : ranks_.local_ranks()) {
      TpRank& r = local(rank);
      OptimizerState mine(r.params.size());
      for (size_t k = 0; k < r.params.size(); ++k) {
        const size_t p = r.tensor_index[k];
        const Split split = split_of(tensors[p].name);
        Parameter& q = *r.params[k];
        const std::vector<float> part = shard_of(values_of(s.weights, p), tensors[p].shape, split, r.tp_rank, r.tp_size);
        r.device->upload({q.name, Phase::data, q.layer}, q.value, part.empty() ? nullptr : part.data());
        if (p < s.optimizer.size())
          for (const std::vector<float>& whole : s.optimizer[p])
            mine[k].push_back(shard_of(whole, tensors[p].shape, split, r.tp_rank, r.tp_size));
      }
      r.optimizer->set_steps_taken(s.optimizer_steps);
      r.optimizer->upload_state(zero1() ? flat_part(r, mine) : mine);
      r.scaler->load_state(s.loss_scale, s.scaler_good_steps);
    }
  }

  AmpReport amp_report() const override {
    return ranks_by_index_[static_cast<size_t>(ranks_.local_ranks().front())]->scaler->report();
  }

 private:
  double rank_step(TpRank& r, const HostBatch& batch_in, int64_t step) {
    if (config_.pp > 1) return pipeline_step(r, batch_in, step);
    Device& dev = *r.device;
    dev.set_step(step);
    // 1. The whole batch to every rank: tensor parallelism splits the weights, not the data. (With
    //    --dp D: the replica's shard, rows d, d+D, …, to each of its ranks.)
    const int D = config_.dp;
    if (D > 1) take_shard(batch_in, r.replica, D, r.shard);
    const HostBatch& batch = D > 1 ? r.shard : batch_in;
    Tensor x = dev.empty({batch.size, batch.features}, DType::f32, MemoryCategory::activations, "batch.x");
    Tensor y = dev.empty({batch.size * batch.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
    dev.upload({"batch.x", Phase::data}, x, batch.x.data());
    dev.upload({"batch.y", Phase::data}, y, batch.y.data());
    // slide: tensor-parallel-step
    // 2. Forward: the embedding whole, each block on this rank's heads and MLP columns (its two g
    //    all-reduces inside), the head whole. Every rank ends with the same logits.
    for (auto& layer : r.layers) {
      layer->refresh_half_weights();            // --amp: this step's half weights
      layer->set_batch_position({step, r.replica, D});  // --dropout: the replica's samples
    }
    const bool sp = config_.sequence_parallel;
    const int n = r.tp_size;
    // --dropout on a sequence-parallel shard: the replica's sequence b (the batch's d + b·D) has
    // its positions on rank t as "sample" (d + b·D)·N + t.
    if (r.embed_drop) r.embed_drop->set_batch_position({step, r.replica * n + r.tp_rank, D * n});
    const int L = static_cast<int>(r.layers.size());
    Tensor h = r.layers.front()->forward(x);  // the embedding, whole
    // Sequence parallel: the blocks start on this rank's T/N positions of each sequence.
    if (sp) h = own_positions(r, h, "embed.out", Phase::fwd, 0);
    if (r.embed_drop) h = r.embed_drop->forward(h);
    for (int l = 1; l < L - 1; ++l) h = r.layers[l]->forward(h);
    if (sp) h = all_positions(r, h, "head.in", Phase::fwd, L - 1);  // the head reads every position
    h = r.layers.back()->forward(h);
    Tensor dlogits = dev.empty(h.shape(), h.dtype(), MemoryCategory::activations, "dlogits");
    const double loss = dev.softmax_xent({"loss", Phase::fwd}, h, y, dlogits, r.scaler->scale());
    // end slide
    // slide: tensor-parallel-backward
    // 3. Backward, last layer first (each block's two f all-reduces inside). A replicated
    //    parameter's gradient comes out the same on every rank of the group: no all-reduce.
    Tensor g = r.layers.back()->backward(dlogits, true);
    if (sp) g = own_positions(r, g, "head.dx", Phase::bwd, L - 1);
    for (int l = L - 2; l >= 1; --l) g = r.layers[l]->backward(g, true);
    if (r.embed_drop) g = r.embed_drop->backward(g, true);
    if (sp) g = all_positions(r, g, "embed.dy", Phase::bwd, 0);  // the embedding's gradient, whole
    r.layers.front()->backward(g, false);
    //    Sequence parallel: the LayerNorms' gradients are sums over this rank's positions alone:
    //    all-reduced in one call (or the replicas' LayerNorms drift apart), as Megatron does.
    const CommTag norms{.name = "layernorm grads all-reduce"};
    if (sp) r.tp->all_reduce(r.layer_norm_grads, ReduceOp::sum, norms);
    const double loss_here = D > 1 && ranks_.ranks_elsewhere() ? replicas_mean(r, loss) : loss;
    // 3b. --dp: the replicas' gradients averaged, as ddp's. 4. Each rank steps its shards and its
    //     copy of the replicated parameters (--zero-stage 1: its part of them), unless (fp16) a
    //     gradient overflowed on any rank: then all skip.
    average_and_step(r);
    return loss_here;
  }
  // end slide

  // --pp: one step of a rank of stage s. Its tasks come from the schedule (GPipe or 1F1B), run as
  // the pipeline strategy runs them (strategies/pipeline_schedule.h): receive a micro-batch's input
  // (activations from stage s − 1, or the gradient from stage s + 1), compute, send the output.
  double pipeline_step(TpRank& r, const HostBatch& batch_in, int64_t step) {
    Device& dev = *r.device;
    dev.set_step(step);
    const int P = config_.pp, s = r.stage, m = config_.micro_batches, D = config_.dp;
    const bool first = s == 0, last = s == P - 1;
    if (D > 1) take_shard(batch_in, r.replica, D, r.shard);
    const HostBatch& batch = D > 1 ? r.shard : batch_in;
    const int64_t rows = batch.size / m, T = spec_.gpt.context, C = spec_.gpt.hidden;
    Tensor y;
    if (last) {
      y = dev.empty({batch.size * batch.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
      dev.upload({"batch.y", Phase::data}, y, batch.y.data());
    }
    for (auto& layer : r.layers) {
      layer->refresh_half_weights();
      layer->set_batch_position({step, r.replica, D});
    }
    const auto tasks = config_.schedule == Schedule::one_f_one_b ? one_f_one_b_schedule(P, s, m) : gpipe_schedule(P, s, m);
    std::vector<Tensor> received[2] = {std::vector<Tensor>(static_cast<size_t>(m)), std::vector<Tensor>(static_cast<size_t>(m))};
    std::vector<Tensor> to_send[2] = {std::vector<Tensor>(static_cast<size_t>(m)), std::vector<Tensor>(static_cast<size_t>(m))};
    std::vector<Tensor> dlogits(static_cast<size_t>(m));
    double loss_sum = 0;
    int backwards = 0;
    const size_t L = r.layers.size();
    for (const PipelineOp& op : stage_program(tasks, P, s)) {
      const int i = op.task.micro_batch;
      const size_t pass = static_cast<size_t>(op.task.pass), mb = static_cast<size_t>(i);
      const bool forward = op.task.pass == PipelinePass::forward;
      const std::string name = std::string(forward ? "activations" : "gradient") + " mb " + std::to_string(i);
      if (op.kind == PipelineOp::receive) {
        // The stage's input: B·T·C activations (f32: the residual stream), or their gradient.
        received[pass][mb] = dev.empty({rows * T, C}, DType::f32, MemoryCategory::activations, name);
        r.groups.pp->recv(received[pass][mb], forward ? s - 1 : s + 1, {.name = name, .micro_batch = i});
      } else if (op.kind == PipelineOp::send) {
        r.groups.pp->send(to_send[pass][mb], forward ? s + 1 : s - 1, {.name = name, .micro_batch = i});
        to_send[pass][mb] = Tensor();
      } else if (forward) {
        Tensor h;
        if (first) {
          h = dev.empty({rows, batch.features}, DType::f32, MemoryCategory::activations, "batch.x mb " + std::to_string(i));
          dev.upload({"batch.x", Phase::data, -1, i}, h, batch.x.data() + i * rows * batch.features);
        } else {
          h = received[pass][mb];
          received[pass][mb] = Tensor();
        }
        for (auto& layer : r.layers) h = layer->forward(h, i);
        if (last) {
          // Micro-batch i's loss (the mean over its rows) and its gradient, scaled by 1/m.
          const int64_t labels = rows * batch.labels_per_sample;
          dlogits[mb] = dev.empty(h.shape(), h.dtype(), MemoryCategory::activations, "dlogits mb " + std::to_string(i));
          loss_sum += dev.softmax_xent({"loss", Phase::fwd, -1, i}, h, y.rows_slice(i * labels, labels), dlogits[mb],
                                       r.scaler->scale() / static_cast<float>(m));
        } else {
          to_send[pass][mb] = h;
        }
      } else {
        Tensor g = last ? dlogits[mb] : received[pass][mb];
        (last ? dlogits[mb] : received[pass][mb]) = Tensor();
        // The first backward of the step writes the weight gradients, the later ones add to them.
        const bool accumulate = backwards++ > 0;
        for (size_t l = L; l-- > 0;) g = r.layers[l]->backward(g, !(first && l == 0), accumulate, i);
        if (!first) to_send[pass][mb] = g;
      }
    }
    average_and_step(r);
    // The replica's loss, the mean over its micro-batches, from the last stage to every stage.
    Tensor loss = dev.empty({1}, DType::f32, MemoryCategory::comm_buffers, "loss");
    float value = static_cast<float>(loss_sum / m);
    if (last) dev.upload({"loss", Phase::data}, loss, &value);
    r.groups.pp->broadcast(loss, P - 1, {.name = "loss"});
    value = std::numeric_limits<float>::quiet_NaN();  // stays NaN in a dry run: no numerics
    dev.download({"loss", Phase::data}, &value, loss);
    return value;
  }

  // The blocks' LayerNorm gradients made views of one flat tensor, so that one all-reduce sums
  // them all (a call per tensor would pay the latency 4·L times for C floats each).
  void gather_layer_norm_grads(TpRank& r) {
    std::vector<Parameter*> norms;
    for (size_t l = 1; l + 1 < r.layers.size(); ++l)
      for (Parameter* p : static_cast<TensorParallelBlock&>(*r.layers[l]).layer_norm_parameters()) norms.push_back(p);
    int64_t total = 0;
    for (Parameter* p : norms) {
      total += p->grad.numel();
      p->grad = Tensor();  // freed first: the ledger holds them once, not twice
    }
    r.layer_norm_grads = r.device->zeros({total}, DType::f32, MemoryCategory::grads, "layernorm grads");
    int64_t offset = 0;
    for (Parameter* p : norms) {
      p->grad = r.layer_norm_grads.view(offset, p->value.shape());
      offset += p->value.numel();
    }
  }

  // Sequence parallel's ends. Rank r's positions [r·T/N, (r+1)·T/N) of every sequence out of the
  // whole {B·T, C}: regrouped so that each rank's rows follow one another, then its own copied
  // out. No communication: every rank holds the whole.
  Tensor own_positions(TpRank& r, const Tensor& whole, const std::string& what, Phase phase, int layer) {
    Device& dev = *r.device;
    const int64_t n = r.tp_size, rows = whole.rows() / n;
    const OpTag tag{what + ".split", phase, layer};
    Tensor by_rank = dev.empty(whole.shape(), whole.dtype(), MemoryCategory::activations, what + ".regrouped");
    dev.regroup_rows(tag, whole, by_rank, whole.rows() / spec_.gpt.context, n);
    Tensor mine = dev.empty({rows, whole.cols()}, whole.dtype(), MemoryCategory::activations, what + ".shard");
    dev.copy(tag, by_rank.rows_slice(r.tp_rank * rows, rows), mine);
    return mine;
  }
  // Every rank's positions, all-gathered and regrouped into whole sequences.
  Tensor all_positions(TpRank& r, const Tensor& mine, const std::string& what, Phase phase, int layer) {
    Device& dev = *r.device;
    const int64_t n = r.tp_size;
    Tensor gathered = dev.empty({mine.rows() * n, mine.cols()}, mine.dtype(), MemoryCategory::activations, what + ".gathered");
    r.tp->all_gather(mine, gathered, {.name = what + " all-gather"});
    Tensor whole = dev.empty(gathered.shape(), mine.dtype(), MemoryCategory::activations, what);
    dev.regroup_rows({what + ".regroup", phase, layer}, gathered, whole, n, gathered.rows() / spec_.gpt.context);
    return whole;
  }

  bool zero1() const { return config_.zero_stage == 1; }

  // --dp: the data-parallel group (the ranks of the other replicas holding the same shards)
  // averages each gradient, as ddp does; then every replica steps alike. --zero-stage 1: one
  // reduce-scatter of the flat gradients, rank d receiving part d's average; rank d steps part d;
  // the parts all-gathered in place.
  void average_and_step(TpRank& r) {
    if (zero1())
      r.groups.dp->reduce_scatter(r.flat_grads, r.optimizer_part.grad, ReduceOp::avg, {.name = "dp grads"});
    else if (config_.dp > 1)
      for (Parameter* p : r.params) r.groups.dp->all_reduce(p->grad, ReduceOp::avg, {.name = "dp " + p->name});
    const bool overflow = r.scaler->unscale_and_check(zero1() ? std::vector<Parameter*>{&r.optimizer_part} : r.params);
    if (!overflow) r.optimizer->step();
    r.scaler->update(overflow);
    if (zero1()) r.groups.dp->all_gather(r.optimizer_part.value, r.flat_params, {.name = "dp params"});
  }

  // --zero-stage 1: the flat buffers' length, the rank's parameters end to end, padded so that the
  // data-parallel group's D parts are equal.
  int64_t flat_length(const TpRank& r) const {
    int64_t total = 0;
    for (const Parameter* p : r.params) total += p->value.numel();
    const int64_t D = config_.dp;
    return (total + D - 1) / D * D;
  }

  // --zero-stage 1: every parameter's weight and gradient become views of two flat buffers (the
  // weights copied over); `optimizer_part` views part d of the weights, and has a gradient of its own.
  // With --sequence-parallel the blocks' LayerNorms come first: their gradients, one run of the
  // buffer, are `layer_norm_grads`, all-reduced over the tensor group in one call as without ZeRO.
  void seat_in_flat_buffers(TpRank& r) {
    Device& dev = *r.device;
    const int64_t length = flat_length(r), part = length / config_.dp;
    r.flat_params = dev.zeros({length}, DType::f32, MemoryCategory::params, "dp.flat_params");
    r.flat_grads = dev.zeros({length}, DType::f32, MemoryCategory::grads, "dp.flat_grads");
    std::vector<bool> layer_norm(r.params.size());
    if (config_.sequence_parallel)
      for (size_t l = 1; l + 1 < r.layers.size(); ++l)
        for (Parameter* q : static_cast<TensorParallelBlock&>(*r.layers[l]).layer_norm_parameters())
          layer_norm[static_cast<size_t>(std::find(r.params.begin(), r.params.end(), q) - r.params.begin())] = true;
    r.flat_order.clear();
    for (bool first : {true, false})
      for (size_t k = 0; k < r.params.size(); ++k)
        if (layer_norm[k] == first) r.flat_order.push_back(k);
    int64_t offset = 0, layer_norm_floats = 0;
    for (size_t k : r.flat_order) {
      Parameter* p = r.params[k];
      Tensor value = r.flat_params.view(offset, p->value.shape());
      dev.copy({p->name, Phase::data, p->layer}, p->value, value);
      p->value = value;  // the parameter's own tensors are freed here
      p->grad = r.flat_grads.view(offset, p->value.shape());
      offset += p->value.numel();
      if (layer_norm[k]) layer_norm_floats += p->value.numel();
    }
    if (layer_norm_floats > 0) r.layer_norm_grads = r.flat_grads.view(0, {layer_norm_floats});
    const int d = r.groups.dp->rank();
    r.optimizer_part.name = "dp.part" + std::to_string(d);
    r.optimizer_part.value = r.flat_params.view(d * part, {part});
    r.optimizer_part.grad = dev.zeros({part}, DType::f32, MemoryCategory::grads, "dp.part_grad");
    dev.memory().reset_peaks();  // the parameters' own tensors lived only while the rank was built
  }

  // --zero-stage 1: the rank's per-parameter optimizer state (`per_parameter[k]`: parameter k's
  // tensors) laid end to end as the flat buffer is, and part d of each state tensor cut out.
  OptimizerState flat_part(const TpRank& r, const OptimizerState& per_parameter) const {
    const int64_t length = flat_length(r), part = length / config_.dp;
    const int64_t d = r.groups.dp->rank();
    OptimizerState mine(1);
    const size_t k = per_parameter.empty() ? 0 : per_parameter.front().size();
    for (size_t t = 0; t < k; ++t) {
      std::vector<float> flat(static_cast<size_t>(length), 0.0f);
      size_t offset = 0;
      for (size_t q : r.flat_order) {
        const std::vector<float>& tensor = per_parameter[q][t];
        std::copy(tensor.begin(), tensor.end(), flat.begin() + static_cast<std::ptrdiff_t>(offset));
        offset += tensor.size();
      }
      mine[0].emplace_back(flat.begin() + d * part, flat.begin() + (d + 1) * part);
    }
    return mine;
  }

  // The mean of the replicas' losses, through the data-parallel group (ranks in other processes).
  double replicas_mean(TpRank& r, double loss) {
    Device& dev = *r.device;
    float value = static_cast<float>(loss);
    Tensor t = dev.empty({1}, DType::f32, MemoryCategory::comm_buffers, "loss");
    t.set_ready_ns(std::max(t.ready_ns(), dev.clock().now_ns()));
    dev.upload({"loss", Phase::data}, t, &value);
    r.groups.dp->all_reduce(t, ReduceOp::avg, {.name = "loss"});
    dev.download({"loss", Phase::data}, &value, t);
    return value;
  }

  // The model's tensors rank r holds (r.tensor_index), whole, from every rank's part of each
  // (`mine[k]`, rank r's): a replicated
  // one is this rank's own; a split one is all-gathered (the parts are equal) and put in place.
  // Every rank issues the same collectives. Empty vectors in a dry run.
  std::vector<std::vector<float>> gather_whole(TpRank& r, const std::vector<Tensor>& mine, const std::string& what) {
    const std::vector<TensorSpec>& tensors = spec_.tensors();
    ProcessGroup& group = *r.tp;
    Device& dev = *r.device;
    const int n = group.size();
    std::vector<std::vector<float>> whole;
    for (size_t k = 0; k < mine.size(); ++k) {
      const size_t p = r.tensor_index[k];
      const Split split = split_of(tensors[p].name);
      const OpTag tag{what + " " + tensors[p].name, Phase::data, tensors[p].layer};
      if (split.kind == Split::whole) {
        whole.push_back(dev.download_f32(tag, mine[k]));
        continue;
      }
      const int64_t size = mine[k].numel();
      Tensor all = dev.empty({n * size}, DType::f32, MemoryCategory::comm_buffers, what + " " + tensors[p].name);
      group.all_gather(mine[k], all, {.name = "all-gather " + what + " " + tensors[p].name});
      const std::vector<float> flat = dev.download_f32(tag, all);
      std::vector<std::vector<float>> parts(static_cast<size_t>(n));
      if (!flat.empty())
        for (int k = 0; k < n; ++k) parts[static_cast<size_t>(k)].assign(flat.begin() + k * size, flat.begin() + (k + 1) * size);
      whole.push_back(whole_of(parts, tensors[p].shape, split));
    }
    return whole;
  }

  // The rank that fills in what weights() and state() return: with --launch threads every rank has
  // everything, one of them writes it down.
  int reporter() const { return ranks_.local_ranks().front(); }
  // Who writes down the whole tensors it gathered: the reporter; with --pp (every rank in this
  // process) the first rank of each stage, each its stage's tensors.
  bool keeps_whole(const TpRank& r) const {
    return config_.pp == 1 ? r.rank == reporter() : r.replica == 0 && r.tp_rank == 0;
  }
  TpRank& local(int rank) {
    TpRank* r = ranks_by_index_.at(static_cast<size_t>(rank)).get();
    if (!r) throw Error(kName, "rank " + std::to_string(rank) + " does not run in this process — please report this");
    return *r;
  }

  const TrainConfig& config_;
  const RankSet& ranks_;
  ModelSpec spec_;
  std::vector<std::unique_ptr<TpRank>> ranks_by_index_;  // by rank; null for ranks in other processes
};

}  // namespace

namespace {

// --pp P (and what only it takes: --micro-batches, --schedule): the shape of the 3D run.
void check_pipeline_stages(const TrainConfig& c, const ModelSpec& spec) {
  const TrainConfig defaults;
  const std::string pp = "--pp " + std::to_string(c.pp);
  if (c.pp < 1) throw UsageError(kName, pp + ": give the pipeline stages (≥ 1)");
  if (c.pp == 1) {
    if (c.micro_batches != defaults.micro_batches || c.schedule != defaults.schedule)
      throw UsageError(kName, "--micro-batches and --schedule cut the batch for pipeline stages — add --pp P (P ≥ 2), "
                              "or drop them");
    return;
  }
  const int64_t blocks = spec.gpt.layers;
  if (blocks % c.pp != 0)
    throw UsageError(kName, pp + ": the " + std::to_string(blocks) + " blocks of --model " + c.model +
                                " cannot be cut into " + std::to_string(c.pp) + " equal stages — use --pp that divides " +
                                std::to_string(blocks));
  if (c.devices % (c.dp * c.pp) != 0)
    throw UsageError(kName, "--devices " + std::to_string(c.devices) + " is not --dp " + std::to_string(c.dp) + " × " + pp +
                                " × the tensor-parallel ranks — use --devices a multiple of " + std::to_string(c.dp * c.pp));
  const int64_t per_replica = c.batch / c.dp;
  if (c.micro_batches < 1 || per_replica % c.micro_batches != 0)
    throw UsageError(kName, "--micro-batches " + std::to_string(c.micro_batches) + " must divide each replica's " +
                                std::to_string(per_replica) + " sequences (--batch " + std::to_string(c.batch) + " / --dp " +
                                std::to_string(c.dp) + ")");
  if (c.schedule == Schedule::interleaved || c.schedule == Schedule::zero_bubble)
    throw UsageError(kName, pp + " runs GPipe or 1F1B — use --schedule gpipe or 1f1b (" + schedule_name(c.schedule) +
                                ": --strategy pipeline)");
  if (c.sequence_parallel) throw UsageError(kName, pp + " with --sequence-parallel is not written yet — drop one of them");
  if (spec.dropout > 0) throw UsageError(kName, pp + " with --dropout is not written yet — drop one of them");
  if (c.launch != Launch::threads)
    throw UsageError(kName, pp + " gathers the stages' weights in one process — use --launch threads");
}

}  // namespace

void check_tensor_parallel_shape(const TrainConfig& c) {
  const ModelSpec spec = ModelSpec::parse(c.model);
  if (spec.family != ModelFamily::gpt)
    throw UsageError(kName, "--model " + c.model + ": tensor parallelism splits a transformer's heads and MLP "
                            "across devices, and this model has neither — use --model gpt:L-C-H-T-V, or "
                            "--strategy ddp or pipeline");
  if (c.dp > 1) check_batch_shares(c.batch, c.dp, kName);
  if (c.zero_stage > 1)
    throw UsageError(kName, "--zero-stage " + std::to_string(c.zero_stage) + ": tensor-parallel shards the optimizer "
                            "state over its data-parallel group (stage 1, Megatron's distributed optimizer) — use "
                            "--zero-stage 1, or --strategy zero for stages 2 and 3");
  if (c.zero_stage == 1 && c.dp < 2)
    throw UsageError(kName, "--zero-stage 1 shards the optimizer state over the data-parallel group, and --dp " +
                                std::to_string(c.dp) + " has one rank in it — add --dp D (D ≥ 2)");
  // The replicas' groups are sub-groups of the world, which the shm and nccl backends do not make.
  if (c.dp > 1 && (c.launch == Launch::procs || c.comm == CommBackend::shm || c.comm == CommBackend::nccl))
    throw UsageError(kName, "--dp " + std::to_string(c.dp) + " with " +
                                (c.launch == Launch::procs ? std::string("--launch procs") : "--comm " + std::string(comm_backend_name(c.comm))) +
                                ": its tensor- and data-parallel groups are sub-groups of the world, which only the "
                                "threads and mpi backends make — use --launch threads or mpi");
  check_pipeline_stages(c, spec);
  const int n = c.devices / std::max(1, c.dp * c.pp);  // each stage's tensor-parallel ranks
  std::string devices = "--devices " + std::to_string(n);
  if (c.pp > 1)
    devices = "--devices " + std::to_string(c.devices) + " / (--dp " + std::to_string(c.dp) + " · --pp " +
              std::to_string(c.pp) + ") = " + std::to_string(n);
  else if (c.dp > 1)
    devices = "--devices " + std::to_string(c.devices) + " / --dp " + std::to_string(c.dp) + " = " + std::to_string(n);
  if (spec.gpt.heads % n != 0)
    throw UsageError(kName, devices + ": the " + std::to_string(spec.gpt.heads) +
                                " heads of --model " + c.model + " cannot be shared equally by " + std::to_string(n) +
                                " ranks — use --devices that divides " + std::to_string(spec.gpt.heads) +
                                ", or a model whose heads are a multiple of " + std::to_string(n));
  if ((4 * spec.gpt.hidden) % n != 0)
    throw UsageError(kName, devices + ": the MLP's " + std::to_string(4 * spec.gpt.hidden) +
                                " hidden features (4C) cannot be shared equally by " + std::to_string(n) +
                                " ranks — use --devices that divides " + std::to_string(4 * spec.gpt.hidden));
  if (c.sequence_parallel && spec.gpt.context % n != 0)
    throw UsageError(kName, "--sequence-parallel --devices " + std::to_string(n) + ": each rank holds T/N positions of "
                            "every sequence, and the context T = " + std::to_string(spec.gpt.context) + " of --model " +
                            c.model + " cannot be split in " + std::to_string(n) + " — use --devices that divides " +
                            std::to_string(spec.gpt.context) + ", or drop --sequence-parallel");
}

std::unique_ptr<Strategy> make_tensor_parallel(StrategyContext& ctx) {
  if (!ctx.ranks) throw Error(kName, "needs ranks (devices_per_rank = 1 in the registry)");
  TrainConfig shape = ctx.config;
  shape.devices = ctx.ranks->world_size();
  check_tensor_parallel_shape(shape);
  return std::make_unique<TensorParallel>(ctx);
}

}  // namespace scalelab
