#pragma once
// Element-wise reductions on host buffers of any storage dtype, shared by the host backends
// (threads, shm). f16 and bf16 are summed in f32 and rounded once per step, as NCCL does.
#include <cstdint>

#include "core/collective.h"
#include "core/device/buffer_ops.h"
#include "core/tensor.h"

namespace scalelab::comm {

// acc[i] = acc[i] (op) x[i] for i in [0, n); avg accumulates as sum (divide with finish_avg).
void reduce_into(void* acc, const void* x, int64_t n, DType dtype, ReduceOp op);
// dst[i] = a[i] (op) b[i]: the first step of an out-of-place reduction, with no copy first.
void reduce_pair(void* dst, const void* a, const void* b, int64_t n, DType dtype, ReduceOp op);
// x[i] /= world_size when op is avg; nothing otherwise.
void finish_avg(void* x, int64_t n, DType dtype, ReduceOp op, int world_size);

// The host's BufferOps: memcpy and the loops above; scratch is per thread.
BufferOps& host_buffer_ops();

}  // namespace scalelab::comm
