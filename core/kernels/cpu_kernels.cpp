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

// ---- the ConvNet's ops: convolution, max pooling, dropout ----------------------------------

namespace scalelab::kernels {

namespace {

// Runs fn(begin, end) over [0, n) on the calling thread, as one range. (Splitting the range over
// threads of our own, with OpenBLAS held to one thread meanwhile, was faster on an idle machine but
// changed the bits: OpenBLAS's thread count is one setting for the whole process, and ranks on
// other threads computed with whatever it was at that moment.)
template <typename Fn>
void parallel_ranges(int64_t n, int64_t /*min_items*/, Fn fn, int64_t /*max_threads*/ = 1 << 30) {
  fn(int64_t{0}, n);
}

}  // namespace

namespace {

// About 4 Mi floats (16 MiB) of workspace per chunk: the ConvNet's layers take a batch of 64 in
// one or two chunks, and a large image's chunk is still one image.
constexpr int64_t kConvWorkspaceTarget = int64_t{1} << 22;

// The outputs ow in [first, last) whose input column ow·S − P + kw lies inside the image; the
// others read padding. Found once per row, so the loops over them need no test per pixel.
struct ValidRange {
  int64_t first, last;
};
ValidRange valid_outputs(int64_t offset, int64_t size, int64_t stride, int64_t outputs) {
  // ow·S + offset ≥ 0 and ow·S + offset < size, with offset = kw − P (or kh − P for rows).
  const int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t last = size - offset <= 0 ? 0 : (size - offset - 1) / stride + 1;
  return {std::min(first, outputs), std::clamp<int64_t>(last, std::min(first, outputs), outputs)};
}

// Stride 1 with padding (K − 1) / 2: the output plane is the image's size, and output pixel j of
// the (kh, kw) row reads input pixel j + (kh − P)·W + kw − P. The valid rows are then one
// contiguous stretch of the plane; the columns of it that wrapped into a neighbouring image row
// (outside cols) are padding, set to 0 after the copy.
bool same_size_stride_1(const Conv2dGeometry& g) { return g.stride == 1 && g.out_width() == g.width; }
void im2col_plane_same(const float* plane, float* out, ValidRange rows, ValidRange cols, const Conv2dGeometry& g,
                       int64_t shift) {
  const int64_t W = g.width, L = g.pixels();
  if (rows.first >= rows.last || cols.first >= cols.last) {
    for (int64_t j = 0; j < L; ++j) out[j] = 0.0f;
    return;
  }
  const int64_t begin = rows.first * W + cols.first, end = (rows.last - 1) * W + cols.last;
  for (int64_t j = 0; j < begin; ++j) out[j] = 0.0f;
  for (int64_t j = begin; j < end; ++j) out[j] = plane[j + shift];
  for (int64_t j = end; j < L; ++j) out[j] = 0.0f;
  for (int64_t oh = rows.first; oh < rows.last; ++oh) {
    for (int64_t ow = 0; ow < cols.first; ++ow) out[oh * W + ow] = 0.0f;
    for (int64_t ow = cols.last; ow < W; ++ow) out[oh * W + ow] = 0.0f;
  }
}

// col[(c·K + kh)·K + kw][i·OH·OW + oh·OW + ow] = x_i[c][oh·S − P + kh][ow·S − P + kw], or 0 in the
// padding, for the chunk's `images` images starting at x.
void im2col(const float* x, float* col, int64_t images, const Conv2dGeometry& g) {
  const int64_t C = g.in_channels, H = g.height, W = g.width, K = g.kernel, S = g.stride, P = g.padding;
  const int64_t OH = g.out_height(), OW = g.out_width(), cols = images * OH * OW;
  // Each (c, kh, kw) fills its own row of col: the rows in ranges, one per thread.
  parallel_ranges(C * K * K, 1, [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row) {
        const int64_t c = row / (K * K), kh = row / K % K, kw = row % K;
        float* out = col + row * cols;
        const ValidRange rows = valid_outputs(kh - P, H, S, OH), cols_in = valid_outputs(kw - P, W, S, OW);
        for (int64_t i = 0; i < images; ++i) {
          const float* plane = x + (i * C + c) * H * W;
          if (same_size_stride_1(g)) {
            im2col_plane_same(plane, out, rows, cols_in, g, (kh - P) * W + kw - P);
            out += OH * OW;
            continue;
          }
          for (int64_t oh = 0; oh < OH; ++oh, out += OW) {
            if (oh < rows.first || oh >= rows.last) {
              for (int64_t ow = 0; ow < OW; ++ow) out[ow] = 0.0f;
              continue;
            }
            const float* in = plane + (oh * S - P + kh) * W;  // the input row; ow reads in[ow·S + kw − P]
            // Plain loops, not memcpy/memset: a row is a few dozen floats, shorter than a call's overhead.
            for (int64_t ow = 0; ow < cols_in.first; ++ow) out[ow] = 0.0f;
            if (S == 1) {
              const float* shifted = in + kw - P;
              for (int64_t ow = cols_in.first; ow < cols_in.last; ++ow) out[ow] = shifted[ow];
            } else {
              for (int64_t ow = cols_in.first; ow < cols_in.last; ++ow) out[ow] = in[ow * S + kw - P];
            }
            for (int64_t ow = cols_in.last; ow < OW; ++ow) out[ow] = 0.0f;
          }
        }
    }
  });
}

// dx_i[c][ih][iw] = Σ over the (kh, kw) whose window reads that pixel of dcol's entry: im2col's
// adjoint. Each pixel gets its terms in (kh, kw) order, the order the CUDA kernel gathers them
// in, so the two give the same bits. dcol is scratch: the same-size path zeroes its padding entries.
void col2im(float* dcol, float* dx, int64_t images, const Conv2dGeometry& g) {
  const int64_t C = g.in_channels, H = g.height, W = g.width, K = g.kernel, S = g.stride, P = g.padding;
  const int64_t OH = g.out_height(), OW = g.out_width(), cols = images * OH * OW;
  // Each channel's planes are written by its own (kh, kw) alone: the channels in ranges, one per thread.
  parallel_ranges(C, 1, [&](int64_t c_first, int64_t c_last) {
  for (int64_t i = 0; i < images; ++i) std::fill(dx + (i * C + c_first) * H * W, dx + (i * C + c_last) * H * W, 0.0f);
  for (int64_t c = c_first; c < c_last; ++c)
    for (int64_t kh = 0; kh < K; ++kh)
      for (int64_t kw = 0; kw < K; ++kw) {
        float* in = dcol + ((c * K + kh) * K + kw) * cols;
        const ValidRange rows = valid_outputs(kh - P, H, S, OH), cols_in = valid_outputs(kw - P, W, S, OW);
        for (int64_t i = 0; i < images; ++i) {
          float* plane = dx + (i * C + c) * H * W;
          if (same_size_stride_1(g)) {
            // im2col_plane_same's stretch in reverse: its wrapped entries (padding) are zeroed first,
            // and adding +0 to a sum that began at +0 leaves its bits as they were.
            if (rows.first >= rows.last || cols_in.first >= cols_in.last) continue;
            float* src = in + i * OH * OW;
            for (int64_t oh = rows.first; oh < rows.last; ++oh) {
              for (int64_t ow = 0; ow < cols_in.first; ++ow) src[oh * W + ow] = 0.0f;
              for (int64_t ow = cols_in.last; ow < W; ++ow) src[oh * W + ow] = 0.0f;
            }
            const int64_t begin = rows.first * W + cols_in.first, end = (rows.last - 1) * W + cols_in.last;
            const int64_t shift = (kh - P) * W + kw - P;
            for (int64_t j = begin; j < end; ++j) plane[j + shift] += src[j];
            continue;
          }
          for (int64_t oh = rows.first; oh < rows.last; ++oh) {
            const float* src = in + (i * OH + oh) * OW;
            float* out = plane + (oh * S - P + kh) * W;  // the input row; ow sent to out[ow·S + kw − P]
            if (S == 1) {
              float* shifted = out + cols_in.first + kw - P;
              for (int64_t ow = cols_in.first; ow < cols_in.last; ++ow) shifted[ow - cols_in.first] += src[ow];
            } else {
              for (int64_t ow = cols_in.first; ow < cols_in.last; ++ow) out[ow * S + kw - P] += src[ow];
            }
          }
        }
      }
  });
}

// dyt {OC, images·OH·OW} = `images` rows of dy (OC·OH·OW each): the layout of the GEMM's columns.
void rows_to_columns(const float* dy, float* dyt, int64_t images, const Conv2dGeometry& g) {
  const int64_t OC = g.out_channels, L = g.pixels();
  parallel_ranges(OC, 1, [&](int64_t first, int64_t last) {
    for (int64_t oc = first; oc < last; ++oc)
      for (int64_t i = 0; i < images; ++i)
        std::memcpy(dyt + (oc * images + i) * L, dy + (i * OC + oc) * L, static_cast<size_t>(L) * sizeof(float));
  });
}

}  // namespace

