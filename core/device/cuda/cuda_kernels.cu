// The CUDA kernels behind CudaExecutor, one per host kernel in core/kernels/cpu_kernels.cpp, with
// the same formulas in the same precision (double where the host accumulates in double), so the
// two backends agree to rounding. The ops mixed precision runs in half are templated on the
// storage dtype (f32, f16, bf16): half values are read as f32, computed with in f32 and rounded
// once when stored, as the cpu executor does. Device code and thin launchers only: the executor
// does the rest.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/device/cuda/cuda_check.h"
#include "core/device/cuda/cuda_kernels.h"

namespace scalelab::cuda {

namespace {

constexpr int kThreads = 256;         // per block; a multiple of 32 (block_all_reduce relies on it)
constexpr int64_t kMaxBlocks = 8192;  // grid-stride loops cover the rest

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks)); }

// A bad launch (configuration, missing kernel image for this GPU) shows up in cudaGetLastError.
#define CHECK_LAUNCH(kernel)                                                                  \
  do {                                                                                        \
    const cudaError_t launch_err = cudaGetLastError();                                        \
    if (launch_err != cudaSuccess)                                                            \
      ::scalelab::detail::throw_cuda_error(launch_err, "launch of " kernel, __FILE__, __LINE__); \
  } while (0)

// ---- reductions ---------------------------------------------------------------------------

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Every thread of the block gets op over all threads' v. Warp shuffles, then one value per warp
// through shared memory. Callers must reach it with the whole block.
template <typename T, typename Op>
__device__ T block_all_reduce(T v, Op op) {
  __shared__ T partial[32];
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // a previous call's readers of partial[0] are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T acc = partial[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) acc = op(acc, partial[w]);
    partial[0] = acc;
  }
  __syncthreads();
  return partial[0];
}

// One block: *out = Σ x[0..n). Fixed order for a given n, so the loss is deterministic.
__global__ void sum_kernel(const double* x, int64_t n, double* out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
  acc = block_all_reduce(acc, SumOp{});
  if (threadIdx.x == 0) *out = acc;
}

// ---- conversions: the intrinsics round to nearest even; NaNs are spelled as core/tensor.cpp does ----

__device__ uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
}

__device__ float f16_bits_to_f32(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0)  // nan: keep sign and payload, as the host does
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<uint32_t>(h & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h));
}

__device__ uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__device__ float bf16_bits_to_f32(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }

