#pragma once
// One ProcessGroup, four backends (threads, shm, mpi, nccl). A strategy calls all_reduce on a
// tensor and never asks which backend or which kind of device it runs on: the group times the
// collective (measured on cpu and cuda, modelled on sim, where it starts when the last rank
// arrives) and emits its events, one per chunk where the backend moves data in steps.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/collective.h"
#include "core/tensor.h"
#include "core/trace/events.h"

namespace scalelab {

// The handle of an asynchronous call. wait() rethrows what the call threw.
class Work {
 public:
  void wait();
  bool is_completed();

 private:
  friend class ProcessGroup;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// How the host backends run a large all-reduce: `ring` (reduce-scatter then all-gather around the
// ring, 2(n−1) steps, as over a network; the one the dashboard draws) or `direct` (one pass over
// shared memory: each rank reduces its slice from everyone and writes it to everyone).
enum class CommAlgorithm : uint8_t { ring, direct };
const char* comm_algorithm_name(CommAlgorithm a);
CommAlgorithm parse_comm_algorithm(const std::string& name);  // throws UsageError

struct CommOptions {
  // Every blocking wait gives up after this long, naming the ranks that never arrived.
  std::chrono::milliseconds timeout{60000};
  CommAlgorithm algorithm = CommAlgorithm::ring;
};

// What a call's events are tagged with in the trace: the name a strategy gives it (empty: the
// collective's own), DDP's bucket, a pipeline's micro-batch. It is passed with the call and tags
// that call alone; an asynchronous call keeps the tag it was queued with.
//   pg.send(h, next, {.name = "activations mb 3", .micro_batch = 3});
struct CommTag {
  std::string name;
  int bucket = -1;
  int micro_batch = -1;
  // The step the call belongs to; -1: the device's step when it runs. An asynchronous call takes
  // its caller's step when queued: it may run after the caller has gone on to the next step.
  int64_t step = -1;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size, CommOptions options);
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommOptions& options() const { return options_; }
  virtual const char* backend() const = 0;
  // The device of this rank: where a barrier (which has no tensor) is timed and traced.
  void set_device(class Device* device) { device_ = device; }

  // A group over some of the world's ranks, made collectively as MPI_Comm_split and
  // torch.distributed.new_group make one: every rank of this (the world's) group calls split() at
  // the same point of its program, each naming the members of the group it joins — world ranks,
  // ascending, itself among them; ranks that name the same members get one group, its ranks
  // numbered in that order. `name` ("tp", "pp", "dp") tags the group's events in the trace.
  //   auto tp = world.split(rank < 2 ? std::vector{0, 1} : std::vector{2, 3}, "tp");
  // Its collectives, async calls and send / recv take group ranks; on sim they are priced on
  // where the members sit (k per node over m nodes). Throws Error where the backend has none.
  std::unique_ptr<ProcessGroup> split(const std::vector<int>& members, const std::string& name);
  // The name given at split ("" for the world's group), and the world rank of a rank of this group.
  const std::string& name() const { return name_; }
  int world_rank(int group_rank) const { return world_ranks_.empty() ? group_rank : world_ranks_.at(group_rank); }

