#include "core/comm/threads/threads_group.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "core/comm/reduce_kernels.h"
#include "core/device/buffer_ops.h"
#include "core/device/device.h"
#include "core/error.h"
#include "core/limits.h"
#include "core/proc/futex.h"

namespace scalelab {

namespace {

// What the ranks of one process share: the buffers each rank posts for the current collective,
// a barrier that times out naming the ranks that never came, and mailboxes for send / recv.
class World {
 public:
  World(int size, CommOptions options)
      : size_(size), options_(options), passed_(static_cast<size_t>(size), 0), in_(size), out_(size) {}

  int size() const { return size_; }

  // Every rank waits here until all have arrived. `what` names the collective and its step.
  void arrive_and_wait(int rank, const std::string& what) { arrive(rank, 0, what); }

  // A barrier that also returns the largest `value` any rank brought: the simulated start of a
  // collective (the last rank's arrival). The running maximum is kept as ranks arrive, so no rank
  // reads n slots (n² reads per collective at a thousand ranks).
  int64_t arrive_max(int rank, int64_t value, const std::string& what) { return arrive(rank, value, what); }

  // The buffers of the current collective, posted by each rank before the first barrier.
  void post(int rank, const void* in, void* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_[static_cast<size_t>(rank)] = in;
    out_[static_cast<size_t>(rank)] = out;
  }
  const void* in(int rank) const { return in_[static_cast<size_t>(rank)]; }
  void* out(int rank) const { return out_[static_cast<size_t>(rank)]; }

  // split(): every rank posts the members it names; once all have, rank 0 checks that the members
  // of each group named the same and makes one World per group; then each rank takes its own.
  // (A dry run's ranks that do not run name nothing: a World holds a group's running members.)
  std::shared_ptr<World> split(int rank, const std::vector<int>& members, const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (split_members_.empty()) split_members_.resize(static_cast<size_t>(size_));
      split_members_[static_cast<size_t>(rank)] = members;
    }
    arrive_and_wait(rank, what + " (naming members)");
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      split_error_.clear();
      split_made_.assign(static_cast<size_t>(size_), nullptr);
      std::map<std::vector<int>, std::shared_ptr<World>> made;
      for (int r = 0; r < size_ && split_error_.empty(); ++r) {
        const std::vector<int>& mine = split_members_[static_cast<size_t>(r)];
        for (int m : mine) {
          if (m >= size_) break;  // ascending: the rest do not run
          if (split_members_[static_cast<size_t>(m)] != mine) {
            split_error_ = "threads: " + what + ": rank " + std::to_string(r) + " names members " + list(mine) +
                           " but its member " + std::to_string(m) + " names " + list(split_members_[static_cast<size_t>(m)]) +
                           " — every rank of a group must name the same members";
            break;
          }
        }
        auto& world = made[mine];
        if (!world) {
          const auto running = std::count_if(mine.begin(), mine.end(), [&](int m) { return m < size_; });
          world = std::make_shared<World>(static_cast<int>(running), options_);
        }
        split_made_[static_cast<size_t>(r)] = world;
      }
    }
    arrive_and_wait(rank, what + " (making the groups)");
    std::lock_guard<std::mutex> lock(mutex_);
    if (!split_error_.empty()) throw Error("comm", split_error_);
    return std::move(split_made_[static_cast<size_t>(rank)]);
  }

