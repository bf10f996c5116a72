#pragma once
// The memory ledger of one device: every allocation by category, the peak, and the capacity.
// Going over capacity is an out-of-memory error that explains itself — except in a dry run, whose
// ledger records past capacity, so it can say what each device WOULD need (a 175B model's weights
// on one H100) rather than stop at the first allocation that does not fit. A tensor's storage tells
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

  // Throws Error("memory", ...) naming the device, the request, the capacity and the breakdown,
  // unless the ledger records past capacity.
  void allocate(MemoryCategory category, int64_t bytes, const std::string& what = "");
  void release(MemoryCategory category, int64_t bytes) noexcept;

  int64_t live(MemoryCategory category) const;
  int64_t live_total() const;
  int64_t peak(MemoryCategory category) const;  // the most this category ever held
  int64_t peak_total() const;                   // the most all categories held at once
  int64_t capacity() const { return capacity_; }
  // A dry run's ledger: allocations past capacity are counted, not refused; fits() says.
  void record_past_capacity() { past_capacity_ = true; }
  bool fits() const { return capacity_ <= 0 || peak_total() <= capacity_; }
  const std::string& device_name() const { return device_name_; }
  void set_listener(Listener listener);
  void reset_peaks();

 private:
  std::string breakdown_locked() const;

  std::string device_name_;
  int64_t capacity_;
  bool past_capacity_ = false;
  mutable std::mutex mutex_;
  std::array<int64_t, kMemoryCategoryCount> live_{};
  std::array<int64_t, kMemoryCategoryCount> peak_{};
  int64_t peak_total_ = 0;
  Listener listener_;
};

std::string format_bytes(int64_t bytes);

// "does not fit: needs 2.96 TiB of its 80.00 GiB (params 652 GiB, …)" for a peak past capacity, ""
// when it fits: what a dry run past capacity says instead of running out of memory.
std::string past_capacity_note(int64_t peak_total, int64_t capacity, const int64_t* peak_by_category);

}  // namespace scalelab
