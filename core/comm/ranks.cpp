#include "core/comm/ranks.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "core/error.h"
#include "core/limits.h"
#include "core/proc/futex.h"

namespace scalelab {

namespace {

std::vector<std::vector<Device*>> split_devices(const std::vector<Device*>& devices, size_t ranks) {
  if (ranks == 0 || devices.size() % ranks != 0)
    throw UsageError("train", std::to_string(devices.size()) + " devices cannot be shared evenly by " +
                                  std::to_string(ranks) + " ranks");
  const size_t k = devices.size() / ranks;
  std::vector<std::vector<Device*>> out(ranks);
  for (size_t r = 0; r < ranks; ++r) out[r].assign(devices.begin() + static_cast<std::ptrdiff_t>(r * k),
                                                    devices.begin() + static_cast<std::ptrdiff_t>((r + 1) * k));
  return out;
}

}  // namespace

RankSet::RankSet(std::vector<Device*> devices, std::vector<std::unique_ptr<ProcessGroup>> groups)
    : world_size_(groups.empty() ? 0 : groups.front()->size()), owned_(std::move(groups)) {
  devices_ = split_devices(devices, owned_.size());
  for (size_t r = 0; r < owned_.size(); ++r) {
    // Each rank is its own host (a process in a real launch): it waits only for its own devices.
    Device& first = *devices_[r].front();
    first.use_own_host();
    for (Device* d : devices_[r]) d->share_host_with(first);
    local_ranks_.push_back(static_cast<int>(r));
    groups_.push_back(owned_[r].get());
    owned_[r]->set_device(devices_[r].front());
  }
}

RankSet::RankSet(std::vector<Device*> devices, ProcessGroup& group)
    : world_size_(group.size()), ranks_elsewhere_(group.size() > 1) {
  devices_ = split_devices(devices, 1);
  local_ranks_.push_back(group.rank());
  groups_.push_back(&group);
  group.set_device(devices_[0].front());
}

bool RankSet::is_local(int rank) const {
  for (int r : local_ranks_)
    if (r == rank) return true;
  return false;
}

ProcessGroup& RankSet::group(int rank) const {
  for (size_t i = 0; i < local_ranks_.size(); ++i)
    if (local_ranks_[i] == rank) return *groups_[i];
  throw Error("train", "rank " + std::to_string(rank) + " does not run in this process");
}

const std::vector<Device*>& RankSet::devices(int rank) const {
  for (size_t i = 0; i < local_ranks_.size(); ++i)
    if (local_ranks_[i] == rank) return devices_[i];
  throw Error("train", "rank " + std::to_string(rank) + " does not run in this process");
}

namespace {

thread_local bool in_rank_thread = false;

// Runs step(rank) on a new thread per rank: a run() called from inside a rank's step.
void run_on_new_threads(const std::vector<int>& ranks, const std::function<void(int)>& step) {
  // The first failure in time is the cause; the others are usually ranks timing out waiting for it.
  std::vector<std::exception_ptr> errors(ranks.size());
  std::vector<int> order(ranks.size(), -1);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads = start_threads(static_cast<int>(ranks.size()), [&](int i) {
    try {
      step(ranks[i]);
    } catch (...) {
      errors[i] = std::current_exception();
      order[i] = failures++;
    }
  });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < errors.size(); ++i)
    if (order[i] == 0) std::rethrow_exception(errors[i]);
}

}  // namespace

// The threads that play the local ranks, kept from one run() to the next: a thread per rank per
// step would cost, at 4096 ranks, a quarter of a second a step — most of it clearing each new
// thread's copy of OpenBLAS's 60 KB of static TLS. Between calls they sleep on a futex; the
// caller sleeps until the last of them is done (no mutex for a thousand threads to queue on).
class RankThreads {
 public:
  explicit RankThreads(std::vector<int> ranks) : ranks_(std::move(ranks)), errors_(ranks_.size()), order_(ranks_.size()) {
    threads_ = start_threads(static_cast<int>(ranks_.size()), [this](int i) { loop(static_cast<size_t>(i)); });
  }
  ~RankThreads() {
    stop_.store(true);
    generation_.fetch_add(1, std::memory_order_release);
    private_futex_wake_all(generation_);
    for (auto& t : threads_) t.join();
  }
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  void run(const std::function<void(int)>& step) {
    step_ = &step;
    std::fill(errors_.begin(), errors_.end(), nullptr);
    std::fill(order_.begin(), order_.end(), -1);
    failures_.store(0);
    remaining_.store(static_cast<int>(ranks_.size()));
    done_.store(0);
    generation_.fetch_add(1, std::memory_order_release);  // publishes the step to the threads
    private_futex_wake_all(generation_);
    while (done_.load(std::memory_order_acquire) == 0) private_futex_wait(done_, 0, std::chrono::seconds(1));
    step_ = nullptr;
    for (size_t i = 0; i < errors_.size(); ++i)
      if (order_[i] == 0) std::rethrow_exception(errors_[i]);
  }

 private:
  void loop(size_t i) {
    in_rank_thread = true;
    uint32_t seen = 0;
    for (;;) {
      uint32_t now;
      while ((now = generation_.load(std::memory_order_acquire)) == seen)
        private_futex_wait(generation_, seen, std::chrono::seconds(1));
      seen = now;
      if (stop_.load()) return;
      try {
        (*step_)(ranks_[i]);
      } catch (...) {
        errors_[i] = std::current_exception();
        order_[i] = failures_++;
      }
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        done_.store(1, std::memory_order_release);
        private_futex_wake_all(done_);
      }
    }
  }

  std::vector<int> ranks_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* step_ = nullptr;
  std::atomic<uint32_t> generation_{0};  // bumped once per run(): the threads' futex
  std::atomic<uint32_t> done_{0};        // the caller's futex
  std::atomic<int> remaining_{0};
  std::atomic<bool> stop_{false};
  // The first failure in time is the cause; the others are usually ranks timing out waiting for it.
  std::vector<std::exception_ptr> errors_;
  std::vector<int> order_;
  std::atomic<int> failures_{0};
};

RankSet::~RankSet() = default;

void RankSet::run(const std::function<void(int rank)>& step) const {
  if (local_ranks_.size() == 1) {
    step(local_ranks_.front());
    return;
  }
  if (in_rank_thread) return run_on_new_threads(local_ranks_, step);  // the kept threads are busy
  if (!threads_) threads_ = std::make_unique<RankThreads>(local_ranks_);
  threads_->run(step);
}

}  // namespace scalelab
