#include "core/device/cuda/cuda_executor.h"

#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <utility>

#include "core/device/cuda/cuda_check.h"
#include "core/device/cuda/cuda_kernels.h"
#include "core/device/device.h"
#include "core/error.h"

namespace scalelab {

namespace {

void require_f32(const Tensor& t, const char* op) {
  if (t.dtype() != DType::f32)
    throw Error("cuda", std::string(op) + " needs f32 tensors, got " + t.shape_string() +
                            " — cast to f32 first (mixed precision keeps f32 master weights)");
}

// The ops mixed precision runs in half take f32, f16 or bf16; integers are labels.
void require_float(const Tensor& t, const char* op) {
  if (t.dtype() == DType::i32)
    throw Error("cuda", std::string(op) + " takes f32, f16 or bf16 tensors, got " + t.shape_string() +
                            " — integers are labels, not values to compute with");
}

void require_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype())
    throw Error("cuda", std::string(op) + ": " + a.shape_string() + " and " + b.shape_string() +
                            " differ in dtype — one dtype per op: cast one of them");
}

// The dtype codes of kernels::cast (i32 is copied as raw 4-byte words, as on the cpu).
int dtype_code(DType d) { return d == DType::f16 ? 1 : d == DType::bf16 ? 2 : 0; }

cudaDataType_t cuda_data_type(DType d) {
  switch (d) {
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

int to_int(int64_t v, const char* what) {
  if (v > INT_MAX)
    throw Error("cuda", std::string("gemm: ") + what + " = " + std::to_string(v) +
                            " exceeds cuBLAS's 32-bit sizes — split the matrix (a smaller batch or layer)");
  return static_cast<int>(v);
}

// Makes `waiter` (on GPU waiter_device) wait for what is queued so far on `signaller` (on GPU
// signaller_device), without blocking the host. Leaves waiter_device current.
void stream_wait(cudaStream_t waiter, int waiter_device, cudaStream_t signaller, int signaller_device) {
  cudaEvent_t event = nullptr;
  SCALELAB_CUDA_CHECK(cudaSetDevice(signaller_device));  // an event is recorded on its own GPU's stream
  SCALELAB_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  cudaError_t e = cudaEventRecord(event, signaller);
  if (e == cudaSuccess) e = cudaSetDevice(waiter_device);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(waiter, event, 0);
  cudaEventDestroy(event);  // safe while pending: released once it completes
  if (e != cudaSuccess) detail::throw_cuda_error(e, "cudaEventRecord + cudaStreamWaitEvent", __FILE__, __LINE__);
}

int64_t ms_to_ns(float ms) { return static_cast<int64_t>(std::llround(static_cast<double>(ms) * 1e6)); }

// The threads backend's moves in GPU memory (device/buffer_ops.h): copies and reduction kernels on
// the executor's comm stream. finish() waits for that stream: another rank's thread reads the
// bytes after the next barrier. The compute stream needs no event: every Device op has finished
// when it returns (CudaClock waits for its end), so a collective never reads a half-written tensor.
class CudaBufferOps : public BufferOps {
 public:
  explicit CudaBufferOps(const CudaExecutor& executor) : executor_(executor) {}
  ~CudaBufferOps() override {
    if (scratch_) {
      (void)cudaSetDevice(executor_.ordinal());
      (void)cudaStreamSynchronize(executor_.comm_stream());
      (void)cudaFree(scratch_);
      (void)cudaGetLastError();
    }
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0 || dst == src) return;
    executor_.activate();
    SCALELAB_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, executor_.comm_stream()));
  }
  void reduce_pair(void* dst, const void* a, const void* b, int64_t n, DType d, ReduceOp op) override {
    executor_.activate();
    cuda::reduce_pair(dst, a, b, float_code(d), n, op == ReduceOp::max, executor_.comm_stream());
  }
  void finish_avg(void* x, int64_t n, DType d, ReduceOp op, int world_size) override {
    if (op != ReduceOp::avg || world_size == 1) return;
    executor_.activate();
    cuda::divide(x, static_cast<float>(world_size), float_code(d), n, executor_.comm_stream());
  }
  void* scratch(int64_t bytes) override {
    if (bytes <= scratch_bytes_) return scratch_;
    executor_.activate();
    SCALELAB_CUDA_CHECK(cudaStreamSynchronize(executor_.comm_stream()));  // the old one may be in use
    if (scratch_) SCALELAB_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    SCALELAB_CUDA_CHECK(cudaMalloc(&scratch_, static_cast<size_t>(bytes)));
    scratch_bytes_ = bytes;
    return scratch_;
  }
  int64_t piece_bytes() const override { return int64_t{256} << 20; }  // a launch per piece: large ones
  void finish() override {
    executor_.activate();
    SCALELAB_CUDA_CHECK(cudaStreamSynchronize(executor_.comm_stream()));
  }

 private:
  int float_code(DType d) const {
    if (d == DType::i32)
      throw Error("comm", std::string("threads on ") + executor_.name() +
                              ": reductions of i32 tensors run on host memory only — reduce f32, f16 or bf16");
    return dtype_code(d);
  }
  const CudaExecutor& executor_;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
};

}  // namespace