__device__ float load_as_f32(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case 1: return f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    case 2: return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ void store_from_f32(void* p, int dtype, int64_t i, float v) {
  switch (dtype) {
    case 1: static_cast<uint16_t*>(p)[i] = f32_to_f16_bits(v); break;
    case 2: static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

// Typed access to storage of dtype code D (0 = f32, 1 = f16, 2 = bf16), known at compile time:
// read as f32, stored rounded to nearest even. The f32 instantiations are plain loads and stores.
template <int D>
__device__ __forceinline__ float ld(const void* p, int64_t i) {
  return load_as_f32(p, D, i);
}
template <int D>
__device__ __forceinline__ void st(void* p, int64_t i, float v) {
  store_from_f32(p, D, i, v);
}

// Calls launch(std::integral_constant<int, D>) for the dtype code: one kernel instantiation per dtype.
template <typename Launch>
void with_dtype(int dtype, Launch&& launch) {
  switch (dtype) {
    case 1: launch(std::integral_constant<int, 1>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    default: launch(std::integral_constant<int, 0>{});
  }
}

// ---- kernels ------------------------------------------------------------------------------

// for (i over [0, n) in steps of the whole grid): correct for any n and any grid size.
#define GRID_STRIDE(i, n)                                                                   \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <int D>
__global__ void bias_act_kernel(void* y, const void* bias, int64_t n, int64_t cols, bool relu) {
  GRID_STRIDE(i, n) {
    const float v = ld<D>(y, i) + ld<D>(bias, i % cols);
    st<D>(y, i, relu ? (v < 0.0f ? 0.0f : v) : v);  // std::max(v, 0.0f), which keeps a nan
  }
}

// A block owns 32 adjacent columns (coalesced reads) and kRowLanes threads walk down the rows;
// the kRowLanes partial sums per column (f32, whatever the dtype) then meet in shared memory.
constexpr int kRowLanes = 8;
constexpr int kUnroll = 8;  // rows in flight per thread in bias_act_backward
// dbias is a column sum over every row: one block per 32 columns alone would leave most of the GPU
// idle and stream each column's rows through a single block. So the rows are cut into chunks too
// (blockIdx.y): each block sums its chunk of its 32 columns into partials[chunk][col], and a second
// kernel adds the chunks in order. Deterministic: no atomics, a fixed order.
template <int D>
__global__ void bias_act_backward_kernel(void* dy, const void* y, float* partials, int64_t rows, int64_t cols,
                                         int64_t rows_per_chunk, bool relu) {
  __shared__ float partial[kRowLanes][33];  // 33: no bank conflicts on the column-wise reads
  const int64_t row_first = blockIdx.y * rows_per_chunk;
  const int64_t row_last = row_first + rows_per_chunk < rows ? row_first + rows_per_chunk : rows;
  for (int64_t first = blockIdx.x * 32ll; first < cols; first += gridDim.x * 32ll) {
    const int64_t j = first + threadIdx.x;
    float acc = 0.0f;
    if (j < cols) {
      // kUnroll rows' loads are issued before any is used: one row at a time, each load waited for
      // the last (dy may be written), and the kernel ran at a tenth of the memory's bandwidth.
      for (int64_t r0 = row_first + threadIdx.y; r0 < row_last; r0 += kRowLanes * kUnroll) {
        float d[kUnroll], act[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t r = r0 + u * kRowLanes;
          d[u] = r < row_last ? ld<D>(dy, r * cols + j) : 0.0f;
          act[u] = relu && r < row_last ? ld<D>(y, r * cols + j) : 1.0f;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t r = r0 + u * kRowLanes;
          if (r >= row_last) break;
          if (relu && !(act[u] > 0.0f)) {
            d[u] = 0.0f;
            st<D>(dy, r * cols + j, 0.0f);
          }
          acc += d[u];  // rows in increasing order, as one at a time
        }
      }
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
      float sum = 0.0f;
      for (int k = 0; k < kRowLanes; ++k) sum += partial[k][threadIdx.x];
      partials[blockIdx.y * cols + j] = sum;
    }
    __syncthreads();
  }
}

template <int D>
__global__ void bias_sum_chunks_kernel(const float* partials, int64_t chunks, void* dbias, int64_t cols,
                                       bool accumulate) {
  GRID_STRIDE(j, cols) {
    float sum = accumulate ? ld<D>(dbias, j) : 0.0f;
    for (int64_t c = 0; c < chunks; ++c) sum += partials[c * cols + j];
    st<D>(dbias, j, sum);
  }
}

// One block per row. The label check is the same for the whole block, so the reductions below
// are reached by every thread or by none. Half logits are read as f32; the gradient is rounded
// once into dlogits' (the logits') dtype.
template <int D>
__global__ void softmax_xent_kernel(const void* logits, const int32_t* labels, void* dlogits, int64_t rows,
                                    int64_t cols, float grad_over_rows, double* row_loss,
                                    unsigned long long* first_bad_row) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t row = r * cols;
    const int32_t label = labels[r];
    if (label < 0 || label >= cols) {
      if (threadIdx.x == 0) {
        atomicMin(first_bad_row, static_cast<unsigned long long>(r));
        row_loss[r] = 0;
      }
      continue;
    }
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mx = fmaxf(mx, ld<D>(logits, row + j));
    mx = block_all_reduce(mx, MaxOp{});
    double sum = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      sum += exp(static_cast<double>(ld<D>(logits, row + j) - mx));
    sum = block_all_reduce(sum, SumOp{});
    const double log_sum = log(sum);
    if (threadIdx.x == 0) row_loss[r] = log_sum - static_cast<double>(ld<D>(logits, row + label) - mx);
    if (dlogits) {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        const float p = static_cast<float>(exp(static_cast<double>(ld<D>(logits, row + j) - mx) - log_sum));
        st<D>(dlogits, row + j, (p - (j == label ? 1.0f : 0.0f)) * grad_over_rows);
      }
    }
  }
}

// Each block writes its partial Σ(p − t)² to partials[blockIdx.x].
__global__ void mse_kernel(const float* pred, const float* target, float* dpred, int64_t n, float dpred_scale,
                           double* partials) {
  double acc = 0;
  GRID_STRIDE(i, n) {
    const float d = pred[i] - target[i];
    acc += static_cast<double>(d) * d;
    if (dpred) dpred[i] = dpred_scale * d;
  }
  acc = block_all_reduce(acc, SumOp{});
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sgd_kernel(float* w, const float* g, float* buf, int64_t n, float lr, float momentum,
                           float weight_decay) {
  GRID_STRIDE(i, n) {
    float d = g[i] + weight_decay * w[i];
    if (buf) {
      buf[i] = momentum * buf[i] + d;
      d = buf[i];
    }
    w[i] -= lr * d;
  }
}

__global__ void adam_kernel(float* w, const float* g, float* m, float* v, int64_t n, kernels::AdamStep s) {
  GRID_STRIDE(i, n) {  // kernels::adam's formula, operation for operation (no fused multiply-adds)
    const float gi = __fadd_rn(g[i], __fmul_rn(s.weight_decay, w[i]));
    m[i] = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(s.one_minus_beta1, gi));
    v[i] = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, gi), gi));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v[i]), s.bias_correction2_sqrt), s.eps);
    w[i] = __fadd_rn(w[i], __fdiv_rn(__fmul_rn(-s.step_size, m[i]), denom));
  }
}

template <int DX, int DY>
__global__ void axpy_kernel(float alpha, const void* x, void* y, int64_t n) {
  GRID_STRIDE(i, n) st<DY>(y, i, ld<DY>(y, i) + alpha * ld<DX>(x, i));
}