int64_t conv2d_chunk_images(const Conv2dGeometry& g) {
  const int64_t per_image = std::max<int64_t>((g.patch() + g.out_channels) * g.pixels(), 1);
  const int64_t most = std::clamp<int64_t>(kConvWorkspaceTarget / per_image, 1, std::max<int64_t>(g.batch, 1));
  // Chunks of equal size (64 images as 32 + 32, not 49 + 15): no small GEMM at the end.
  const int64_t chunks = (std::max<int64_t>(g.batch, 1) + most - 1) / most;
  return (std::max<int64_t>(g.batch, 1) + chunks - 1) / chunks;
}

int64_t conv2d_workspace_floats(const Conv2dGeometry& g) {
  return (g.patch() + g.out_channels) * conv2d_chunk_images(g) * g.pixels();
}

namespace {

// The convolution's images chunk after chunk, each chunk of the same images whatever the machine
// (a GEMM's bits depend on its shape): fn(slot 0, first, images, workspace) per chunk, each chunk's
// GEMM on every BLAS thread.
template <typename Fn>
void conv_image_shares(const Conv2dGeometry& g, float* workspace, Fn fn) {
  const int64_t chunk = conv2d_chunk_images(g);
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) fn(int64_t{0}, n0, std::min(chunk, g.batch - n0), workspace);
}

}  // namespace