// ---- executor -----------------------------------------------------------------------------

CudaExecutor::CudaExecutor(int ordinal, std::string name, int sharing, bool tf32)
    : ordinal_(ordinal), name_(name.empty() ? "cuda:" + std::to_string(ordinal) : std::move(name)) {
  try {
    activate();
    size_t free_bytes = 0, total_bytes = 0;
    SCALELAB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    capacity_bytes_ = static_cast<int64_t>(total_bytes) / std::max(sharing, 1);
    // Tensors come from the GPU's stream-ordered pool (cudaMallocAsync): a step's activations are
    // allocated and freed every step, and cudaFree would wait for the whole GPU each time. Freed
    // memory stays in the pool for the next step instead of going back to the driver.
    cudaMemPool_t pool = nullptr;
    SCALELAB_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ordinal_));
    uint64_t keep = UINT64_MAX;
    SCALELAB_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    // Non-blocking: our streams do not serialise with the legacy default stream other libraries use.
    SCALELAB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SCALELAB_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    buffer_ops_ = std::make_unique<CudaBufferOps>(*this);
    SCALELAB_CUBLAS_CHECK(cublasCreate(&cublas_));
    SCALELAB_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // Full fp32 by default (no TF32 tensor cores, as PyTorch >= 1.12), so gemm agrees with the cpu
    // reference to fp32 rounding; --tf32 allows TF32 (10-bit mantissas in the products). Half
    // inputs (cublasGemmEx, mixed precision) run on the tensor cores either way.
    SCALELAB_CUBLAS_CHECK(cublasSetMathMode(cublas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    SCALELAB_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scalars_), sizeof(Scalars)));
    int count = 0;
    SCALELAB_CUDA_CHECK(cudaGetDeviceCount(&count));
    peer_checked_.assign(static_cast<size_t>(count), 0);
  } catch (...) {
    release();
    throw;
  }
}

CudaExecutor::~CudaExecutor() { release(); }

void CudaExecutor::release() noexcept {
  // Errors are ignored: this runs in destructors, possibly while the CUDA runtime shuts down.
  (void)cudaSetDevice(ordinal_);
  if (stream_) (void)cudaStreamSynchronize(stream_);
  buffer_ops_.reset();  // waits for the comm stream, frees its scratch
  if (comm_stream_) (void)cudaStreamDestroy(comm_stream_);
  comm_stream_ = nullptr;
  if (cublas_) (void)cublasDestroy(cublas_);
  if (scalars_) (void)cudaFree(scalars_);
  if (workspace_) (void)cudaFree(workspace_);
  if (stream_) (void)cudaStreamDestroy(stream_);
  cublas_ = nullptr;
  scalars_ = nullptr;
  workspace_ = nullptr;
  workspace_doubles_ = 0;
  stream_ = nullptr;
  (void)cudaGetLastError();  // leave no error behind for the next checked call
}

void CudaExecutor::activate() const { SCALELAB_CUDA_CHECK(cudaSetDevice(ordinal_)); }

void CudaExecutor::synchronize() const {
  activate();
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void* CudaExecutor::allocate(int64_t bytes) {
  activate();
  void* p = nullptr;
  // At least one byte: an empty tensor still gets a real pointer, as on the cpu, so that it is
  // not mistaken for a meta tensor.
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  const cudaError_t e = cudaMallocAsync(&p, size, stream_);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    throw Error("cuda", name_ + ": cudaMalloc of " + std::to_string(bytes) + " bytes failed with " +
                            std::to_string(free_bytes) + " of " + std::to_string(total_bytes) +
                            " bytes free — use a smaller batch or model, shard it over more devices, or stop "
                            "other processes on this GPU (nvidia-smi)");
  }
  if (e != cudaSuccess) detail::throw_cuda_error(e, "cudaMalloc", __FILE__, __LINE__);
  return p;
}

void CudaExecutor::deallocate(void* p) noexcept {
  if (!p) return;
  (void)cudaSetDevice(ordinal_);
  // After the work queued on the stream (which may still read it); the comm stream's collectives
  // have finished by then (finish()).
  if (cudaFreeAsync(p, stream_) != cudaSuccess) (void)cudaGetLastError();  // never throw; no stale error
}

CudaExecutor::Scalars CudaExecutor::fetch_scalars() {
  Scalars s{};
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(&s, scalars_, sizeof(Scalars), cudaMemcpyDeviceToHost, stream_));
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return s;
}

double* CudaExecutor::workspace(int64_t doubles) {
  if (doubles <= workspace_doubles_) return workspace_;
  // Kernels queued earlier may still read the old buffer.
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (workspace_) SCALELAB_CUDA_CHECK(cudaFree(workspace_));
  workspace_ = nullptr;
  workspace_doubles_ = 0;
  const int64_t want = std::max<int64_t>(doubles, cuda::kReduceBlocks);
  SCALELAB_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&workspace_), static_cast<size_t>(want) * sizeof(double)));
  workspace_doubles_ = want;
  return workspace_;
}

