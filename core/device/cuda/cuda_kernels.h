#pragma once
// Host-side launchers for the CUDA kernels in cuda_kernels.cu. Each takes raw device pointers,
// sizes and the stream to queue on, returns without waiting, and throws scalelab::Error when the
// launch itself fails. They mirror core/kernels/cpu_kernels.h op for op; the executor (not these)
// checks dtypes and shapes and copies results back to the host.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/kernels/cpu_kernels.h"

namespace scalelab::cuda {

// Partial sums per reduction (mse): the caller provides this many doubles of scratch.
constexpr int kReduceBlocks = 1024;
// What first_bad_row holds when every label was inside [0, cols).
constexpr unsigned long long kNoBadRow = ~0ull;

// Element types. The ops that mixed precision runs in half take a storage dtype code, as
// kernels::cast: 0 = f32, 1 = f16, 2 = bf16. Half values are read as f32, computed with in f32,
// and rounded once (to nearest even) where they are stored: a tensor core's numerics, and those
// of the cpu executor. The optimizers stay f32: master weights and their state are f32.

// y[r, j] = act(y[r, j] + bias[j]) in place; y and bias of one dtype.
void bias_act(void* y, const void* bias, int dtype, int64_t rows, int64_t cols, kernels::Activation act,
              cudaStream_t stream);
// dy *= act'(y) in place; dbias (+)= Σ_r dy[r, :] (a column reduction, summed in f32); one dtype.
// scratch: bias_act_backward_scratch_floats(rows, cols) floats (the per-chunk column sums).
void bias_act_backward(void* dy, const void* y, void* dbias, int dtype, int64_t rows, int64_t cols,
                       kernels::Activation act, bool accumulate, float* scratch, cudaStream_t stream);
int64_t bias_act_backward_scratch_floats(int64_t rows, int64_t cols);

// Per-row softmax cross-entropy into row_loss[rows] (double), their sum into *loss_sum.
// dlogits (may be null; logits' dtype) = (softmax − onehot) · grad_over_rows, where
// grad_over_rows = grad_scale / rows. *first_bad_row gets the lowest row whose label is outside
// [0, cols), or kNoBadRow.
void softmax_xent(const void* logits, const int32_t* labels, void* dlogits, int dtype, int64_t rows, int64_t cols,
                  float grad_over_rows, double* row_loss, double* loss_sum, unsigned long long* first_bad_row,
                  cudaStream_t stream);
// *sum = Σ (p − t)² in double; dpred (may be null) = dpred_scale · (p − t), dpred_scale = 2 · grad_scale / n.
// partials: kReduceBlocks doubles of scratch.
void mse(const float* pred, const float* target, float* dpred, int64_t n, float dpred_scale, double* partials,
         double* sum, cudaStream_t stream);

// PyTorch's SGD (momentum_buf may be null without momentum).
void sgd(float* w, const float* g, float* momentum_buf, int64_t n, const kernels::SgdOptions& o, cudaStream_t stream);
// PyTorch's Adam, kernels::adam's formula, with the step's scalars from kernels::adam_step.
void adam(float* w, const float* g, float* m, float* v, int64_t n, const kernels::AdamStep& s, cudaStream_t stream);

// y += alpha · x. y in x's dtype, or f32 (a half gradient added into an f32 master gradient).
void axpy(float alpha, const void* x, int x_dtype, void* y, int y_dtype, int64_t n, cudaStream_t stream);
void scale(float alpha, void* x, int dtype, int64_t n, cudaStream_t stream);  // x *= alpha
// The collectives' reductions among devices of one process: dst = a + b (max(a, b) when max),
// in f32, rounded once; and x /= divisor (an average's last step). One dtype for all operands.
void reduce_pair(void* dst, const void* a, const void* b, int dtype, int64_t n, bool max, cudaStream_t stream);
void divide(void* x, float divisor, int dtype, int64_t n, cudaStream_t stream);
// Sets C = beta · C (0 when beta is 0, as BLAS reads no C then): gemm with an empty inner dimension.
void scale_or_zero(float beta, void* c, int dtype, int64_t n, cudaStream_t stream);

void fill_f32(float* x, float value, int64_t n, cudaStream_t stream);
void fill_i32(int32_t* x, int32_t value, int64_t n, cudaStream_t stream);
void fill_f16(void* x, float value, int64_t n, cudaStream_t stream);   // value rounded to nearest even
void fill_bf16(void* x, float value, int64_t n, cudaStream_t stream);  // value rounded to nearest even

// Storage dtype codes as in kernels::cast: 0 = f32, 1 = f16, 2 = bf16. Round to nearest even, and
// the same bits as the host conversions in core/tensor.h (NaN payloads included).
void cast(const void* src, int src_dtype, void* dst, int dst_dtype, int64_t n, cudaStream_t stream);

// *flag = 1 when any element is inf or nan, else 0.
void has_non_finite(const void* x, int dtype, int64_t n, int* flag, cudaStream_t stream);


// ---- the ConvNet's ops (kernels::conv2d …), f32; the executor runs the GEMMs (cuBLAS) between ----
// col {C·K·K, images·OH·OW} = im2col of `images` images at x (kernels::conv2d's layout).
void im2col(const float* x, float* col, int64_t images, const kernels::Conv2dGeometry& g, cudaStream_t stream);
// dx (images rows of C·H·W) = im2col's adjoint of dcol: each pixel gathers its terms in (kh, kw)
// order, the order the host's col2im adds them in.
void col2im(const float* dcol, float* dx, int64_t images, const kernels::Conv2dGeometry& g, cudaStream_t stream);
// y (images rows of OC·OH·OW) = act(out + b), out the GEMM's {OC, images·OH·OW}.
void conv_bias_act(const float* out, const float* b, float* y, int64_t images, const kernels::Conv2dGeometry& g,
                   kernels::Activation act, cudaStream_t stream);
// dy ← dy ⊙ act'(y) in place over the whole batch; db (+)= its sum per channel (in double).
void conv_bias_backward(float* dy, const float* y, float* db, const kernels::Conv2dGeometry& g,
                        kernels::Activation act, bool accumulate, cudaStream_t stream);
// dyt {OC, images·OH·OW} = dy's `images` rows (OC·OH·OW each), the GEMM's layout.
void conv_rows_to_columns(const float* dy, float* dyt, int64_t images, const kernels::Conv2dGeometry& g,
                          cudaStream_t stream);
// kernels::max_pool2d and its backward (a gather per input pixel, in the host's order).
void max_pool2d(const float* x, float* y, int32_t* indices, const kernels::Pool2dGeometry& g, cudaStream_t stream);
void max_pool2d_backward(const float* dy, const int32_t* indices, float* dx, const kernels::Pool2dGeometry& g,
                         cudaStream_t stream);
// kernels::dropout: the same hash, the same mask.
void dropout(const float* x, float* y, int64_t rows, int64_t cols, const kernels::DropoutMask& m, cudaStream_t stream);

}  // namespace scalelab::cuda

