#include "core/comm/process_group.h"

#include <algorithm>

#include "core/device/device.h"
#include "core/error.h"
#include "core/limits.h"

namespace scalelab {

const char* comm_algorithm_name(CommAlgorithm a) { return a == CommAlgorithm::direct ? "direct" : "ring"; }

CommAlgorithm parse_comm_algorithm(const std::string& name) {
  if (name == "ring") return CommAlgorithm::ring;
  if (name == "direct") return CommAlgorithm::direct;
  throw UsageError("comm", "--comm-algo '" + name + "' is unknown — use ring or direct");
}

// ---------------------------------------------------------------------------------------------
// Work

void Work::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

// ---------------------------------------------------------------------------------------------
// ProcessGroup

namespace {
thread_local const ProcessGroup* current_worker_group = nullptr;

std::string describe(const Tensor& t) { return t.defined() ? t.shape_string() : "an undefined tensor"; }
}  // namespace

ProcessGroup::ProcessGroup(int rank, int size, CommOptions options)
    : rank_(rank), size_(size), options_(options) {
  if (size < 1) throw UsageError("comm", "the world size must be ≥ 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size)
    throw UsageError("comm", "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(size) + ")");
}

ProcessGroup::~ProcessGroup() { stop_worker(); }

void ProcessGroup::stop_worker() noexcept {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

int64_t ProcessGroup::steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<Work> ProcessGroup::run_async(std::function<void()> call) {
  auto work = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (!worker_.joinable()) worker_ = start_thread([this] { worker_loop(); });
    queue_.emplace_back(std::move(call), work);
  }
  queue_cv_.notify_all();
  return work;
}

void ProcessGroup::worker_loop() {
  current_worker_group = this;
  for (;;) {
    std::pair<std::function<void()>, std::shared_ptr<Work>> item;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      item = std::move(queue_.front());
    }
    std::exception_ptr error;
    try {
      item.first();
    } catch (...) {
      error = std::current_exception();
    }
    // The call's copies of its tensors go before it is reported done: a caller that frees a
    // buffer after wait() frees it then, and the memory ledger shows it at that moment.
    item.first = nullptr;
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      queue_.pop_front();  // popped only now, so drain_queue() sees the running call as pending
    }
    queue_cv_.notify_all();
    {
      std::lock_guard<std::mutex> lock(item.second->mutex_);
      item.second->done_ = true;
      item.second->error_ = error;
    }
    item.second->cv_.notify_all();
  }
}

void ProcessGroup::drain_queue() {
  if (current_worker_group == this) return;  // a queued call issuing a collective runs it in order
  std::unique_lock<std::mutex> lock(queue_mutex_);
  queue_cv_.wait(lock, [&] { return queue_.empty(); });
}

// The tag is captured by value: it tags the call when it runs, whatever the caller does meanwhile.
std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& t, ReduceOp op, CommTag tag) {
  if (tag.step < 0 && device_) tag.step = device_->step();
  return run_async([this, t, op, tag = std::move(tag)] { all_reduce(t, t, op, tag); });
}
std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op, CommTag tag) {
  if (tag.step < 0 && device_) tag.step = device_->step();
  return run_async([this, in, out, op, tag = std::move(tag)] { reduce_scatter(in, out, op, tag); });
}
std::shared_ptr<Work> ProcessGroup::all_gather_async(const Tensor& in, const Tensor& out, CommTag tag) {
  if (tag.step < 0 && device_) tag.step = device_->step();
  return run_async([this, in, out, tag = std::move(tag)] { all_gather(in, out, tag); });
}
std::shared_ptr<Work> ProcessGroup::broadcast_async(const Tensor& t, int root, CommTag tag) {
  if (tag.step < 0 && device_) tag.step = device_->step();
  return run_async([this, t, root, tag = std::move(tag)] { broadcast(t, root, tag); });
}

// ---------------------------------------------------------------------------------------------
// Argument checks: the same clear error from every backend.

