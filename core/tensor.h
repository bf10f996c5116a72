#pragma once
// A tensor: a shape and a dtype, living on a device. Its bytes come from the device's executor and
// are counted in the device's memory ledger under a category. A "meta" tensor (dry-run on sim)
// has a shape and no data. Views share the storage of the tensor they were cut from.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/memory_ledger.h"

namespace scalelab {

enum class DType : uint8_t { f32, f16, bf16, i32 };
int64_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
DType parse_dtype(const std::string& name);  // throws UsageError
// A shape as errors write it: "[128,784]".
std::string shape_text(const std::vector<int64_t>& shape);

class Device;
class MemoryLedger;

// The bytes behind one or more tensors. Freeing them tells the ledger.
struct Storage {
  Device* device = nullptr;
  std::shared_ptr<MemoryLedger> ledger;
  MemoryCategory category = MemoryCategory::workspace;
  int64_t bytes = 0;
  void* data = nullptr;  // nullptr for meta tensors
  std::function<void(void*)> free_data;
  // When (device clock, ns) the last write to these bytes ends: ops that read them start no earlier.
  std::atomic<int64_t> ready_ns{0};

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, std::vector<int64_t> shape, DType dtype, int64_t offset_elems = 0);

  bool defined() const { return storage_ != nullptr; }
  bool is_meta() const { return !storage_ || storage_->data == nullptr; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype_); }
  // Row-major 2-D reading: rows = first dimension, cols = the rest.
  int64_t rows() const { return shape_.empty() ? 1 : shape_[0]; }
  int64_t cols() const { return rows() == 0 ? 0 : numel() / rows(); }
  DType dtype() const { return dtype_; }
  Device* device() const { return storage_ ? storage_->device : nullptr; }
  MemoryCategory category() const { return storage_->category; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int64_t offset() const { return offset_; }

  void* raw() const;
  template <typename T>
  T* data() const { return static_cast<T*>(raw()); }

  // A view of `count` rows starting at `first` (dim 0), sharing storage: the batch split of
  // data parallel, the micro-batches of a pipeline.
  Tensor rows_slice(int64_t first, int64_t count) const;
  // A flat view of numel elements starting at element `first`, given a new shape.
  Tensor view(int64_t first, std::vector<int64_t> shape) const;

  int64_t ready_ns() const { return storage_ ? storage_->ready_ns.load() : 0; }
  void set_ready_ns(int64_t t) const {
    if (storage_) storage_->ready_ns.store(t);
  }

  std::string shape_string() const;

 private:
  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::f32;
  int64_t offset_ = 0;  // in elements
};

// Half-precision conversions (round to nearest even), used by cast, by the host kernels of mixed
// precision and by host-side checks. Inline: the host converts every operand of a half op, and a
// call per element would cost more than the conversion.
inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x007fffffu;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));  // inf / nan
  int32_t e = exp - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {                                                  // subnormal or zero
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x00800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // may carry into the exponent: correct
  return static_cast<uint16_t>(h);
}

inline float half_to_float(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet nan
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

inline float bf16_to_float(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}


}  // namespace scalelab
