#include "core/device/cpu/cpu_executor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "core/error.h"

namespace scalelab {

namespace k = kernels;

namespace {
void require_f32(const Tensor& t, const char* op) {
  if (t.dtype() != DType::f32)
    throw Error("cpu", std::string(op) + " needs f32 tensors, got " + t.shape_string() +
                           " — cast to f32 first (mixed precision keeps f32 master weights)");
}
int dtype_code(DType d) { return d == DType::f16 ? 1 : d == DType::bf16 ? 2 : 0; }
}  // namespace

void* CpuExecutor::allocate(int64_t bytes) {
  // 64-byte alignment: whole cache lines, and what AVX-512 loads like. Large buffers are aligned
  // to 2 MiB and offered transparent huge pages: 512× fewer page faults and TLB misses when
  // streaming through them.
  constexpr size_t kHuge = size_t{2} << 20;
  const bool huge = static_cast<size_t>(bytes) >= 4 * kHuge;
  const size_t align = huge ? kHuge : 64;
  size_t size = (static_cast<size_t>(bytes) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size == 0 ? align : size);
  if (!p) throw Error("cpu", "host allocation of " + std::to_string(bytes) + " bytes failed — the machine is out of memory");
  if (huge) ::madvise(p, size, MADV_HUGEPAGE);  // advice only: failure changes nothing
  return p;
}

void CpuExecutor::deallocate(void* p) noexcept { std::free(p); }

void CpuExecutor::gemm(bool ta, bool tb, float alpha, const Tensor& a, const Tensor& b, float beta, const Tensor& c) {
  require_f32(a, "gemm");
  require_f32(b, "gemm");
  require_f32(c, "gemm");
  int64_t m = c.rows(), n = c.cols();
  int64_t k = ta ? a.rows() : a.cols();
  k::gemm(ta, tb, m, n, k, alpha, a.data<float>(), b.data<float>(), beta, c.data<float>());
}

void CpuExecutor::bias_act(const Tensor& y, const Tensor& bias, Activation act) {
  require_f32(y, "bias_act");
  k::bias_act(y.data<float>(), bias.data<float>(), y.rows(), y.cols(), act);
}

void CpuExecutor::bias_act_backward(const Tensor& dy, const Tensor& y, const Tensor& dbias, Activation act,
                                    bool accumulate) {
  require_f32(dy, "bias_act_backward");
  k::bias_act_backward(dy.data<float>(), y.data<float>(), dbias.data<float>(), dy.rows(), dy.cols(), act,
                       accumulate);
}

double CpuExecutor::softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                                 float grad_scale) {
  require_f32(logits, "softmax_xent");
  return k::softmax_xent(logits.data<float>(), labels.data<int32_t>(),
                         dlogits.defined() ? dlogits.data<float>() : nullptr, logits.rows(), logits.cols(),
                         grad_scale);
}

double CpuExecutor::mse(const Tensor& pred, const Tensor& target, const Tensor& dpred, float grad_scale) {
  require_f32(pred, "mse");
  return k::mse(pred.data<float>(), target.data<float>(), dpred.defined() ? dpred.data<float>() : nullptr,
                pred.numel(), grad_scale);
}

void CpuExecutor::sgd(const Tensor& w, const Tensor& g, const Tensor& buf, const SgdOptions& o) {
  require_f32(w, "sgd");
  k::sgd(w.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, w.numel(), o);
}

void CpuExecutor::adam(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v, const AdamOptions& o,
                       int64_t t) {
  require_f32(w, "adam");
  k::adam(w.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), w.numel(), o, t);
}

void CpuExecutor::axpy(float alpha, const Tensor& x, const Tensor& y) {
  require_f32(x, "axpy");
  k::axpy(alpha, x.data<float>(), y.data<float>(), x.numel());
}

void CpuExecutor::scale(float alpha, const Tensor& x) {
  require_f32(x, "scale");
  k::scale(alpha, x.data<float>(), x.numel());
}

void CpuExecutor::fill(const Tensor& x, float value) {
  if (x.dtype() == DType::f32) {
    k::fill(x.data<float>(), value, x.numel());
  } else if (x.dtype() == DType::i32) {
    auto* p = x.data<int32_t>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<int32_t>(value);
  } else {
    float v = value;
    for (int64_t i = 0; i < x.numel(); ++i) k::cast(&v, 0, static_cast<char*>(x.raw()) + 2 * i, dtype_code(x.dtype()), 1);
  }
}

void CpuExecutor::cast(const Tensor& src, const Tensor& dst) {
  if (src.numel() != dst.numel())
    throw Error("cpu", "cast from " + src.shape_string() + " to " + dst.shape_string() + ": element counts differ");
  k::cast(src.raw(), dtype_code(src.dtype()), dst.raw(), dtype_code(dst.dtype()), src.numel());
}

bool CpuExecutor::has_non_finite(const Tensor& x) {
  require_f32(x, "has_non_finite");
  return k::has_non_finite(x.data<float>(), x.numel());
}

void CpuExecutor::copy_from_host(const Tensor& dst, const void* src, int64_t bytes) {
  std::memcpy(dst.raw(), src, static_cast<size_t>(bytes));
}

void CpuExecutor::copy_to_host(void* dst, const Tensor& src, int64_t bytes) {
  std::memcpy(dst, src.raw(), static_cast<size_t>(bytes));
}

void CpuExecutor::copy(const Tensor& src, const Tensor& dst) {
  if (src.nbytes() != dst.nbytes())
    throw Error("cpu", "copy from " + src.shape_string() + " to " + dst.shape_string() + ": sizes differ");
  std::memmove(dst.raw(), src.raw(), static_cast<size_t>(src.nbytes()));
}

double MetaExecutor::softmax_xent(const Tensor&, const Tensor&, const Tensor&, float) {
  return std::numeric_limits<double>::quiet_NaN();
}
double MetaExecutor::mse(const Tensor&, const Tensor&, const Tensor&, float) {
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace scalelab
