// DataParallel's replica threads (strategies/replica_threads.h), kept for the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "strategies/replica_threads.h"

using namespace scalelab;

// DataParallel's replica threads (strategies/replica_threads.h): each round runs every replica's
// work once, each replica always on the same thread (kept, not started afresh), and a replica's
// error comes back to the caller without stopping the threads.
TEST(ReplicaThreads, EveryReplicaOnceARoundOnItsOwnThreadErrorsComeBack) {
  ReplicaThreads threads(3);
  std::vector<std::thread::id> first(3), seen(3);
  std::vector<int> runs(3, 0);
  threads.apply([&](int i) {
    first[static_cast<size_t>(i)] = std::this_thread::get_id();
    ++runs[static_cast<size_t>(i)];
  });
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 3u);
  EXPECT_EQ(std::count(first.begin(), first.end(), std::this_thread::get_id()), 0);
  threads.apply([&](int i) {
    seen[static_cast<size_t>(i)] = std::this_thread::get_id();
    ++runs[static_cast<size_t>(i)];
  });
  EXPECT_EQ(seen, first);
  EXPECT_EQ(runs, (std::vector<int>{2, 2, 2}));
  EXPECT_THROW(threads.apply([](int i) {
    if (i == 1) throw std::runtime_error("replica 1 failed");
  }),
               std::runtime_error);
  threads.apply([&](int i) { ++runs[static_cast<size_t>(i)]; });
  EXPECT_EQ(runs, (std::vector<int>{3, 3, 3}));
}
