#include "core/proc/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

namespace scalelab {

// Atomics shared between processes must be lock-free (a lock would live in one process only).
static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

namespace {

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout, int op) {
  const int64_t ns = std::max<int64_t>(0, timeout.count());
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word, int op) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

void shared_futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) {
  futex_wait(word, expected, timeout, FUTEX_WAIT);
}
void shared_futex_wake_all(std::atomic<uint32_t>& word) { futex_wake_all(word, FUTEX_WAKE); }

void private_futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) {
  futex_wait(word, expected, timeout, FUTEX_WAIT_PRIVATE);
}
void private_futex_wake_all(std::atomic<uint32_t>& word) { futex_wake_all(word, FUTEX_WAKE_PRIVATE); }

}  // namespace scalelab
