#include "core/comm/reduce_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace scalelab::comm {

namespace {

template <typename Load, typename Store>
void apply(void* dst, const void* a, const void* b, int64_t n, ReduceOp op, Load load, Store store) {
  if (op == ReduceOp::max) {
    for (int64_t i = 0; i < n; ++i) store(dst, i, std::max(load(a, i), load(b, i)));
  } else {
    for (int64_t i = 0; i < n; ++i) store(dst, i, load(a, i) + load(b, i));
  }
}

}  // namespace

void reduce_pair(void* dst, const void* a, const void* b, int64_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32: {
      auto* d = static_cast<float*>(dst);
      const auto* x = static_cast<const float*>(a);
      const auto* y = static_cast<const float*>(b);
      // The hot loop of every host all-reduce: plain enough for the compiler to vectorise.
      if (op == ReduceOp::max) {
        for (int64_t i = 0; i < n; ++i) d[i] = std::max(x[i], y[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = x[i] + y[i];
      }
      return;
    }
    case DType::f16:
      apply(dst, a, b, n, op, [](const void* p, int64_t i) { return half_to_float(static_cast<const uint16_t*>(p)[i]); },
            [](void* p, int64_t i, float v) { static_cast<uint16_t*>(p)[i] = float_to_half(v); });
      return;
    case DType::bf16:
      apply(dst, a, b, n, op, [](const void* p, int64_t i) { return bf16_to_float(static_cast<const uint16_t*>(p)[i]); },
            [](void* p, int64_t i, float v) { static_cast<uint16_t*>(p)[i] = float_to_bf16(v); });
      return;
    case DType::i32:
      apply(dst, a, b, n, op, [](const void* p, int64_t i) { return static_cast<const int32_t*>(p)[i]; },
            [](void* p, int64_t i, int32_t v) { static_cast<int32_t*>(p)[i] = v; });
      return;
  }
}

void reduce_into(void* acc, const void* x, int64_t n, DType dtype, ReduceOp op) {
  reduce_pair(acc, acc, x, n, dtype, op);
}

void finish_avg(void* x, int64_t n, DType dtype, ReduceOp op, int world_size) {
  if (op != ReduceOp::avg || world_size == 1) return;
  const float n_ranks = static_cast<float>(world_size);  // divide, not multiply by 1/n: exact when it can be
  switch (dtype) {
    case DType::f32: {
      auto* p = static_cast<float*>(x);
      for (int64_t i = 0; i < n; ++i) p[i] /= n_ranks;
      return;
    }
    case DType::f16: {
      auto* p = static_cast<uint16_t*>(x);
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_half(half_to_float(p[i]) / n_ranks);
      return;
    }
    case DType::bf16: {
      auto* p = static_cast<uint16_t*>(x);
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / n_ranks);
      return;
    }
    case DType::i32: {
      auto* p = static_cast<int32_t*>(x);
      for (int64_t i = 0; i < n; ++i) p[i] /= world_size;
      return;
    }
  }
}

namespace {

class HostBufferOps : public BufferOps {
 public:
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  void reduce_pair(void* dst, const void* a, const void* b, int64_t n, DType d, ReduceOp op) override {
    comm::reduce_pair(dst, a, b, n, d, op);
  }
  void finish_avg(void* x, int64_t n, DType d, ReduceOp op, int world_size) override {
    comm::finish_avg(x, n, d, op, world_size);
  }
  void* scratch(int64_t bytes) override {
    thread_local std::vector<char> buffer;
    if (static_cast<int64_t>(buffer.size()) < bytes) buffer.resize(static_cast<size_t>(bytes));
    return buffer.data();
  }
  int64_t piece_bytes() const override { return 64 << 10; }  // fits L2 with room to spare
  void finish() override {}
};

}  // namespace

BufferOps& host_buffer_ops() {
  static HostBufferOps ops;
  return ops;
}

}  // namespace scalelab::comm
