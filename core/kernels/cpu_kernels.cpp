#include "core/kernels/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/limits.h"
#include "core/tensor.h"

namespace scalelab::kernels {

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
          float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // sgemm with k = 0 is allowed but some BLAS read lda; do the closed form
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == 0 ? 0 : beta * c[i];
    return;
  }
  check_room_for_blas_buffers();
  const int lda = static_cast<int>(ta ? m : k);
  const int ldb = static_cast<int>(tb ? k : n);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, lda, b, ldb, beta, c, static_cast<int>(n));
}

void gemm_naive(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
                float beta, float* c) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        float av = ta ? a[p * m + i] : a[i * k + p];
        float bv = tb ? b[j * k + p] : b[p * n + j];
        acc += static_cast<double>(av) * bv;
      }
      float prev = beta == 0 ? 0.0f : beta * c[i * n + j];
      c[i * n + j] = static_cast<float>(alpha * acc) + prev;
    }
}

void bias_act(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * cols;
    if (act == Activation::relu) {
      for (int64_t j = 0; j < cols; ++j) row[j] = std::max(row[j] + bias[j], 0.0f);
    } else {
      for (int64_t j = 0; j < cols; ++j) row[j] += bias[j];
    }
  }
}

void bias_act_backward(float* dy, const float* y, float* dbias, int64_t rows, int64_t cols, Activation act,
                       bool accumulate) {
  // The column sums in double: over a large batch the terms cancel (the loss gradient is p − y),
  // and a float running sum loses what PyTorch's pairwise sum keeps (1e-5 relative at 60 000 rows).
  std::vector<double> sum(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    float* drow = dy + r * cols;
    if (act == Activation::relu) {
      const float* yrow = y + r * cols;
      for (int64_t j = 0; j < cols; ++j) drow[j] = yrow[j] > 0.0f ? drow[j] : 0.0f;
    }
    for (int64_t j = 0; j < cols; ++j) sum[static_cast<size_t>(j)] += drow[j];
  }
  for (int64_t j = 0; j < cols; ++j)
    dbias[j] = static_cast<float>(sum[static_cast<size_t>(j)]) + (accumulate ? dbias[j] : 0.0f);
}

double softmax_xent(const float* logits, const int32_t* labels, float* dlogits, int64_t rows, int64_t cols,
                    float grad_scale) {
  double total = 0;
  const float inv_rows = rows > 0 ? grad_scale / static_cast<float>(rows) : 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * cols;
    int32_t label = labels[r];
    if (label < 0 || label >= cols)
      throw Error("loss", "label " + std::to_string(label) + " at row " + std::to_string(r) + " is outside [0, " +
                              std::to_string(cols) + ") — the model's last layer must have one output per class");
    float mx = *std::max_element(x, x + cols);
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(static_cast<double>(x[j] - mx));
    double log_sum = std::log(sum);
    total += log_sum - static_cast<double>(x[label] - mx);
    if (dlogits) {
      float* d = dlogits + r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        float p = static_cast<float>(std::exp(static_cast<double>(x[j] - mx) - log_sum));
        d[j] = (p - (j == label ? 1.0f : 0.0f)) * inv_rows;
      }
    }
  }
  return rows > 0 ? total / static_cast<double>(rows) : 0.0;
}

double mse(const float* pred, const float* target, float* dpred, int64_t n, float grad_scale) {
  double total = 0;
  const float k = n > 0 ? 2.0f * grad_scale / static_cast<float>(n) : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float d = pred[i] - target[i];
    total += static_cast<double>(d) * d;
    if (dpred) dpred[i] = k * d;
  }
  return n > 0 ? total / static_cast<double>(n) : 0.0;
}

// The optimizer loops copy their scalars out of the options and take restrict pointers: a store to
// w[i] could otherwise change o.lr (both are floats), and the compiler would then keep the loop
// scalar. Vectorized they are the same operations per element, so the same bits (no FMA here).
void sgd(float* __restrict w, const float* __restrict g, float* __restrict buf, int64_t n, const SgdOptions& o) {
  const float lr = o.lr, momentum = o.momentum, weight_decay = o.weight_decay;
  if (momentum != 0.0f && buf) {
    for (int64_t i = 0; i < n; ++i) {
      buf[i] = momentum * buf[i] + (g[i] + weight_decay * w[i]);
      w[i] -= lr * buf[i];
    }
  } else {
    for (int64_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + weight_decay * w[i]);
  }
}

AdamStep adam_step(const AdamOptions& o, int64_t t) {
  const double bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  return AdamStep{static_cast<float>(o.beta1),          static_cast<float>(1.0 - o.beta1),
                  static_cast<float>(o.beta2),          static_cast<float>(1.0 - o.beta2),
                  static_cast<float>(o.lr / bias_correction1), static_cast<float>(std::sqrt(bias_correction2)),
                  static_cast<float>(o.eps),            o.weight_decay};
}

void adam(float* __restrict w, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
          const AdamOptions& o, int64_t t) {
  const AdamStep s = adam_step(o, t);
  const float beta1 = s.beta1, one_minus_beta1 = s.one_minus_beta1, beta2 = s.beta2,
              one_minus_beta2 = s.one_minus_beta2, step_size = s.step_size,
              bias_correction2_sqrt = s.bias_correction2_sqrt, eps = s.eps, weight_decay = s.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + weight_decay * w[i];
    m[i] = m[i] * beta1 + one_minus_beta1 * gi;
    v[i] = v[i] * beta2 + one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
    w[i] = w[i] + -step_size * m[i] / denom;
  }
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void scale(float alpha, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void fill(float* x, float value, int64_t n) { std::fill(x, x + n, value); }

namespace {

// Every f16 value as f32, made once by half_to_float: a table read is bit-identical to the
// conversion and several times faster, which matters where mixed precision converts every
// operand of every op on the host.
const float* f16_to_f32_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = half_to_float(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

template <typename Convert>
void convert_to_f32(const uint16_t* src, float* dst, int64_t n, Convert convert) {
  for (int64_t i = 0; i < n; ++i) dst[i] = convert(src[i]);
}

}  // namespace

void cast(const void* src, int src_dtype, void* dst, int dst_dtype, int64_t n) {
  if (src_dtype == dst_dtype) {
    if (n > 0) std::memmove(dst, src, static_cast<size_t>(n) * (src_dtype == 0 ? 4 : 2));  // an empty tensor's data may be null
    return;
  }
  // One loop per pair of dtypes, so each is a plain loop the compiler can inline and unroll.
  const auto* s16 = static_cast<const uint16_t*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  const auto* s32 = static_cast<const float*>(src);
  auto* d32 = static_cast<float*>(dst);
  if (dst_dtype == 0) {
    if (src_dtype == 1) {
      const float* table = f16_to_f32_table();
      convert_to_f32(s16, d32, n, [table](uint16_t h) { return table[h]; });
    } else {
      convert_to_f32(s16, d32, n, bf16_to_float);
    }
  } else if (src_dtype == 0) {
    if (dst_dtype == 1)
      for (int64_t i = 0; i < n; ++i) d16[i] = float_to_half(s32[i]);
    else
      for (int64_t i = 0; i < n; ++i) d16[i] = float_to_bf16(s32[i]);
  } else {  // f16 <-> bf16, through f32 (exact on the way in, one rounding on the way out)
    const float* table = f16_to_f32_table();
    for (int64_t i = 0; i < n; ++i)
      d16[i] = dst_dtype == 1 ? float_to_half(bf16_to_float(s16[i])) : float_to_bf16(table[s16[i]]);
  }
}

bool has_non_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return true;
  return false;
}

}  // namespace scalelab::kernels
