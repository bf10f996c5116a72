// The `mpi` backend: one rank per process, launched by mpirun, on as many machines as mpirun
// reaches. Each collective is Open MPI's own (MPI_Iallreduce, MPI_Ibcast, …), so this file shows
// how the ProcessGroup calls map onto MPI, and how to keep a promise MPI itself does not make:
// no call waits forever. Every call is non-blocking and polled until CommOptions::timeout; to name
// the ranks that never came, each rank announces "I reached collective #k" to the others on a tag
// of its own, and a timeout reports the ranks whose announcement of k has not arrived.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/backends.h"
#include "core/comm/reduce_kernels.h"
#include "core/device/host_cores.h"
#include "core/error.h"

namespace scalelab {

namespace detail {

// The check macro's error: the call's text, file:line, MPI's own words and what to try.
[[noreturn]] static void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof text, "MPI error %d", code);
  int error_class = code;
  (void)MPI_Error_class(code, &error_class);
  const char* hint =
      error_class == MPI_ERR_TRUNCATE
          ? "a rank received more data than it posted room for — every rank must pass the same sizes and dtypes "
            "to the same collective, in the same order"
          : "every rank must issue the same collectives with the same sizes, dtypes and roots in the same order; "
            "check that mpirun started every rank (mpirun -np N)";
  throw Error("mpi", std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + text + " — " + hint);
}

}  // namespace detail

#define SCALELAB_MPI_CHECK(call)                                                        \
  do {                                                                                  \
    const int scalelab_mpi_err_ = (call);                                               \
    if (scalelab_mpi_err_ != MPI_SUCCESS)                                               \
      ::scalelab::detail::throw_mpi_error(scalelab_mpi_err_, #call, __FILE__, __LINE__); \
  } while (0)

namespace {

using SteadyClock = std::chrono::steady_clock;

// Tags of our own point-to-point traffic. MPI's collectives use a tag space of their own, so
// they never match these.
constexpr int kDataTag = 1;      // send / recv
constexpr int kArrivalTag = 2;   // "I reached collective #k" (on a group's communicator)
constexpr int kExchangeTag = 3;  // exchange_with (the simulated start of send / recv)
constexpr int kBulkTag = 4;      // scatter / gather of blocks too large for one MPI call
constexpr int kCreateTag = 0x5CA1;  // "I am creating group #k" (on MPI_COMM_WORLD)

// One lock around every MPI call of this process. MPI is initialised MPI_THREAD_SERIALIZED: the
// async worker thread of a group and the main thread (or two groups' workers) may both call MPI,
// never at once. The lock is only held while a call runs, never while waiting.
std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

std::string seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// Between two polls: first give the core away (when ranks outnumber cores, a spinning rank would
// steal it from the rank it waits for), then, once the wait is long enough that a rank is late
// rather than data being in flight, sleep a little so a waiting rank costs next to nothing.
void pause_between_polls(SteadyClock::duration waited) {
  if (waited < std::chrono::milliseconds(50)) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::microseconds(200));
}

// f16 and bf16 travel as 2-byte elements of a type of their own and are reduced by user-defined
// operations that sum in f32 and round once per pairwise step, as the host backends and NCCL do.
void f16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  comm::reduce_pair(inout, in, inout, *len, DType::f16, ReduceOp::sum);
}
void f16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  comm::reduce_pair(inout, in, inout, *len, DType::f16, ReduceOp::max);
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  comm::reduce_pair(inout, in, inout, *len, DType::bf16, ReduceOp::sum);
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  comm::reduce_pair(inout, in, inout, *len, DType::bf16, ReduceOp::max);
}

