#pragma once
// Lab 10 — tensor parallelism (Megatron-LM). You write the functions declared under "Task" below,
// in tensor_parallel.cpp; the rest is given. The grader builds your tensor_parallel.cpp into
// harness.cpp and runs the checks of checks.json (`scalelab grade 10-tensor-parallel`).
//
// The harness trains a small network on N ranks (threads of one process, one cpu device each).
// Every rank sees the WHOLE batch; the MLP in the middle is split across the ranks, as a GPT
// block's MLP is in strategies/tensor_parallel.cpp, with YOUR TpMlp:
//
//     x ─ embed (whole) ─ h ─ TpMlp ─ (+h) ─ head (whole) ─ loss
//
//     TpMlp mlp(device, group, C, whole);           // once: cut this rank's shards
//     every step: out = mlp.forward(h);  …  dh = mlp.backward(dout);  SGD on mlp.parameters()
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/device/device.h"
#include "core/nn/layer.h"
#include "core/tensor.h"
#include "labs/common/harness.h"

namespace lab10 {

using scalelab::Device;
using scalelab::Parameter;
using scalelab::ProcessGroup;
using scalelab::Tensor;

// ---- Task 1: which part of each weight rank r holds ------------------------------------------

// [begin, end) of a weight's rows or columns.
struct Range {
  int64_t begin = 0, end = 0;
};

// A GPT block of hidden size C and H heads; our weights are out × in (y = x · Wᵀ):
//   attn.qkv.weight {3C, C}: q's C rows, then k's, then v's; head h owns rows [h·C/H, (h+1)·C/H)
//                            of each                                        column-parallel
//   attn.proj.weight {C, C}: its columns are the heads' attention outputs  row-parallel
//   mlp.fc.weight {4C, C}                                                   column-parallel
//   mlp.proj.weight {C, 4C}                                                 row-parallel
// A column-parallel layer (A in X·A split by columns) holds ROWS of our weight (and of its bias);
// a row-parallel layer holds COLUMNS of our weight (its bias is whole on every rank).
//
// Rank r of N holds heads [r·H/N, (r+1)·H/N): its rows of q, of k and of v (three ranges, in that
// order), the matching columns of attn.proj, and the r-th N-th of the MLP's 4C features (rows of
// mlp.fc, columns of mlp.proj).
//
// Example: C = 8, H = 4, N = 2, rank 1 → qkv rows [4, 8), [12, 16), [20, 24); attn.proj columns
// [4, 8); mlp.fc rows [16, 32); mlp.proj columns [16, 32).
//
// Heads that N does not divide cannot be shared equally: throw std::invalid_argument whose message
// says so and names H and N (e.g. "[tp] 12 heads cannot be split across 8 ranks — …"). C is a
// multiple of H.
struct TpLayout {
  std::vector<Range> qkv_rows;  // 3 ranges: q's, k's, v's rows of attn.qkv.weight (and bias)
  Range proj_cols;              // columns of attn.proj.weight
  Range fc_rows;                // rows of mlp.fc.weight (and bias)
  Range mlp_proj_cols;          // columns of mlp.proj.weight
};
TpLayout tp_layout(int64_t hidden, int64_t heads, int world, int rank);

// ---- Given: weights on the host and on the device ---------------------------------------------

// The MLP's whole weights (as single holds them), row-major: fc_w {4C, C}, fc_b {4C},
// proj_w {C, 4C}, proj_b {C}.
struct MlpWeights {
  std::vector<float> fc_w, fc_b, proj_w, proj_b;
};

// Rows [r.begin, r.end) of a row-major matrix of `cols` columns (a vector: cols = 1).
inline std::vector<float> rows_of(const std::vector<float>& whole, int64_t cols, Range r) {
  return std::vector<float>(whole.begin() + r.begin * cols, whole.begin() + r.end * cols);
}
// Columns [c.begin, c.end) of a row-major matrix of `cols` columns: {rows, c.end − c.begin}.
inline std::vector<float> cols_of(const std::vector<float>& whole, int64_t cols, Range c) {
  std::vector<float> part;
  for (int64_t i = 0; i < static_cast<int64_t>(whole.size()) / cols; ++i)
    part.insert(part.end(), whole.begin() + i * cols + c.begin, whole.begin() + i * cols + c.end);
  return part;
}

// A parameter on `device`: its value (MemoryCategory::params) holding `values` (shape's floats),
// its gradient (MemoryCategory::grads) zeroed. The ledger counts both.
inline Parameter make_parameter(Device& device, const std::string& name, std::vector<int64_t> shape,
                                const std::vector<float>& values) {
  Parameter p;
  p.name = name;
  p.layer = 1;
  p.value = device.empty(shape, scalelab::DType::f32, scalelab::MemoryCategory::params, name);
  p.grad = device.zeros(shape, scalelab::DType::f32, scalelab::MemoryCategory::grads, name + ".grad");
  if (static_cast<int64_t>(values.size()) != p.value.numel())
    throw std::invalid_argument("[lab10] " + name + ": " + std::to_string(values.size()) + " values for " +
                                std::to_string(p.value.numel()) + " elements — cut the right rows or columns");
  device.upload({name, scalelab::Phase::data, 1}, p.value, values.data());
  return p;
}

// What you call (see core/device/device.h, core/comm/process_group.h), OpTag t{"mlp.fc.fwd", Phase::fwd}:
//   device.empty({rows, cols}, DType::f32, MemoryCategory::activations, "name")
//   device.gemm(t, trans_a, trans_b, a, b, c)       c = op(a) · op(b)   (y = x · Wᵀ: trans_b = true)
//   device.bias_act(t, y, bias, Activation::none)   y += bias, per row
//   device.bias_act_backward(t, dy, dy, dbias, Activation::none)   dbias = Σ over rows of dy
//   device.gelu(t, x, y)          device.gelu_backward(t, dy, x, y, dx)   (dx may be dy)
//   group.all_reduce(t, ReduceOp::sum, {.name = "mlp.g"})   in place; group.rank(), group.size()

// ---- Task 2: the MLP of a block, split across the ranks ----------------------------------------

class TpMlp {
 public:
  // This rank's part of the MLP, cut out of the whole weights (the same on every rank):
  // fc.weight {4C/N, C} and fc.bias {4C/N} (its rows: column-parallel), proj.weight {C, 4C/N} (its
  // columns: row-parallel) and proj.bias {C}, whole. Each a make_parameter, named "mlp.fc.weight",
  // "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias". Hold ONLY your part: the point of tensor
  // parallelism is that each rank keeps 1/N of the split weights.
  TpMlp(Device& device, ProcessGroup& group, int64_t hidden, const MlpWeights& whole);