void conv2d(const float* x, const float* w, const float* b, float* y, const Conv2dGeometry& g, Activation act,
            float* workspace) {
  const int64_t OC = g.out_channels, L = g.pixels();
  const int64_t in_row = g.in_channels * g.height * g.width, out_row = OC * L;
  conv_image_shares(g, workspace, [&](int64_t, int64_t n0, int64_t images, float* col) {
    float* out = col + g.patch() * images * L;  // after this sub-chunk's columns
    im2col(x + n0 * in_row, col, images, g);
    gemm(false, false, OC, images * L, g.patch(), 1.0f, w, col, 0.0f, out);  // out = W · col
    // out is {OC, images, OH·OW}: into NCHW rows, with the bias and the activation on the way.
    for (int64_t oc = 0; oc < OC; ++oc)
      for (int64_t i = 0; i < images; ++i) {
        const float* src = out + (oc * images + i) * L;
        float* dst = y + (n0 + i) * out_row + oc * L;
        const float bias = b[oc];
        if (act == Activation::relu)
          for (int64_t j = 0; j < L; ++j) dst[j] = std::max(src[j] + bias, 0.0f);
        else
          for (int64_t j = 0; j < L; ++j) dst[j] = src[j] + bias;
      }
  });
}

void conv2d_backward_weight(const float* x, const float* y, float* dy, float* dw, float* db, const Conv2dGeometry& g,
                            Activation act, bool accumulate, float* workspace) {
  const int64_t OC = g.out_channels, L = g.pixels();
  const int64_t in_row = g.in_channels * g.height * g.width, out_row = OC * L;
  // The ReLU's mask, then db: per channel over every image and pixel, in double as bias_act_backward.
  // A channel's sum over the images in their order, whichever thread runs the channel.
  // A plane's sum is a chain of dependent double additions: eight channels' planes at once keep
  // eight chains in flight, each still adding its own terms in order (the same bits as one at a time).
  std::vector<double> sum(static_cast<size_t>(OC), 0.0);
  if (act == Activation::relu)
    for (int64_t n = 0; n < g.batch; ++n) {
      float* d = dy + n * out_row;
      const float* out = y + n * out_row;
      for (int64_t j = 0; j < out_row; ++j) d[j] = out[j] > 0.0f ? d[j] : 0.0f;
    }
  constexpr int64_t kChains = 8;
  for (int64_t n = 0; n < g.batch; ++n) {
    const float* d = dy + n * out_row;
    int64_t oc = 0;
    for (; oc + kChains <= OC; oc += kChains) {
      double s[kChains] = {};
      for (int64_t j = 0; j < L; ++j)
        for (int64_t k = 0; k < kChains; ++k) s[k] += d[(oc + k) * L + j];
      for (int64_t k = 0; k < kChains; ++k) sum[static_cast<size_t>(oc + k)] += s[k];
    }
    for (; oc < OC; ++oc) {
      double s = 0;
      for (int64_t j = 0; j < L; ++j) s += d[oc * L + j];
      sum[static_cast<size_t>(oc)] += s;
    }
  }
  for (int64_t oc = 0; oc < OC; ++oc)
    db[oc] = static_cast<float>(sum[static_cast<size_t>(oc)]) + (accumulate ? db[oc] : 0.0f);
  // dW = Σ over images of dy · colᵀ, chunk after chunk in image order, into dW itself.
  conv_image_shares(g, workspace, [&](int64_t, int64_t n0, int64_t images, float* col) {
    float* dyt = col + g.patch() * images * L;
    rows_to_columns(dy + n0 * out_row, dyt, images, g);
    im2col(x + n0 * in_row, col, images, g);
    const float beta = n0 == 0 && !accumulate ? 0.0f : 1.0f;
    gemm(false, true, OC, g.patch(), images * L, 1.0f, dyt, col, beta, dw);
  });
}