// Whether the byte ranges [a, a+n) and [b, b+m) share a byte.
bool overlaps(const void* a, int64_t n, const void* b, int64_t m) {
  if (!a || !b || n == 0 || m == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uintptr_t>(m) && pb < pa + static_cast<uintptr_t>(n);
}

// What a rank announces when it reaches a collective: which one (its number on the group), and
// what it is, so a timeout can also say when the ranks disagree on the collective.
struct Arrival {
  int64_t seq = -1, op = -1, bytes = 0, root = -1;
};
constexpr int64_t kStartAgreement = 100;  // the op code of max_over_ranks
constexpr int64_t kSplit = 101;           // … and of split's gathering of the members

std::string describe_arrival(const Arrival& a) {
  const std::string what = a.op == kStartAgreement ? std::string("the start-time agreement")
                           : a.op == kSplit         ? std::string("split")
                                                    : collective_name(static_cast<Collective>(a.op));
  return what + " of " + std::to_string(a.bytes) + " bytes" + (a.root >= 0 ? " (root " + std::to_string(a.root) + ")" : "");
}

// Announcements on one communicator and tag: sent to every other rank, received lazily (whatever
// has come is taken at each announcement and on a timeout). Callers hold mpi_mutex().
class Arrivals {
 public:
  Arrivals(MPI_Comm comm, int tag, int rank, int size)
      : comm_(comm), tag_(tag), rank_(rank), size_(size), seen_(static_cast<size_t>(size)),
        latest_(static_cast<size_t>(size), -1) {}

  void announce(const Arrival& a) {
    reap_sends();
    forget_before(a.seq);
    latest_[static_cast<size_t>(rank_)] = a.seq;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      sends_.push_back({{a.seq, a.op, a.bytes, a.root}, MPI_REQUEST_NULL});
      Sent& s = sends_.back();  // a deque keeps its elements in place: the buffer stays valid
      SCALELAB_MPI_CHECK(MPI_Isend(s.data.data(), 4, MPI_INT64_T, r, tag_, comm_, &s.request));
    }
    drain();
  }

  // Takes every announcement that has arrived.
  void drain() {
    for (;;) {
      int flag = 0;
      MPI_Status status;
      SCALELAB_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, tag_, comm_, &flag, &status));
      if (!flag) return;
      std::array<int64_t, 4> d{};
      // The probed message is here and small: this receive returns at once.
      SCALELAB_MPI_CHECK(MPI_Recv(d.data(), 4, MPI_INT64_T, status.MPI_SOURCE, tag_, comm_, MPI_STATUS_IGNORE));
      const auto from = static_cast<size_t>(status.MPI_SOURCE);
      seen_[from].push_back({d[0], d[1], d[2], d[3]});
      latest_[from] = std::max(latest_[from], d[0]);
    }
  }

  // The ranks whose announcement of `seq` has not arrived.
  std::vector<int> missing(int64_t seq) const {
    std::vector<int> m;
    for (int r = 0; r < size_; ++r)
      if (latest_[static_cast<size_t>(r)] < seq) m.push_back(r);
    return m;
  }

  const Arrival* of(int rank, int64_t seq) const {
    for (const Arrival& a : seen_[static_cast<size_t>(rank)])
      if (a.seq == seq) return &a;
    return nullptr;
  }

  // Completed sends are freed; the rest are handed to `keep` (they may still read their buffer).
  template <typename Keep>
  void release(Keep keep) noexcept {
    for (Sent& s : sends_) {
      int done = 1;
      if (s.request != MPI_REQUEST_NULL && MPI_Test(&s.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
      if (!done) keep(s.request, s.data);
    }
    sends_.clear();
  }

 private:
  struct Sent {
    std::array<int64_t, 4> data;
    MPI_Request request;
  };
  void reap_sends() {
    while (!sends_.empty()) {
      int done = 0;
      SCALELAB_MPI_CHECK(MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE));
      if (!done) return;
      sends_.pop_front();
    }
  }
  void forget_before(int64_t seq) {
    for (auto& q : seen_)
      while (!q.empty() && q.front().seq < seq) q.pop_front();
  }

  MPI_Comm comm_;
  int tag_, rank_, size_;
  std::deque<Sent> sends_;
  std::vector<std::deque<Arrival>> seen_;  // announcements not yet older than our current collective
  std::vector<int64_t> latest_;            // the latest collective each rank has announced
};

// What a call has in flight: its requests and everything they may still read or write.
struct Pending {
  std::vector<MPI_Request> requests;
  size_t finished = 0;  // the requests before this one have completed
  SteadyClock::time_point start = SteadyClock::now();
  std::deque<std::vector<char>> buffers;  // staging copies and scalars (a deque: they stay in place)
  std::vector<Tensor> tensors;            // kept alive while MPI may still write into them

  char* buffer(int64_t bytes) {
    buffers.emplace_back(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    return buffers.back().data();
  }
};

// Requests that timed out: MPI may still complete them (a late rank arrives) and write into their
// buffers, and a non-blocking collective may not be cancelled or freed, so they and their buffers
// are kept until the process ends.
void orphan(Pending&& p) {
  static auto* orphans = new std::vector<Pending>();  // never freed: MPI may write into it until exit
  std::lock_guard<std::mutex> lock(mpi_mutex());
  orphans->push_back(std::move(p));
}

// Polls until requests [from, to) of p complete (true) or `timeout` has passed since the call
// began (false). Throws on MPI errors.
bool wait_range(Pending& p, size_t from, size_t to, std::chrono::milliseconds timeout, const std::string& what) {
  const int count = static_cast<int>(to - from);
  std::vector<MPI_Status> statuses(static_cast<size_t>(count));
  for (;;) {
    int done = 0, rc = MPI_SUCCESS;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      rc = MPI_Testall(count, p.requests.data() + from, &done, statuses.data());
    }
    if (rc != MPI_SUCCESS) {
      int code = rc;
      if (rc == MPI_ERR_IN_STATUS)
        for (const MPI_Status& s : statuses)
          if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) code = s.MPI_ERROR;
      orphan(std::move(p));  // the requests that did not fail may still run
      detail::throw_mpi_error(code, ("MPI_Testall on the requests of " + what).c_str(), __FILE__, __LINE__);
    }
    if (done) return true;
    const auto waited = SteadyClock::now() - p.start;
    if (waited >= timeout) return false;
    pause_between_polls(waited);
  }
}

bool wait_all(Pending& p, std::chrono::milliseconds timeout, const std::string& what) {
  if (!wait_range(p, p.finished, p.requests.size(), timeout, what)) return false;
  p.finished = p.requests.size();
  return true;
}