// ---- transformer ops (f32), mirroring the host kernels in core/kernels/cpu_kernels.h ----
namespace scalelab::cuda {

// One block per row: mean and variance in double (two passes), y, mean[rows], rstd[rows].
void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                int64_t rows, int64_t cols, float eps, cudaStream_t stream);
// dx per row (a block per row); dgamma, dbeta (+)= column sums over the rows in order, in double, a
// thread per column: deterministic, and the host's order.
void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t cols, bool accumulate,
                         cudaStream_t stream);
// GELU and the causal softmax take a storage dtype code (0 = f32, 1 = f16, 2 = bf16) for all their
// tensors: read as f32, computed in f32, rounded once where stored.
void gelu(const void* x, void* y, int dtype, int64_t n, cudaStream_t stream);
// Φ(x) read off the forward's output as y / x, as on the host. dx may be dy.
void gelu_backward(const void* dy, const void* x, const void* y, void* dx, int dtype, int64_t n, cudaStream_t stream);
// *first_bad gets the lowest flat index b·seq + t whose id is not a whole number in [0, vocab),
// or kNoBadRow.
void check_token_ids(const float* ids, int64_t n, int64_t vocab, unsigned long long* first_bad, cudaStream_t stream);
// Ids already checked (check_token_ids).
void embedding(const float* ids, const float* wte, const float* wpe, float* out, int64_t batch, int64_t seq,
               int64_t hidden, cudaStream_t stream);
// No atomics: a thread per (column, slice of the vocabulary) walks the tokens in order and adds
// those whose id falls in its slice, so every dwte element sums its tokens in the host's order;
// dwpe a thread per (position, column) over the batch in order. The same bits as the host.
void embedding_backward(const float* dout, const float* ids, float* dwte, float* dwpe, int64_t batch, int64_t seq,
                        int64_t vocab, int64_t hidden, bool accumulate, cudaStream_t stream);
// scores {rows, seq}, rows = B·heads·seq, row r the query r % seq: the causal softmax in place
// (zeros where key > query).
void causal_softmax(void* scores, int dtype, int64_t rows, int64_t seq, cudaStream_t stream);
// dscores holds dP; becomes dS = P ⊙ (dP − Σ_j dP ⊙ P) · scale.
void causal_softmax_backward(const void* probs, void* dscores, int dtype, int64_t rows, int64_t seq, float scale,
                             cudaStream_t stream);

}  // namespace scalelab::cuda