template <int D>
__global__ void scale_kernel(float alpha, void* x, int64_t n) {
  GRID_STRIDE(i, n) st<D>(x, i, ld<D>(x, i) * alpha);
}

template <int D>
__global__ void scale_or_zero_kernel(float beta, void* x, int64_t n) {
  GRID_STRIDE(i, n) st<D>(x, i, beta == 0.0f ? 0.0f : beta * ld<D>(x, i));
}

// The collectives' reductions (comm::reduce_pair and finish_avg on the host): a pair summed or
// maxed in f32 and rounded once; the average divides, as the host does.
template <int D>
__global__ void reduce_pair_kernel(void* dst, const void* a, const void* b, int64_t n, bool max) {
  GRID_STRIDE(i, n) {
    const float x = ld<D>(a, i), y = ld<D>(b, i);
    st<D>(dst, i, max ? (x < y ? y : x) : x + y);  // std::max, as the host
  }
}

template <int D>
__global__ void divide_kernel(void* x, float divisor, int64_t n) {
  GRID_STRIDE(i, n) st<D>(x, i, ld<D>(x, i) / divisor);
}

template <typename T>
__global__ void fill_kernel(T* x, T value, int64_t n) {
  GRID_STRIDE(i, n) x[i] = value;
}

// f16 / bf16: every thread rounds the same value; cheaper than a host round trip.
__global__ void fill_half_kernel(uint16_t* x, float value, int dtype, int64_t n) {
  const uint16_t bits = dtype == 1 ? f32_to_f16_bits(value) : f32_to_bf16_bits(value);
  GRID_STRIDE(i, n) x[i] = bits;
}

__global__ void cast_kernel(const void* src, int src_dtype, void* dst, int dst_dtype, int64_t n) {
  GRID_STRIDE(i, n) store_from_f32(dst, dst_dtype, i, load_as_f32(src, src_dtype, i));
}

template <int D>
__global__ void has_non_finite_kernel(const void* x, int64_t n, int* flag) {
  GRID_STRIDE(i, n) {
    if (!isfinite(ld<D>(x, i))) *flag = 1;  // racing writers all write 1; a half inf is an f32 inf
  }
}

#undef GRID_STRIDE

}  // namespace

// ---- launchers ----------------------------------------------------------------------------

void bias_act(void* y, const void* bias, int dtype, int64_t rows, int64_t cols, kernels::Activation act,
              cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  with_dtype(dtype, [&](auto d) {
    bias_act_kernel<decltype(d)::value><<<blocks_for(n), kThreads, 0, stream>>>(y, bias, n, cols,
                                                                               act == kernels::Activation::relu);
  });
  CHECK_LAUNCH("bias_act_kernel");
}

namespace {
constexpr int64_t kRowsPerChunk = 256;
constexpr int64_t kMaxChunks = 65535;  // gridDim.y's limit
int64_t rows_per_chunk(int64_t rows) { return std::max(kRowsPerChunk, (rows + kMaxChunks - 1) / kMaxChunks); }
int64_t row_chunks(int64_t rows) { return (rows + rows_per_chunk(rows) - 1) / rows_per_chunk(rows); }
}  // namespace

int64_t bias_act_backward_scratch_floats(int64_t rows, int64_t cols) { return std::max<int64_t>(row_chunks(rows) * cols, 1); }

void bias_act_backward(void* dy, const void* y, void* dbias, int dtype, int64_t rows, int64_t cols,
                       kernels::Activation act, bool accumulate, float* scratch, cudaStream_t stream) {
  if (cols == 0) return;  // rows == 0 still runs: dbias is zeroed unless accumulating
  const int64_t chunks = row_chunks(rows);
  const int col_blocks = static_cast<int>(std::min<int64_t>((cols + 31) / 32, kMaxBlocks));
  with_dtype(dtype, [&](auto d) {
    if (chunks > 0)
      bias_act_backward_kernel<decltype(d)::value>
          <<<dim3(col_blocks, static_cast<unsigned>(chunks)), dim3(32, kRowLanes), 0, stream>>>(
              dy, y, scratch, rows, cols, rows_per_chunk(rows), act == kernels::Activation::relu);
    bias_sum_chunks_kernel<decltype(d)::value><<<blocks_for(cols), kThreads, 0, stream>>>(scratch, chunks, dbias, cols,
                                                                                         accumulate);
  });
  CHECK_LAUNCH("bias_act_backward_kernel");
}

void softmax_xent(const void* logits, const int32_t* labels, void* dlogits, int dtype, int64_t rows, int64_t cols,
                  float grad_over_rows, double* row_loss, double* loss_sum, unsigned long long* first_bad_row,
                  cudaStream_t stream) {
  SCALELAB_CUDA_CHECK(cudaMemsetAsync(first_bad_row, 0xff, sizeof(*first_bad_row), stream));  // = kNoBadRow
  if (rows > 0) {
    const int blocks = static_cast<int>(std::min<int64_t>(rows, kMaxBlocks));
    with_dtype(dtype, [&](auto d) {
      softmax_xent_kernel<decltype(d)::value><<<blocks, kThreads, 0, stream>>>(
          logits, labels, dlogits, rows, cols, grad_over_rows, row_loss, first_bad_row);
    });
    CHECK_LAUNCH("softmax_xent_kernel");
  }
  sum_kernel<<<1, kThreads, 0, stream>>>(row_loss, rows, loss_sum);
  CHECK_LAUNCH("sum_kernel");
}

