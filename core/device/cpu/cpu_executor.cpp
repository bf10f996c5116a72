#include "core/device/cpu/cpu_executor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
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

// The values of a float tensor (f32, f16 or bf16) as f32, for the host kernels. An f32 tensor is
// used in place. A half one is converted into a scratch copy — exactly: every f16 and bf16 value
// is an f32 value — and store() rounds the results back into it once, to nearest even. So a half
// op reads half values, multiplies and adds in f32 and rounds once at the output: the numerics of
// a tensor core (and of the CUDA kernels). The scratch is host memory outside the ledger, like the
// workspace cuBLAS keeps for itself.
class AsF32 {
 public:
  AsF32(const Tensor& t, const char* op, bool load = true) : t_(t) {
    if (!t.defined()) return;
    if (t.dtype() == DType::i32)
      throw Error("cpu", std::string(op) + " takes f32, f16 or bf16 tensors, got " + t.shape_string() +
                             " — integers are labels, not values to compute with");
    if (t.dtype() == DType::f32) {
      p_ = t.data<float>();
      return;
    }
    scratch_.reset(new float[static_cast<size_t>(t.numel())]);  // uninitialised: filled or written next
    if (load) k::cast(t.raw(), dtype_code(t.dtype()), scratch_.get(), 0, t.numel());
    p_ = scratch_.get();
  }
  float* get() const { return p_; }
  // Rounds the scratch copy's values into the half tensor (nothing to do for f32: it was in place).
  void store() const {
    if (t_.defined() && t_.dtype() != DType::f32)
      k::cast(scratch_.get(), 0, t_.raw(), dtype_code(t_.dtype()), t_.numel());
  }

 private:
  const Tensor& t_;
  std::unique_ptr<float[]> scratch_;
  float* p_ = nullptr;
};

// Kept blocks beyond this go back to the system: a run of one model reuses a few sizes, but a
// process that trains several (bench predict) would otherwise keep every size it ever freed.
constexpr size_t kMaxCachedBytes = size_t{1} << 30;

// Under AddressSanitizer every block is freed, so that a use after free is still caught.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheBlocks = false;
#else
constexpr bool kCacheBlocks = true;
#endif

}  // namespace

CpuExecutor::~CpuExecutor() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached();
}

void CpuExecutor::release_cached() {
  for (auto& [size, blocks] : cached_)
    for (void* p : blocks) {
      sizes_.erase(p);
      std::free(p);
    }
  cached_.clear();
  cached_total_ = 0;
}

int64_t CpuExecutor::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(cached_total_);
}

void* CpuExecutor::allocate(int64_t bytes) {
  // 64-byte alignment: whole cache lines, and what AVX-512 loads like. Large buffers are aligned
  // to 2 MiB and offered transparent huge pages: 512× fewer page faults and TLB misses when
  // streaming through them.
  constexpr size_t kHuge = size_t{2} << 20;
  const bool huge = static_cast<size_t>(bytes) >= 4 * kHuge;
  const size_t align = huge ? kHuge : 64;
  size_t size = (static_cast<size_t>(bytes) + align - 1) / align * align;
  if (size == 0) size = align;
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = cached_.find(size); it != cached_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    cached_total_ -= size;
    return p;
  }
  void* p = std::aligned_alloc(align, size);
  if (!p && cached_total_ > 0) {  // the kept blocks may be what the system lacks
    release_cached();
    p = std::aligned_alloc(align, size);
  }
  if (!p)
    throw Error("memory", "out of host memory: " + std::to_string(bytes) +
                              " bytes for a cpu tensor could not be had — lower --devices, --batch or --model, or raise the "
                              "address-space limit (ulimit -v) if one is set");
  if (huge) ::madvise(p, size, MADV_HUGEPAGE);  // advice only: failure changes nothing
  try {
    sizes_.emplace(p, size);
  } catch (...) {
    std::free(p);
    throw;
  }
  return p;
}

void CpuExecutor::deallocate(void* p) noexcept {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = sizes_.find(p);
  if (it == sizes_.end()) {  // not one of ours (cannot happen through Device): hand it back as before
    std::free(p);
    return;
  }
  const size_t size = it->second;
  if (kCacheBlocks && cached_total_ + size <= kMaxCachedBytes) {
    try {
      cached_[size].push_back(p);
      cached_total_ += size;
      return;
    } catch (...) {  // no memory to note it: free it instead (a destructor never throws)
    }
  }
  sizes_.erase(it);
  std::free(p);
}