void conv2d_backward_input(const float* dy, const float* w, float* dx, const Conv2dGeometry& g, float* workspace) {
  const int64_t OC = g.out_channels, L = g.pixels();
  const int64_t in_row = g.in_channels * g.height * g.width, out_row = OC * L;
  conv_image_shares(g, workspace, [&](int64_t, int64_t n0, int64_t images, float* dcol) {
    float* dyt = dcol + g.patch() * images * L;
    rows_to_columns(dy + n0 * out_row, dyt, images, g);
    gemm(true, false, g.patch(), images * L, OC, 1.0f, w, dyt, 0.0f, dcol);  // dcol = Wᵀ · dy
    col2im(dcol, dx + n0 * in_row, images, g);
  });
}

namespace {

// The 2×2 windows of stride 2 (the ConvNet's): each window's four pixels read at once, the same
// rule in the same order as the general loop below.
void max_pool2d_2x2(const float* x, float* y, int32_t* indices, const Pool2dGeometry& g) {
  const int64_t H = g.height, W = g.width, OH = g.out_height(), OW = g.out_width();
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane) {
    const float* in = x + plane * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const float* r0 = in + 2 * oh * W;
      const float* r1 = r0 + W;
      float* value = y + (plane * OH + oh) * OW;
      int32_t* best = indices + (plane * OH + oh) * OW;
      const int32_t first = static_cast<int32_t>(2 * oh * W);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int32_t at = first + static_cast<int32_t>(2 * ow);
        float v = r0[2 * ow];
        int32_t i = at;
        const float b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        const bool wb = b > v || b != b;  // b != b: NaN
        v = wb ? b : v;
        i = wb ? at + 1 : i;
        const bool wc = c > v || c != c;
        v = wc ? c : v;
        i = wc ? at + static_cast<int32_t>(W) : i;
        const bool wd = d > v || d != d;
        v = wd ? d : v;
        i = wd ? at + static_cast<int32_t>(W) + 1 : i;
        value[ow] = v;
        best[ow] = i;
      }
    }
  }
}

}  // namespace