// MPI itself, initialised on first use and finalised once when the process exits.
// Set once a call of this process gave up waiting: the job may not end with MPI_Finalize then.
std::atomic<bool>& collective_timed_out() {
  static std::atomic<bool> flag{false};
  return flag;
}
// That call's timeout: how long the end of the job waits for the other ranks before aborting it.
std::atomic<int64_t>& timeout_after_failure_ms() {
  static std::atomic<int64_t> ms{10000};
  return ms;
}

class Runtime {
 public:
  static Runtime& get() {
    static Runtime runtime;  // a function-local static: built on first use, destroyed at exit
    return runtime;
  }

  MPI_Datatype type(DType d) const {
    switch (d) {
      case DType::f32: return MPI_FLOAT;
      case DType::f16: return f16_type_;
      case DType::bf16: return bf16_type_;
      case DType::i32: return MPI_INT32_T;
    }
    return MPI_BYTE;
  }
  // avg is summed here; the group divides on the host.
  MPI_Op op(DType d, ReduceOp op) const {
    const bool max = op == ReduceOp::max;
    if (d == DType::f16) return max ? f16_max_ : f16_sum_;
    if (d == DType::bf16) return max ? bf16_max_ : bf16_sum_;
    return max ? MPI_MAX : MPI_SUM;
  }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

  // Group creations are numbered and announced on MPI_COMM_WORLD, so that a rank that never
  // creates its group can be named.
  int64_t next_creation() { return creations_++; }
  Arrivals& creation_arrivals() { return *creation_arrivals_; }

