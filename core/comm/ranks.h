#pragma once
// The ranks of a run. A strategy with ranks (ddp, ddp-mp, pipeline, zero) writes the step of ONE
// rank and hands it to run(): with --launch threads every rank lives in this process and run()
// calls it on one thread per rank, at once; with --launch procs or mpi this process is one rank
// and run() calls it once. The strategy's code is the same either way.
#include <functional>
#include <memory>
#include <vector>

#include "core/comm/process_group.h"
#include "core/device/device.h"

namespace scalelab {

class RankThreads;

class RankSet {
 public:
  // Every rank in this process: rank r owns devices [r·k, (r+1)·k) of `devices`, k = devices per rank.
  // (A dry run of alike ranks: the groups are of more ranks than run; the others run nowhere.)
  RankSet(std::vector<Device*> devices, std::vector<std::unique_ptr<ProcessGroup>> groups);
  // This process is rank group.rank() of group.size(); `devices` are its own.
  RankSet(std::vector<Device*> devices, ProcessGroup& group);
  ~RankSet();

  int world_size() const { return world_size_; }
  // Some ranks run in other processes (procs, mpi): what this one learns of them, a collective
  // must bring (the loss, averaged over every rank).
  bool ranks_elsewhere() const { return ranks_elsewhere_; }
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  bool is_local(int rank) const;
  ProcessGroup& group(int rank) const;
  // The devices of a rank (one, or two for ddp-mp), and its first.
  const std::vector<Device*>& devices(int rank) const;
  Device& device(int rank) const { return *devices(rank).front(); }

  // Calls step(rank) for every local rank, all at once; returns when all have returned, rethrowing
  // the first failure (the other ranks then fail by their collectives' timeout, never hang). The
  // threads that play the ranks are started at the first call and kept for the next ones.
  void run(const std::function<void(int rank)>& step) const;

 private:
  int world_size_ = 0;
  bool ranks_elsewhere_ = false;
  std::vector<int> local_ranks_;
  std::vector<std::vector<Device*>> devices_;         // by local index
  std::vector<std::unique_ptr<ProcessGroup>> owned_;  // threads launch
  std::vector<ProcessGroup*> groups_;                 // by local index
  mutable std::unique_ptr<RankThreads> threads_;      // last: stopped before anything they use goes
};

}  // namespace scalelab
