// Lab 10 — the reference solution.
#include <stdexcept>

#include "lab.h"

namespace lab10 {

using scalelab::Activation;
using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::Phase;
using scalelab::ReduceOp;

TpLayout tp_layout(int64_t hidden, int64_t heads, int world, int rank) {
  if (heads % world != 0)
    throw std::invalid_argument("[tp] " + std::to_string(heads) + " heads cannot be split across " +
                                std::to_string(world) + " ranks — use a number of ranks that divides " +
                                std::to_string(heads));
  const int64_t per_rank = hidden / world;  // (H/N) heads of C/H rows each
  TpLayout t;
  for (int64_t part = 0; part < 3; ++part)  // q, k, v
    t.qkv_rows.push_back({part * hidden + rank * per_rank, part * hidden + (rank + 1) * per_rank});
  t.proj_cols = {rank * per_rank, (rank + 1) * per_rank};
  const int64_t features = 4 * hidden / world;
  t.fc_rows = {rank * features, (rank + 1) * features};
  t.mlp_proj_cols = t.fc_rows;
  return t;
}

TpMlp::TpMlp(Device& device, ProcessGroup& group, int64_t hidden, const MlpWeights& whole)
    : device_(device), group_(group), hidden_(hidden), local_(4 * hidden / group.size()) {
  const Range mine{group.rank() * local_, (group.rank() + 1) * local_};  // of the 4C features
  fc_w_ = make_parameter(device, "mlp.fc.weight", {local_, hidden}, rows_of(whole.fc_w, hidden, mine));
  fc_b_ = make_parameter(device, "mlp.fc.bias", {local_}, rows_of(whole.fc_b, 1, mine));
  proj_w_ = make_parameter(device, "mlp.proj.weight", {hidden, local_}, cols_of(whole.proj_w, 4 * hidden, mine));
  proj_b_ = make_parameter(device, "mlp.proj.bias", {hidden}, whole.proj_b);
}

Tensor TpMlp::forward(const Tensor& x) {
  const int64_t rows = x.rows();
  x_ = x;  // f: the identity
  f_ = device_.empty({rows, local_}, DType::f32, MemoryCategory::activations, "mlp.fc.out");
  device_.gemm({"mlp.fc.fwd", Phase::fwd}, false, true, x, fc_w_.value, f_);
  device_.bias_act({"mlp.fc.fwd", Phase::fwd}, f_, fc_b_.value, Activation::none);
  g_ = device_.empty({rows, local_}, DType::f32, MemoryCategory::activations, "mlp.gelu");
  device_.gelu({"mlp.gelu.fwd", Phase::fwd}, f_, g_);
  Tensor z = device_.empty({rows, hidden_}, DType::f32, MemoryCategory::activations, "mlp.proj.out");
  device_.gemm({"mlp.proj.fwd", Phase::fwd}, false, true, g_, proj_w_.value, z);  // Z_r: a partial sum
  group_.all_reduce(z, ReduceOp::sum, {.name = "mlp.g"});                          // g
  device_.bias_act({"mlp.proj.fwd", Phase::fwd}, z, proj_b_.value, Activation::none);  // once, after g
  return z;
}

Tensor TpMlp::backward(const Tensor& dz) {
  const int64_t rows = dz.rows();
  // g's backward: the identity. dz is whole on every rank, so proj.bias's gradient is too.
  const scalelab::OpTag proj{"mlp.proj.bwd", Phase::bwd}, fc{"mlp.fc.bwd", Phase::bwd};
  device_.bias_act_backward(proj, dz, dz, proj_b_.grad, Activation::none);
  device_.gemm(proj, true, false, dz, g_, proj_w_.grad);  // {C, 4C/N}
  Tensor dg = device_.empty({rows, local_}, DType::f32, MemoryCategory::activations, "mlp.gelu.dx");
  device_.gemm(proj, false, false, dz, proj_w_.value, dg);
  device_.gelu_backward({"mlp.gelu.bwd", Phase::bwd}, dg, f_, g_, dg);
  device_.bias_act_backward(fc, dg, dg, fc_b_.grad, Activation::none);
  device_.gemm(fc, true, false, dg, x_, fc_w_.grad);  // {4C/N, C}
  Tensor dx = device_.empty({rows, hidden_}, DType::f32, MemoryCategory::activations, "mlp.dx");
  device_.gemm(fc, false, false, dg, fc_w_.value, dx);  // this rank's part of x's gradient
  group_.all_reduce(dx, ReduceOp::sum, {.name = "mlp.f"});  // f's backward
  return dx;
}

}  // namespace lab10