void max_pool2d(const float* x, float* y, int32_t* indices, const Pool2dGeometry& g) {
  const int64_t H = g.height, W = g.width, K = g.kernel, S = g.stride, OH = g.out_height(), OW = g.out_width();
  if (K == 2 && S == 2) return max_pool2d_2x2(x, y, indices, g);
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane) {
    const float* in = x + plane * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      // A row of windows at once, their pixels in row-major order: the first of each window
      // starts it, then each later one replaces it only when strictly greater (the first max
      // stays) or NaN (as PyTorch's CPU kernel).
      float* value = y + (plane * OH + oh) * OW;
      int32_t* best = indices + (plane * OH + oh) * OW;
      for (int64_t ow = 0; ow < OW; ++ow) {
        value[ow] = in[oh * S * W + ow * S];
        best[ow] = static_cast<int32_t>(oh * S * W + ow * S);
      }
      for (int64_t kh = 0; kh < K; ++kh)
        for (int64_t kw = 0; kw < K; ++kw) {
          if (kh == 0 && kw == 0) continue;
          const int64_t row = (oh * S + kh) * W + kw;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const float v = in[row + ow * S];
            const bool wins = v > value[ow] || std::isnan(v);
            value[ow] = wins ? v : value[ow];
            best[ow] = wins ? static_cast<int32_t>(row + ow * S) : best[ow];
          }
        }
    }
  }
}

void max_pool2d_backward(const float* dy, const int32_t* indices, float* dx, const Pool2dGeometry& g) {
  const int64_t HW = g.height * g.width, L = g.out_height() * g.out_width();
  std::fill(dx, dx + g.batch * g.channels * HW, 0.0f);
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane)
    for (int64_t j = 0; j < L; ++j) dx[plane * HW + indices[plane * L + j]] += dy[plane * L + j];
}

uint64_t DropoutMask::threshold() const {
  return static_cast<uint64_t>(std::llround(static_cast<double>(p) * 4294967296.0));  // p · 2³²
}

void dropout(const float* x, float* y, int64_t rows, int64_t cols, const DropoutMask& m) {
  const uint64_t threshold = m.threshold();
  const float scale = m.scale();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = dropout_global_row(m.first_row, r, m.sample_offset, m.sample_stride, m.rows_per_sample);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      y[i] = dropout_keeps(threshold, m.seed, m.step, row, c) ? x[i] * scale : 0.0f;
    }
  }
}

}  // namespace scalelab::kernels

// ---- transformer ops: LayerNorm, GELU, token + position embedding, causal self-attention ----
namespace scalelab::kernels {


void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    // Two passes in double: the mean, then the variance around it (no cancellation of E[x²] − E[x]²).
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += xr[j];
    const double mu = cols > 0 ? sum / static_cast<double>(cols) : 0.0;
    double sq = 0;
    for (int64_t j = 0; j < cols; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    const double var = cols > 0 ? sq / static_cast<double>(cols) : 0.0;
    const float m = static_cast<float>(mu);
    const float s = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    mean[r] = m;
    rstd[r] = s;
    float* yr = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - m) * s * gamma[j] + beta[j];
  }
}

