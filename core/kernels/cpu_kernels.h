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


// ---- the ConvNet's ops: convolution, max pooling, dropout ----------------------------------
// Images are rows of C·H·W floats in PyTorch's NCHW order. The CUDA kernels mirror these.

// A 2-D convolution's sizes: N images of C×H×W, OC filters of C×K×K, zero padding P on every side.
struct Conv2dGeometry {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kernel = 1, stride = 1, padding = 0;
  int64_t out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
  int64_t patch() const { return in_channels * kernel * kernel; }  // one column of im2col: C·K·K
  int64_t pixels() const { return out_height() * out_width(); }    // outputs per channel: OH·OW
};

// Convolution is computed as a GEMM over im2col's matrix, a chunk of images at a time: the
// workspace holds the chunk's columns (C·K·K × images·OH·OW) and its GEMM output before it is
// transposed into NCHW (OC × images·OH·OW). Chunks keep the workspace near a fixed size, so one
// large GEMM (fast on every core) replaces a small one per image.
int64_t conv2d_chunk_images(const Conv2dGeometry& g);
int64_t conv2d_workspace_floats(const Conv2dGeometry& g);

// y = act(conv(x, W) + b): x {N, C·H·W}, W {OC, C, K, K} (PyTorch's layout), b {OC}, y {N, OC·OH·OW}.
void conv2d(const float* x, const float* w, const float* b, float* y, const Conv2dGeometry& g, Activation act,
            float* workspace);
// dy ← dy ⊙ act'(y) in place (y is the layer's output); db (+)= Σ over images and pixels of dy;
// dW (+)= Σ_n dy_n · im2col(x_n)ᵀ. Run it before conv2d_backward_input, which reads the masked dy.
void conv2d_backward_weight(const float* x, const float* y, float* dy, float* dw, float* db, const Conv2dGeometry& g,
                            Activation act, bool accumulate, float* workspace);
// dx = col2im(Wᵀ · dy_n) per image: every input pixel gets the sum of what its windows sent back.
void conv2d_backward_input(const float* dy, const float* w, float* dx, const Conv2dGeometry& g, float* workspace);

// Max pooling without padding: windows of K×K every S pixels, over each channel of each image.
struct Pool2dGeometry {
  int64_t batch = 0, channels = 0, height = 0, width = 0, kernel = 2, stride = 2;
  int64_t out_height() const { return (height - kernel) / stride + 1; }
  int64_t out_width() const { return (width - kernel) / stride + 1; }
};
// y = the max of each window; indices = where it was, as h·W + w within its channel (PyTorch's
// return_indices). Ties: the first in row-major order wins; a NaN wins (the last one), as in
// PyTorch's CPU kernel.
void max_pool2d(const float* x, float* y, int32_t* indices, const Pool2dGeometry& g);
// dx = 0, then each dy is added at its window's saved index (overlapping windows add up).
void max_pool2d_backward(const float* dy, const int32_t* indices, float* dx, const Pool2dGeometry& g);

// Dropout whose mask is a function of where an element sits in the global batch, not of which
// device computes it: the hash of (seed, step, global row, column). A sample keeps its mask
// whichever replica, micro-batch or pipeline stage it lands on, and backward recomputes it.
//
// Where a row sits: a replica numbers its rows 0, 1, … across the step's forwards (first_row is
// the tensor's first), `rows_per_sample` rows to a sample (a GPT's T tokens, an image's 1); its
// local sample j is global sample sample_offset + j·sample_stride — a DDP rank r of N holds the
// global batch's samples r, r+N, r+2N, … (offset r, stride N); single, a pipeline and tensor
// parallel hold them all (0, 1). The hash takes the global row: global sample · rows_per_sample + t.
struct DropoutMask {
  float p = 0;             // the probability of dropping an element, in [0, 1]
  uint64_t seed = 0;
  int64_t step = 0;        // the training step: each step draws a new mask
  int64_t first_row = 0;   // the replica's row number of the tensor's first row
  int64_t sample_offset = 0, sample_stride = 1, rows_per_sample = 1;
  // Kept elements are scaled by 1 / (1 − p) (0 when p = 1, where nothing is kept), as PyTorch's.
  float scale() const { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }
  // An element is kept when the top 32 bits of its hash are at least this: probability 1 − p.
  uint64_t threshold() const;
};
// y = x ⊙ mask · scale, x {rows, cols}; the backward is the same op on dy (y may be x).
void dropout(const float* x, float* y, int64_t rows, int64_t cols, const DropoutMask& m);