  // Rendezvous send: the message stays in the mailbox until the receiver has copied it.
  struct Message {
    const void* data = nullptr;
    int64_t bytes = 0;
    int64_t value = 0;
    bool taken = false;
  };
  void send(int from, int to, Message* m, const std::string& what) {
    std::unique_lock<std::mutex> lock(mutex_);
    throw_if_broken();
    mailbox_[{from, to}].push_back(m);
    cv_.notify_all();
    wait_for(lock, [&] { return m->taken; }, from, to, what);
  }
  // Copies the oldest message from `from` into dst (or takes its value).
  Message receive(int from, int to, void* dst, int64_t bytes, const std::string& what,
                  BufferOps& ops = comm::host_buffer_ops()) {
    std::unique_lock<std::mutex> lock(mutex_);
    throw_if_broken();
    auto& box = mailbox_[{from, to}];
    wait_for(lock, [&] { return !box.empty(); }, to, from, what);
    Message* m = box.front();
    box.pop_front();
    if (dst && m->bytes != bytes) {
      m->taken = true;
      cv_.notify_all();
      throw Error("comm", "threads: " + what + ": rank " + std::to_string(from) + " sent " + std::to_string(m->bytes) +
                              " bytes but rank " + std::to_string(to) + " expects " + std::to_string(bytes) +
                              " — post matching sizes on both sides");
    }
    if (dst && bytes > 0) {
      ops.copy(dst, m->data, bytes);
      ops.finish();  // the sender may reuse its buffer once the message is taken
    }
    Message copy = *m;
    m->taken = true;
    cv_.notify_all();
    return copy;
  }

 private:
  // The barrier. Arrivals count under the mutex; the waiters sleep on a futex on the generation,
  // outside the mutex, and the last arrival wakes them all at once. (A condition variable would
  // make a thousand woken ranks queue for its mutex one after another: most of a large dry run's
  // time.) The maximum of the generation is kept in one of two slots by its parity: a rank can
  // start the generation after next only once every rank has left this one.
  int64_t arrive(int rank, int64_t value, const std::string& what) {
    uint32_t generation;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      throw_if_broken();
      generation = generation_.load();
      ++passed_[static_cast<size_t>(rank)];
      int64_t& running = max_[generation & 1];
      running = arrived_ == 0 ? value : std::max(running, value);
      if (++arrived_ == size_) {
        arrived_ = 0;
        generation_.store(generation + 1);
        private_futex_wake_all(generation_);
        return running;
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (generation_.load() == generation) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (generation_.load() != generation || !broken_.empty()) break;
        std::string missing;
        for (int r = 0; r < size_; ++r)
          if (passed_[static_cast<size_t>(r)] < passed_[static_cast<size_t>(rank)])
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        broken_ = "threads: rank " + std::to_string(rank) + " waited " + seconds(options_.timeout) + " in " + what +
                  " for rank(s) " + missing +
                  ", which never arrived — a rank died or skipped the collective; every rank must issue the same "
                  "collectives in the same order (raise --comm-timeout if the ranks are merely slow)";
        broken_flag_.store(true);
        generation_.fetch_add(1);  // wakes the other waiters, who find the world broken
        private_futex_wake_all(generation_);
        cv_.notify_all();
        break;
      }
      private_futex_wait(generation_, generation, left);
    }
    if (broken_flag_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      throw_if_broken();
    }
    return max_[generation & 1];
  }

  template <typename Pred>
  void wait_for(std::unique_lock<std::mutex>& lock, Pred pred, int me, int peer, const std::string& what) {
    if (!cv_.wait_for(lock, options_.timeout, [&] { return pred() || !broken_.empty(); })) {
      broken_ = "threads: rank " + std::to_string(me) + " waited " + seconds(options_.timeout) + " in " +
                what + " for rank " + std::to_string(peer) +
                ", which never arrived — it died or never posted the matching send / recv";
      broken_flag_.store(true);
      generation_.fetch_add(1);  // and the ranks in a barrier
      private_futex_wake_all(generation_);
      cv_.notify_all();
    }
    throw_if_broken();
  }
  void throw_if_broken() const {
    if (!broken_.empty()) throw Error("comm", broken_);
  }
  static std::string list(const std::vector<int>& ranks) {
    std::string s;
    for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return "{" + s + "}";
  }
  static std::string seconds(std::chrono::milliseconds ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(ms.count()) / 1000.0);
    return buf;
  }

  const int size_;
  const CommOptions options_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> broken_flag_{false};  // broken_ is set: read without the mutex by the barrier
  int64_t max_[2] = {0, 0};
  std::vector<int64_t> passed_;  // barriers each rank has entered: who is missing
  std::string broken_;           // once a rank timed out, every later wait fails at once
  std::vector<const void*> in_;
  std::vector<void*> out_;
  std::map<std::pair<int, int>, std::deque<Message*>> mailbox_;
  std::vector<std::vector<int>> split_members_;        // by rank: the members it named
  std::vector<std::shared_ptr<World>> split_made_;     // by rank: its group's World
  std::string split_error_;
};

