#pragma once
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/device/executor.h"

namespace scalelab {

// Real numerics on the host: the `cpu` device, and the `sim` device unless it is a dry run.
class CpuExecutor : public Executor {
 public:
  CpuExecutor() = default;
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;
  ~CpuExecutor() override;
  const char* name() const override { return "host"; }
  // Blocks are kept for reuse, as a GPU framework's caching allocator keeps them: a step frees
  // and allocates the same sizes again (activations, DataParallel's gradient buffers), and memory
  // fresh from the system costs a page fault per 4 KiB page on first touch — 1.4 µs here, 0.6 ms for
  // a 1.6 MiB buffer whose copy takes 30 µs — which a GPU never pays and the cost model never prices.
  void* allocate(int64_t bytes) override;
  void deallocate(void* p) noexcept override;
  int64_t cached_bytes() const;  // freed blocks kept for reuse
  void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
            const Tensor& c) override;
  void bias_act(const Tensor& y, const Tensor& bias, Activation act) override;
  void bias_act_backward(const Tensor& dy, const Tensor& y, const Tensor& dbias, Activation act,
                         bool accumulate) override;
  double softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& dlogits, float grad_scale) override;
  double mse(const Tensor& pred, const Tensor& target, const Tensor& dpred, float grad_scale) override;
  void sgd(const Tensor& w, const Tensor& g, const Tensor& momentum_buf, const SgdOptions& o) override;
  void adam(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v, const AdamOptions& o,
            int64_t t) override;
  void axpy(float alpha, const Tensor& x, const Tensor& y) override;
  void scale(float alpha, const Tensor& x) override;
  void fill(const Tensor& x, float value) override;
  void cast(const Tensor& src, const Tensor& dst) override;
  bool has_non_finite(const Tensor& x) override;
  void copy_from_host(const Tensor& dst, const void* src, int64_t bytes) override;
  void copy_to_host(void* dst, const Tensor& src, int64_t bytes) override;
  void copy(const Tensor& src, const Tensor& dst) override;

  // ---- transformer ops ----
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                  const Tensor& rstd, float eps) override;
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                           bool accumulate) override;
  void gelu(const Tensor& x, const Tensor& y) override;
  void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx) override;
  void embedding(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& out) override;
  void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dwte, const Tensor& dwpe,
                          bool accumulate) override;
  void attention(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& y) override;
  void attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& probs, int64_t heads,
                          const Tensor& dscores, const Tensor& dqkv) override;
  // The ConvNet's ops (executor.h).
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y, const Conv2dGeometry& g,
              Activation act, const Tensor& workspace) override;
  void conv2d_backward_weight(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dweight,
                              const Tensor& dbias, const Conv2dGeometry& g, Activation act, bool accumulate,
                              const Tensor& workspace) override;
  void conv2d_backward_input(const Tensor& dy, const Tensor& weight, const Tensor& dx, const Conv2dGeometry& g,
                             const Tensor& workspace) override;
  void max_pool2d(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g) override;
  void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx, const Pool2dGeometry& g) override;
  void dropout(const Tensor& x, const Tensor& y, const DropoutMask& mask) override;

 private:
  void release_cached();  // every kept block back to the system; caller holds mutex_

  mutable std::mutex mutex_;  // a device's tensors may be made and dropped on several threads
  std::unordered_map<void*, size_t> sizes_;                   // every block handed out, its size
  std::unordered_map<size_t, std::vector<void*>> cached_;     // freed blocks by size
  size_t cached_total_ = 0;
};

// Shapes only, no numbers: lets `sim --dry-run` price a model far larger than this machine's memory.
class MetaExecutor : public Executor {
 public:
  const char* name() const override { return "meta"; }
  bool computes() const override { return false; }
  void* allocate(int64_t) override { return nullptr; }
  void deallocate(void*) noexcept override {}
  void gemm(bool, bool, float, const Tensor&, const Tensor&, float, const Tensor&) override {}
  void bias_act(const Tensor&, const Tensor&, Activation) override {}
  void bias_act_backward(const Tensor&, const Tensor&, const Tensor&, Activation, bool) override {}
  double softmax_xent(const Tensor&, const Tensor&, const Tensor&, float) override;
  double mse(const Tensor&, const Tensor&, const Tensor&, float) override;
  void sgd(const Tensor&, const Tensor&, const Tensor&, const SgdOptions&) override {}
  void adam(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamOptions&, int64_t) override {}
  void axpy(float, const Tensor&, const Tensor&) override {}
  void scale(float, const Tensor&) override {}
  void fill(const Tensor&, float) override {}
  void cast(const Tensor&, const Tensor&) override {}
  bool has_non_finite(const Tensor&) override { return false; }
  void copy_from_host(const Tensor&, const void*, int64_t) override {}
  void copy_to_host(void*, const Tensor&, int64_t) override {}
  void copy(const Tensor&, const Tensor&) override {}

  // ---- transformer ops ----
  void layer_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                  float) override {}
  void layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, bool) override {}
  void gelu(const Tensor&, const Tensor&) override {}
  void gelu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void embedding(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void embedding_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool) override {}
  void attention(const Tensor&, int64_t, const Tensor&, const Tensor&) override {}
  void attention_backward(const Tensor&, const Tensor&, const Tensor&, int64_t, const Tensor&, const Tensor&) override {}
  // The ConvNet's ops: nothing to compute.
  void conv2d(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dGeometry&, Activation,
              const Tensor&) override {}
  void conv2d_backward_weight(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Conv2dGeometry&, Activation, bool, const Tensor&) override {}
  void conv2d_backward_input(const Tensor&, const Tensor&, const Tensor&, const Conv2dGeometry&,
                             const Tensor&) override {}
  void max_pool2d(const Tensor&, const Tensor&, const Tensor&, const Pool2dGeometry&) override {}
  void max_pool2d_backward(const Tensor&, const Tensor&, const Tensor&, const Pool2dGeometry&) override {}
  void dropout(const Tensor&, const Tensor&, const DropoutMask&) override {}
};

}  // namespace scalelab