  // x {rows, C}, the same on every rank (f's forward: the identity). Y_r = GeLU(x · A_r) on this
  // rank's 4C/N features alone, the partial Z_r = Y_r · B_r {rows, C}, then g: ONE all-reduce (sum)
  // of the partials, then proj.bias added ONCE. Returns Z + b, the same on every rank. Keep what
  // backward needs.
  Tensor forward(const Tensor& x);

  // dz {rows, C}: the output's gradient, the same on every rank (g's backward: the identity).
  // Writes the gradients of your four parameters; returns dx {rows, C}: each rank's fc_r gives only
  // its part of x's gradient, so f's backward is ONE all-reduce (sum) of them.
  Tensor backward(const Tensor& dz);

  // fc.weight, fc.bias, proj.weight, proj.bias: the harness steps them with SGD.
  std::vector<Parameter*> parameters() { return {&fc_w_, &fc_b_, &proj_w_, &proj_b_}; }

 private:
  Device& device_;
  ProcessGroup& group_;
  int64_t hidden_ = 0;  // C
  int64_t local_ = 0;   // 4C/N: this rank's MLP features
  Parameter fc_w_, fc_b_, proj_w_, proj_b_;
  Tensor x_, f_, g_;    // kept by forward: the input, fc's output, GeLU's output
};

}  // namespace lab10