namespace {

void check_defined(const Tensor& t, Collective c, const char* what) {
  if (!t.defined())
    throw Error("comm", std::string(collective_name(c)) + ": " + what + " is undefined — allocate it on this rank's device");
}

void check_same_dtype(const Tensor& a, const Tensor& b, Collective c) {
  if (a.dtype() != b.dtype())
    throw Error("comm", std::string(collective_name(c)) + ": input " + describe(a) + " and output " + describe(b) +
                            " differ in dtype — cast one of them");
}

void check_reducible(const Tensor& t, Collective c) {
  if (t.dtype() == DType::i32)
    throw Error("comm", std::string(collective_name(c)) + ": reductions take f32, f16 or bf16, got " + describe(t));
}

}  // namespace

void ProcessGroup::all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, const CommTag& tag) {
  check_defined(in, Collective::all_reduce, "input");
  check_defined(out, Collective::all_reduce, "output");
  check_same_dtype(in, out, Collective::all_reduce);
  check_reducible(in, Collective::all_reduce);
  if (in.numel() != out.numel())
    throw Error("comm", "all_reduce: input " + describe(in) + " and output " + describe(out) + " differ in size");
  collective({Collective::all_reduce, op, &in, &out}, in.nbytes(), tag);
}

void ProcessGroup::broadcast(const Tensor& t, int root, const CommTag& tag) {
  check_defined(t, Collective::broadcast, "tensor");
  if (root < 0 || root >= size_)
    throw Error("comm", "broadcast: root " + std::to_string(root) + " is outside [0, " + std::to_string(size_) + ")");
  collective({Collective::broadcast, ReduceOp::sum, &t, &t, root}, t.nbytes(), tag);
}

void ProcessGroup::reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op, const CommTag& tag) {
  check_defined(in, Collective::reduce, "input");
  if (root < 0 || root >= size_)
    throw Error("comm", "reduce: root " + std::to_string(root) + " is outside [0, " + std::to_string(size_) + ")");
  check_reducible(in, Collective::reduce);
  if (rank_ == root) {
    check_defined(out, Collective::reduce, "output on the root");
    check_same_dtype(in, out, Collective::reduce);
    if (in.numel() != out.numel())
      throw Error("comm", "reduce: input " + describe(in) + " and output " + describe(out) + " differ in size");
  }
  collective({Collective::reduce, op, &in, rank_ == root ? &out : nullptr, root}, in.nbytes(), tag);
}

void ProcessGroup::all_gather(const Tensor& in, const Tensor& out, const CommTag& tag) {
  check_defined(in, Collective::all_gather, "input");
  check_defined(out, Collective::all_gather, "output");
  check_same_dtype(in, out, Collective::all_gather);
  if (out.numel() != in.numel() * size_)
    throw Error("comm", "all_gather: the output must hold world size × input = " + std::to_string(size_) + " × " +
                            std::to_string(in.numel()) + " elements, got " + describe(out));
  collective({Collective::all_gather, ReduceOp::sum, &in, &out}, out.nbytes(), tag);
}

void ProcessGroup::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, const CommTag& tag) {
  check_defined(in, Collective::reduce_scatter, "input");
  check_defined(out, Collective::reduce_scatter, "output");
  check_same_dtype(in, out, Collective::reduce_scatter);
  check_reducible(in, Collective::reduce_scatter);
  if (in.numel() != out.numel() * size_)
    throw Error("comm", "reduce_scatter: the input must hold world size × output = " + std::to_string(size_) +
                            " × " + std::to_string(out.numel()) + " elements, got " + describe(in));
  collective({Collective::reduce_scatter, op, &in, &out}, in.nbytes(), tag);
}

void ProcessGroup::scatter(const Tensor& in, const Tensor& out, int root, const CommTag& tag) {
  check_defined(out, Collective::scatter, "output");
  if (root < 0 || root >= size_)
    throw Error("comm", "scatter: root " + std::to_string(root) + " is outside [0, " + std::to_string(size_) + ")");
  if (rank_ == root) {
    check_defined(in, Collective::scatter, "input on the root");
    check_same_dtype(in, out, Collective::scatter);
    if (in.numel() != out.numel() * size_)
      throw Error("comm", "scatter: the root's input must hold world size × output = " + std::to_string(size_) +
                              " × " + std::to_string(out.numel()) + " elements, got " + describe(in));
  }
  collective({Collective::scatter, ReduceOp::sum, rank_ == root ? &in : nullptr, &out, root}, out.nbytes() * size_,
             tag);
}