// Element range of chunk c when `count` elements are cut into `parts` nearly equal pieces.
struct Range {
  int64_t first, count;
};
Range chunk_range(int64_t count, int parts, int c) {
  const int64_t first = count * c / parts, last = count * (c + 1) / parts;
  return {first, last - first};
}

class ThreadsGroup : public ProcessGroup {
 public:
  ThreadsGroup(std::shared_ptr<World> world, int rank, int world_size, CommOptions options)
      : ProcessGroup(rank, world_size, options), world_(std::move(world)) {}
  ~ThreadsGroup() override { stop_worker(); }
  const char* backend() const override { return "threads"; }

 protected:
  void run(const Call& call) override {
    const std::string what = collective_name(call.op);
    if (world_->size() != size())
      throw Error("threads", "internal: " + what + " moves data among " + std::to_string(size()) + " ranks, but only " +
                                 std::to_string(world_->size()) + " run (a dry run's alike ranks compute nothing) — please report it");
    switch (call.op) {
      case Collective::all_reduce:
        return options().algorithm == CommAlgorithm::direct ? all_reduce_direct(call, what) : all_reduce_ring(call, what);
      case Collective::broadcast: return broadcast_tree(call, what);
      case Collective::reduce: return reduce_direct(call, what);
      case Collective::all_gather: return all_gather_direct(call, what);
      case Collective::reduce_scatter: return reduce_scatter_direct(call, what);
      case Collective::scatter: return scatter_direct(call, what);
      case Collective::gather: return gather_direct(call, what);
      case Collective::send: {
        World::Message m{call.in->raw(), call.in->nbytes()};
        const int64_t t0 = steady_ns();
        world_->send(rank(), call.root, &m, what);
        call.chunks->push_back({call.root, call.in->nbytes(), t0, steady_ns()});
        return;
      }
      case Collective::recv: {
        const int64_t t0 = steady_ns();
        world_->receive(call.root, rank(), call.out->raw(), call.out->nbytes(), what, ops_of(call));
        call.chunks->push_back({call.root, call.out->nbytes(), t0, steady_ns()});
        return;
      }
      case Collective::barrier: world_->arrive_and_wait(rank(), what); return;
    }
  }

  int64_t max_over_ranks(int64_t value) override {
    return world_->arrive_max(rank(), value, "the start-time agreement of a collective");
  }

  // The group's ranks are the members' places in `members`; a dry run's running ranks come first
  // (they are the world's first), so they are the first members too.
  std::unique_ptr<ProcessGroup> split_backend(const std::vector<int>& members) override {
    std::shared_ptr<World> world = world_->split(rank(), members, "split");
    const auto me = std::lower_bound(members.begin(), members.end(), rank()) - members.begin();
    return std::make_unique<ThreadsGroup>(std::move(world), static_cast<int>(me), static_cast<int>(members.size()),
                                          options());
  }

  int64_t exchange_with(int peer, int64_t value) override {
    // Both sides post first and then take, so neither waits on the other's take: no deadlock.
    auto m = std::make_shared<World::Message>();
    m->value = value;
    std::thread poster;  // a send blocks until taken; post from a helper so this rank can receive
    std::exception_ptr error;
    poster = start_thread([&] {
      try {
        world_->send(rank(), peer, m.get(), "the start-time agreement of send / recv");
      } catch (...) {
        error = std::current_exception();
      }
    });
    int64_t theirs = 0;
    try {
      theirs = world_->receive(peer, rank(), nullptr, 0, "the start-time agreement of send / recv").value;
    } catch (...) {
      poster.join();
      throw;
    }
    poster.join();
    if (error) std::rethrow_exception(error);
    return theirs;
  }