 private:
  Runtime() {
    (void)mpi_mutex();  // built first, so destroyed after us: ~Runtime still takes it
    int initialized = 0, finalized = 0;
    SCALELAB_MPI_CHECK(MPI_Finalized(&finalized));
    if (finalized)
      throw Error("mpi", "MPI was already finalised in this process — create every mpi group before MPI_Finalize");
    SCALELAB_MPI_CHECK(MPI_Initialized(&initialized));
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      // SERIALIZED, not MULTIPLE: a group's async worker may call MPI, never at the same time as
      // another thread (mpi_mutex), and MULTIPLE would slow every call down for nothing.
      SCALELAB_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
      owns_ = true;
      // Errors come back as codes that the check macro turns into exceptions, instead of aborting.
      SCALELAB_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    } else {
      SCALELAB_MPI_CHECK(MPI_Query_thread(&provided));
    }
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error("mpi", "this MPI provides thread level " + std::to_string(provided) +
                             ", below MPI_THREAD_SERIALIZED, which the asynchronous collectives need (they run on a "
                             "worker thread) — use an Open MPI built with thread support, or initialise MPI with "
                             "MPI_Init_thread(…, MPI_THREAD_SERIALIZED, …) before scalelab does");
    SCALELAB_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
    SCALELAB_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
    // The other ranks may be on these cores: keeping every rank's turns to the first core would
    // stack them there.
    if (world_size_ > 1) computes_beside_other_processes();
    SCALELAB_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &f16_type_));
    SCALELAB_MPI_CHECK(MPI_Type_commit(&f16_type_));
    SCALELAB_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &bf16_type_));
    SCALELAB_MPI_CHECK(MPI_Type_commit(&bf16_type_));
    SCALELAB_MPI_CHECK(MPI_Op_create(&f16_sum, 1, &f16_sum_));
    SCALELAB_MPI_CHECK(MPI_Op_create(&f16_max, 1, &f16_max_));
    SCALELAB_MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &bf16_sum_));
    SCALELAB_MPI_CHECK(MPI_Op_create(&bf16_max, 1, &bf16_max_));
    creation_arrivals_ = std::make_unique<Arrivals>(MPI_COMM_WORLD, kCreateTag, world_rank_, world_size_);
  }

  ~Runtime() {
    // Destructors never throw: errors at exit are ignored, and MPI is finalised only if we began it.
    int finalized = 1;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
    // MPI_Finalize waits for every rank, and a rank that missed a collective (stopped, hung) never
    // comes. So every rank meets the others at a barrier first; a rank whose call timed out waits
    // there only as long as its timeout, then ends the whole job (MPI_Abort), so mpirun exits.
    if (owns_ && world_size_ > 1) {
      const bool bounded = collective_timed_out();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_after_failure_ms());
      MPI_Request barrier = MPI_REQUEST_NULL;
      int met = 0;
      if (MPI_Ibarrier(MPI_COMM_WORLD, &barrier) == MPI_SUCCESS) {
        while (MPI_Test(&barrier, &met, MPI_STATUS_IGNORE) == MPI_SUCCESS && !met &&
               (!bounded || std::chrono::steady_clock::now() < deadline))
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (bounded && !met) {
        std::fprintf(stderr, "[mpi] rank %d: a collective timed out and not every rank came to the end — aborting "
                             "the job (MPI_Abort) rather than waiting in MPI_Finalize for ever\n", world_rank_);
        std::fflush(stderr);
        (void)MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    std::lock_guard<std::mutex> lock(mpi_mutex());
    if (creation_arrivals_) creation_arrivals_->release([](MPI_Request&, const std::array<int64_t, 4>&) {});
    for (MPI_Op* op : {&f16_sum_, &f16_max_, &bf16_sum_, &bf16_max_})
      if (*op != MPI_OP_NULL) (void)MPI_Op_free(op);
    for (MPI_Datatype* t : {&f16_type_, &bf16_type_})
      if (*t != MPI_DATATYPE_NULL) (void)MPI_Type_free(t);
    if (owns_) (void)MPI_Finalize();
  }

  bool owns_ = false;
  int world_rank_ = 0, world_size_ = 1;
  MPI_Datatype f16_type_ = MPI_DATATYPE_NULL, bf16_type_ = MPI_DATATYPE_NULL;
  MPI_Op f16_sum_ = MPI_OP_NULL, f16_max_ = MPI_OP_NULL, bf16_sum_ = MPI_OP_NULL, bf16_max_ = MPI_OP_NULL;
  int64_t creations_ = 0;
  std::unique_ptr<Arrivals> creation_arrivals_;
};

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(MPI_Comm comm, int rank, int size, CommOptions options, int64_t max_count)
      : ProcessGroup(rank, size, options), comm_(comm), max_count_(max_count),
        rt_(Runtime::get()), arrivals_(comm, kArrivalTag, rank, size) {}

  ~MpiGroup() override {
    stop_worker();  // queued async calls finish while this object is whole
    int finalized = 1;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
    Pending unsent;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      arrivals_.release([&](MPI_Request& r, const std::array<int64_t, 4>& data) {
        unsent.requests.push_back(r);
        std::memcpy(unsent.buffer(sizeof data), data.data(), sizeof data);  // kept as long as the send
      });
      // Freeing marks the communicator for deallocation; requests still pending on it (after a
      // timeout) keep it alive inside MPI.
      (void)MPI_Comm_free(&comm_);
    }
    if (!unsent.requests.empty()) orphan(std::move(unsent));
  }

  const char* backend() const override { return "mpi"; }

 protected:
  void run(const Call& call) override {
    guarded(collective_name(call.op), [&] {
      switch (call.op) {
        case Collective::all_reduce: return all_reduce(call);
        case Collective::broadcast: return broadcast(call);
        case Collective::reduce: return reduce(call);
        case Collective::all_gather: return all_gather(call);
        case Collective::reduce_scatter: return reduce_scatter(call);
        case Collective::scatter: return scatter(call);
        case Collective::gather: return gather(call);
        case Collective::send: return point_to_point(call, true);
        case Collective::recv: return point_to_point(call, false);
        case Collective::barrier: return barrier();
      }
    });
  }

  int64_t max_over_ranks(int64_t value) override {
    int64_t result = value;
    guarded("the start-time agreement of a collective", [&] {
      Pending p;
      auto* v = reinterpret_cast<int64_t*>(p.buffer(sizeof(int64_t)));
      *v = value;
      const Op op = begin_collective("the start-time agreement of a collective", {-1, kStartAgreement, 8, -1});
      issue(p, op, "MPI_Iallreduce", [&](MPI_Request* r) {
        return MPI_Iallreduce(MPI_IN_PLACE, v, 1, MPI_INT64_T, MPI_MAX, comm_, r);
      });
      finish(p, op);
      result = *v;
    });
    return result;
  }

  // MPI_Comm_split, once every rank has shown (by a gather, which times out naming who is missing)
  // that the members each names agree: MPI_Comm_split itself would wait for ever.
  std::unique_ptr<ProcessGroup> split_backend(const std::vector<int>& members) override {
    const int n = size();
    std::vector<int64_t> all(3 * static_cast<size_t>(n));  // by rank: first member, count, hash
    guarded("split", [&] {
      Pending p;
      auto* mine = reinterpret_cast<int64_t*>(p.buffer(3 * sizeof(int64_t)));
      auto* out = reinterpret_cast<int64_t*>(p.buffer(3 * n * static_cast<int64_t>(sizeof(int64_t))));
      uint64_t hash = 1469598103934665603ULL;  // FNV-1a of the members
      for (int m : members) hash = (hash ^ static_cast<uint64_t>(m)) * 1099511628211ULL;
      mine[0] = members.front();
      mine[1] = static_cast<int64_t>(members.size());
      mine[2] = static_cast<int64_t>(hash >> 1);
      const Op op = begin_collective("split", {-1, kSplit, 24, -1});
      issue(p, op, "MPI_Iallgather", [&](MPI_Request* r) {
        return MPI_Iallgather(mine, 3, MPI_INT64_T, out, 3, MPI_INT64_T, comm_, r);
      });
      finish(p, op);
      std::copy(out, out + all.size(), all.begin());
    });
    // Every rank checks every group on the same data, so all reach the same verdict.
    std::map<int64_t, int> first_of, count_of;  // group (its first member) → a rank naming it, ranks naming it
    for (int r = 0; r < n; ++r) {
      const int64_t* a = &all[3 * static_cast<size_t>(r)];
      const auto [it, fresh] = first_of.try_emplace(a[0], r);
      const int64_t* b = &all[3 * static_cast<size_t>(it->second)];
      if (!fresh && (a[1] != b[1] || a[2] != b[2]))
        throw Error("comm", "mpi: split: ranks " + std::to_string(it->second) + " and " + std::to_string(r) +
                                " name different members for the group of rank " + std::to_string(a[0]) +
                                " — every rank of a group must name the same members");
      ++count_of[a[0]];
    }
    for (const auto& [first, count] : count_of) {
      const int64_t named = all[3 * static_cast<size_t>(first_of[first]) + 1];
      if (count != named)
        throw Error("comm", "mpi: split: " + std::to_string(count) + " ranks join the group of rank " +
                                std::to_string(first) + ", whose members number " + std::to_string(named) +
                                " — every member must name the group, and no other rank");
    }
    MPI_Comm c = MPI_COMM_NULL;
    int rank = 0, group_size = 1;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      SCALELAB_MPI_CHECK(MPI_Comm_split(comm_, members.front(), this->rank(), &c));
      SCALELAB_MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
      SCALELAB_MPI_CHECK(MPI_Comm_rank(c, &rank));
      SCALELAB_MPI_CHECK(MPI_Comm_size(c, &group_size));
    }
    return std::make_unique<MpiGroup>(c, rank, group_size, options(), max_count_);
  }

  int64_t exchange_with(int peer, int64_t value) override {
    int64_t result = value;
    guarded("the start-time agreement of send / recv", [&] {
      Pending p;
      auto* mine = reinterpret_cast<int64_t*>(p.buffer(sizeof(int64_t)));
      auto* theirs = reinterpret_cast<int64_t*>(p.buffer(sizeof(int64_t)));
      *mine = value;
      const Op op{"the start-time agreement of send / recv", -1, {}, peer, "exchange"};
      issue(p, op, "MPI_Isend", [&](MPI_Request* r) { return MPI_Isend(mine, 1, MPI_INT64_T, peer, kExchangeTag, comm_, r); });
      issue(p, op, "MPI_Irecv", [&](MPI_Request* r) { return MPI_Irecv(theirs, 1, MPI_INT64_T, peer, kExchangeTag, comm_, r); });
      finish(p, op);
      result = *theirs;
    });
    return result;
  }

 private:
  // What a timeout says about the call in flight.
  struct Op {
    std::string what;
    int64_t seq = -1;  // the collective's number on this group; -1 for point-to-point
    Arrival mine;      // what this rank announced
    int peer = -1;     // point-to-point: the other rank
    const char* peer_call = "";  // what the peer should have posted
  };

  // At most this many pieces of one call are in flight: thousands of outstanding collectives
  // would slow MPI's progress engine to a crawl (it walks them all at every poll).
  static constexpr size_t kMaxInFlight = 8;

  static char* at(const Tensor& t, int64_t elems) { return static_cast<char*>(t.raw()) + elems * dtype_size(t.dtype()); }

  // Runs a call unless the group is already broken; any failure breaks it.
  template <typename Fn>
  void guarded(const std::string& what, Fn fn) {
    throw_if_broken(what);
    try {
      fn();
    } catch (const Error& e) {
      if (broken_.empty()) broken_ = e.message();
      throw;
    }
  }

  // Issues one MPI call that yields a request, under the process's MPI lock.
  template <typename Fn>
  void issue(Pending& p, const Op& op, const char* call, Fn fn) {
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      rc = fn(&r);
    }
    if (rc != MPI_SUCCESS) {
      if (p.finished < p.requests.size()) orphan(std::move(p));  // those issued before it may still run
      detail::throw_mpi_error(rc, call, __FILE__, __LINE__);
    }
    p.requests.push_back(r);
    if (p.requests.size() - p.finished > kMaxInFlight) {
      if (!wait_range(p, p.finished, p.finished + 1, options().timeout, op.what)) timed_out(p, op);
      ++p.finished;
    }
  }

  // Waits for everything the call has in flight.
  void finish(Pending& p, const Op& op) {
    if (!wait_all(p, options().timeout, op.what)) timed_out(p, op);
  }

  // Calls fn(first, count) over `count` elements cut into pieces MPI's int counts can hold. Zero
  // elements still make one call, so every rank issues the same calls.
  template <typename Fn>
  void in_pieces(int64_t count, Fn fn) const {
    if (count == 0) return fn(int64_t{0}, 0);
    for (int64_t first = 0; first < count; first += max_count_)
      fn(first, static_cast<int>(std::min(max_count_, count - first)));
  }

  // Announces this rank's arrival at the next collective of the group.
  Op begin_collective(const std::string& what, Arrival a) {
    a.seq = seq_++;
    if (size() > 1) {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      arrivals_.announce(a);
    }
    return {what, a.seq, a, -1, ""};
  }

  [[noreturn]] void timed_out(Pending& p, const Op& op) {
    collective_timed_out() = true;
    timeout_after_failure_ms() = std::max<int64_t>(1000, options().timeout.count());
    const std::string head =
        "mpi: rank " + std::to_string(rank()) + " waited " + seconds(options().timeout) + " in " + op.what;
    if (op.seq < 0) {
      orphan(std::move(p));
      throw Error("comm", head + " for rank " + std::to_string(op.peer) + ", which never arrived — it died or never "
                                 "posted the matching " + op.peer_call +
                                 " (raise --comm-timeout if it is merely slow)");
    }
    std::vector<int> missing;
    std::string disagree;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      arrivals_.drain();
      missing = arrivals_.missing(op.seq);
      for (int r = 0; r < size() && disagree.empty(); ++r) {
        const Arrival* a = arrivals_.of(r, op.seq);
        if (r != rank() && a && (a->op != op.mine.op || a->bytes != op.mine.bytes || a->root != op.mine.root))
          disagree = "rank " + std::to_string(r) + " issued " + describe_arrival(*a) + " as its collective #" +
                     std::to_string(op.seq) + ", this rank " + describe_arrival(op.mine);
      }
    }
    orphan(std::move(p));
    const std::string where = head + " (collective #" + std::to_string(op.seq) + " of this group)";
    if (!missing.empty())
      throw Error("comm", where + " for rank(s) " + rank_list(missing) +
                              ", which never arrived — a rank died or skipped the collective; every rank must issue "
                              "the same collectives in the same order (raise --comm-timeout if the ranks are merely "
                              "slow)");
    if (!disagree.empty())
      throw Error("comm", where + ": every rank arrived, but they disagree: " + disagree +
                              " — every rank must issue the same collective with the same sizes and root");
    throw Error("comm", where + ": every rank arrived, but MPI did not finish it — the network is slow or stalled "
                                "(raise --comm-timeout if the ranks are merely slow)");
  }

  void throw_if_broken(const std::string& what) const {
    if (broken_.empty()) return;
    throw Error("comm", "mpi: rank " + std::to_string(rank()) + " cannot run " + what +
                            ": an earlier call on this group failed, so the ranks no longer agree on what comes next "
                            "— end the run (the earlier error: " + broken_ + ")");
  }

  // A copy of `bytes` at `src`, owned by p: the input of a call whose output overlaps it.
  static const char* staged(Pending& p, const void* src, int64_t bytes) {
    char* copy = p.buffer(bytes);
    if (bytes > 0) std::memcpy(copy, src, static_cast<size_t>(bytes));
    return copy;
  }

  static void keep(Pending& p, const Call& c) {
    if (c.in && c.in->defined()) p.tensors.push_back(*c.in);
    if (c.out && c.out->defined()) p.tensors.push_back(*c.out);
  }

  void all_reduce(const Call& c) {
    const DType d = c.out->dtype();
    const int64_t n = c.out->numel(), es = dtype_size(d);
    Pending p;
    keep(p, c);
    const bool in_place = c.in->raw() == c.out->raw();
    const char* in = static_cast<const char*>(c.in->raw());
    if (!in_place && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes())) in = staged(p, in, c.in->nbytes());
    const Op op = begin_collective("all_reduce", {-1, static_cast<int64_t>(c.op), c.out->nbytes(), -1});
    in_pieces(n, [&](int64_t first, int count) {
      issue(p, op, "MPI_Iallreduce", [&](MPI_Request* r) {
        return MPI_Iallreduce(in_place ? MPI_IN_PLACE : in + first * es, at(*c.out, first), count, rt_.type(d),
                              rt_.op(d, c.reduce_op), comm_, r);
      });
    });
    finish(p, op);
    comm::finish_avg(c.out->raw(), n, d, c.reduce_op, size());
  }

  void broadcast(const Call& c) {
    const DType d = c.out->dtype();
    Pending p;
    keep(p, c);
    const Op op = begin_collective("broadcast", {-1, static_cast<int64_t>(c.op), c.out->nbytes(), c.root});
    in_pieces(c.out->numel(), [&](int64_t first, int count) {
      issue(p, op, "MPI_Ibcast", [&](MPI_Request* r) {
        return MPI_Ibcast(at(*c.out, first), count, rt_.type(d), c.root, comm_, r);
      });
    });
    finish(p, op);
  }

  void reduce(const Call& c) {
    const DType d = c.in->dtype();
    const int64_t n = c.in->numel(), es = dtype_size(d);
    const bool root = rank() == c.root;
    Pending p;
    keep(p, c);
    const bool in_place = root && c.in->raw() == c.out->raw();
    const char* in = static_cast<const char*>(c.in->raw());
    if (root && !in_place && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes()))
      in = staged(p, in, c.in->nbytes());
    const Op op = begin_collective("reduce", {-1, static_cast<int64_t>(c.op), c.in->nbytes(), c.root});
    in_pieces(n, [&](int64_t first, int count) {
      issue(p, op, "MPI_Ireduce", [&](MPI_Request* r) {
        return MPI_Ireduce(in_place ? MPI_IN_PLACE : in + first * es, root ? at(*c.out, first) : nullptr, count,
                           rt_.type(d), rt_.op(d, c.reduce_op), c.root, comm_, r);
      });
    });
    finish(p, op);
    if (root) comm::finish_avg(c.out->raw(), n, d, c.reduce_op, size());
  }

  void all_gather(const Call& c) {
    const DType d = c.in->dtype();
    const int64_t block = c.in->numel(), es = dtype_size(d), n = size(), r = rank();
    Pending p;
    keep(p, c);
    // MPI's in place: this rank's block already sits at its place in the output.
    const bool in_place = c.in->raw() == at(*c.out, r * block);
    const char* in = static_cast<const char*>(c.in->raw());
    if (!in_place && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes())) in = staged(p, in, c.in->nbytes());
    const Op op = begin_collective("all_gather", {-1, static_cast<int64_t>(c.op), c.in->nbytes(), -1});
    if (block <= max_count_) {
      issue(p, op, "MPI_Iallgather", [&](MPI_Request* req) {
        return MPI_Iallgather(in_place ? MPI_IN_PLACE : in, static_cast<int>(block), rt_.type(d), c.out->raw(),
                              static_cast<int>(block), rt_.type(d), comm_, req);
      });
    } else {
      // Blocks beyond MPI's int counts: each rank broadcasts its own block, piece by piece.
      if (!in_place) std::memcpy(at(*c.out, r * block), in, static_cast<size_t>(block * es));
      for (int64_t k = 0; k < n; ++k)
        in_pieces(block, [&](int64_t first, int count) {
          issue(p, op, "MPI_Ibcast", [&](MPI_Request* req) {
            return MPI_Ibcast(at(*c.out, k * block + first), count, rt_.type(d), static_cast<int>(k), comm_, req);
          });
        });
    }
    finish(p, op);
  }

  void reduce_scatter(const Call& c) {
    const DType d = c.out->dtype();
    const int64_t block = c.out->numel(), es = dtype_size(d), n = size();
    Pending p;
    keep(p, c);
    const char* in = static_cast<const char*>(c.in->raw());
    const Op op = begin_collective("reduce_scatter", {-1, static_cast<int64_t>(c.op), c.out->nbytes(), -1});
    if (block <= max_count_) {
      // MPI's in place: the whole input is in the receive buffer and the result lands in its
      // first block — exactly the case of an output that is the input's first block.
      const bool in_place = c.out->raw() == c.in->raw();
      if (!in_place && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes())) in = staged(p, in, c.in->nbytes());
      issue(p, op, "MPI_Ireduce_scatter_block", [&](MPI_Request* req) {
        return MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : in, in_place ? c.in->raw() : c.out->raw(),
                                         static_cast<int>(block), rt_.type(d), rt_.op(d, c.reduce_op), comm_, req);
      });
    } else {
      // Blocks beyond MPI's int counts: block k is reduced onto rank k, piece by piece.
      if (overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes())) in = staged(p, in, c.in->nbytes());
      for (int64_t k = 0; k < n; ++k)
        in_pieces(block, [&](int64_t first, int count) {
          issue(p, op, "MPI_Ireduce", [&](MPI_Request* req) {
            return MPI_Ireduce(in + (k * block + first) * es, k == rank() ? at(*c.out, first) : nullptr, count,
                               rt_.type(d), rt_.op(d, c.reduce_op), static_cast<int>(k), comm_, req);
          });
        });
    }
    finish(p, op);
    comm::finish_avg(c.out->raw(), block, d, c.reduce_op, size());
  }

  void scatter(const Call& c) {
    const DType d = c.out->dtype();
    const int64_t block = c.out->numel(), es = dtype_size(d), n = size();
    const bool root = rank() == c.root;
    Pending p;
    keep(p, c);
    const char* in = root ? static_cast<const char*>(c.in->raw()) : nullptr;
    const bool in_place = root && c.out->raw() == in + c.root * block * es;
    if (root && !in_place && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes()))
      in = staged(p, in, c.in->nbytes());
    const Op op = begin_collective("scatter", {-1, static_cast<int64_t>(c.op), c.out->nbytes(), c.root});
    if (block <= max_count_) {
      issue(p, op, "MPI_Iscatter", [&](MPI_Request* req) {
        return MPI_Iscatter(in, static_cast<int>(block), rt_.type(d), in_place ? MPI_IN_PLACE : c.out->raw(),
                            static_cast<int>(block), rt_.type(d), c.root, comm_, req);
      });
    } else if (root) {
      // Blocks beyond MPI's int counts: the root sends each block in pieces.
      if (!in_place) std::memcpy(c.out->raw(), in + c.root * block * es, static_cast<size_t>(block * es));
      for (int64_t k = 0; k < n; ++k) {
        if (k == c.root) continue;
        in_pieces(block, [&](int64_t first, int count) {
          issue(p, op, "MPI_Isend", [&](MPI_Request* req) {
            return MPI_Isend(in + (k * block + first) * es, count, rt_.type(d), static_cast<int>(k), kBulkTag, comm_, req);
          });
        });
      }
    } else {
      in_pieces(block, [&](int64_t first, int count) {
        issue(p, op, "MPI_Irecv", [&](MPI_Request* req) {
          return MPI_Irecv(at(*c.out, first), count, rt_.type(d), c.root, kBulkTag, comm_, req);
        });
      });
    }
    finish(p, op);
  }

  void gather(const Call& c) {
    const DType d = c.in->dtype();
    const int64_t block = c.in->numel(), es = dtype_size(d), n = size();
    const bool root = rank() == c.root;
    Pending p;
    keep(p, c);
    const char* in = static_cast<const char*>(c.in->raw());
    const bool in_place = root && c.in->raw() == at(*c.out, c.root * block);
    if (root && !in_place && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes()))
      in = staged(p, in, c.in->nbytes());
    const Op op = begin_collective("gather", {-1, static_cast<int64_t>(c.op), c.in->nbytes(), c.root});
    if (block <= max_count_) {
      issue(p, op, "MPI_Igather", [&](MPI_Request* req) {
        return MPI_Igather(in_place ? MPI_IN_PLACE : in, static_cast<int>(block), rt_.type(d),
                           root ? c.out->raw() : nullptr, static_cast<int>(block), rt_.type(d), c.root, comm_, req);
      });
    } else if (root) {
      // Blocks beyond MPI's int counts: every rank sends its block to the root in pieces.
      if (!in_place) std::memcpy(at(*c.out, c.root * block), in, static_cast<size_t>(block * es));
      for (int64_t k = 0; k < n; ++k) {
        if (k == c.root) continue;
        in_pieces(block, [&](int64_t first, int count) {
          issue(p, op, "MPI_Irecv", [&](MPI_Request* req) {
            return MPI_Irecv(at(*c.out, k * block + first), count, rt_.type(d), static_cast<int>(k), kBulkTag, comm_, req);
          });
        });
      }
    } else {
      in_pieces(block, [&](int64_t first, int count) {
        issue(p, op, "MPI_Isend", [&](MPI_Request* req) {
          return MPI_Isend(in + first * es, count, rt_.type(d), c.root, kBulkTag, comm_, req);
        });
      });
    }
    finish(p, op);
  }

  void point_to_point(const Call& c, bool sending) {
    const Tensor& t = sending ? *c.in : *c.out;
    const DType d = t.dtype();
    Pending p;
    keep(p, c);
    const Op op{sending ? "send" : "recv", -1, {}, c.root, sending ? "recv" : "send"};
    in_pieces(t.numel(), [&](int64_t first, int count) {
      if (sending)
        issue(p, op, "MPI_Isend", [&](MPI_Request* r) {
          return MPI_Isend(at(t, first), count, rt_.type(d), c.root, kDataTag, comm_, r);
        });
      else
        issue(p, op, "MPI_Irecv", [&](MPI_Request* r) {
          return MPI_Irecv(at(t, first), count, rt_.type(d), c.root, kDataTag, comm_, r);
        });
    });
    finish(p, op);
  }

  void barrier() {
    Pending p;
    const Op op = begin_collective("barrier", {-1, static_cast<int64_t>(Collective::barrier), 0, -1});
    issue(p, op, "MPI_Ibarrier", [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
    finish(p, op);
  }

  MPI_Comm comm_;
  const int64_t max_count_;  // the most elements one MPI call is given (INT_MAX; smaller in tests)
  Runtime& rt_;
  Arrivals arrivals_;
  int64_t seq_ = 0;     // collectives this rank has begun on the group
  std::string broken_;  // once a call failed, every later call fails at once (its message)
};

}  // namespace