void mse(const float* pred, const float* target, float* dpred, int64_t n, float dpred_scale, double* partials,
         double* sum, cudaStream_t stream) {
  const int blocks = std::max(1, std::min(blocks_for(n), kReduceBlocks));
  mse_kernel<<<blocks, kThreads, 0, stream>>>(pred, target, dpred, n, dpred_scale, partials);
  CHECK_LAUNCH("mse_kernel");
  sum_kernel<<<1, kThreads, 0, stream>>>(partials, blocks, sum);
  CHECK_LAUNCH("sum_kernel");
}

void sgd(float* w, const float* g, float* momentum_buf, int64_t n, const kernels::SgdOptions& o, cudaStream_t stream) {
  if (n == 0) return;
  float* buf = o.momentum != 0.0f ? momentum_buf : nullptr;  // as the host: no momentum, no buffer
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, buf, n, o.lr, o.momentum, o.weight_decay);
  CHECK_LAUNCH("sgd_kernel");
}

void adam(float* w, const float* g, float* m, float* v, int64_t n, const kernels::AdamStep& s, cudaStream_t stream) {
  if (n == 0) return;
  adam_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, m, v, n, s);
  CHECK_LAUNCH("adam_kernel");
}

void axpy(float alpha, const void* x, int x_dtype, void* y, int y_dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_dtype(x_dtype, [&](auto dx) {
    with_dtype(y_dtype, [&](auto dy) {
      axpy_kernel<decltype(dx)::value, decltype(dy)::value><<<blocks_for(n), kThreads, 0, stream>>>(alpha, x, y, n);
    });
  });
  CHECK_LAUNCH("axpy_kernel");
}

void scale(float alpha, void* x, int dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_dtype(dtype, [&](auto d) {
    scale_kernel<decltype(d)::value><<<blocks_for(n), kThreads, 0, stream>>>(alpha, x, n);
  });
  CHECK_LAUNCH("scale_kernel");
}

void reduce_pair(void* dst, const void* a, const void* b, int dtype, int64_t n, bool max, cudaStream_t stream) {
  if (n == 0) return;
  with_dtype(dtype, [&](auto d) {
    reduce_pair_kernel<decltype(d)::value><<<blocks_for(n), kThreads, 0, stream>>>(dst, a, b, n, max);
  });
  CHECK_LAUNCH("reduce_pair_kernel");
}

void divide(void* x, float divisor, int dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_dtype(dtype, [&](auto d) {
    divide_kernel<decltype(d)::value><<<blocks_for(n), kThreads, 0, stream>>>(x, divisor, n);
  });
  CHECK_LAUNCH("divide_kernel");
}

void scale_or_zero(float beta, void* c, int dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_dtype(dtype, [&](auto d) {
    scale_or_zero_kernel<decltype(d)::value><<<blocks_for(n), kThreads, 0, stream>>>(beta, c, n);
  });
  CHECK_LAUNCH("scale_or_zero_kernel");
}

void fill_f32(float* x, float value, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(x, value, n);
  CHECK_LAUNCH("fill_kernel<float>");
}

void fill_i32(int32_t* x, int32_t value, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<int32_t><<<blocks_for(n), kThreads, 0, stream>>>(x, value, n);
  CHECK_LAUNCH("fill_kernel<int32_t>");
}

void fill_f16(void* x, float value, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(x), value, 1, n);
  CHECK_LAUNCH("fill_half_kernel");
}

void fill_bf16(void* x, float value, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(x), value, 2, n);
  CHECK_LAUNCH("fill_half_kernel");
}

void cast(const void* src, int src_dtype, void* dst, int dst_dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * (src_dtype == 0 ? 4 : 2),
                                        cudaMemcpyDeviceToDevice, stream));
    return;
  }
  cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, src_dtype, dst, dst_dtype, n);
  CHECK_LAUNCH("cast_kernel");
}

void has_non_finite(const void* x, int dtype, int64_t n, int* flag, cudaStream_t stream) {
  SCALELAB_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
  if (n == 0) return;
  with_dtype(dtype, [&](auto d) {
    has_non_finite_kernel<decltype(d)::value><<<blocks_for(n), kThreads, 0, stream>>>(x, n, flag);
  });
  CHECK_LAUNCH("has_non_finite_kernel");
}


// ---- the ConvNet's ops ----------------------------------------------------------------------