// The hash of one element, written once for the host and the GPU (cuda_kernels.cu): SplitMix64's
// finalizer over the four coordinates in turn.
#if defined(__CUDACC__)
#define SCALELAB_HOST_DEVICE __host__ __device__
#else
#define SCALELAB_HOST_DEVICE
#endif
SCALELAB_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
SCALELAB_HOST_DEVICE inline uint64_t dropout_hash(uint64_t seed, int64_t step, int64_t row, int64_t col) {
  uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
  h = mix64(h ^ static_cast<uint64_t>(step));
  h = mix64(h ^ static_cast<uint64_t>(row));
  return mix64(h ^ static_cast<uint64_t>(col));
}
// Row r of the tensor, as the global batch numbers it (see DropoutMask).
SCALELAB_HOST_DEVICE inline int64_t dropout_global_row(int64_t first_row, int64_t r, int64_t sample_offset,
                                                       int64_t sample_stride, int64_t rows_per_sample) {
  const int64_t local = first_row + r;
  return (sample_offset + local / rows_per_sample * sample_stride) * rows_per_sample + local % rows_per_sample;
}
SCALELAB_HOST_DEVICE inline bool dropout_keeps(uint64_t threshold, uint64_t seed, int64_t step, int64_t row,
                                               int64_t col) {
  return (dropout_hash(seed, step, row, col) >> 32) >= threshold;
}
#undef SCALELAB_HOST_DEVICE

}  // namespace scalelab::kernels

// ---- transformer ops: LayerNorm, GELU, token + position embedding, causal self-attention ----
namespace scalelab::kernels {

// Per row of `cols`: y = (x − mean) · rstd · gamma + beta, rstd = 1 / √(var + eps) (the biased
// variance, as torch.nn.LayerNorm). mean[rows] and rstd[rows] are kept for the backward.
void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                int64_t rows, int64_t cols, float eps);
// dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂)) with g = dy ⊙ gamma, x̂ = (x − mean) · rstd;
// dgamma (+)= Σ_r dy ⊙ x̂, dbeta (+)= Σ_r dy (column sums in double, rows in order).
void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t cols, bool accumulate);

// The exact GELU of torch.nn.GELU(): y = x · Φ(x), Φ(x) = ½ · (1 + erf(x / √2)).
void gelu(const float* x, float* y, int64_t n);
// dx = dy · (Φ(x) + x · φ(x)), φ the standard normal density; Φ(x) read off the forward's y as
// y / x (½ at x = 0), so no erf is computed again. dx may be dy (in place).
void gelu_backward(const float* dy, const float* x, const float* y, float* dx, int64_t n);

// out[b·seq + t, :] = wte[ids[b, t], :] + wpe[t, :]. ids hold whole numbers in [0, vocab) as
// floats (a batch row is a sequence); any other value throws, naming the batch row and position.
void embedding(const float* ids, const float* wte, const float* wpe, float* out, int64_t batch, int64_t seq,
               int64_t vocab, int64_t hidden);
// dwte (+)= scatter-add of dout's rows by id, dwpe (+)= Σ_b dout[b·seq + t, :]; rows in order
// (deterministic: the same sums in the same order every time).
void embedding_backward(const float* dout, const float* ids, float* dwte, float* dwpe, int64_t batch, int64_t seq,
                        int64_t vocab, int64_t hidden, bool accumulate);

// Causal multi-head self-attention, per sequence b and head h (d = hidden / heads, scale = 1/√d):
//   q, k, v = columns h·d … (h+1)·d of the q, k and v thirds of qkv {batch·seq, 3·hidden}
//   S = scale · q · kᵀ, masked where key > query; P = softmax(S) row by row; y[:, h·d…] = P · v
// probs {batch·heads·seq, seq} keeps P (zeros above the diagonal) for the backward. An sgemm per
// (b, h) reads q, k and v in place through the leading dimension 3·hidden: no head-split copies.
// probs_dtype (0 = f32, 1 = f16, 2 = bf16): P is rounded to it before P · v reads it, as a GPU that
// stores P in half does (mixed precision).
void attention(const float* qkv, float* probs, float* y, int64_t batch, int64_t seq, int64_t heads, int64_t hidden,
               int probs_dtype = 0);
// dV = Pᵀ · dy,  dP = dy · vᵀ,  dS = P ⊙ (dP − Σ_j dP ⊙ P) · scale,  dQ = dS · k,  dK = dSᵀ · q,
// written into dqkv {batch·seq, 3·hidden}; dscores (probs' shape) is the workspace for dP and dS,
// each rounded to probs_dtype where a half workspace would hold it.
void attention_backward(const float* dy, const float* qkv, const float* probs, float* dscores, float* dqkv,
                        int64_t batch, int64_t seq, int64_t heads, int64_t hidden, int probs_dtype = 0);

}  // namespace scalelab::kernels
