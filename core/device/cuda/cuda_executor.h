#pragma once
// The cuda device: an executor that queues every op on its own stream of one GPU (cuBLAS for gemm,
// cuda_kernels.cu for the rest), and a clock that times each op with CUDA events on that stream.
// Several executors may live in one process and be driven from different threads, so every call
// first makes its GPU the calling thread's current device. Several may share one GPU: logical
// devices (cuda:0.0 … cuda:0.3), each with its own streams, cuBLAS handle and share of the memory.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device/buffer_ops.h"
#include "core/device/clock.h"
#include "core/device/executor.h"

namespace scalelab {

class CudaExecutor : public Executor {
 public:
  // `name` is how the device is shown ("cuda:0", or "cuda:0.1" for the second logical device of
  // GPU 0); its capacity is the GPU's memory over `sharing`, the devices placed on that GPU.
  // tf32: f32 GEMMs as TF32 on the tensor cores (cuBLAS's TF32 tensor-op math).
  explicit CudaExecutor(int ordinal, std::string name = "", int sharing = 1, bool tf32 = false);
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  const char* name() const override { return name_.c_str(); }
  int64_t capacity_bytes() const override { return capacity_bytes_; }
  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }
  // The stream the threads backend's collectives run on (buffer_ops), beside the compute stream.
  cudaStream_t comm_stream() const { return comm_stream_; }
  // Makes this GPU the calling thread's current device.
  void activate() const;
  // Waits until everything queued on the stream has run.
  void synchronize() const;

  BufferOps* buffer_ops() override { return buffer_ops_.get(); }
  void* allocate(int64_t bytes) override;
  void deallocate(void* p) noexcept override;
  void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
            const Tensor& c) override;
  void bias_act(const Tensor& y, const Tensor& bias, Activation act) override;
  void bias_act_backward(const Tensor& dy, const Tensor& y, const Tensor& dbias, Activation act,
                         bool accumulate) override;
  double softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& dlogits, float grad_scale) override;
  double mse(const Tensor& pred, const Tensor& target, const Tensor& dpred, float grad_scale) override;
  void sgd(const Tensor& w, const Tensor& g, const Tensor& momentum_buf, const SgdOptions& o) override;
  void adam(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v, const AdamOptions& o,
            int64_t t) override;
  void axpy(float alpha, const Tensor& x, const Tensor& y) override;
  void scale(float alpha, const Tensor& x) override;
  void fill(const Tensor& x, float value) override;
  void cast(const Tensor& src, const Tensor& dst) override;
  bool has_non_finite(const Tensor& x) override;
  void copy_from_host(const Tensor& dst, const void* src, int64_t bytes) override;
  void copy_to_host(void* dst, const Tensor& src, int64_t bytes) override;
  // dst lives here; src may live here, on another GPU (a peer copy), or in host memory.
  void copy(const Tensor& src, const Tensor& dst) override;

  // ---- transformer ops ----
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                  const Tensor& rstd, float eps) override;
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                           bool accumulate) override;
  void gelu(const Tensor& x, const Tensor& y) override;
  void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx) override;
  void embedding(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& out) override;
  void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dwte, const Tensor& dwpe,
                          bool accumulate) override;
  void attention(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& y) override;
  void attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& probs, int64_t heads,
                          const Tensor& dscores, const Tensor& dqkv) override;
  // The ConvNet's ops (executor.h).
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y, const Conv2dGeometry& g,
              Activation act, const Tensor& workspace) override;
  void conv2d_backward_weight(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dweight,
                              const Tensor& dbias, const Conv2dGeometry& g, Activation act, bool accumulate,
                              const Tensor& workspace) override;
  void conv2d_backward_input(const Tensor& dy, const Tensor& weight, const Tensor& dx, const Conv2dGeometry& g,
                             const Tensor& workspace) override;
  void max_pool2d(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g) override;
  void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx, const Pool2dGeometry& g) override;
  void dropout(const Tensor& x, const Tensor& y, const DropoutMask& mask) override;

 private:
  // What reductions hand back to the host, in one small device block so one copy fetches it.
  struct Scalars {
    double sum;
    unsigned long long first_bad_row;
    int flag;
  };

  Scalars fetch_scalars();
  double* workspace(int64_t doubles);  // grows on demand, reused across calls
  void copy_from_peer(const Tensor& src, const Tensor& dst, int src_ordinal);
  void enable_peer_access(int peer);
  void release() noexcept;

  int ordinal_;
  std::string name_;
  int64_t capacity_bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<BufferOps> buffer_ops_;
  Scalars* scalars_ = nullptr;  // device memory
  double* workspace_ = nullptr;
  int64_t workspace_doubles_ = 0;
  std::vector<char> peer_checked_;  // per peer ordinal: access already enabled (or impossible)
};

// Measured time for a cuda device: each op is bracketed by CUDA events on the executor's stream,
// so its interval is when the GPU ran it, not when the host queued it.
class CudaClock : public Clock {
 public:
  CudaClock(CudaExecutor& executor, WallClock::time_point epoch);
  ~CudaClock() override;
  CudaClock(const CudaClock&) = delete;
  CudaClock& operator=(const CudaClock&) = delete;

  Interval run(Lane lane, int64_t ready_ns, const OpCost& cost, const std::function<void()>& work) override;
  int64_t now_ns() const override;
  bool simulated() const override { return false; }

 private:
  CudaExecutor& executor_;
  WallClock::time_point epoch_;
  // anchor_ is an event whose time since the epoch is known (anchor_ns_): first the one recorded at
  // construction, then the end of the latest op.
  cudaEvent_t anchor_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
  int64_t anchor_ns_ = 0;
};

}  // namespace scalelab