namespace {

// As above: for (i over [0, n) in steps of the whole grid).
#define GRID_STRIDE(i, n)                                                                   \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void im2col_kernel(const float* x, float* col, int64_t images, int64_t C, int64_t H, int64_t W,
                              int64_t K, int64_t S, int64_t P, int64_t OH, int64_t OW) {
  const int64_t L = OH * OW, cols = images * L;
  GRID_STRIDE(e, C * K * K * cols) {
    const int64_t r = e / cols, j = e % cols;
    const int64_t c = r / (K * K), kh = (r / K) % K, kw = r % K;
    const int64_t i = j / L, oh = (j % L) / OW, ow = j % OW;
    const int64_t ih = oh * S - P + kh, iw = ow * S - P + kw;
    col[e] = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[((i * C + c) * H + ih) * W + iw] : 0.0f;
  }
}

__global__ void col2im_kernel(const float* dcol, float* dx, int64_t images, int64_t C, int64_t H, int64_t W,
                              int64_t K, int64_t S, int64_t P, int64_t OH, int64_t OW) {
  const int64_t L = OH * OW, cols = images * L;
  GRID_STRIDE(e, images * C * H * W) {
    const int64_t i = e / (C * H * W), c = (e / (H * W)) % C, ih = (e / W) % H, iw = e % W;
    float sum = 0.0f;
    for (int64_t kh = 0; kh < K; ++kh) {
      const int64_t th = ih + P - kh;  // = oh · S for the window that reads this pixel through kh
      if (th < 0 || th % S != 0 || th / S >= OH) continue;
      for (int64_t kw = 0; kw < K; ++kw) {
        const int64_t tw = iw + P - kw;
        if (tw < 0 || tw % S != 0 || tw / S >= OW) continue;
        sum += dcol[((c * K + kh) * K + kw) * cols + i * L + (th / S) * OW + tw / S];
      }
    }
    dx[e] = sum;
  }
}

__global__ void conv_bias_act_kernel(const float* out, const float* b, float* y, int64_t images, int64_t OC,
                                     int64_t L, bool relu) {
  GRID_STRIDE(e, images * OC * L) {
    const int64_t i = e / (OC * L), oc = (e / L) % OC, j = e % L;
    const float v = out[(oc * images + i) * L + j] + b[oc];
    y[e] = relu ? (v < 0.0f ? 0.0f : v) : v;  // std::max(v, 0.0f), as the host
  }
}

// One block per channel: the mask over its N·L elements, their sum in double.
__global__ void conv_bias_backward_kernel(float* dy, const float* y, float* db, int64_t N, int64_t OC, int64_t L,
                                          bool relu, bool accumulate) {
  const int64_t oc = blockIdx.x;
  double acc = 0;
  for (int64_t t = threadIdx.x; t < N * L; t += blockDim.x) {
    const int64_t at = (t / L) * OC * L + oc * L + t % L;
    if (relu && !(y[at] > 0.0f)) dy[at] = 0.0f;
    acc += dy[at];
  }
  acc = block_all_reduce(acc, SumOp{});
  if (threadIdx.x == 0) db[oc] = static_cast<float>(acc) + (accumulate ? db[oc] : 0.0f);
}

__global__ void conv_rows_to_columns_kernel(const float* dy, float* dyt, int64_t images, int64_t OC, int64_t L) {
  GRID_STRIDE(e, OC * images * L) {
    const int64_t oc = e / (images * L), i = (e / L) % images, j = e % L;
    dyt[e] = dy[(i * OC + oc) * L + j];
  }
}

__global__ void max_pool2d_kernel(const float* x, float* y, int32_t* indices, int64_t planes, int64_t H, int64_t W,
                                  int64_t K, int64_t S, int64_t OH, int64_t OW) {
  GRID_STRIDE(e, planes * OH * OW) {
    const int64_t plane = e / (OH * OW), oh = (e / OW) % OH, ow = e % OW;
    const float* in = x + plane * H * W;
    int64_t best = oh * S * W + ow * S;
    float value = in[best];
    for (int64_t kh = 0; kh < K; ++kh)
      for (int64_t kw = 0; kw < K; ++kw) {
        const int64_t at = (oh * S + kh) * W + ow * S + kw;
        if (in[at] > value || isnan(in[at])) {
          value = in[at];
          best = at;
        }
      }
    y[e] = value;
    indices[e] = static_cast<int32_t>(best);
  }
}

// Each input pixel sums the dy of the windows that chose it, in the order the host adds them.
__global__ void max_pool2d_backward_kernel(const float* dy, const int32_t* indices, float* dx, int64_t planes,
                                           int64_t H, int64_t W, int64_t K, int64_t S, int64_t OH, int64_t OW) {
  GRID_STRIDE(e, planes * H * W) {
    const int64_t plane = e / (H * W), ih = (e / W) % H, iw = e % W, here = ih * W + iw;
    // The windows holding (ih, iw): oh · S ≤ ih < oh · S + K.
    const int64_t oh_first = ih >= K ? (ih - K) / S + 1 : 0, ow_first = iw >= K ? (iw - K) / S + 1 : 0;
    const int64_t oh_last = ih / S < OH ? ih / S : OH - 1, ow_last = iw / S < OW ? iw / S : OW - 1;
    float sum = 0.0f;
    for (int64_t oh = oh_first; oh <= oh_last; ++oh)
      for (int64_t ow = ow_first; ow <= ow_last; ++ow) {
        const int64_t j = plane * OH * OW + oh * OW + ow;
        if (indices[j] == here) sum += dy[j];
      }
    dx[e] = sum;
  }
}