void ProcessGroup::gather(const Tensor& in, const Tensor& out, int root, const CommTag& tag) {
  check_defined(in, Collective::gather, "input");
  if (root < 0 || root >= size_)
    throw Error("comm", "gather: root " + std::to_string(root) + " is outside [0, " + std::to_string(size_) + ")");
  if (rank_ == root) {
    check_defined(out, Collective::gather, "output on the root");
    check_same_dtype(in, out, Collective::gather);
    if (out.numel() != in.numel() * size_)
      throw Error("comm", "gather: the root's output must hold world size × input = " + std::to_string(size_) +
                              " × " + std::to_string(in.numel()) + " elements, got " + describe(out));
  }
  collective({Collective::gather, ReduceOp::sum, &in, rank_ == root ? &out : nullptr, root}, in.nbytes() * size_,
             tag);
}

void ProcessGroup::send(const Tensor& t, int peer, const CommTag& tag) {
  check_defined(t, Collective::send, "tensor");
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw Error("comm", "send: peer " + std::to_string(peer) + " must be another rank in [0, " +
                            std::to_string(size_) + ")");
  collective({Collective::send, ReduceOp::sum, &t, nullptr, peer}, t.nbytes(), tag);
}

void ProcessGroup::recv(const Tensor& t, int peer, const CommTag& tag) {
  check_defined(t, Collective::recv, "tensor");
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw Error("comm", "recv: peer " + std::to_string(peer) + " must be another rank in [0, " +
                            std::to_string(size_) + ")");
  collective({Collective::recv, ReduceOp::sum, nullptr, &t, peer}, t.nbytes(), tag);
}

void ProcessGroup::barrier(const CommTag& tag) {
  collective({Collective::barrier}, 0, tag);
}

// ---------------------------------------------------------------------------------------------
// Sub-groups

namespace {
// Flow ids: each group counts its own below 2^32, in a space of its own below 2^20 (ids stay below
// 2^53, exact in a JSON reader's doubles). The world's group is space 0: its ids are its counts.
constexpr int64_t kFlowsPerSpace = int64_t{1} << 32;
constexpr int64_t kFlowSpaces = int64_t{1} << 20;

std::string list_of(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return "{" + s + "}";
}
}  // namespace

std::unique_ptr<ProcessGroup> ProcessGroup::split(const std::vector<int>& members, const std::string& name) {
  const std::string what = "split '" + name + "' on rank " + std::to_string(rank_);
  if (!world_ranks_.empty())
    throw Error("comm", what + ": group '" + name_ + "' is itself a sub-group — split the world's group (members are world ranks)");
  if (name.empty()) throw Error("comm", "split: the group needs a name (\"tp\", \"pp\", \"dp\") — it tags its events in the trace");
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= size_)
      throw Error("comm", what + ": member " + std::to_string(members[i]) + " is outside the world [0, " +
                              std::to_string(size_) + ")");
    if (i > 0 && members[i] <= members[i - 1])
      throw Error("comm", what + ": members " + list_of(members) + " must be ascending, each once");
  }
  if (!std::binary_search(members.begin(), members.end(), rank_))
    throw Error("comm", what + ": members " + list_of(members) + " leave out this rank — each rank names the group it joins");
  const int64_t space = 1 + static_cast<int64_t>(splits_) * size_ + members.front();
  if (space >= kFlowSpaces)
    throw Error("comm", what + ": " + std::to_string(splits_) + " groups already split from a world of " +
                            std::to_string(size_) + " ranks — make each group once and keep it");
  ++splits_;
  drain_queue();  // a split is a call like the others: what was queued before it runs first
  std::unique_ptr<ProcessGroup> group = split_backend(members);
  group->name_ = name;
  group->world_ranks_ = members;
  group->flow_space_ = space;
  group->device_ = device_;
  return group;
}

std::unique_ptr<ProcessGroup> ProcessGroup::split_backend(const std::vector<int>&) {
  throw Error("comm", std::string(backend()) + ": this backend makes no sub-groups (split) — run tp / pp / dp groups "
                      "with --launch threads (cpu, sim) or mpi");
}