void CudaExecutor::gemm(bool ta, bool tb, float alpha, const Tensor& a, const Tensor& b, float beta,
                        const Tensor& c) {
  require_float(a, "gemm");
  require_same_dtype(a, b, "gemm");
  require_float(c, "gemm");
  if (c.dtype() != a.dtype() && c.dtype() != DType::f32)
    throw Error("cuda", "gemm: C is " + c.shape_string() + " for " + dtype_name(a.dtype()) +
                            " inputs — write C in the inputs' dtype or in f32");
  const int64_t m = c.rows(), n = c.cols();
  const int64_t k = ta ? a.rows() : a.cols();
  if (m == 0 || n == 0) return;
  activate();
  if (k == 0) {  // as the cpu: C = beta · C, without asking cuBLAS about empty operands
    cuda::scale_or_zero(beta, c.raw(), dtype_code(c.dtype()), m * n, stream_);
    return;
  }
  // cuBLAS is column-major; a row-major X is the column-major Xᵀ. So compute Cᵀ = op(B)ᵀ · op(A)ᵀ:
  // B and A swap places, keep their transpose flags, and the leading dimensions are the row lengths.
  const int lda = to_int(ta ? m : k, "lda"), ldb = to_int(tb ? k : n, "ldb");
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (a.dtype() == DType::f32 && c.dtype() == DType::f32) {
    SCALELAB_CUBLAS_CHECK(cublasSgemm(cublas_, op_b, op_a, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha,
                                      b.data<float>(), ldb, a.data<float>(), lda, &beta, c.data<float>(),
                                      to_int(n, "ldc")));
    return;
  }
  // Half inputs on the tensor cores: products and sums in f32 (CUBLAS_COMPUTE_32F), C rounded once
  // into its dtype (f16, bf16, or f32). alpha and beta are floats, as the compute type says.
  SCALELAB_CUBLAS_CHECK(cublasGemmEx(cublas_, op_b, op_a, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha,
                                     b.raw(), cuda_data_type(b.dtype()), ldb, a.raw(), cuda_data_type(a.dtype()), lda,
                                     &beta, c.raw(), cuda_data_type(c.dtype()), to_int(n, "ldc"), CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
}

void CudaExecutor::bias_act(const Tensor& y, const Tensor& bias, Activation act) {
  require_float(y, "bias_act");
  require_same_dtype(y, bias, "bias_act");
  activate();
  cuda::bias_act(y.raw(), bias.raw(), dtype_code(y.dtype()), y.rows(), y.cols(), act, stream_);
}

void CudaExecutor::bias_act_backward(const Tensor& dy, const Tensor& y, const Tensor& dbias, Activation act,
                                     bool accumulate) {
  require_float(dy, "bias_act_backward");
  require_same_dtype(dy, dbias, "bias_act_backward");
  if (act == Activation::relu) require_same_dtype(dy, y, "bias_act_backward");
  activate();
  const int64_t floats = cuda::bias_act_backward_scratch_floats(dy.rows(), dy.cols());
  float* scratch = reinterpret_cast<float*>(workspace((floats + 1) / 2));  // the workspace counts doubles
  cuda::bias_act_backward(dy.raw(), y.defined() ? y.raw() : nullptr, dbias.raw(), dtype_code(dy.dtype()), dy.rows(),
                          dy.cols(), act, accumulate, scratch, stream_);
}

double CudaExecutor::softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                                  float grad_scale) {
  require_float(logits, "softmax_xent");
  if (dlogits.defined()) require_same_dtype(logits, dlogits, "softmax_xent");
  if (labels.dtype() != DType::i32)
    throw Error("cuda", "softmax_xent needs i32 labels, got " + labels.shape_string() + " — load labels as i32");
  const int64_t rows = logits.rows(), cols = logits.cols();
  if (rows == 0) return 0.0;
  activate();
  const float grad_over_rows = grad_scale / static_cast<float>(rows);  // in float, as the cpu
  cuda::softmax_xent(logits.raw(), labels.data<int32_t>(), dlogits.defined() ? dlogits.raw() : nullptr,
                     dtype_code(logits.dtype()), rows, cols, grad_over_rows, workspace(rows), &scalars_->sum,
                     &scalars_->first_bad_row, stream_);
  const Scalars s = fetch_scalars();
  if (s.first_bad_row != cuda::kNoBadRow) {
    const int64_t row = static_cast<int64_t>(s.first_bad_row);
    int32_t label = 0;
    SCALELAB_CUDA_CHECK(
        cudaMemcpyAsync(&label, labels.data<int32_t>() + row, sizeof(label), cudaMemcpyDeviceToHost, stream_));
    SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    throw Error("loss", "label " + std::to_string(label) + " at row " + std::to_string(row) + " is outside [0, " +
                            std::to_string(cols) + ") — the model's last layer must have one output per class");
  }
  return s.sum / static_cast<double>(rows);
}

double CudaExecutor::mse(const Tensor& pred, const Tensor& target, const Tensor& dpred, float grad_scale) {
  require_f32(pred, "mse");
  require_f32(target, "mse");
  if (dpred.defined()) require_f32(dpred, "mse");
  const int64_t n = pred.numel();
  if (n == 0) return 0.0;
  activate();
  const float dpred_scale = 2.0f * grad_scale / static_cast<float>(n);  // in float, as the cpu
  cuda::mse(pred.data<float>(), target.data<float>(), dpred.defined() ? dpred.data<float>() : nullptr, n, dpred_scale,
            workspace(cuda::kReduceBlocks), &scalars_->sum, stream_);
  return fetch_scalars().sum / static_cast<double>(n);
}

void CudaExecutor::sgd(const Tensor& w, const Tensor& g, const Tensor& buf, const SgdOptions& o) {
  require_f32(w, "sgd");
  require_f32(g, "sgd");
  activate();
  cuda::sgd(w.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, w.numel(), o, stream_);
}

void CudaExecutor::adam(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v, const AdamOptions& o,
                        int64_t t) {
  require_f32(w, "adam");
  require_f32(g, "adam");
  require_f32(m, "adam");
  require_f32(v, "adam");
  activate();
  cuda::adam(w.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), w.numel(), kernels::adam_step(o, t),
             stream_);
}

