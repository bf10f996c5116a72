#include "core/tensor.h"


#include "core/error.h"
#include "core/memory_ledger.h"

namespace scalelab {

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
  }
  return 4;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "f32" || name == "float" || name == "fp32") return DType::f32;
  if (name == "f16" || name == "half" || name == "fp16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  if (name == "i32") return DType::i32;
  throw UsageError("tensor", "unknown dtype '" + name + "' — use f32, f16 or bf16");
}

Storage::~Storage() {
  if (data && free_data) free_data(data);
  if (ledger) ledger->release(category, bytes);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, std::vector<int64_t> shape, DType dtype, int64_t offset_elems)
    : storage_(std::move(storage)), shape_(std::move(shape)), dtype_(dtype), offset_(offset_elems) {}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

void* Tensor::raw() const {
  if (!storage_ || !storage_->data) return nullptr;
  return static_cast<char*>(storage_->data) + offset_ * dtype_size(dtype_);
}

Tensor Tensor::rows_slice(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > rows())
    throw Error("tensor", "rows " + std::to_string(first) + "+" + std::to_string(count) + " out of range for " +
                              shape_string());
  std::vector<int64_t> shape = shape_;
  if (shape.empty()) shape.push_back(1);
  shape[0] = count;
  return Tensor(storage_, shape, dtype_, offset_ + first * cols());
}

Tensor Tensor::view(int64_t first, std::vector<int64_t> shape) const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (first < 0 || first + n > numel())
    throw Error("tensor", "view of " + std::to_string(n) + " elements at " + std::to_string(first) +
                              " exceeds " + shape_string());
  return Tensor(storage_, std::move(shape), dtype_, offset_ + first);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string Tensor::shape_string() const { return shape_text(shape_) + " " + dtype_name(dtype_); }

}  // namespace scalelab