void CpuExecutor::gemm(bool ta, bool tb, float alpha, const Tensor& a, const Tensor& b, float beta, const Tensor& c) {
  // f16 / bf16: half inputs, f32 products and sums (sgemm on their exact f32 values), C read
  // (when beta ≠ 0) and written in its own dtype with one rounding.
  AsF32 A(a, "gemm"), B(b, "gemm"), C(c, "gemm", /*load=*/beta != 0.0f);
  int64_t m = c.rows(), n = c.cols();
  int64_t k = ta ? a.rows() : a.cols();
  k::gemm(ta, tb, m, n, k, alpha, A.get(), B.get(), beta, C.get());
  C.store();
}

void CpuExecutor::bias_act(const Tensor& y, const Tensor& bias, Activation act) {
  AsF32 Y(y, "bias_act"), Bias(bias, "bias_act");
  k::bias_act(Y.get(), Bias.get(), y.rows(), y.cols(), act);
  Y.store();
}

void CpuExecutor::bias_act_backward(const Tensor& dy, const Tensor& y, const Tensor& dbias, Activation act,
                                    bool accumulate) {
  AsF32 DY(dy, "bias_act_backward"), Y(y, "bias_act_backward"), DB(dbias, "bias_act_backward", accumulate);
  k::bias_act_backward(DY.get(), Y.get(), DB.get(), dy.rows(), dy.cols(), act, accumulate);
  DY.store();
  DB.store();
}

double CpuExecutor::softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                                 float grad_scale) {
  if (labels.dtype() != DType::i32)
    throw Error("cpu", "softmax_xent needs i32 labels, got " + labels.shape_string() + " — load labels as i32");
  // Half logits: the softmax, the loss and the gradient in f32 (the loss summed in double), the
  // gradient rounded once into dlogits' dtype.
  AsF32 L(logits, "softmax_xent"), D(dlogits, "softmax_xent", /*load=*/false);
  const double loss =
      k::softmax_xent(L.get(), labels.data<int32_t>(), D.get(), logits.rows(), logits.cols(), grad_scale);
  D.store();
  return loss;
}

double CpuExecutor::mse(const Tensor& pred, const Tensor& target, const Tensor& dpred, float grad_scale) {
  AsF32 P(pred, "mse"), T(target, "mse"), D(dpred, "mse", /*load=*/false);
  const double loss = k::mse(P.get(), T.get(), D.get(), pred.numel(), grad_scale);
  D.store();
  return loss;
}

void CpuExecutor::sgd(const Tensor& w, const Tensor& g, const Tensor& buf, const SgdOptions& o) {
  require_f32(w, "sgd");
  require_f32(g, "sgd");
  k::sgd(w.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, w.numel(), o);
}

void CpuExecutor::adam(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v, const AdamOptions& o,
                       int64_t t) {
  require_f32(w, "adam");
  require_f32(g, "adam");
  k::adam(w.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), w.numel(), o, t);
}

void CpuExecutor::axpy(float alpha, const Tensor& x, const Tensor& y) {
  // x may be half while y is f32: a half gradient added into an f32 master gradient.
  AsF32 X(x, "axpy"), Y(y, "axpy");
  k::axpy(alpha, X.get(), Y.get(), x.numel());
  Y.store();
}

void CpuExecutor::scale(float alpha, const Tensor& x) {
  AsF32 X(x, "scale");
  k::scale(alpha, X.get(), x.numel());
  X.store();
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
  AsF32 X(x, "has_non_finite");  // a half inf or nan is an f32 inf or nan
  return k::has_non_finite(X.get(), x.numel());
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

// ---- the ConvNet's ops ----------------------------------------------------------------------

namespace scalelab {

namespace {

void require_conv_f32(std::initializer_list<const Tensor*> tensors, const char* op) {
  for (const Tensor* t : tensors)
    if (t->defined()) require_f32(*t, op);
}

}  // namespace

void CpuExecutor::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                         const Conv2dGeometry& g, Activation act, const Tensor& workspace) {
  require_conv_f32({&x, &weight, &bias, &y, &workspace}, "conv2d");
  k::conv2d(x.data<float>(), weight.data<float>(), bias.data<float>(), y.data<float>(), g, act,
            workspace.data<float>());
}

void CpuExecutor::conv2d_backward_weight(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dweight,
                                         const Tensor& dbias, const Conv2dGeometry& g, Activation act,
                                         bool accumulate, const Tensor& workspace) {
  require_conv_f32({&x, &y, &dy, &dweight, &dbias, &workspace}, "conv2d_backward_weight");
  k::conv2d_backward_weight(x.data<float>(), y.defined() ? y.data<float>() : nullptr, dy.data<float>(),
                            dweight.data<float>(), dbias.data<float>(), g, act, accumulate, workspace.data<float>());
}

void CpuExecutor::conv2d_backward_input(const Tensor& dy, const Tensor& weight, const Tensor& dx,
                                        const Conv2dGeometry& g, const Tensor& workspace) {
  require_conv_f32({&dy, &weight, &dx, &workspace}, "conv2d_backward_input");
  k::conv2d_backward_input(dy.data<float>(), weight.data<float>(), dx.data<float>(), g, workspace.data<float>());
}

void CpuExecutor::max_pool2d(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g) {
  require_conv_f32({&x, &y}, "max_pool2d");
  k::max_pool2d(x.data<float>(), y.data<float>(), indices.data<int32_t>(), g);
}

void CpuExecutor::max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                      const Pool2dGeometry& g) {
  require_conv_f32({&dy, &dx}, "max_pool2d_backward");
  k::max_pool2d_backward(dy.data<float>(), indices.data<int32_t>(), dx.data<float>(), g);
}