void CudaExecutor::axpy(float alpha, const Tensor& x, const Tensor& y) {
  require_float(x, "axpy");
  require_float(y, "axpy");
  // y in x's dtype, or f32: a half gradient added into an f32 master gradient.
  if (y.dtype() != DType::f32) require_same_dtype(x, y, "axpy");
  activate();
  cuda::axpy(alpha, x.raw(), dtype_code(x.dtype()), y.raw(), dtype_code(y.dtype()), x.numel(), stream_);
}

void CudaExecutor::scale(float alpha, const Tensor& x) {
  require_float(x, "scale");
  activate();
  cuda::scale(alpha, x.raw(), dtype_code(x.dtype()), x.numel(), stream_);
}

void CudaExecutor::fill(const Tensor& x, float value) {
  activate();
  switch (x.dtype()) {
    case DType::f32: cuda::fill_f32(x.data<float>(), value, x.numel(), stream_); break;
    case DType::i32: cuda::fill_i32(x.data<int32_t>(), static_cast<int32_t>(value), x.numel(), stream_); break;
    case DType::f16: cuda::fill_f16(x.raw(), value, x.numel(), stream_); break;
    case DType::bf16: cuda::fill_bf16(x.raw(), value, x.numel(), stream_); break;
  }
}

void CudaExecutor::cast(const Tensor& src, const Tensor& dst) {
  if (src.numel() != dst.numel())
    throw Error("cuda", "cast from " + src.shape_string() + " to " + dst.shape_string() + ": element counts differ");
  activate();
  cuda::cast(src.raw(), dtype_code(src.dtype()), dst.raw(), dtype_code(dst.dtype()), src.numel(), stream_);
}

bool CudaExecutor::has_non_finite(const Tensor& x) {
  require_float(x, "has_non_finite");
  if (x.numel() == 0) return false;
  activate();
  cuda::has_non_finite(x.raw(), dtype_code(x.dtype()), x.numel(), &scalars_->flag, stream_);
  return fetch_scalars().flag != 0;
}

void CudaExecutor::copy_from_host(const Tensor& dst, const void* src, int64_t bytes) {
  if (bytes == 0) return;
  activate();
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
  // The caller may reuse its buffer as soon as we return; from pinned memory the copy would still run.
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaExecutor::copy_to_host(void* dst, const Tensor& src, int64_t bytes) {
  if (bytes == 0) return;
  activate();
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst, src.raw(), static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host reads it next
}

void CudaExecutor::copy(const Tensor& src, const Tensor& dst) {
  if (src.nbytes() != dst.nbytes())
    throw Error("cuda", "copy from " + src.shape_string() + " to " + dst.shape_string() + ": sizes differ");
  const int64_t bytes = src.nbytes();
  if (bytes == 0) return;
  if (!src.raw() || !dst.raw())
    throw Error("cuda", "copy: a tensor has no data (a dry-run meta tensor) — copy only between computing devices");
  activate();
  cudaPointerAttributes attr{};
  SCALELAB_CUDA_CHECK(cudaPointerGetAttributes(&attr, src.raw()));
  if (attr.type == cudaMemoryTypeDevice && attr.device != ordinal_) {
    copy_from_peer(src, dst, attr.device);
  } else if (attr.type == cudaMemoryTypeDevice) {
    // Another logical device of this GPU: a device-to-device copy on our stream, ordered after the
    // other's stream and before its next write, as a peer copy is.
    CudaExecutor* other = nullptr;
    if (Device* device = src.device()) other = dynamic_cast<CudaExecutor*>(&device->executor());
    if (other == this) other = nullptr;
    if (other) stream_wait(stream_, ordinal_, other->stream(), ordinal_);
    SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                                        stream_));
    if (other) stream_wait(other->stream(), ordinal_, stream_, ordinal_);
  } else {  // host memory (a cpu device's tensor) or managed memory: the runtime works out the direction
    SCALELAB_CUDA_CHECK(
        cudaMemcpyAsync(dst.raw(), src.raw(), static_cast<size_t>(bytes), cudaMemcpyDefault, stream_));
    SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
}