std::pair<int, int> ProcessGroup::placement(int devices_per_node) {
  if (placement_per_node_ == devices_per_node) return placement_;
  const int d = std::max(1, devices_per_node);
  if (world_ranks_.empty()) {
    // The world's ranks fill nodes in order.
    const int k = std::min(size_, d);
    placement_ = {k, (size_ + k - 1) / k};
  } else {
    std::unordered_map<int, int> on_node;
    for (int r : world_ranks_) ++on_node[r / d];
    int most = 0;
    for (const auto& [node, count] : on_node) most = std::max(most, count);
    placement_ = {most, static_cast<int>(on_node.size())};
  }
  placement_per_node_ = devices_per_node;
  return placement_;
}

// ---------------------------------------------------------------------------------------------
// Timing and events: the same for every backend and every kind of device.

namespace {

// A backend that pipelines in small pieces reports hundreds of steps per call; a trace keeps at
// most this many per call, each the merge of neighbouring steps (bytes summed, the peer kept when
// they share it).
constexpr size_t kMaxChunkEvents = 32;

Role role_of(Collective c) {
  switch (c) {
    case Collective::all_reduce: return Role::all_reduce;
    case Collective::broadcast: return Role::broadcast;
    case Collective::reduce: return Role::reduce;
    case Collective::all_gather: return Role::all_gather;
    case Collective::reduce_scatter: return Role::reduce_scatter;
    case Collective::scatter: return Role::scatter;
    case Collective::gather: return Role::gather;
    case Collective::send: return Role::send;
    case Collective::recv: return Role::recv;
    case Collective::barrier: return Role::barrier;
  }
  return Role::none;
}

}  // namespace

void ProcessGroup::merge_chunks(std::vector<Chunk>& chunks) {
  if (chunks.size() <= kMaxChunkEvents) return;
  std::vector<Chunk> merged;
  const size_t n = chunks.size();
  for (size_t g = 0; g < kMaxChunkEvents; ++g) {
    const size_t first = n * g / kMaxChunkEvents, last = n * (g + 1) / kMaxChunkEvents;
    Chunk m = chunks[first];
    for (size_t i = first + 1; i < last; ++i) {
      m.bytes += chunks[i].bytes;
      m.begin_ns = std::min(m.begin_ns, chunks[i].begin_ns);
      m.end_ns = std::max(m.end_ns, chunks[i].end_ns);
      if (chunks[i].peer != m.peer) m.peer = -1;
    }
    merged.push_back(m);
  }
  chunks = std::move(merged);
}

int64_t ProcessGroup::next_flow_id(const Call& call) {
  // Even ids for collectives, odd ones for point-to-point: the two never collide. A send from s to
  // d and the recv on d from s both count the pair (s, d)'s messages, so they agree on the id.
  if (call.op == Collective::send || call.op == Collective::recv) {
    const bool sending = call.op == Collective::send;
    const int64_t src = sending ? rank_ : call.root, dst = sending ? call.root : rank_;
    const int64_t seq = (sending ? sent_to_ : received_from_)[call.root]++;
    const int64_t local = (seq * size_ + src) * size_ + dst;
    return 2 * (flow_space_ > 0 ? flow_space_ * kFlowsPerSpace + local % kFlowsPerSpace : local) + 1;
  }
  const int64_t local = collectives_issued_++;
  return 2 * (flow_space_ > 0 ? flow_space_ * kFlowsPerSpace + local % kFlowsPerSpace : local);
}