void CpuExecutor::dropout(const Tensor& x, const Tensor& y, const DropoutMask& mask) {
  require_conv_f32({&x, &y}, "dropout");
  k::dropout(x.data<float>(), y.data<float>(), x.rows(), x.cols(), mask);
}

}  // namespace scalelab

// ---- transformer ops: LayerNorm and the embedding in f32 (autocast keeps them there), GELU and attention also in half ----
namespace scalelab {

void CpuExecutor::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd, float eps) {
  k::layer_norm(x.data<float>(), gamma.data<float>(), beta.data<float>(), y.data<float>(), mean.data<float>(),
                rstd.data<float>(), x.rows(), x.cols(), eps);
}

void CpuExecutor::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                      bool accumulate) {
  k::layer_norm_backward(dy.data<float>(), x.data<float>(), gamma.data<float>(), mean.data<float>(),
                         rstd.data<float>(), dx.data<float>(), dgamma.data<float>(), dbeta.data<float>(), x.rows(),
                         x.cols(), accumulate);
}

// GELU and attention also take f16 / bf16 (mixed precision), computed in f32 and rounded once
// where stored, as the other half ops.
void CpuExecutor::gelu(const Tensor& x, const Tensor& y) {
  AsF32 X(x, "gelu"), Y(y, "gelu", /*load=*/false);
  k::gelu(X.get(), Y.get(), x.numel());
  Y.store();
}

void CpuExecutor::gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx) {
  AsF32 DY(dy, "gelu_backward"), X(x, "gelu_backward"), Y(y, "gelu_backward");
  if (dx.raw() == dy.raw()) {  // in place
    k::gelu_backward(DY.get(), X.get(), Y.get(), DY.get(), x.numel());
    DY.store();
    return;
  }
  AsF32 DX(dx, "gelu_backward", /*load=*/false);
  k::gelu_backward(DY.get(), X.get(), Y.get(), DX.get(), x.numel());
  DX.store();
}

void CpuExecutor::embedding(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& out) {
  k::embedding(ids.data<float>(), wte.data<float>(), wpe.data<float>(), out.data<float>(), ids.rows(), ids.cols(),
               wte.rows(), wte.cols());
}

void CpuExecutor::embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dwte, const Tensor& dwpe,
                                     bool accumulate) {
  k::embedding_backward(dout.data<float>(), ids.data<float>(), dwte.data<float>(), dwpe.data<float>(), ids.rows(),
                        ids.cols(), dwte.rows(), dwte.cols(), accumulate);
}

void CpuExecutor::attention(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& y) {
  if (qkv.rows() == 0) return;
  const int64_t seq = probs.cols();
  AsF32 QKV(qkv, "attention"), P(probs, "attention", false), Y(y, "attention", false);
  k::attention(QKV.get(), P.get(), Y.get(), qkv.rows() / seq, seq, heads, y.cols(), dtype_code(probs.dtype()));
  P.store();
  Y.store();
}

void CpuExecutor::attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& probs, int64_t heads,
                                     const Tensor& dscores, const Tensor& dqkv) {
  if (qkv.rows() == 0) return;
  const int64_t seq = probs.cols();
  AsF32 DY(dy, "attention_backward"), QKV(qkv, "attention_backward"), P(probs, "attention_backward");
  AsF32 DS(dscores, "attention_backward", false), DQKV(dqkv, "attention_backward", false);
  k::attention_backward(DY.get(), QKV.get(), P.get(), DS.get(), DQKV.get(), qkv.rows() / seq, seq, heads, dy.cols(),
                        dtype_code(probs.dtype()));
  DS.store();
  DQKV.store();
}

}  // namespace scalelab
