#pragma once
#include "core/device/executor.h"

namespace scalelab {

// Real numerics on the host: the `cpu` device, and the `sim` device unless it is a dry run.
class CpuExecutor : public Executor {
 public:
  const char* name() const override { return "host"; }
  void* allocate(int64_t bytes) override;
  void deallocate(void* p) noexcept override;
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
};

}  // namespace scalelab