void CudaExecutor::copy_from_peer(const Tensor& src, const Tensor& dst, int src_ordinal) {
  // When src belongs to another cuda device, order its stream and ours both ways around the copy:
  // the copy reads src after that stream's last write to it, and its next write waits for the copy.
  // Without one (a bare tensor), the caller must have finished writing src; the cuda clock waits
  // for every op to end, so a copy through Device always has.
  CudaExecutor* peer = nullptr;
  if (Device* device = src.device()) peer = dynamic_cast<CudaExecutor*>(&device->executor());
  if (peer) stream_wait(stream_, ordinal_, peer->stream(), src_ordinal);
  enable_peer_access(src_ordinal);
  activate();
  SCALELAB_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw(), ordinal_, src.raw(), src_ordinal,
                                          static_cast<size_t>(src.nbytes()), stream_));
  if (peer) {
    stream_wait(peer->stream(), src_ordinal, stream_, ordinal_);
    activate();
  }
}

void CudaExecutor::enable_peer_access(int peer) {
  if (peer < 0 || static_cast<size_t>(peer) >= peer_checked_.size() || peer_checked_[peer]) return;
  peer_checked_[peer] = 1;
  int can = 0;
  activate();
  SCALELAB_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, ordinal_, peer));
  if (!can) return;  // cudaMemcpyPeerAsync still works, staged through host memory
  const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {  // another executor in this process did it
    (void)cudaGetLastError();
  } else if (e != cudaSuccess) {
    detail::throw_cuda_error(e, "cudaDeviceEnablePeerAccess", __FILE__, __LINE__);
  }
  // Tensors come from the peer's stream-ordered pool, which grants no access to other GPUs by itself.
  cudaMemPool_t pool = nullptr;
  SCALELAB_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, peer));
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = ordinal_;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  SCALELAB_CUDA_CHECK(cudaMemPoolSetAccess(pool, &access, 1));
}

// ---- clock --------------------------------------------------------------------------------

CudaClock::CudaClock(CudaExecutor& executor, WallClock::time_point epoch) : executor_(executor), epoch_(epoch) {
  try {
    executor_.activate();
    SCALELAB_CUDA_CHECK(cudaEventCreate(&anchor_));
    SCALELAB_CUDA_CHECK(cudaEventCreate(&start_));
    SCALELAB_CUDA_CHECK(cudaEventCreate(&end_));
    // Tie GPU time to wall time once: on an idle stream the event runs as soon as it is recorded,
    // so it ran within the host interval around record + synchronize; take its midpoint.
    executor_.synchronize();
    const int64_t before = now_ns();
    SCALELAB_CUDA_CHECK(cudaEventRecord(anchor_, executor_.stream()));
    SCALELAB_CUDA_CHECK(cudaEventSynchronize(anchor_));
    const int64_t after = now_ns();
    anchor_ns_ = before + (after - before) / 2;
  } catch (...) {
    for (cudaEvent_t e : {anchor_, start_, end_})
      if (e) (void)cudaEventDestroy(e);
    throw;
  }
}

CudaClock::~CudaClock() {
  (void)cudaSetDevice(executor_.ordinal());
  for (cudaEvent_t e : {anchor_, start_, end_})
    if (e) (void)cudaEventDestroy(e);
  (void)cudaGetLastError();
}

Interval CudaClock::run(Lane, int64_t, const OpCost&, const std::function<void()>& work) {
  executor_.activate();
  SCALELAB_CUDA_CHECK(cudaEventRecord(start_, executor_.stream()));
  if (work) work();
  executor_.activate();
  SCALELAB_CUDA_CHECK(cudaEventRecord(end_, executor_.stream()));
  SCALELAB_CUDA_CHECK(cudaEventSynchronize(end_));
  float since_anchor_ms = 0, duration_ms = 0;
  SCALELAB_CUDA_CHECK(cudaEventElapsedTime(&since_anchor_ms, anchor_, start_));
  SCALELAB_CUDA_CHECK(cudaEventElapsedTime(&duration_ms, start_, end_));
  Interval i;
  i.begin_ns = anchor_ns_ + ms_to_ns(since_anchor_ms);
  i.end_ns = i.begin_ns + ms_to_ns(duration_ms);
  // This op's end anchors the next op. cudaEventElapsedTime returns float ms, which would lose
  // microseconds minutes into a run if measured from construction; from the last op it stays short.
  std::swap(anchor_, end_);
  anchor_ns_ = i.end_ns;
  return i;
}

int64_t CudaClock::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count();
}

// ---- entry points (device.h) --------------------------------------------------------------

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {  // no driver or no GPU: none, not an error
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

std::unique_ptr<Executor> make_cuda_executor(int ordinal, const std::string& name, int sharing, bool tf32) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw UsageError("cuda", std::string("no usable CUDA device: cudaGetDeviceCount says ") + cudaGetErrorName(e) +
                                 " (" + cudaGetErrorString(e) +
                                 ") — run on a machine with an NVIDIA GPU and driver (check nvidia-smi), or use "
                                 "--device cpu or --device sim");
  }
  if (ordinal < 0 || ordinal >= n)
    throw UsageError("cuda", "GPU " + std::to_string(ordinal) + " asked for, but " + std::to_string(n) +
                                 " visible — use --devices ≤ " + std::to_string(n) +
                                 " (check CUDA_VISIBLE_DEVICES and nvidia-smi), or --device sim");
  return std::make_unique<CudaExecutor>(ordinal, name, sharing, tf32);
}