void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t cols, bool accumulate) {
  std::vector<double> sum_gamma(static_cast<size_t>(cols), 0.0), sum_beta(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    const float m = mean[r], s = rstd[r];
    // The two row means the input gradient needs: of g = dy ⊙ gamma, and of g ⊙ x̂.
    double g_sum = 0, gx_sum = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const float xhat = (xr[j] - m) * s;
      const float g = dyr[j] * gamma[j];
      g_sum += g;
      gx_sum += static_cast<double>(g) * xhat;
      sum_gamma[static_cast<size_t>(j)] += static_cast<double>(dyr[j]) * xhat;
      sum_beta[static_cast<size_t>(j)] += dyr[j];
    }
    const float g_mean = static_cast<float>(g_sum / static_cast<double>(cols));
    const float gx_mean = static_cast<float>(gx_sum / static_cast<double>(cols));
    float* dxr = dx + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float xhat = (xr[j] - m) * s;
      dxr[j] = s * (dyr[j] * gamma[j] - g_mean - xhat * gx_mean);
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    dgamma[j] = static_cast<float>(sum_gamma[static_cast<size_t>(j)]) + (accumulate ? dgamma[j] : 0.0f);
    dbeta[j] = static_cast<float>(sum_beta[static_cast<size_t>(j)]) + (accumulate ? dbeta[j] : 0.0f);
  }
}

namespace {
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
}  // namespace

void gelu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

void gelu_backward(const float* dy, const float* x, const float* y, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float cdf = std::fabs(v) > 1e-20f ? y[i] / v : 0.5f;  // Φ(x) = y / x: no erf again
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

namespace {

// The id at (b, t) as an index, or a clear error: ids arrive as floats (the batch is one f32 tensor).
int64_t token_id(const float* ids, int64_t b, int64_t t, int64_t seq, int64_t vocab) {
  const float v = ids[b * seq + t];
  if (!(v >= 0.0f) || v >= static_cast<float>(vocab) || v != std::floor(v))
    throw Error("embedding", "token id " + std::to_string(v) + " at batch row " + std::to_string(b) + ", position " +
                                 std::to_string(t) + " is not a whole number in [0, " + std::to_string(vocab) +
                                 ") — the data's vocabulary must fit the model's (gpt:…-V)");
  return static_cast<int64_t>(v);
}

}  // namespace

void embedding(const float* ids, const float* wte, const float* wpe, float* out, int64_t batch, int64_t seq,
               int64_t vocab, int64_t hidden) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) {
      const float* tok = wte + token_id(ids, b, t, seq, vocab) * hidden;
      const float* pos = wpe + t * hidden;
      float* o = out + (b * seq + t) * hidden;
      for (int64_t j = 0; j < hidden; ++j) o[j] = tok[j] + pos[j];
    }
}

void embedding_backward(const float* dout, const float* ids, float* dwte, float* dwpe, int64_t batch, int64_t seq,
                        int64_t vocab, int64_t hidden, bool accumulate) {
  if (!accumulate) {
    std::fill(dwte, dwte + vocab * hidden, 0.0f);
    std::fill(dwpe, dwpe + seq * hidden, 0.0f);
  }
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) {
      const float* d = dout + (b * seq + t) * hidden;
      float* tok = dwte + token_id(ids, b, t, seq, vocab) * hidden;
      float* pos = dwpe + t * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        tok[j] += d[j];
        pos[j] += d[j];
      }
    }
}

