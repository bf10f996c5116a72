// Lab 10 — your file. Write the functions below (their contracts are in lab.h), then grade them:
//   scalelab grade 10-tensor-parallel
// Read first: README.md of this lab; strategies/tensor_parallel.cpp (the library's Megatron tensor
// parallelism: split_of, TensorParallelBlock's run_forward and run_backward, f and g).
#include <stdexcept>

#include "lab.h"

namespace lab10 {

using scalelab::Activation;
using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::Phase;
using scalelab::ReduceOp;

TpLayout tp_layout(int64_t hidden, int64_t heads, int world, int rank) {
  // TODO: throw std::invalid_argument when N does not divide H; rank r's rows of q, k and v, the
  // columns of attn.proj, the rows of mlp.fc and the columns of mlp.proj.
  (void)hidden, (void)heads, (void)world, (void)rank;
  throw lab::Todo("tp_layout", "labs/10-tensor-parallel/tensor_parallel.cpp");
}

TpMlp::TpMlp(Device& device, ProcessGroup& group, int64_t hidden, const MlpWeights& whole)
    : device_(device), group_(group), hidden_(hidden), local_(4 * hidden / group.size()) {
  // TODO: cut this rank's part of the whole weights (rows_of, cols_of) into four make_parameter.
  (void)whole;
  throw lab::Todo("TpMlp::TpMlp", "labs/10-tensor-parallel/tensor_parallel.cpp");
}

Tensor TpMlp::forward(const Tensor& x) {
  // TODO: GeLU(x · A_r) (keep x, fc's output and GeLU's), the partial Z_r, g's all-reduce, the bias once.
  (void)x;
  throw lab::Todo("TpMlp::forward", "labs/10-tensor-parallel/tensor_parallel.cpp");
}

Tensor TpMlp::backward(const Tensor& dz) {
  // TODO: the four gradients of this rank's parameters, then dx's part and f's all-reduce.
  (void)dz;
  throw lab::Todo("TpMlp::backward", "labs/10-tensor-parallel/tensor_parallel.cpp");
}

}  // namespace lab10