std::string cuda_device_name(int ordinal) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return prop.name;
}

std::unique_ptr<Clock> make_cuda_clock(Executor& executor, WallClock::time_point epoch) {
  auto* cuda = dynamic_cast<CudaExecutor*>(&executor);
  if (!cuda)
    throw UsageError("cuda", std::string("the CUDA clock times a CUDA executor's stream, got executor '") +
                                 executor.name() + "' — make the executor with make_cuda_executor");
  return std::make_unique<CudaClock>(*cuda, epoch);
}

}  // namespace scalelab

// ---- the ConvNet's ops ----------------------------------------------------------------------
// kernels::conv2d's algorithm, step for step: per chunk of images, im2col, one cuBLAS GEMM, and a
// kernel that puts its output into NCHW rows (forward) or takes dy out of them (backward).

namespace scalelab {

namespace {

void require_conv_f32(std::initializer_list<const Tensor*> tensors, const char* op) {
  for (const Tensor* t : tensors)
    if (t->defined()) require_f32(*t, op);
}

// C[m×n] = alpha · op(A) · op(B) + beta · C on row-major f32 arrays (as CudaExecutor::gemm).
void sgemm_rows(cublasHandle_t handle, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                const float* b, float beta, float* c) {
  const int lda = to_int(ta ? m : k, "lda"), ldb = to_int(tb ? k : n, "ldb");
  SCALELAB_CUBLAS_CHECK(cublasSgemm(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha, b, ldb, a, lda, &beta, c,
                                    to_int(n, "ldc")));
}

}  // namespace

void CudaExecutor::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                          const Conv2dGeometry& g, Activation act, const Tensor& workspace) {
  require_conv_f32({&x, &weight, &bias, &y, &workspace}, "conv2d");
  const int64_t L = g.pixels(), chunk = kernels::conv2d_chunk_images(g);
  const int64_t in_row = g.in_channels * g.height * g.width, out_row = g.out_channels * L;
  if (L == 0 || g.out_channels == 0) return;
  activate();
  float* col = workspace.data<float>();
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const int64_t images = std::min(chunk, g.batch - n0);
    float* out = col + g.patch() * images * L;
    cuda::im2col(x.data<float>() + n0 * in_row, col, images, g, stream_);
    if (g.patch() == 0) cuda::fill_f32(out, 0.0f, g.out_channels * images * L, stream_);
    else sgemm_rows(cublas_, false, false, g.out_channels, images * L, g.patch(), 1.0f, weight.data<float>(), col, 0.0f, out);
    cuda::conv_bias_act(out, bias.data<float>(), y.data<float>() + n0 * out_row, images, g, act, stream_);
  }
}

void CudaExecutor::conv2d_backward_weight(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dweight,
                                          const Tensor& dbias, const Conv2dGeometry& g, Activation act,
                                          bool accumulate, const Tensor& workspace) {
  require_conv_f32({&x, &y, &dy, &dweight, &dbias, &workspace}, "conv2d_backward_weight");
  const int64_t L = g.pixels(), chunk = kernels::conv2d_chunk_images(g);
  const int64_t in_row = g.in_channels * g.height * g.width, out_row = g.out_channels * L;
  activate();
  cuda::conv_bias_backward(dy.data<float>(), y.defined() ? y.data<float>() : nullptr, dbias.data<float>(), g, act,
                           accumulate, stream_);
  if (g.out_channels == 0 || g.patch() == 0) return;
  if ((g.batch == 0 || L == 0) && !accumulate) cuda::fill_f32(dweight.data<float>(), 0.0f, dweight.numel(), stream_);
  if (L == 0) return;
  float* col = workspace.data<float>();
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const int64_t images = std::min(chunk, g.batch - n0);
    float* dyt = col + g.patch() * images * L;
    cuda::conv_rows_to_columns(dy.data<float>() + n0 * out_row, dyt, images, g, stream_);
    cuda::im2col(x.data<float>() + n0 * in_row, col, images, g, stream_);
    const float beta = n0 == 0 && !accumulate ? 0.0f : 1.0f;
    sgemm_rows(cublas_, false, true, g.out_channels, g.patch(), images * L, 1.0f, dyt, col, beta,
               dweight.data<float>());  // dW (+)= dy · colᵀ
  }
}

