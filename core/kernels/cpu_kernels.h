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

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
};
// PyTorch's Adam at step t (1-based) with bias correction.
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