void ProcessGroup::collective(Call call, int64_t payload, const CommTag& tag) {
  drain_queue();
  Device* dev = device_;
  for (const Tensor* t : {call.in, call.out})
    if (t && t->defined() && t->device()) dev = t->device();
  const bool point_to_point = call.op == Collective::send || call.op == Collective::recv;
  std::vector<Chunk> chunks;
  call.chunks = &chunks;
  const int64_t flow_id = next_flow_id(call);

  auto* sim = dev ? dynamic_cast<SimClock*>(&dev->clock()) : nullptr;
  int64_t begin_ns = 0, end_ns = 0;
  if (sim) {
    // On sim the collective starts when the last rank arrives (its comm lane free and its
    // inputs ready) and lasts what the cost model says; the numerics still run (unless dry run).
    int64_t arrival = sim->lane_free_ns(Lane::comm);
    for (const Tensor* t : {call.in, call.out})
      if (t && t->defined()) arrival = std::max(arrival, t->ready_ns());
    const int64_t start = point_to_point ? std::max(arrival, exchange_with(call.root, arrival)) : max_over_ranks(arrival);
    if (dev->computes()) run(call);
    // Priced on where the group's ranks sit: a TP group inside a node on NVLink, a DP group with
    // one rank per node on the NICs.
    const int per_node = std::max(1, sim->model().profile().devices_per_node);
    const bool crosses = point_to_point && world_rank(rank_) / per_node != world_rank(call.root) / per_node;
    const auto [k, m] = placement(per_node);
    const HostTraffic traffic = dev->host_traffic();
    const double cold = sim->model().profile().cold_share(sim->host_bytes_between_touches(traffic.moved, traffic.held, traffic.devices, traffic.shared));
    const double seconds =
        sim->model().collective_seconds(call.op, static_cast<double>(payload), size_, {k, m}, crosses, cold);
    // What the call keeps busy of this device's link (NVLink), shared with a peer copy that
    // overlaps it (SimClock): the bytes it sends, as nccl-tests counts them; none for a message
    // that leaves the node through the NIC.
    const double link_Bps = sim->model().profile().intra_node.bandwidth_Bps;
    const double link_bytes = crosses ? 0.0 : static_cast<double>(payload) * busbw_factor(call.op, size_);
    const double link_share = seconds > 0 && link_Bps > 0 ? link_bytes / (link_Bps * seconds) : 0.0;
    const Interval when = sim->occupy(Lane::comm, start, seconds_to_ns(seconds), link_share);
    begin_ns = when.begin_ns;
    end_ns = when.end_ns;
    // Lay the backend's steps evenly over the modelled interval: the order and bytes are real,
    // the times are the model's.
    // (d · i / steps, split so that a duration near the clock's horizon does not overflow.)
    const int64_t steps = static_cast<int64_t>(chunks.size());
    const int64_t d = end_ns - begin_ns;
    auto at = [&](int64_t i) { return begin_ns + d / steps * i + d % steps * i / steps; };
    for (int64_t i = 0; i < steps; ++i) {
      chunks[i].begin_ns = at(i);
      chunks[i].end_ns = at(i + 1);
    }
  } else {
    const int64_t offset = dev ? dev->clock().now_ns() - steady_ns() : 0;
    begin_ns = steady_ns() + offset;
    run(call);
    end_ns = steady_ns() + offset;
    for (Chunk& c : chunks) {
      c.begin_ns += offset;
      c.end_ns += offset;
    }
  }
  for (const Tensor* t : {call.in, call.out})
    if (t && t->defined()) t->set_ready_ns(std::max(t->ready_ns(), end_ns));
  if (!dev) return;
  merge_chunks(chunks);

  Event e;
  e.lane = Lane::comm;
  e.kind = collective_name(call.op);
  e.name = tag.name.empty() ? e.kind : tag.name;
  e.phase = Phase::comm;
  e.bucket = tag.bucket;
  e.micro_batch = tag.micro_batch;
  e.step = tag.step;
  e.thread = host_thread_index();  // the thread that ran the call: a rank's, or its queue's worker
  e.flow_id = flow_id;
  e.role = role_of(call.op);
  e.group = name_;
  // Peers in the trace are world ranks: the dashboard draws between devices, whatever the group.
  if (chunks.empty()) {
    // One event; its bytes are what this rank sends, as nccl-tests counts bus bandwidth.
    e.t_begin_ns = begin_ns;
    e.t_end_ns = end_ns;
    e.bytes = static_cast<int64_t>(static_cast<double>(payload) * busbw_factor(call.op, size_));
    e.peer = point_to_point ? world_rank(call.root) : -1;
    dev->record(e);
  } else {
    for (size_t i = 0; i < chunks.size(); ++i) {
      Event c = e;
      c.name = e.name + " step " + std::to_string(i + 1) + "/" + std::to_string(chunks.size());
      c.t_begin_ns = chunks[i].begin_ns;
      c.t_end_ns = chunks[i].end_ns;
      c.bytes = chunks[i].bytes;
      c.peer = chunks[i].peer >= 0 ? world_rank(chunks[i].peer) : -1;
      if (i > 0) c.flow_id = -1;  // one arrow per call between the ranks, from its first step
      dev->record(c);
    }
  }
}

}  // namespace scalelab
