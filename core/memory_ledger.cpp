#include "core/memory_ledger.h"

#include <cstdio>

#include "core/error.h"

namespace scalelab {

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::params: return "params";
    case MemoryCategory::grads: return "grads";
    case MemoryCategory::optimizer: return "optimizer";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::comm_buffers: return "comm_buffers";
    case MemoryCategory::workspace: return "workspace";
  }
  return "?";
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string past_capacity_note(int64_t peak_total, int64_t capacity, const int64_t* peak_by_category) {
  if (capacity <= 0 || peak_total <= capacity) return "";
  std::string s = "does not fit: needs " + format_bytes(peak_total) + " of its " + format_bytes(capacity) + " (peaks:";
  for (int c = 0; c < kMemoryCategoryCount; ++c)
    if (peak_by_category[c] > 0)
      s += std::string(" ") + memory_category_name(static_cast<MemoryCategory>(c)) + " " + format_bytes(peak_by_category[c]);
  return s + ")";
}

std::string MemoryLedger::breakdown_locked() const {
  std::string s;
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    if (!s.empty()) s += ", ";
    s += memory_category_name(static_cast<MemoryCategory>(c));
    s += ' ';
    s += format_bytes(live_[c]);
  }
  return s;
}

void MemoryLedger::allocate(MemoryCategory category, int64_t bytes, const std::string& what) {
  Listener listener;
  int64_t live_now = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t total = 0;
    for (int64_t v : live_) total += v;
    if (capacity_ > 0 && !past_capacity_ && total + bytes > capacity_) {
      throw Error("memory", "out of memory on " + device_name_ + ": asked for " + format_bytes(bytes) +
                                " of " + memory_category_name(category) + (what.empty() ? "" : " (" + what + ")") +
                                " with " + format_bytes(total) + " in use of its capacity " +
                                format_bytes(capacity_) + " — in use: " + breakdown_locked() +
                                ". Use a smaller batch or model, more devices, or a profile with more memory.");
    }
    int c = static_cast<int>(category);
    live_[c] += bytes;
    if (live_[c] > peak_[c]) peak_[c] = live_[c];
    if (total + bytes > peak_total_) peak_total_ = total + bytes;
    listener = listener_;
    live_now = live_[c];
  }
  if (listener) listener(category, live_now);
}

void MemoryLedger::release(MemoryCategory category, int64_t bytes) noexcept {
  Listener listener;
  int64_t live_now = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_[static_cast<int>(category)] -= bytes;
    listener = listener_;
    live_now = live_[static_cast<int>(category)];
  }
  if (listener) {
    try {
      listener(category, live_now);
    } catch (...) {  // a release runs in destructors: it must not throw
    }
  }
}

int64_t MemoryLedger::live(MemoryCategory category) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_[static_cast<int>(category)];
}
int64_t MemoryLedger::live_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t t = 0;
  for (int64_t v : live_) t += v;
  return t;
}
int64_t MemoryLedger::peak(MemoryCategory category) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_[static_cast<int>(category)];
}
int64_t MemoryLedger::peak_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_total_;
}
void MemoryLedger::set_listener(Listener listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  listener_ = std::move(listener);
}
void MemoryLedger::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = live_;
  peak_total_ = 0;
  for (int64_t v : live_) peak_total_ += v;
}

}  // namespace scalelab
