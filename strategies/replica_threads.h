#pragma once
// One host thread per replica, as torch.nn.parallel.parallel_apply: each thread issues its
// replica's ops to that replica's device, so the devices compute at the same time. The threads
// live as long as the strategy, where torch starts new ones at every call: on the cpu device a new
// thread shares a core with OpenBLAS's helper thread until the scheduler moves one of them, which
// slows its GEMMs by a cost no model would price.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace scalelab {

class ReplicaThreads {
 public:
  explicit ReplicaThreads(int replicas);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  // Runs work(i) on replica i's thread for every i; returns when all have finished, rethrowing
  // the first replica's error.
  void apply(const std::function<void(int replica)>& work);

 private:
  void stop() noexcept;
  void serve(int replica);

  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> errors_;  // by replica, for the round under way
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* work_ = nullptr;
  uint64_t round_ = 0;
  size_t pending_ = 0;
  bool stopping_ = false;
};

}  // namespace scalelab