__global__ void dropout_kernel(const float* x, float* y, int64_t rows, int64_t cols, uint64_t threshold,
                               uint64_t seed, int64_t step, int64_t first_row, int64_t sample_offset,
                               int64_t sample_stride, int64_t rows_per_sample, float scale) {
  GRID_STRIDE(e, rows * cols) {
    const int64_t row = kernels::dropout_global_row(first_row, e / cols, sample_offset, sample_stride, rows_per_sample);
    const bool keep = kernels::dropout_keeps(threshold, seed, step, row, e % cols);
    y[e] = keep ? x[e] * scale : 0.0f;
  }
}

#undef GRID_STRIDE

}  // namespace

void im2col(const float* x, float* col, int64_t images, const kernels::Conv2dGeometry& g, cudaStream_t stream) {
  const int64_t n = g.patch() * images * g.pixels();
  if (n == 0) return;
  im2col_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, col, images, g.in_channels, g.height, g.width, g.kernel,
                                                        g.stride, g.padding, g.out_height(), g.out_width());
  CHECK_LAUNCH("im2col_kernel");
}

void col2im(const float* dcol, float* dx, int64_t images, const kernels::Conv2dGeometry& g, cudaStream_t stream) {
  const int64_t n = images * g.in_channels * g.height * g.width;
  if (n == 0) return;
  col2im_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dcol, dx, images, g.in_channels, g.height, g.width, g.kernel,
                                                        g.stride, g.padding, g.out_height(), g.out_width());
  CHECK_LAUNCH("col2im_kernel");
}

void conv_bias_act(const float* out, const float* b, float* y, int64_t images, const kernels::Conv2dGeometry& g,
                   kernels::Activation act, cudaStream_t stream) {
  const int64_t n = images * g.out_channels * g.pixels();
  if (n == 0) return;
  conv_bias_act_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, b, y, images, g.out_channels, g.pixels(),
                                                               act == kernels::Activation::relu);
  CHECK_LAUNCH("conv_bias_act_kernel");
}

void conv_bias_backward(float* dy, const float* y, float* db, const kernels::Conv2dGeometry& g,
                        kernels::Activation act, bool accumulate, cudaStream_t stream) {
  if (g.out_channels == 0) return;
  conv_bias_backward_kernel<<<static_cast<unsigned>(g.out_channels), kThreads, 0, stream>>>(
      dy, y, db, g.batch, g.out_channels, g.pixels(), act == kernels::Activation::relu, accumulate);
  CHECK_LAUNCH("conv_bias_backward_kernel");
}

void conv_rows_to_columns(const float* dy, float* dyt, int64_t images, const kernels::Conv2dGeometry& g,
                          cudaStream_t stream) {
  const int64_t n = images * g.out_channels * g.pixels();
  if (n == 0) return;
  conv_rows_to_columns_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, dyt, images, g.out_channels, g.pixels());
  CHECK_LAUNCH("conv_rows_to_columns_kernel");
}

void max_pool2d(const float* x, float* y, int32_t* indices, const kernels::Pool2dGeometry& g, cudaStream_t stream) {
  const int64_t planes = g.batch * g.channels, n = planes * g.out_height() * g.out_width();
  if (n == 0) return;
  max_pool2d_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, indices, planes, g.height, g.width, g.kernel,
                                                            g.stride, g.out_height(), g.out_width());
  CHECK_LAUNCH("max_pool2d_kernel");
}

void max_pool2d_backward(const float* dy, const int32_t* indices, float* dx, const kernels::Pool2dGeometry& g,
                         cudaStream_t stream) {
  const int64_t planes = g.batch * g.channels, n = planes * g.height * g.width;
  if (n == 0) return;
  max_pool2d_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, indices, dx, planes, g.height, g.width,
                                                                     g.kernel, g.stride, g.out_height(), g.out_width());
  CHECK_LAUNCH("max_pool2d_backward_kernel");
}

void dropout(const float* x, float* y, int64_t rows, int64_t cols, const kernels::DropoutMask& m, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, rows, cols, m.threshold(), m.seed, m.step, m.first_row,
                                                         m.sample_offset, m.sample_stride, m.rows_per_sample, m.scale());
  CHECK_LAUNCH("dropout_kernel");
}

}  // namespace scalelab::cuda

// ---- transformer ops (f32): LayerNorm, GELU, embedding, the causal softmax of attention ----
namespace scalelab::cuda {

namespace {

int row_blocks(int64_t rows) { return static_cast<int>(std::min<int64_t>(rows, 65535)); }

__global__ void layer_norm_kernel(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                  float* rstd, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    double sum = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += xr[j];
    const double mu = block_all_reduce(sum, SumOp{}) / static_cast<double>(cols);
    double sq = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sq += (xr[j] - mu) * (xr[j] - mu);
    const double var = block_all_reduce(sq, SumOp{}) / static_cast<double>(cols);
    const float m = static_cast<float>(mu);
    const float s = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      y[r * cols + j] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(xr[j], m), s), gamma[j]), beta[j]);
  }
}