 private:
  static const char* bytes_of(const void* p, int64_t elems, DType d) {
    return static_cast<const char*>(p) + elems * dtype_size(d);
  }
  static char* bytes_of(void* p, int64_t elems, DType d) { return static_cast<char*>(p) + elems * dtype_size(d); }

  // Where the call's buffers live decides how their bytes move: host memory or a GPU's.
  static BufferOps& ops_of(const Call& call) {
    for (const Tensor* t : {call.out, call.in})
      if (t && t->defined() && t->device())
        if (BufferOps* ops = t->device()->executor().buffer_ops()) return *ops;
    return comm::host_buffer_ops();
  }

  // Every rank waits here; this rank's moves have finished first, so the others may read them.
  void step_done(BufferOps& ops, const std::string& what) {
    ops.finish();
    world_->arrive_and_wait(rank(), what);
  }

  // Ring all-reduce: n−1 reduce-scatter steps, in which each rank adds its left neighbour's partial
  // sum of one chunk to its own input, then n−1 all-gather steps, in which each rank copies a
  // finished chunk from its left neighbour. After step s of the first phase, rank r's output holds
  // the sum over s+2 ranks of chunk (r−s−1) mod n. Every chunk of the output is written exactly
  // once, so out of place needs no copy of the input first.
  void all_reduce_ring(const Call& call, const std::string& what) {
    BufferOps& ops = ops_of(call);
    const int n = size(), r = rank(), left = (r - 1 + n) % n;
    const DType d = call.out->dtype();
    const int64_t count = call.out->numel();
    world_->post(r, call.in->raw(), call.out->raw());
    world_->arrive_and_wait(r, what + " (posting buffers)");
    if (n == 1) {
      ops.copy(call.out->raw(), call.in->raw(), call.out->nbytes());
      ops.finish_avg(call.out->raw(), count, d, call.reduce_op, n);
      step_done(ops, what + " (done)");
      return;
    }
    const void* my_in = call.in->raw();
    void* mine = call.out->raw();
    for (int s = 0; s < n - 1; ++s) {
      const Range c = chunk_range(count, n, ((r - s - 1) % n + n) % n);
      // Step 0 reads the neighbour's input; later steps its partial sum, in its output.
      const void* theirs = s == 0 ? world_->in(left) : world_->out(left);
      const int64_t t0 = steady_ns();
      ops.reduce_pair(bytes_of(mine, c.first, d), bytes_of(my_in, c.first, d), bytes_of(theirs, c.first, d), c.count, d,
                      call.reduce_op);
      ops.finish();
      call.chunks->push_back({left, c.count * dtype_size(d), t0, steady_ns()});
      step_done(ops, what + " (reduce-scatter step " + std::to_string(s + 1) + ")");
    }
    // Rank r now owns the finished chunk (r+1) mod n; averaging happens once, on the owner.
    const Range own = chunk_range(count, n, (r + 1) % n);
    ops.finish_avg(bytes_of(mine, own.first, d), own.count, d, call.reduce_op, n);
    step_done(ops, what + " (end of reduce-scatter)");
    const void* theirs = world_->out(left);
    for (int s = 0; s < n - 1; ++s) {
      const Range c = chunk_range(count, n, ((r - s) % n + n) % n);
      const int64_t t0 = steady_ns();
      ops.copy(bytes_of(mine, c.first, d), bytes_of(theirs, c.first, d), c.count * dtype_size(d));
      ops.finish();
      call.chunks->push_back({left, c.count * dtype_size(d), t0, steady_ns()});
      step_done(ops, what + " (all-gather step " + std::to_string(s + 1) + ")");
    }
  }