bool mpi_available() { return true; }

bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK"); }

std::unique_ptr<ProcessGroup> make_mpi_group(CommOptions options) {
  Runtime& rt = Runtime::get();
  // SCALELAB_MPI_MAX_COUNT lowers the most elements one MPI call gets (INT_MAX), so the tests can
  // check the path that cuts larger tensors into pieces without 8 GiB buffers.
  int64_t max_count = INT_MAX;
  if (const char* s = std::getenv("SCALELAB_MPI_MAX_COUNT")) {
    const long long v = std::atoll(s);
    if (v < 1 || v > INT_MAX)
      throw UsageError("mpi", std::string("SCALELAB_MPI_MAX_COUNT=") + s + " must be in [1, " + std::to_string(INT_MAX) + "]");
    max_count = v;
  }

  // A communicator of our own (a duplicate of MPI_COMM_WORLD): our traffic never meets the
  // program's, nor another group's. MPI_Comm_idup, polled, so that a rank that never comes is
  // named instead of hanging everyone.
  Pending p;
  auto* comm = reinterpret_cast<MPI_Comm*>(p.buffer(sizeof(MPI_Comm)));
  *comm = MPI_COMM_NULL;
  const int64_t creation = rt.next_creation();
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    if (rt.world_size() > 1) rt.creation_arrivals().announce({creation, -1, 0, -1});
    MPI_Request r = MPI_REQUEST_NULL;
    SCALELAB_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, comm, &r));
    p.requests.push_back(r);
  }
  if (!wait_all(p, options.timeout, "make_mpi_group (MPI_Comm_idup)")) {
    std::vector<int> missing;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      rt.creation_arrivals().drain();
      missing = rt.creation_arrivals().missing(creation);
    }
    orphan(std::move(p));
    throw Error("comm", "mpi: rank " + std::to_string(rt.world_rank()) + " waited " + seconds(options.timeout) +
                            " to create mpi group #" + std::to_string(creation) + " for rank(s) " +
                            (missing.empty() ? std::string("(unknown)") : rank_list(missing)) +
                            ", which never arrived — every rank of mpirun must create its group, in the same order "
                            "(a rank died, or exited before; raise --comm-timeout if the ranks are merely slow)");
  }
  const MPI_Comm c = *comm;
  int rank = 0, size = 1;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    SCALELAB_MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    SCALELAB_MPI_CHECK(MPI_Comm_rank(c, &rank));
    SCALELAB_MPI_CHECK(MPI_Comm_size(c, &size));
  }
  return std::make_unique<MpiGroup>(c, rank, size, options, max_count);
}

}  // namespace scalelab
