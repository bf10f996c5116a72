#pragma once
// The executor of a device runs the numerics of ops on tensors that live on it. The cpu executor
// (also the sim device's host executor) calls OpenBLAS and core/kernels; the CUDA one cuBLAS and
// the kernels in core/device/cuda; the meta executor runs nothing (a dry run on sim).
#include <cstdint>

#include "core/kernels/cpu_kernels.h"
#include "core/tensor.h"

namespace scalelab {

class BufferOps;

using kernels::Activation;
using kernels::AdamOptions;
using kernels::SgdOptions;
using kernels::Conv2dGeometry;
using kernels::DropoutMask;
using kernels::Pool2dGeometry;

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const char* name() const = 0;
  // False for the meta executor: tensors carry no data and ops compute nothing.
  virtual bool computes() const { return true; }
  // The memory the device can hold, when the executor knows it (cudaMemGetInfo); 0 otherwise.
  virtual int64_t capacity_bytes() const { return 0; }

  // How the threads backend moves and reduces bytes in this executor's memory; nullptr: host
  // memory (memcpy and host loops). A cuda executor returns its copies and kernels on its stream.
  virtual BufferOps* buffer_ops() { return nullptr; }

  virtual void* allocate(int64_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;

  virtual void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                    const Tensor& c) = 0;
  virtual void bias_act(const Tensor& y, const Tensor& bias, Activation act) = 0;
  virtual void bias_act_backward(const Tensor& dy, const Tensor& y, const Tensor& dbias, Activation act,
                                 bool accumulate) = 0;
  virtual double softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                              float grad_scale) = 0;
  virtual double mse(const Tensor& pred, const Tensor& target, const Tensor& dpred, float grad_scale) = 0;
  virtual void sgd(const Tensor& w, const Tensor& g, const Tensor& momentum_buf, const SgdOptions& o) = 0;
  virtual void adam(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v, const AdamOptions& o,
                    int64_t t) = 0;
  virtual void axpy(float alpha, const Tensor& x, const Tensor& y) = 0;
  virtual void scale(float alpha, const Tensor& x) = 0;
  virtual void fill(const Tensor& x, float value) = 0;
  virtual void cast(const Tensor& src, const Tensor& dst) = 0;
  virtual bool has_non_finite(const Tensor& x) = 0;
  // Copies between this device and the host, and between two tensors (same or another device).
  virtual void copy_from_host(const Tensor& dst, const void* src, int64_t bytes) = 0;
  virtual void copy_to_host(void* dst, const Tensor& src, int64_t bytes) = 0;
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;

  // ---- transformer ops (f32; Device checks shapes and dtypes, see device.h) ----
  virtual void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd, float eps) = 0;
  virtual void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                   bool accumulate) = 0;
  virtual void gelu(const Tensor& x, const Tensor& y) = 0;
  virtual void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx) = 0;
  virtual void embedding(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& out) = 0;
  virtual void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dwte, const Tensor& dwpe,
                                  bool accumulate) = 0;
  virtual void attention(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& y) = 0;
  virtual void attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& probs, int64_t heads,
                                  const Tensor& dscores, const Tensor& dqkv) = 0;
  // ---- the ConvNet's ops (kernels::conv2d …): f32. `workspace` holds
  // kernels::conv2d_workspace_floats(g) floats (im2col's columns and the GEMM's output).
  virtual void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                      const Conv2dGeometry& g, Activation act, const Tensor& workspace) = 0;
  virtual void conv2d_backward_weight(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dweight,
                                      const Tensor& dbias, const Conv2dGeometry& g, Activation act, bool accumulate,
                                      const Tensor& workspace) = 0;
  virtual void conv2d_backward_input(const Tensor& dy, const Tensor& weight, const Tensor& dx, const Conv2dGeometry& g,
                                     const Tensor& workspace) = 0;
  virtual void max_pool2d(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g) = 0;
  virtual void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                   const Pool2dGeometry& g) = 0;
  virtual void dropout(const Tensor& x, const Tensor& y, const DropoutMask& mask) = 0;
};

}  // namespace scalelab
