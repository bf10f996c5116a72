#include "core/run/ranks.h"

#include <atomic>
#include <exception>
#include <thread>

#include "core/error.h"

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
    : world_size_(static_cast<int>(groups.size())), owned_(std::move(groups)) {
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

RankSet::RankSet(std::vector<Device*> devices, ProcessGroup& group) : world_size_(group.size()) {
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

void RankSet::run(const std::function<void(int rank)>& step) const {
  if (local_ranks_.size() == 1) {
    step(local_ranks_.front());
    return;
  }
  // The first failure in time is the cause; the others are usually ranks timing out waiting for it.
  std::vector<std::exception_ptr> errors(local_ranks_.size());
  std::vector<int> order(local_ranks_.size(), -1);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < local_ranks_.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        step(local_ranks_[i]);
      } catch (...) {
        errors[i] = std::current_exception();
        order[i] = failures++;
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < errors.size(); ++i)
    if (order[i] == 0) std::rethrow_exception(errors[i]);
}

}  // namespace scalelab
