#pragma once
// The numerics on the host, on raw row-major float arrays. The cpu executor and the sim device's
// host executor both call these; the CUDA kernels in core/device/cuda mirror them.
#include <cstdint>

namespace scalelab::kernels {

enum class Activation : uint8_t { none, relu };

// C[M×N] = alpha · op(A) · op(B) + beta · C, row-major; op(A) is M×K, op(B) is K×N (OpenBLAS sgemm).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c);
// The same by three plain loops: the reference the tests check gemm against.
void gemm_naive(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                const float* b, float beta, float* c);

// y[r, j] = act(y[r, j] + bias[j]) in place.
void bias_act(float* y, const float* bias, int64_t rows, int64_t cols, Activation act);
// dy *= act'(y) in place (y is the activation's output); dbias (+)= Σ_r dy[r, :].
void bias_act_backward(float* dy, const float* y, float* dbias, int64_t rows, int64_t cols, Activation act,
                       bool accumulate);

// Mean softmax cross-entropy over the rows; dlogits = grad_scale · (softmax − onehot) / rows.
// Returns the mean loss. Labels out of [0, cols) throw.
double softmax_xent(const float* logits, const int32_t* labels, float* dlogits, int64_t rows, int64_t cols,
                    float grad_scale);
// Mean squared error ½·mean((p − t)²)·2 = mean((p − t)²); dpred = grad_scale · 2(p − t) / n.
double mse(const float* pred, const float* target, float* dpred, int64_t n, float grad_scale);

struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0;
  float weight_decay = 0;
};
// PyTorch's SGD: g += wd·w; buf = momentum·buf + g; w -= lr·buf (buf may be null without momentum).
void sgd(float* w, const float* g, float* momentum_buf, int64_t n, const SgdOptions& o);

// In double, as torch.optim.Adam holds them (Python floats): 1 − 0.999 is 0.001, where
// 1 − 0.999f is 0.00099998713 — a 1.3e-5 difference in exp_avg_sq at every step.
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  float weight_decay = 0;
};
// The scalars of step t (1-based) as torch.optim.Adam computes them: in double on the host, each
// rounded to float once where the float kernel takes it (the CPU and CUDA kernels share these).
struct AdamStep {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;                // lr / (1 − β1ᵗ)
  float bias_correction2_sqrt;    // √(1 − β2ᵗ)
  float eps, weight_decay;
};
AdamStep adam_step(const AdamOptions& o, int64_t t);
// PyTorch's Adam at step t (1-based), torch.optim.Adam's float program element by element:
// g += wd·w; m = m·β1 + (1−β1)·g; v = v·β2 + (1−β2)·g·g; w += (−step_size·m) / (√v / √bc2 + ε).
void adam(float* w, const float* g, float* m, float* v, int64_t n, const AdamOptions& o, int64_t t);

// y += alpha · x
void axpy(float alpha, const float* x, float* y, int64_t n);
// x *= alpha
void scale(float alpha, float* x, int64_t n);
void fill(float* x, float value, int64_t n);

// Conversions between storage dtypes (0 = f32, 1 = f16, 2 = bf16), round to nearest even.
void cast(const void* src, int src_dtype, void* dst, int dst_dtype, int64_t n);
// True when any element is inf or nan: the fp16 loss scaler's overflow check.
bool has_non_finite(const float* x, int64_t n);

}  // namespace scalelab::kernels
