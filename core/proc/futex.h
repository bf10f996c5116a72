#pragma once
// A futex on a word in shared memory (not FUTEX_PRIVATE, so it works across processes): what
// forked processes sleep on while they wait for each other, instead of spinning — they may
// outnumber the cores, and a spinning one would steal the core of the one it waits for.
#include <atomic>
#include <chrono>
#include <cstdint>

namespace scalelab {

// Sleeps while `word` still holds `expected`, at most `timeout` (a wake-up may also be spurious).
void shared_futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout);
// Wakes every process sleeping on `word`.
void shared_futex_wake_all(std::atomic<uint32_t>& word);

// The same for threads of this process alone (FUTEX_PRIVATE: the kernel skips finding the
// shared mapping, which a thousand threads waking at once feel).
void private_futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout);
void private_futex_wake_all(std::atomic<uint32_t>& word);

}  // namespace scalelab