namespace {

// Row-major C = alpha · op(A) · op(B) + beta · C with explicit leading dimensions: q, k and v are
// d-column windows of the qkv rows, 3·hidden apart.
void gemm_ld(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

}  // namespace

namespace {

// Rounds values to f16 or bf16 precision in place (dtype 1 or 2; 0 leaves them): what storing them
// in a half tensor and reading them back gives.
void round_to(float* x, int64_t n, int dtype) {
  if (dtype == 1)
    for (int64_t i = 0; i < n; ++i) x[i] = half_to_float(float_to_half(x[i]));
  else if (dtype == 2)
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
}

}  // namespace

void attention(const float* qkv, float* probs, float* y, int64_t batch, int64_t seq, int64_t heads, int64_t hidden,
               int probs_dtype) {
  if (batch == 0 || seq == 0 || heads == 0) return;
  check_room_for_blas_buffers();
  const int64_t d = hidden / heads, ld = 3 * hidden;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // The (sequence, head) pairs are independent: each range of them on its own thread, each GEMM on
  // one (a head's GEMMs are too small for OpenBLAS's helpers to pay off).
  parallel_ranges(batch * heads, 1, [&](int64_t first, int64_t last) {
    for (int64_t bh = first; bh < last; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const float* q = qkv + b * seq * ld + h * d;
      const float* k = q + hidden;
      const float* v = q + 2 * hidden;
      float* p = probs + (b * heads + h) * seq * seq;
      gemm_ld(false, true, seq, seq, d, scale, q, ld, k, ld, 0.0f, p, seq);  // S = scale · q · kᵀ
      round_to(p, seq * seq, probs_dtype);  // S, then P, in probs' dtype
      for (int64_t i = 0; i < seq; ++i) {  // softmax over the keys j ≤ i; the later ones are masked
        float* row = p + i * seq;
        const float mx = *std::max_element(row, row + i + 1);
        for (int64_t j = 0; j <= i; ++j) row[j] = std::exp(row[j] - mx);
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += row[j];
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        std::fill(row + i + 1, row + seq, 0.0f);
      }
      round_to(p, seq * seq, probs_dtype);
      gemm_ld(false, false, seq, d, seq, 1.0f, p, seq, v, ld, 0.0f, y + b * seq * hidden + h * d, hidden);  // y = P · v
    }
  });
}

void attention_backward(const float* dy, const float* qkv, const float* probs, float* dscores, float* dqkv,
                        int64_t batch, int64_t seq, int64_t heads, int64_t hidden, int probs_dtype) {
  if (batch == 0 || seq == 0 || heads == 0) return;
  check_room_for_blas_buffers();
  const int64_t d = hidden / heads, ld = 3 * hidden;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  parallel_ranges(batch * heads, 1, [&](int64_t first, int64_t last) {  // as attention's pairs
    for (int64_t bh = first; bh < last; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const float* q = qkv + b * seq * ld + h * d;
      const float* k = q + hidden;
      const float* v = q + 2 * hidden;
      float* dq = dqkv + b * seq * ld + h * d;
      float* dk = dq + hidden;
      float* dv = dq + 2 * hidden;
      const float* p = probs + (b * heads + h) * seq * seq;
      float* ds = dscores + (b * heads + h) * seq * seq;
      const float* dyh = dy + b * seq * hidden + h * d;
      gemm_ld(true, false, seq, d, seq, 1.0f, p, seq, dyh, hidden, 0.0f, dv, ld);   // dV = Pᵀ · dy
      gemm_ld(false, true, seq, seq, d, 1.0f, dyh, hidden, v, ld, 0.0f, ds, seq);   // dP = dy · vᵀ
      round_to(ds, seq * seq, probs_dtype);
      for (int64_t i = 0; i < seq; ++i) {  // the softmax's backward, row by row; masked P are 0, so dS is
        const float* prow = p + i * seq;
        float* drow = ds + i * seq;
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += static_cast<double>(drow[j]) * prow[j];
        const float dotf = static_cast<float>(dot);
        for (int64_t j = 0; j < seq; ++j) drow[j] = prow[j] * (drow[j] - dotf) * scale;
      }
      round_to(ds, seq * seq, probs_dtype);
      gemm_ld(false, false, seq, d, seq, 1.0f, ds, seq, k, ld, 0.0f, dq, ld);  // dQ = dS · k
      gemm_ld(true, false, seq, d, seq, 1.0f, ds, seq, q, ld, 0.0f, dk, ld);   // dK = dSᵀ · q
    }
  });
}

}  // namespace scalelab::kernels