  // One pass, no ring: rank r owns slice r of the buffer; it sums that slice of every rank's input
  // a piece at a time (a cache's worth on a host) and writes each finished piece straight into
  // every rank's output. Every input is read once and every output written once — the least
  // memory traffic an all-reduce can have — where the ring reads and writes each chunk at every one
  // of its 2(n−1) steps. The ring is the algorithm a network forces; in one memory we can do better.
  void all_reduce_direct(const Call& call, const std::string& what) {
    BufferOps& ops = ops_of(call);
    const int n = size(), r = rank();
    const DType d = call.out->dtype();
    const int64_t elem = dtype_size(d);
    world_->post(r, call.in->raw(), call.out->raw());
    world_->arrive_and_wait(r, what + " (posting buffers)");
    const Range slice = chunk_range(call.out->numel(), n, r);
    const int64_t piece = std::max<int64_t>(1, std::min(ops.piece_bytes() / elem, std::max<int64_t>(slice.count, 1)));
    void* acc = ops.scratch(piece * elem);
    const int64_t t0 = steady_ns();
    for (int64_t first = slice.first; first < slice.first + slice.count; first += piece) {
      const int64_t m = std::min(piece, slice.first + slice.count - first);
      if (n == 1) ops.copy(acc, bytes_of(world_->in(0), first, d), m * elem);
      else ops.reduce_pair(acc, bytes_of(world_->in(0), first, d), bytes_of(world_->in(1), first, d), m, d, call.reduce_op);
      for (int k = 2; k < n; ++k) ops.reduce_into(acc, bytes_of(world_->in(k), first, d), m, d, call.reduce_op);
      ops.finish_avg(acc, m, d, call.reduce_op, n);
      for (int k = 0; k < n; ++k) ops.copy(bytes_of(world_->out(k), first, d), acc, m * elem);
    }
    ops.finish();
    const int64_t t1 = steady_ns();
    // The peers' pieces interleave; report one step per peer over the measured interval.
    for (int k = 1; k < n; ++k) {
      const int peer = (r + k) % n;
      call.chunks->push_back({peer, 2 * slice.count * elem, t0 + (t1 - t0) * (k - 1) / (n - 1), t0 + (t1 - t0) * k / (n - 1)});
    }
    world_->arrive_and_wait(r, what + " (done)");  // every output complete, every input free
  }

  // Binomial tree: in round j, the ranks that already have the data (relative rank < 2^j) give it
  // to the rank 2^j further on. ⌈log2 n⌉ rounds instead of n−1.
  void broadcast_tree(const Call& call, const std::string& what) {
    BufferOps& ops = ops_of(call);
    const int n = size(), r = rank();
    const int rel = (r - call.root + n) % n;
    world_->post(r, nullptr, call.out->raw());
    world_->arrive_and_wait(r, what + " (posting buffers)");
    for (int dist = 1; dist < n; dist *= 2) {
      if (rel >= dist && rel < 2 * dist) {
        const int from = (call.root + rel - dist) % n;
        const int64_t t0 = steady_ns();
        ops.copy(call.out->raw(), world_->out(from), call.out->nbytes());
        ops.finish();
        call.chunks->push_back({from, call.out->nbytes(), t0, steady_ns()});
      }
      world_->arrive_and_wait(r, what + " (tree round " + std::to_string(dist) + ")");
    }
  }

  // The root reads every rank's input in rank order.
  void reduce_direct(const Call& call, const std::string& what) {
    BufferOps& ops = ops_of(call);
    const int n = size(), r = rank();
    world_->post(r, call.in->raw(), call.out ? call.out->raw() : nullptr);
    world_->arrive_and_wait(r, what + " (posting buffers)");
    if (r == call.root) {
      const DType d = call.in->dtype();
      const int64_t count = call.in->numel();
      void* out = call.out->raw();
      if (n == 1) ops.copy(out, call.in->raw(), call.in->nbytes());
      for (int k = 1; k < n; ++k) {
        const int64_t t0 = steady_ns();
        if (k == 1) ops.reduce_pair(out, world_->in(0), world_->in(1), count, d, call.reduce_op);
        else ops.reduce_into(out, world_->in(k), count, d, call.reduce_op);
        ops.finish();
        call.chunks->push_back({k, call.in->nbytes(), t0, steady_ns()});
      }
      ops.finish_avg(out, count, d, call.reduce_op, n);
    }
    step_done(ops, what + " (done)");  // inputs stay valid until the root has read them
  }