__global__ void layer_norm_dx_kernel(const float* dy, const float* x, const float* gamma, const float* mean,
                                     const float* rstd, float* dx, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float m = mean[r], s = rstd[r];
    double g_sum = 0, gx_sum = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float xhat = __fmul_rn(__fsub_rn(x[r * cols + j], m), s);
      const float g = __fmul_rn(dy[r * cols + j], gamma[j]);
      g_sum += g;
      gx_sum += static_cast<double>(g) * xhat;
    }
    const float g_mean = static_cast<float>(block_all_reduce(g_sum, SumOp{}) / static_cast<double>(cols));
    const float gx_mean = static_cast<float>(block_all_reduce(gx_sum, SumOp{}) / static_cast<double>(cols));
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float xhat = __fmul_rn(__fsub_rn(x[r * cols + j], m), s);
      const float g = __fmul_rn(dy[r * cols + j], gamma[j]);
      dx[r * cols + j] = __fmul_rn(s, __fsub_rn(__fsub_rn(g, g_mean), __fmul_rn(xhat, gx_mean)));
    }
  }
}

__global__ void layer_norm_params_kernel(const float* dy, const float* x, const float* mean, const float* rstd,
                                         float* dgamma, float* dbeta, int64_t rows, int64_t cols, bool accumulate) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sg = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float d = dy[r * cols + j];
      const float xhat = __fmul_rn(__fsub_rn(x[r * cols + j], mean[r]), rstd[r]);
      sg += static_cast<double>(d) * xhat;
      sb += d;
    }
    dgamma[j] = static_cast<float>(sg) + (accumulate ? dgamma[j] : 0.0f);
    dbeta[j] = static_cast<float>(sb) + (accumulate ? dbeta[j] : 0.0f);
  }
}

template <int D>
__global__ void gelu_kernel(const void* x, void* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = ld<D>(x, i);
    st<D>(y, i, 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
  }
}

template <int D>
__global__ void gelu_backward_kernel(const void* dy, const void* x, const void* y, void* dx, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = ld<D>(x, i);
    const float cdf = fabsf(v) > 1e-20f ? ld<D>(y, i) / v : 0.5f;
    const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    st<D>(dx, i, ld<D>(dy, i) * (cdf + v * pdf));
  }
}

__global__ void check_token_ids_kernel(const float* ids, int64_t n, int64_t vocab, unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = ids[i];
    if (!(v >= 0.0f) || v >= static_cast<float>(vocab) || v != floorf(v))
      atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

__global__ void embedding_kernel(const float* ids, const float* wte, const float* wpe, float* out, int64_t tokens,
                                 int64_t seq, int64_t hidden) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < tokens * hidden;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t token = i / hidden, j = i % hidden;
    const int64_t id = static_cast<int64_t>(ids[token]);
    out[i] = wte[id * hidden + j] + wpe[(token % seq) * hidden + j];
  }
}

// blockIdx.y: a slice of the vocabulary; x: columns. Each thread walks every token in order.
__global__ void embedding_wte_kernel(const float* dout, const float* ids, float* dwte, int64_t tokens,
                                     int64_t hidden, int64_t ids_per_slice) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= hidden) return;
  const int64_t first = blockIdx.y * ids_per_slice, last = first + ids_per_slice;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t id = static_cast<int64_t>(ids[t]);
    if (id >= first && id < last) dwte[id * hidden + j] += dout[t * hidden + j];
  }
}

__global__ void embedding_wpe_kernel(const float* dout, float* dwpe, int64_t batch, int64_t seq, int64_t hidden) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < seq * hidden;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = dwpe[i];  // zeroed first unless accumulating, as on the host
    for (int64_t b = 0; b < batch; ++b) acc += dout[b * seq * hidden + i];
    dwpe[i] = acc;
  }
}

// A block per row. The exponentials are kept in f32 between the passes (in the row itself when it
// is f32; recomputed from the scores otherwise, so a half row is rounded once, at the end).
template <int D>
__global__ void causal_softmax_kernel(void* scores, int64_t rows, int64_t seq) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t row = r * seq;
    const int64_t last = r % seq;  // the query's position: keys 0 … last are visible
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) mx = fmaxf(mx, ld<D>(scores, row + j));
    mx = block_all_reduce(mx, MaxOp{});
    double sum = 0;
    for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) sum += expf(ld<D>(scores, row + j) - mx);
    const float inv = static_cast<float>(1.0 / block_all_reduce(sum, SumOp{}));
    for (int64_t j = threadIdx.x; j < seq; j += blockDim.x)
      st<D>(scores, row + j, j <= last ? expf(ld<D>(scores, row + j) - mx) * inv : 0.0f);
  }
}