void CudaExecutor::conv2d_backward_input(const Tensor& dy, const Tensor& weight, const Tensor& dx,
                                         const Conv2dGeometry& g, const Tensor& workspace) {
  require_conv_f32({&dy, &weight, &dx, &workspace}, "conv2d_backward_input");
  const int64_t L = g.pixels(), chunk = kernels::conv2d_chunk_images(g);
  const int64_t in_row = g.in_channels * g.height * g.width, out_row = g.out_channels * L;
  if (dx.numel() == 0) return;
  activate();
  if (L == 0 || g.out_channels == 0) {  // no window reads any pixel: nothing comes back
    cuda::fill_f32(dx.data<float>(), 0.0f, dx.numel(), stream_);
    return;
  }
  float* dcol = workspace.data<float>();
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const int64_t images = std::min(chunk, g.batch - n0);
    float* dyt = dcol + g.patch() * images * L;
    cuda::conv_rows_to_columns(dy.data<float>() + n0 * out_row, dyt, images, g, stream_);
    sgemm_rows(cublas_, true, false, g.patch(), images * L, g.out_channels, 1.0f, weight.data<float>(), dyt, 0.0f,
               dcol);  // dcol = Wᵀ · dy
    cuda::col2im(dcol, dx.data<float>() + n0 * in_row, images, g, stream_);
  }
}

void CudaExecutor::max_pool2d(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g) {
  require_conv_f32({&x, &y}, "max_pool2d");
  activate();
  cuda::max_pool2d(x.data<float>(), y.data<float>(), indices.data<int32_t>(), g, stream_);
}

void CudaExecutor::max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                       const Pool2dGeometry& g) {
  require_conv_f32({&dy, &dx}, "max_pool2d_backward");
  activate();
  cuda::max_pool2d_backward(dy.data<float>(), indices.data<int32_t>(), dx.data<float>(), g, stream_);
}

void CudaExecutor::dropout(const Tensor& x, const Tensor& y, const DropoutMask& mask) {
  require_conv_f32({&x, &y}, "dropout");
  activate();
  cuda::dropout(x.data<float>(), y.data<float>(), x.rows(), x.cols(), mask, stream_);
}

}  // namespace scalelab

// ---- transformer ops: LayerNorm and the embedding in f32, GELU and attention also in f16 / bf16 ----
namespace scalelab {

namespace {

// Row-major C = alpha · op(A) · op(B) + beta · C for `batch` matrices `stride_*` elements apart,
// with leading dimensions: the heads of one sequence, their q, k and v d-column windows of the qkv
// rows. cuBLAS is column-major, so as in gemm: Cᵀ = op(B)ᵀ · op(A)ᵀ. f32 by cublasSgemm's batched
// form; f16 / bf16 (all three matrices) summed in f32 on the tensor cores, C rounded once.
void gemm_strided(cublasHandle_t handle, DType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                  float beta, void* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (dtype == DType::f32) {
    SCALELAB_CUBLAS_CHECK(cublasSgemmStridedBatched(
        handle, op_b, op_a, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha, static_cast<const float*>(b),
        to_int(ldb, "ldb"), stride_b, static_cast<const float*>(a), to_int(lda, "lda"), stride_a, &beta,
        static_cast<float*>(c), to_int(ldc, "ldc"), stride_c, to_int(batch, "batch")));
    return;
  }
  const cudaDataType_t type = cuda_data_type(dtype);
  SCALELAB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op_b, op_a, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"),
                                                   &alpha, b, type, to_int(ldb, "ldb"), stride_b, a, type,
                                                   to_int(lda, "lda"), stride_a, &beta, c, type, to_int(ldc, "ldc"),
                                                   stride_c, to_int(batch, "batch"), CUBLAS_COMPUTE_32F,
                                                   CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void CudaExecutor::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                              const Tensor& mean, const Tensor& rstd, float eps) {
  activate();
  cuda::layer_norm(x.data<float>(), gamma.data<float>(), beta.data<float>(), y.data<float>(), mean.data<float>(),
                   rstd.data<float>(), x.rows(), x.cols(), eps, stream_);
}

void CudaExecutor::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                       const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                       bool accumulate) {
  activate();
  cuda::layer_norm_backward(dy.data<float>(), x.data<float>(), gamma.data<float>(), mean.data<float>(),
                            rstd.data<float>(), dx.data<float>(), dgamma.data<float>(), dbeta.data<float>(), x.rows(),
                            x.cols(), accumulate, stream_);
}

void CudaExecutor::gelu(const Tensor& x, const Tensor& y) {
  activate();
  cuda::gelu(x.raw(), y.raw(), dtype_code(x.dtype()), x.numel(), stream_);
}

void CudaExecutor::gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx) {
  activate();
  cuda::gelu_backward(dy.raw(), x.raw(), y.raw(), dx.raw(), dtype_code(x.dtype()), x.numel(), stream_);
}

// The host kernel's error for the first id that is not a whole number in [0, vocab), if any.
static void throw_bad_id(const Tensor& ids, int64_t vocab, unsigned long long found, cudaStream_t stream) {
  if (found == cuda::kNoBadRow) return;
  const int64_t i = static_cast<int64_t>(found), seq = ids.cols();
  float v = 0;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(&v, ids.data<float>() + i, sizeof(v), cudaMemcpyDeviceToHost, stream));
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  throw Error("embedding", "token id " + std::to_string(v) + " at batch row " + std::to_string(i / seq) +
                               ", position " + std::to_string(i % seq) + " is not a whole number in [0, " +
                               std::to_string(vocab) + ") — the data's vocabulary must fit the model's (gpt:…-V)");
}