  // Blocking collectives on tensors of this rank's device. `in` and `out` may be the same tensor
  // (in place). Shapes: all_gather out = size × in; reduce_scatter in = size × out; scatter's in
  // (root only) = size × out; gather's out (root only) = size × in; reduce's out is written on root.
  // A send and its recv carry the same flow id in the trace: the arrow between them.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum, const CommTag& tag = {}) { all_reduce(t, t, op, tag); }
  void all_reduce(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum, const CommTag& tag = {});
  void broadcast(const Tensor& t, int root, const CommTag& tag = {});
  void reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op = ReduceOp::sum, const CommTag& tag = {});
  void all_gather(const Tensor& in, const Tensor& out, const CommTag& tag = {});
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum, const CommTag& tag = {});
  void scatter(const Tensor& in, const Tensor& out, int root, const CommTag& tag = {});
  void gather(const Tensor& in, const Tensor& out, int root, const CommTag& tag = {});
  void send(const Tensor& t, int peer, const CommTag& tag = {});
  void recv(const Tensor& t, int peer, const CommTag& tag = {});
  void barrier(const CommTag& tag = {});

  // Host bytes from every rank to `root`, outside any device, clock or trace: how each rank's
  // records reach rank 0 at the end of a run. On root: every rank's bytes, by rank (its own
  // included); elsewhere: empty. (Host memory: the nccl backend cannot carry it.)
  std::vector<std::vector<uint8_t>> gather_bytes(const std::vector<uint8_t>& mine, int root);

  // Asynchronous: queued on this rank's communication thread and run in call order (as a CUDA
  // stream does), so every rank issues them in the same order. The caller keeps the tensors alive
  // until wait() returns.
  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum, CommTag tag = {});
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum,
                                             CommTag tag = {});
  std::shared_ptr<Work> all_gather_async(const Tensor& in, const Tensor& out, CommTag tag = {});
  std::shared_ptr<Work> broadcast_async(const Tensor& t, int root, CommTag tag = {});
  std::shared_ptr<Work> run_async(std::function<void()> call);

 protected:
  // One data-moving step of a collective, reported by a backend so the dashboard can draw it.
  struct Chunk {
    int peer = -1;  // the rank read from or written to; −1: every rank (a shared staging area)
    int64_t bytes = 0;
    int64_t begin_ns = 0, end_ns = 0;  // measured on the rank's clock (wall ns); replaced on sim
  };
  struct Call {
    Collective op;
    ReduceOp reduce_op = ReduceOp::sum;
    const Tensor* in = nullptr;
    const Tensor* out = nullptr;
    int root = -1;  // root of rooted collectives; the peer of send / recv
    std::vector<Chunk>* chunks = nullptr;  // where a backend appends its steps (may stay empty)
  };
  // The backend's data movement. Throws Error("comm", ...) on failure or timeout.
  virtual void run(const Call& call) = 0;
  // The largest value over all ranks (for the simulated start: the last rank's arrival).
  virtual int64_t max_over_ranks(int64_t value) = 0;
  // Gives `value` to `peer` and returns the peer's (for the simulated start of send / recv).
  virtual int64_t exchange_with(int peer, int64_t value) = 0;
  // Wall time in ns on one steady clock, for backends to stamp their chunks.
  static int64_t steady_ns();
  // The backend's half of split(): this rank's group of `members` (ranks of this group, ascending),
  // made with every other rank of this group at once.
  virtual std::unique_ptr<ProcessGroup> split_backend(const std::vector<int>& members);
  // Runs what is queued and stops the communication thread. Every backend's destructor calls it
  // first: a queued call must not reach a backend that is half destroyed.
  void stop_worker() noexcept;

 private:
  void collective(Call call, int64_t payload_bytes, const CommTag& tag);
  int64_t next_flow_id(const Call& call);
  static void merge_chunks(std::vector<Chunk>& chunks);
  void worker_loop();
  // Where this group's ranks sit on sim: the most of them on one node, and on how many nodes.
  std::pair<int, int> placement(int devices_per_node);
  void drain_queue();  // blocking calls wait for queued asynchronous ones: one order per rank

  class Device* device_ = nullptr;
  int rank_, size_;
  CommOptions options_;
  std::string name_;
  std::vector<int> world_ranks_;  // by group rank; empty for the world's group (the identity)
  int splits_ = 0;                // the groups split from this one so far (the same on every rank)
  int64_t flow_space_ = 0;        // 0 for the world's group; a number of its own for each sub-group
  std::pair<int, int> placement_{0, 0};
  int placement_per_node_ = 0;    // the devices per node placement_ was counted for

  // Flow ids, the same on every rank without talking: collectives count in call order (every rank
  // issues the same ones), point-to-point calls per (sender, receiver) pair; each sub-group counts
  // in a space of its own (flow_space_), so no two groups' calls share an id.
  // By peer, for the peers this rank has talked to alone: a vector of every peer on every rank
  // would be n² counters, 270 MB at 4096 ranks.
  int64_t collectives_issued_ = 0;
  std::unordered_map<int, int64_t> sent_to_, received_from_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Work>>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace scalelab