template <int D>
__global__ void causal_softmax_backward_kernel(const void* probs, void* dscores, int64_t rows, int64_t seq,
                                               float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t row = r * seq;
    const int64_t last = r % seq;
    double dot = 0;
    for (int64_t j = threadIdx.x; j <= last; j += blockDim.x)
      dot += static_cast<double>(ld<D>(dscores, row + j)) * ld<D>(probs, row + j);
    const float dotf = static_cast<float>(block_all_reduce(dot, SumOp{}));
    for (int64_t j = threadIdx.x; j < seq; j += blockDim.x)
      st<D>(dscores, row + j, ld<D>(probs, row + j) * (ld<D>(dscores, row + j) - dotf) * scale);
  }
}

}  // namespace

void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  layer_norm_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, gamma, beta, y, mean, rstd, rows, cols, eps);
  CHECK_LAUNCH("layer_norm_kernel");
}

void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t cols, bool accumulate,
                         cudaStream_t stream) {
  if (cols == 0) return;
  if (rows > 0) {
    layer_norm_dx_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(dy, x, gamma, mean, rstd, dx, rows, cols);
    CHECK_LAUNCH("layer_norm_dx_kernel");
  }
  layer_norm_params_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(dy, x, mean, rstd, dgamma, dbeta, rows, cols, accumulate);
  CHECK_LAUNCH("layer_norm_params_kernel");
}

void gelu(const void* x, void* y, int dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_dtype(dtype, [&](auto d) { gelu_kernel<decltype(d)::value><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n); });
  CHECK_LAUNCH("gelu_kernel");
}

void gelu_backward(const void* dy, const void* x, const void* y, void* dx, int dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_dtype(dtype, [&](auto d) {
    gelu_backward_kernel<decltype(d)::value><<<blocks_for(n), kThreads, 0, stream>>>(dy, x, y, dx, n);
  });
  CHECK_LAUNCH("gelu_backward_kernel");
}

void check_token_ids(const float* ids, int64_t n, int64_t vocab, unsigned long long* first_bad, cudaStream_t stream) {
  SCALELAB_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(*first_bad), stream));  // = kNoBadRow
  if (n == 0) return;
  check_token_ids_kernel<<<blocks_for(n), kThreads, 0, stream>>>(ids, n, vocab, first_bad);
  CHECK_LAUNCH("check_token_ids_kernel");
}

void embedding(const float* ids, const float* wte, const float* wpe, float* out, int64_t batch, int64_t seq,
               int64_t hidden, cudaStream_t stream) {
  const int64_t n = batch * seq * hidden;
  if (n == 0) return;
  embedding_kernel<<<blocks_for(n), kThreads, 0, stream>>>(ids, wte, wpe, out, batch * seq, seq, hidden);
  CHECK_LAUNCH("embedding_kernel");
}

void embedding_backward(const float* dout, const float* ids, float* dwte, float* dwpe, int64_t batch, int64_t seq,
                        int64_t vocab, int64_t hidden, bool accumulate, cudaStream_t stream) {
  if (hidden == 0) return;
  if (!accumulate) {
    SCALELAB_CUDA_CHECK(cudaMemsetAsync(dwte, 0, static_cast<size_t>(vocab * hidden) * sizeof(float), stream));
    SCALELAB_CUDA_CHECK(cudaMemsetAsync(dwpe, 0, static_cast<size_t>(seq * hidden) * sizeof(float), stream));
  }
  const int64_t tokens = batch * seq;
  if (tokens == 0 || vocab == 0) return;
  // Slices of the vocabulary give the scatter more threads than one per column; each slice's
  // threads still read every id, so not more slices than the tokens make worthwhile.
  const int64_t slices = std::min<int64_t>({vocab, 64, std::max<int64_t>(tokens / 64, 1)});
  const int64_t ids_per_slice = (vocab + slices - 1) / slices;
  const dim3 grid(static_cast<unsigned>((hidden + kThreads - 1) / kThreads), static_cast<unsigned>(slices));
  embedding_wte_kernel<<<grid, kThreads, 0, stream>>>(dout, ids, dwte, tokens, hidden, ids_per_slice);
  CHECK_LAUNCH("embedding_wte_kernel");
  embedding_wpe_kernel<<<blocks_for(seq * hidden), kThreads, 0, stream>>>(dout, dwpe, batch, seq, hidden);
  CHECK_LAUNCH("embedding_wpe_kernel");
}

void causal_softmax(void* scores, int dtype, int64_t rows, int64_t seq, cudaStream_t stream) {
  if (rows == 0) return;
  with_dtype(dtype, [&](auto d) {
    causal_softmax_kernel<decltype(d)::value><<<row_blocks(rows), kThreads, 0, stream>>>(scores, rows, seq);
  });
  CHECK_LAUNCH("causal_softmax_kernel");
}

void causal_softmax_backward(const void* probs, void* dscores, int dtype, int64_t rows, int64_t seq, float scale,
                             cudaStream_t stream) {
  if (rows == 0) return;
  with_dtype(dtype, [&](auto d) {
    causal_softmax_backward_kernel<decltype(d)::value>
        <<<row_blocks(rows), kThreads, 0, stream>>>(probs, dscores, rows, seq, scale);
  });
  CHECK_LAUNCH("causal_softmax_backward_kernel");
}

#undef CHECK_LAUNCH

}  // namespace scalelab::cuda