void CudaExecutor::embedding(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& out) {
  if (ids.numel() == 0) return;
  activate();
  cuda::check_token_ids(ids.data<float>(), ids.numel(), wte.rows(), &scalars_->first_bad_row, stream_);
  throw_bad_id(ids, wte.rows(), fetch_scalars().first_bad_row, stream_);
  cuda::embedding(ids.data<float>(), wte.data<float>(), wpe.data<float>(), out.data<float>(), ids.rows(), ids.cols(),
                  wte.cols(), stream_);
}

void CudaExecutor::embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dwte, const Tensor& dwpe,
                                      bool accumulate) {
  activate();
  if (ids.numel() > 0) {
    cuda::check_token_ids(ids.data<float>(), ids.numel(), dwte.rows(), &scalars_->first_bad_row, stream_);
    throw_bad_id(ids, dwte.rows(), fetch_scalars().first_bad_row, stream_);
  }
  cuda::embedding_backward(dout.data<float>(), ids.data<float>(), dwte.data<float>(), dwpe.data<float>(), ids.rows(),
                           ids.cols(), dwte.rows(), dwte.cols(), accumulate, stream_);
}

void CudaExecutor::attention(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& y) {
  if (qkv.rows() == 0) return;
  activate();
  const DType dt = qkv.dtype();
  const int64_t seq = probs.cols(), batch = qkv.rows() / seq, hidden = y.cols(), d = hidden / heads, ld = 3 * hidden;
  const int64_t sq = seq * seq, size = dtype_size(dt);  // pointers below step in bytes
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const char* qkv_b = static_cast<const char*>(qkv.raw());
  char* p_b = static_cast<char*>(probs.raw());
  char* y_b = static_cast<char*>(y.raw());
  // Per sequence, the heads as one strided batch: head h's q starts d elements after head h−1's.
  for (int64_t b = 0; b < batch; ++b) {
    const char* q = qkv_b + b * seq * ld * size;
    gemm_strided(cublas_, dt, false, true, seq, seq, d, scale, q, ld, d, q + hidden * size, ld, d, 0.0f,
                 p_b + b * heads * sq * size, seq, sq, heads);  // S = scale · q · kᵀ
  }
  cuda::causal_softmax(probs.raw(), dtype_code(dt), probs.rows(), seq, stream_);
  for (int64_t b = 0; b < batch; ++b) {
    const char* v = qkv_b + (b * seq * ld + 2 * hidden) * size;
    gemm_strided(cublas_, dt, false, false, seq, d, seq, 1.0f, p_b + b * heads * sq * size, seq, sq, v, ld, d, 0.0f,
                 y_b + b * seq * hidden * size, hidden, d, heads);  // y = P · v
  }
}

void CudaExecutor::attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& probs, int64_t heads,
                                      const Tensor& dscores, const Tensor& dqkv) {
  if (qkv.rows() == 0) return;
  activate();
  const DType dt = qkv.dtype();
  const int64_t seq = probs.cols(), batch = qkv.rows() / seq, hidden = dy.cols(), d = hidden / heads, ld = 3 * hidden;
  const int64_t sq = seq * seq, size = dtype_size(dt);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const char* qkv_b = static_cast<const char*>(qkv.raw());
  const char* p_b = static_cast<const char*>(probs.raw());
  const char* dy_b = static_cast<const char*>(dy.raw());
  char* ds_b = static_cast<char*>(dscores.raw());
  char* dqkv_b = static_cast<char*>(dqkv.raw());
  for (int64_t b = 0; b < batch; ++b) {
    const char* v = qkv_b + (b * seq * ld + 2 * hidden) * size;
    const char* p = p_b + b * heads * sq * size;
    const char* dyb = dy_b + b * seq * hidden * size;
    char* ds = ds_b + b * heads * sq * size;
    char* dv = dqkv_b + (b * seq * ld + 2 * hidden) * size;
    gemm_strided(cublas_, dt, true, false, seq, d, seq, 1.0f, p, seq, sq, dyb, hidden, d, 0.0f, dv, ld, d, heads);  // dV = Pᵀ·dy
    gemm_strided(cublas_, dt, false, true, seq, seq, d, 1.0f, dyb, hidden, d, v, ld, d, 0.0f, ds, seq, sq, heads);  // dP = dy·vᵀ
  }
  cuda::causal_softmax_backward(probs.raw(), dscores.raw(), dtype_code(dt), probs.rows(), seq, scale, stream_);
  for (int64_t b = 0; b < batch; ++b) {
    const char* q = qkv_b + b * seq * ld * size;
    const char* ds = ds_b + b * heads * sq * size;
    char* dq = dqkv_b + b * seq * ld * size;
    gemm_strided(cublas_, dt, false, false, seq, d, seq, 1.0f, ds, seq, sq, q + hidden * size, ld, d, 0.0f, dq, ld, d,
                 heads);  // dQ = dS·k
    gemm_strided(cublas_, dt, true, false, seq, d, seq, 1.0f, ds, seq, sq, q, ld, d, 0.0f, dq + hidden * size, ld, d,
                 heads);  // dK = dSᵀ·q
  }
}

}  // namespace scalelab
