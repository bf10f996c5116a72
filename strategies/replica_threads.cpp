#include "strategies/replica_threads.h"

#include "core/limits.h"

#include <algorithm>

namespace scalelab {

ReplicaThreads::ReplicaThreads(int replicas) : errors_(static_cast<size_t>(replicas)) {
  threads_ = start_threads(replicas, [this](int i) { serve(i); });
}

ReplicaThreads::~ReplicaThreads() { stop(); }

void ReplicaThreads::apply(const std::function<void(int replica)>& work) {
  std::unique_lock<std::mutex> lock(mutex_);
  work_ = &work;
  ++round_;
  pending_ = threads_.size();
  wake_.notify_all();
  done_.wait(lock, [&] { return pending_ == 0; });
  work_ = nullptr;
  for (std::exception_ptr& e : errors_)
    if (e) {
      const std::exception_ptr first = e;
      std::fill(errors_.begin(), errors_.end(), nullptr);
      std::rethrow_exception(first);
    }
}

void ReplicaThreads::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ReplicaThreads::serve(int replica) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* work = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || round_ != seen; });
      if (stopping_) return;
      seen = round_;
      work = work_;
    }
    try {
      (*work)(replica);
    } catch (...) {
      errors_[static_cast<size_t>(replica)] = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace scalelab
