#pragma once
// How the threads backend (core/comm) moves and reduces the bytes of a rank's buffers. Its
// algorithms (ring, direct, tree) are the same wherever the buffers live; only these few moves
// differ: memcpy and the host loops of comm/reduce_kernels for host memory (host_buffer_ops),
// copies and reduction kernels on a stream for GPU memory (the executor of a cuda device provides
// those, Executor::buffer_ops). Declared here, with the devices, because a device implements it.
#include <cstdint>

#include "core/collective.h"
#include "core/tensor.h"

namespace scalelab {

class BufferOps {
 public:
  virtual ~BufferOps() = default;
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;  // may overlap (memmove)
  // dst[i] = a[i] (op) b[i]; avg sums (finish_avg divides). dst may be a or b.
  virtual void reduce_pair(void* dst, const void* a, const void* b, int64_t n, DType dtype, ReduceOp op) = 0;
  void reduce_into(void* acc, const void* x, int64_t n, DType dtype, ReduceOp op) { reduce_pair(acc, acc, x, n, dtype, op); }
  virtual void finish_avg(void* x, int64_t n, DType dtype, ReduceOp op, int world_size) = 0;
  // Scratch of at least `bytes` in the same memory, valid until the next call of scratch.
  virtual void* scratch(int64_t bytes) = 0;
  // How much the direct all-reduce sums at a time: a cache's worth on a host, a whole slice on a
  // GPU (each piece is a kernel launch there).
  virtual int64_t piece_bytes() const = 0;
  // Returns once every move queued so far has finished: other ranks read these bytes after the
  // next barrier. (Host moves finish as they return.)
  virtual void finish() = 0;
};

}  // namespace scalelab
