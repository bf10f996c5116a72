#pragma once
// The memory ledger of one device: every allocation by category, the peak, and the capacity.
// Going over capacity is an out-of-memory error that explains itself. A tensor's storage tells
// its ledger when it is freed, so the ledger sits beside the tensor, below the devices.
#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace scalelab {

// What a device's bytes are for: the categories of the memory ledger, of a tensor's storage and of
// the trace's memory samples.
enum class MemoryCategory : uint8_t { params, grads, optimizer, activations, comm_buffers, workspace };
constexpr int kMemoryCategoryCount = 6;
const char* memory_category_name(MemoryCategory category);

class MemoryLedger {
 public:
  using Listener = std::function<void(MemoryCategory, int64_t live_bytes)>;

  MemoryLedger(std::string device_name, int64_t capacity_bytes)
      : device_name_(std::move(device_name)), capacity_(capacity_bytes) {}

  // Throws Error("memory", ...) naming the device, the request, the capacity and the breakdown.
  void allocate(MemoryCategory category, int64_t bytes, const std::string& what = "");
  void release(MemoryCategory category, int64_t bytes) noexcept;

  int64_t live(MemoryCategory category) const;
  int64_t live_total() const;
  int64_t peak(MemoryCategory category) const;  // the most this category ever held
  int64_t peak_total() const;                   // the most all categories held at once
  int64_t capacity() const { return capacity_; }
  const std::string& device_name() const { return device_name_; }
  void set_listener(Listener listener);
  void reset_peaks();

 private:
  std::string breakdown_locked() const;

  std::string device_name_;
  int64_t capacity_;
  mutable std::mutex mutex_;
  std::array<int64_t, kMemoryCategoryCount> live_{};
  std::array<int64_t, kMemoryCategoryCount> peak_{};
  int64_t peak_total_ = 0;
  Listener listener_;
};

std::string format_bytes(int64_t bytes);

}  // namespace scalelab