  // Each rank reduces its own block of everyone's input, in rank order.
  void reduce_scatter_direct(const Call& call, const std::string& what) {
    BufferOps& ops = ops_of(call);
    const int n = size(), r = rank();
    const DType d = call.out->dtype();
    const int64_t block = call.out->numel();
    world_->post(r, call.in->raw(), call.out->raw());
    world_->arrive_and_wait(r, what + " (posting buffers)");
    void* out = call.out->raw();
    if (n == 1) ops.copy(out, call.in->raw(), call.out->nbytes());
    for (int k = 1; k < n; ++k) {
      const int64_t t0 = steady_ns();
      if (k == 1)
        ops.reduce_pair(out, bytes_of(world_->in(0), block * r, d), bytes_of(world_->in(1), block * r, d), block, d,
                        call.reduce_op);
      else
        ops.reduce_into(out, bytes_of(world_->in(k), block * r, d), block, d, call.reduce_op);
      ops.finish();
      call.chunks->push_back({k, block * dtype_size(d), t0, steady_ns()});
    }
    ops.finish_avg(out, block, d, call.reduce_op, n);
    step_done(ops, what + " (done)");
  }

  // Each rank copies every rank's input into its place in the output.
  void all_gather_direct(const Call& call, const std::string& what) {
    BufferOps& ops = ops_of(call);
    const int n = size(), r = rank();
    const DType d = call.in->dtype();
    const int64_t block = call.in->numel();
    world_->post(r, call.in->raw(), call.out->raw());
    world_->arrive_and_wait(r, what + " (posting buffers)");
    for (int step = 0; step < n; ++step) {
      const int k = (r + step) % n;  // own block first; then each peer's, starting with the next
      const int64_t t0 = steady_ns();
      ops.copy(bytes_of(call.out->raw(), block * k, d), world_->in(k), block * dtype_size(d));
      ops.finish();
      if (k != r) call.chunks->push_back({k, block * dtype_size(d), t0, steady_ns()});
    }
    world_->arrive_and_wait(r, what + " (done)");
  }

  void scatter_direct(const Call& call, const std::string& what) {
    BufferOps& ops = ops_of(call);
    const int r = rank();
    const DType d = call.out->dtype();
    const int64_t block = call.out->numel();
    world_->post(r, call.in ? call.in->raw() : nullptr, call.out->raw());
    world_->arrive_and_wait(r, what + " (posting buffers)");
    const int64_t t0 = steady_ns();
    ops.copy(call.out->raw(), bytes_of(world_->in(call.root), block * r, d), call.out->nbytes());
    ops.finish();
    if (r != call.root) call.chunks->push_back({call.root, call.out->nbytes(), t0, steady_ns()});
    world_->arrive_and_wait(r, what + " (done)");
  }

  void gather_direct(const Call& call, const std::string& what) {
    BufferOps& ops = ops_of(call);
    const int n = size(), r = rank();
    const DType d = call.in->dtype();
    const int64_t block = call.in->numel();
    world_->post(r, call.in->raw(), call.out ? call.out->raw() : nullptr);
    world_->arrive_and_wait(r, what + " (posting buffers)");
    if (r == call.root)
      for (int k = 0; k < n; ++k) {
        const int64_t t0 = steady_ns();
        ops.copy(bytes_of(call.out->raw(), block * k, d), world_->in(k), call.in->nbytes());
        ops.finish();
        if (k != r) call.chunks->push_back({k, call.in->nbytes(), t0, steady_ns()});
      }
    world_->arrive_and_wait(r, what + " (done)");
  }

  std::shared_ptr<World> world_;
};

}  // namespace

std::vector<std::unique_ptr<ProcessGroup>> make_threads_groups(int world_size, CommOptions options, int ranks_run) {
  if (world_size < 1) throw UsageError("comm", "--ranks must be ≥ 1, got " + std::to_string(world_size));
  if (ranks_run <= 0 || ranks_run > world_size) ranks_run = world_size;
  auto world = std::make_shared<World>(ranks_run, options);
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  for (int r = 0; r < ranks_run; ++r) groups.push_back(std::make_unique<ThreadsGroup>(world, r, world_size, options));
  return groups;
}

}  // namespace scalelab
