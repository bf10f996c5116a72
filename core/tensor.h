#pragma once
// A tensor: a shape and a dtype, living on a device. Its bytes come from the device's executor and
// are counted in the device's memory ledger under a category. A "meta" tensor (dry-run on sim)
// has a shape and no data. Views share the storage of the tensor they were cut from.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/trace/events.h"

namespace scalelab {

enum class DType : uint8_t { f32, f16, bf16, i32 };
int64_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
DType parse_dtype(const std::string& name);  // throws UsageError

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

// Half-precision conversions (round to nearest even), used by cast and by host-side checks.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

}  // namespace scalelab
