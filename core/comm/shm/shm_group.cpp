#include "core/comm/shm/shm_group.h"

#include <sys/wait.h>

#include <emmintrin.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "core/comm/reduce_kernels.h"
#include "core/error.h"
#include "core/proc/futex.h"
#include "core/proc/process.h"

namespace scalelab {

namespace {

// ---------------------------------------------------------------------------------------------
// The segment: a control block (one cache line per writer, so ranks never fight over a line),
// then the staging buffers of the collectives, then one small channel per ordered pair of ranks
// for send / recv.
//
// Synchronisation is by monotonic counters, one writer each: rank r counts the pieces it has
// copied in (produced), reduced (combined) and copied out (consumed), over the whole life of the
// group; every rank runs the same collectives, so "piece s" means the same thing everywhere. A
// rank waits for others' counters to pass a value: it yields a few times, then sleeps on a futex
// in the segment (never spins: the ranks may outnumber the cores, and a spinning rank would steal
// the core of the rank it waits for), and gives up after the timeout. Nothing is ever locked, so
// a rank that dies can only be missing — it never leaves a mutex locked behind it.

constexpr uint64_t kMagic = 0x5343414c53484d31ULL;  // "SCALSHM1"
constexpr int kDepth = 2;                           // staging buffers in flight: piece k+1 fills while k drains
constexpr int kMaxRanks = 64;                       // n² send / recv channels: keep the segment small
constexpr int64_t kLine = 128;                      // two cache lines: no false sharing through the adjacent-line prefetcher
constexpr int32_t kAgreementOp = 100;              // the start-time agreement of the sim, not a Collective
constexpr int kYieldRounds = 20;                    // sched_yield()s before a wait sleeps on the futex

// Atomics shared between processes must be lock-free (a lock would live in one process only).
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free &&
              std::atomic<int32_t>::is_always_lock_free);

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
int64_t ceil_div(int64_t x, int64_t a) { return (x + a - 1) / a; }

// What a rank says it is doing with one piece; every rank checks every other's before reading
// their data, so mismatched collectives fail with both named instead of mixing data.
struct Sig {
  int32_t op = -1;
  int32_t dtype = 0;
  int32_t reduce = 0;
  int32_t root = -1;
  int64_t count = 0;
  int64_t piece = 0;
  int64_t value = 0;  // max_over_ranks' value (not compared)
};

struct alignas(kLine) RankState {  // written by its rank only
  std::atomic<uint64_t> produced{0}, combined{0}, consumed{0};
  Sig sig[kDepth];
};
struct alignas(kLine) Wake {  // bumped by its rank on every publish: the futex the others sleep on
  std::atomic<uint32_t> epoch{0};
};
struct alignas(kLine) Waiters {  // how many sleep on a rank's Wake (so a publish skips the syscall)
  std::atomic<uint32_t> count{0};
};
struct alignas(kLine) ExitState {  // written by the parent when it reaps the rank
  std::atomic<int32_t> exited{0};
  int32_t status = 0;
};

enum : int32_t { kData = 1, kValue = 2 };
struct PieceHead {
  int64_t message_bytes = 0, piece_bytes = 0, value = 0;
  int32_t kind = 0;
};
struct alignas(kLine) ChannelTx {  // written by the sender
  std::atomic<uint64_t> sent{0};
  PieceHead head[kDepth];
};
struct alignas(kLine) ChannelRx {  // written by the receiver
  std::atomic<uint64_t> taken{0};
};

struct alignas(kLine) Header {
  uint64_t magic = 0;
  int32_t world = 0;
  int64_t slot_bytes = 0, p2p_bytes = 0, total_bytes = 0;
  alignas(kLine) std::atomic<int32_t> opened{0};  // named_file: ranks that have opened the name
  alignas(kLine) std::atomic<int32_t> broken{0};  // 0 fine, 1 being written, 2 broken_text ready
  char broken_text[1024] = {};
};

struct Layout {
  int n = 0;
  int64_t slot = 0, p2p = 0;
  int64_t ranks = 0, wakes = 0, waiters = 0, exits = 0, tx = 0, rx = 0, staging = 0, channels = 0, total = 0;
};

// A staging slot per rank and one for the result, per buffer: about 2.5 MiB per buffer (512 KiB
// slots for 4 ranks), so the buffers in flight stay in the last-level cache between copy-in,
// reduce and copy-out, and only the tensors themselves go to memory. (Measured with 4 ranks on
// 2 cores: 256 KiB – 1 MiB slots are within noise of each other, 2 MiB is slower.)
int64_t slot_bytes_for(int n) {
  const int64_t per_buffer = 5 << 19;
  return std::clamp<int64_t>(per_buffer / (n + 1) / 65536 * 65536, 64 << 10, 1 << 20);
}
int64_t p2p_bytes_for(int n) {
  return std::clamp<int64_t>((int64_t{16} << 20) / (int64_t{n} * n * kDepth) / 4096 * 4096, 4096, 256 << 10);
}

Layout make_layout(int n, int64_t slot, int64_t p2p) {
  Layout l;
  l.n = n;
  l.slot = slot;
  l.p2p = p2p;
  int64_t at = round_up(sizeof(Header), kLine);
  auto take = [&](int64_t bytes, int64_t align) {
    at = round_up(at, align);
    const int64_t offset = at;
    at += bytes;
    return offset;
  };
  const int64_t nn = int64_t{n} * n;
  l.ranks = take(n * int64_t{sizeof(RankState)}, kLine);
  l.wakes = take(n * int64_t{sizeof(Wake)}, kLine);
  l.waiters = take(n * int64_t{sizeof(Waiters)}, kLine);
  l.exits = take(n * int64_t{sizeof(ExitState)}, kLine);
  l.tx = take(nn * int64_t{sizeof(ChannelTx)}, kLine);
  l.rx = take(nn * int64_t{sizeof(ChannelRx)}, kLine);
  l.staging = take(kDepth * (n + 1) * slot, 4096);
  l.channels = take(nn * kDepth * p2p, 4096);
  l.total = round_up(at, 4096);
  return l;
}

struct Segment {
  char* base = nullptr;
  Layout l;

  Header& header() const { return *reinterpret_cast<Header*>(base); }
  RankState& rank(int r) const { return reinterpret_cast<RankState*>(base + l.ranks)[r]; }
  std::atomic<uint32_t>& epoch(int r) const { return reinterpret_cast<Wake*>(base + l.wakes)[r].epoch; }
  std::atomic<uint32_t>& waiters(int r) const { return reinterpret_cast<Waiters*>(base + l.waiters)[r].count; }
  ExitState& exit(int r) const { return reinterpret_cast<ExitState*>(base + l.exits)[r]; }
  ChannelTx& tx(int from, int to) const { return reinterpret_cast<ChannelTx*>(base + l.tx)[from * l.n + to]; }
  ChannelRx& rx(int from, int to) const { return reinterpret_cast<ChannelRx*>(base + l.rx)[from * l.n + to]; }
  // Buffer b holds n + 1 slots: one per rank, then the result.
  char* buffer(int64_t b) const { return base + l.staging + b * (l.n + 1) * l.slot; }
  char* slot(int64_t b, int q) const { return buffer(b) + q * l.slot; }
  char* result(int64_t b) const { return slot(b, l.n); }
  char* channel(int from, int to, int64_t b) const {
    return base + l.channels + ((int64_t{from} * l.n + to) * kDepth + b) * l.p2p;
  }

  // The parent builds the control block in a fresh (zeroed) segment.
  void initialise() const {
    Header& h = *new (base) Header();
    h.magic = kMagic;
    h.world = l.n;
    h.slot_bytes = l.slot;
    h.p2p_bytes = l.p2p;
    h.total_bytes = l.total;
    for (int r = 0; r < l.n; ++r) {
      new (&rank(r)) RankState();
      new (reinterpret_cast<Wake*>(base + l.wakes) + r) Wake();
      new (reinterpret_cast<Waiters*>(base + l.waiters) + r) Waiters();
      new (&exit(r)) ExitState();
      for (int q = 0; q < l.n; ++q) {
        new (&tx(r, q)) ChannelTx();
        new (&rx(r, q)) ChannelRx();
      }
    }
  }
};

// Rank r's counters moved: wake whoever sleeps on r.
void notify(const Segment& seg, int r) {
  seg.epoch(r).fetch_add(1);
  if (seg.waiters(r).load() != 0) shared_futex_wake_all(seg.epoch(r));
}
void notify_all(const Segment& seg) {
  for (int r = 0; r < seg.l.n; ++r) notify(seg, r);
}

std::string seconds_text(int64_t ns) {
  if (ns < 1000000) return "<1 ms";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(ns) / 1e9);
  return buf;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::string sig_text(const Sig& s) {
  if (s.op == kAgreementOp) return "the start-time agreement of a collective";
  if (s.op < 0 || s.op > static_cast<int32_t>(Collective::barrier)) return "nothing (op " + std::to_string(s.op) + ")";
  const auto c = static_cast<Collective>(s.op);
  if (c == Collective::barrier) return "barrier";
  std::string t = std::string(collective_name(c)) + " of " + std::to_string(s.count) + " " +
                  dtype_name(static_cast<DType>(s.dtype));
  if (c == Collective::all_reduce || c == Collective::reduce || c == Collective::reduce_scatter)
    t += std::string(" (") + reduce_op_name(static_cast<ReduceOp>(s.reduce)) + ")";
  if (s.root >= 0) t += " with root " + std::to_string(s.root);
  return t;
}

// Where a rank waits, for the messages: "all_reduce (copy-in, piece 3 of 16)".
struct Where {
  const char* what = "";
  const char* step = "";
  int64_t piece = 0, pieces = 1;
  bool point_to_point = false;
};
std::string where_text(const Where& w) {
  std::string s = w.what;
  if (w.step && *w.step) {
    s += std::string(" (") + w.step;
    if (w.pieces > 1) s += ", piece " + std::to_string(w.piece + 1) + " of " + std::to_string(w.pieces);
    s += ")";
  }
  return s;
}

// What a rank is waiting for, per collective: the step of the others it needs.
struct Steps {
  const char* reuse = "copy-out of an earlier piece";
  const char* in = "copy-in";
  const char* combine = "reduce";
};

struct Range {
  int64_t first = 0, count = 0;
};

// Slice r of n of `len` elements, cut on cache-line boundaries (ranks writing neighbouring
// slices of the result must not share a line).
Range slice(int64_t len, int n, int r, int64_t align) {
  auto cut = [&](int i) { return i >= n ? len : (len * i / n) / align * align; };
  return {cut(r), cut(r + 1) - cut(r)};
}

// A copy-out into private memory: `stream` (a large output that is not in the cache) writes around
// the cache, so the destination is not read first (no read-for-ownership: a third less memory
// traffic) and the staging buffers are not evicted.
void copy_out(void* dst, const void* src, int64_t bytes, bool stream) {
#if defined(__SSE2__)
  if (stream && bytes >= 4096) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    const int64_t head = static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
    std::memcpy(d, s, static_cast<size_t>(head));
    d += head;
    s += head;
    bytes -= head;
    const int64_t body = bytes / 64 * 64;
    for (int64_t i = 0; i < body; i += 64) {
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), x0);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), x1);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), x2);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), x3);
    }
    _mm_sfence();
    std::memcpy(d + body, s + body, static_cast<size_t>(bytes - body));
    return;
  }
#endif
  (void)stream;
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

// Outputs this large (per rank) are written with streaming stores when they are not the input:
// they cannot stay in the cache anyway.
constexpr int64_t kStreamBytes = 8 << 20;

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a && b && x < y + static_cast<uintptr_t>(b_bytes) && y < x + static_cast<uintptr_t>(a_bytes);
}

void copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(bytes));
}

// ---------------------------------------------------------------------------------------------
// The process group of one rank.

class ShmGroup final : public ProcessGroup {
 public:
  ShmGroup(Segment seg, int rank, CommOptions options)
      : ProcessGroup(rank, seg.l.n, options),
        seg_(seg),
        timeout_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(options.timeout).count()),
        sent_(static_cast<size_t>(seg.l.n), 0),
        received_(static_cast<size_t>(seg.l.n), 0) {}
  const char* backend() const override { return "shm"; }

 protected:
  void run(const Call& call) override {
    guarded(collective_name(call.op), [&] {
      switch (call.op) {
        case Collective::all_reduce: return all_reduce(call);
        case Collective::reduce: return reduce(call);
        case Collective::broadcast: return broadcast(call);
        case Collective::all_gather: return all_gather(call);
        case Collective::reduce_scatter: return reduce_scatter(call);
        case Collective::scatter: return scatter(call);
        case Collective::gather: return gather(call);
        case Collective::send:
          send_message(call.root, call.in->raw(), call.in->nbytes(), kData, 0, call.chunks, "send");
          return;
        case Collective::recv:
          recv_message(call.root, call.out->raw(), call.out->nbytes(), kData, call.chunks, "recv");
          return;
        case Collective::barrier: return barrier();
      }
    });
  }

  int64_t max_over_ranks(int64_t value) override {
    int64_t best = value;
    guarded("the start-time agreement of a collective", [&] {
      Sig sig;
      sig.op = kAgreementOp;
      sig.value = value;
      Steps steps;
      steps.in = "arrival";
      pipeline(sig, 1, false, true, false, steps, nothing, [&](int64_t, int64_t b) {
        for (int q = 0; q < size(); ++q) best = std::max(best, seg_.rank(q).sig[b].value);
      }, nothing);
    });
    return best;
  }

  int64_t exchange_with(int peer, int64_t value) override {
    int64_t theirs = 0;
    guarded("the start-time agreement of send / recv", [&] {
      // Sends are eager (a send waits only while the channel is full of messages the peer has
      // not taken yet), so both sides can send first and then receive.
      send_message(peer, nullptr, 0, kValue, value, nullptr, "the start-time agreement of send / recv");
      theirs = recv_message(peer, nullptr, 0, kValue, nullptr, "the start-time agreement of send / recv");
    });
    return theirs;
  }

 private:
  static constexpr auto nothing = [](int64_t, int64_t) {};

  // Runs one call; a failure breaks the group for every rank (they fail at once instead of
  // waiting out their timeouts), and a broken group refuses further calls.
  template <typename Fn>
  void guarded(const std::string& what, Fn&& fn) {
    Header& h = seg_.header();
    if (h.broken.load() == 2)
      throw Error("comm", "shm: rank " + std::to_string(rank()) + " cannot start " + what +
                              ": the group broke earlier — " + std::string(h.broken_text));
    try {
      fn();
    } catch (const Error& e) {
      std::string text = e.message();
      if (text.rfind("shm: ", 0) == 0) text = text.substr(std::strlen("shm: "));
      break_group(text);
      throw;
    }
  }

  void break_group(const std::string& text) {
    Header& h = seg_.header();
    int32_t expected = 0;
    if (h.broken.compare_exchange_strong(expected, 1)) {
      std::snprintf(h.broken_text, sizeof h.broken_text, "%s", text.c_str());
      h.broken.store(2);
      notify_all(seg_);
    }
  }

  void publish(std::atomic<uint64_t>& counter, uint64_t value) {
    counter.store(value);
    notify(seg_, rank());
  }

  // Why a wait in [lo, hi) cannot go on: a rank it needs has ended, another rank broke the group,
  // or the timeout. Returns (the wait is over) if every rank has arrived after all.
  template <typename Behind>
  void fail_wait(Behind& behind, int lo, int hi, const Where& where, int64_t waited_ns) {
    std::vector<int> missing, ended, late;
    std::string how;
    for (int p = lo; p < hi; ++p)
      if (p != rank() && behind(p)) {
        missing.push_back(p);
        if (seg_.exit(p).exited.load()) {
          ended.push_back(p);
          how += (how.empty() ? "rank " : "; rank ") + std::to_string(p) + " ended first (" +
                 wait_status_text(seg_.exit(p).status) + ")";
        } else {
          late.push_back(p);
        }
      }
    if (missing.empty()) return;
    const std::string head = "shm: rank " + std::to_string(rank());
    if (!ended.empty())
      throw Error("comm", head + " waited " + seconds_text(waited_ns) + " in " + where_text(where) + " for rank(s) " +
                              rank_list(ended) + ", which never arrived — " + how + "; its own error, if any, is above" +
                              (late.empty() ? "" : " (rank(s) " + rank_list(late) + " had not arrived yet either)"));
    const Header& h = seg_.header();
    if (h.broken.load() == 2)
      throw Error("comm", head + " stopped waiting in " + where_text(where) + " for rank(s) " + rank_list(missing) +
                              ": " + std::string(h.broken_text));
    throw Error("comm", head + " waited " + seconds_text(timeout_ns_) + " in " + where_text(where) + " for rank(s) " +
                            rank_list(missing) + ", which never arrived — " +
                            (where.point_to_point ? "it died, hung, or never posted the matching send / recv"
                                                  : "a rank died, hung or skipped the collective; every rank must "
                                                    "issue the same collectives in the same order") +
                            " (raise --comm-timeout if the ranks are merely slow)");
  }

  // Blocks until behind(q) is false for every other rank q (or for `peer` only, when ≥ 0).
  template <typename Behind>
  void wait_for(Behind behind, int peer, const Where& where) {
    const int lo = peer < 0 ? 0 : peer, hi = peer < 0 ? size() : peer + 1;
    auto first_behind = [&] {
      for (int q = lo; q < hi; ++q)
        if (q != rank() && behind(q)) return q;
      return -1;
    };
    int q = first_behind();
    if (q < 0) return;
    const int64_t t0 = steady_ns(), deadline = t0 + timeout_ns_;
    int spins = 0;
    for (;;) {
      // The epoch is read before the counter: a publish after this read changes the epoch and
      // the futex wait returns at once, so no wake-up is lost.
      std::atomic<uint32_t>& epoch = seg_.epoch(q);
      const uint32_t seen = epoch.load();
      if (!behind(q)) {
        q = first_behind();
        if (q < 0) return;
        continue;
      }
      const int64_t now = steady_ns();
      bool dead = false;
      for (int p = lo; p < hi && !dead; ++p) dead = p != rank() && behind(p) && seg_.exit(p).exited.load();
      if (dead || seg_.header().broken.load() == 2 || now >= deadline) {
        fail_wait(behind, lo, hi, where, now - t0);
        return;
      }
      // Yield a few times before sleeping: when the ranks outnumber the cores, the rank we wait
      // for may be waiting for this very core, and a short wait then costs no futex round trip.
      if (spins < kYieldRounds) {
        ++spins;
        sched_yield();
        continue;
      }
      seg_.waiters(q).fetch_add(1);
      shared_futex_wait(epoch, seen, std::chrono::nanoseconds(std::min<int64_t>(deadline - now, 50'000'000)));
      seg_.waiters(q).fetch_sub(1);
    }
  }

  template <typename Fn>
  void timed(std::vector<Chunk>* chunks, int peer, int64_t bytes, Fn&& fn) {
    const int64_t t0 = chunks ? steady_ns() : 0;
    fn();
    if (chunks && bytes > 0) chunks->push_back({peer, bytes, t0, steady_ns()});
  }

  // The engine of every collective: `pieces` pieces, each through three steps —
  //   produce (copy-in into the staging buffer), combine (e.g. reduce this rank's slice),
  //   consume (copy-out) —
  // with piece k+1 produced before piece k is combined, over kDepth staging buffers. Each wait
  // is for a step the others reach earlier in the same sequence, so no wait can be circular:
  //   produce(k) needs every rank's consume(k − kDepth) (the buffer is free),
  //   combine(k) needs every rank's produce(k), consume(k) needs every rank's combine(k).
  template <typename Produce, typename Combine, typename Consume>
  void pipeline(Sig sig, int64_t pieces, bool produces, bool combines, bool consumes, const Steps& steps,
                Produce&& produce, Combine&& combine, Consume&& consume) {
    RankState& me = seg_.rank(rank());
    const uint64_t base = next_piece_;
    const char* what = sig.op == kAgreementOp ? "the start-time agreement of a collective"
                                              : collective_name(static_cast<Collective>(sig.op));
    auto stage_in = [&](int64_t k) {
      const uint64_t s = base + static_cast<uint64_t>(k);
      const int64_t b = static_cast<int64_t>(s % kDepth);
      if (s >= kDepth)
        wait_for([&](int q) { return seg_.rank(q).consumed.load() + kDepth < s + 1; }, -1, {what, steps.reuse, k, pieces});
      Sig mine = sig;
      mine.piece = k;
      me.sig[b] = mine;
      if (produces) produce(k, b);
      publish(me.produced, s + 1);
    };
    stage_in(0);
    for (int64_t k = 0; k < pieces; ++k) {
      const uint64_t s = base + static_cast<uint64_t>(k);
      const int64_t b = static_cast<int64_t>(s % kDepth);
      if (k + 1 < pieces) stage_in(k + 1);
      wait_for([&](int q) { return seg_.rank(q).produced.load() < s + 1; }, -1, {what, steps.in, k, pieces});
      check_sigs(b, sig, k);
      if (combines) combine(k, b);
      publish(me.combined, s + 1);
      if (consumes) {
        wait_for([&](int q) { return seg_.rank(q).combined.load() < s + 1; }, -1, {what, steps.combine, k, pieces});
        consume(k, b);
      }
      publish(me.consumed, s + 1);
    }
    next_piece_ = base + static_cast<uint64_t>(pieces);
  }

  void check_sigs(int64_t b, Sig mine, int64_t k) {
    mine.piece = k;
    for (int q = 0; q < size(); ++q) {
      const Sig& o = seg_.rank(q).sig[b];
      if (o.op != mine.op || o.dtype != mine.dtype || o.reduce != mine.reduce || o.root != mine.root ||
          o.count != mine.count || o.piece != mine.piece)
        throw Error("comm", "shm: rank " + std::to_string(rank()) + " is in " + sig_text(mine) + " but rank " +
                                std::to_string(q) + " is in " + sig_text(o) +
                                " — every rank must issue the same collectives, in the same order, with the same "
                                "sizes, dtypes, ops and roots");
    }
  }

  Sig make_sig(Collective c, DType d, ReduceOp op, int root, int64_t count) const {
    Sig s;
    s.op = static_cast<int32_t>(c);
    s.dtype = static_cast<int32_t>(d);
    s.reduce = static_cast<int32_t>(op);
    s.root = root;
    s.count = count;
    return s;
  }

  static char* at(const Tensor* t, int64_t elem) {
    return t && t->raw() ? static_cast<char*>(t->raw()) + elem * dtype_size(t->dtype()) : nullptr;
  }
  int64_t slot_elems(int64_t elem_bytes) const { return seg_.l.slot / elem_bytes; }
  static int64_t line_elems(int64_t elem_bytes) { return std::max<int64_t>(1, 64 / elem_bytes); }

  // all_reduce and reduce: each rank copies its input (all but its own slice) into its slot;
  // each rank reduces its own slice of the piece from every slot (and its own input, read in
  // place) into the shared result; then every rank (all_reduce) or the root (reduce) copies the
  // result out. Memory traffic per rank: (n−1)/n·S in, S read + S/n written to reduce, S out.
  void reduce_family(const Call& c, bool everyone_gets_it) {
    const int n = size(), r = rank();
    const DType d = c.in->dtype();
    const int64_t e = dtype_size(d), m = c.in->numel();
    const ReduceOp op = c.reduce_op;
    const bool gets = everyone_gets_it || r == c.root;
    if (n == 1) {
      copy_bytes(at(c.out, 0), at(c.in, 0), m * e);
      comm::finish_avg(at(c.out, 0), m, d, op, n);
      return;
    }
    const int64_t pe = slot_elems(e), pieces = std::max<int64_t>(1, ceil_div(m, pe)), align = line_elems(e);
    const char* in = at(c.in, 0);
    char* out = gets ? at(c.out, 0) : nullptr;
    const bool stream = m * e >= kStreamBytes && !overlaps(out, m * e, in, m * e);
    auto piece = [&](int64_t k) { return Range{k * pe, std::max<int64_t>(0, std::min(pe, m - k * pe))}; };
    pipeline(
        make_sig(c.op, d, op, everyone_gets_it ? -1 : c.root, m), pieces, true, true, gets, Steps{},
        [&](int64_t k, int64_t b) {
          const Range p = piece(k), own = slice(p.count, n, r, align);
          char* slot = seg_.slot(b, r);
          const int64_t after = own.first + own.count;
          timed(c.chunks, -1, (p.count - own.count) * e, [&] {
            copy_bytes(slot, in + p.first * e, own.first * e);
            copy_bytes(slot + after * e, in + (p.first + after) * e, (p.count - after) * e);
          });
        },
        [&](int64_t k, int64_t b) {
          const Range p = piece(k), own = slice(p.count, n, r, align);
          if (own.count == 0) return;
          char* dst = seg_.result(b) + own.first * e;
          timed(c.chunks, -1, (n - 1) * own.count * e, [&] {
            // Own input first (read where it lives), then the others in ring order from r+1.
            for (int i = 1; i < n; ++i) {
              const char* src = seg_.slot(b, (r + i) % n) + own.first * e;
              if (i == 1) comm::reduce_pair(dst, in + (p.first + own.first) * e, src, own.count, d, op);
              else comm::reduce_into(dst, src, own.count, d, op);
            }
            comm::finish_avg(dst, own.count, d, op, n);
          });
        },
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          timed(c.chunks, -1, p.count * e, [&] { copy_out(out + p.first * e, seg_.result(b), p.count * e, stream); });
        });
  }

  void all_reduce(const Call& c) { reduce_family(c, true); }
  void reduce(const Call& c) { reduce_family(c, false); }

  // The root copies each piece into the whole staging buffer; the others copy it out.
  void broadcast(const Call& c) {
    const int n = size(), r = rank(), root = c.root;
    if (n == 1) return;
    const DType d = c.out->dtype();
    const int64_t e = dtype_size(d), m = c.out->numel();
    const int64_t pe = (n + 1) * slot_elems(e), pieces = std::max<int64_t>(1, ceil_div(m, pe));
    char* t = at(c.out, 0);
    const bool stream = m * e >= kStreamBytes;
    auto piece = [&](int64_t k) { return Range{k * pe, std::max<int64_t>(0, std::min(pe, m - k * pe))}; };
    Steps steps;
    steps.in = steps.combine = "the root's copy-in";
    pipeline(
        make_sig(c.op, d, ReduceOp::sum, root, m), pieces, r == root, false, r != root, steps,
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          timed(c.chunks, -1, p.count * e, [&] { copy_bytes(seg_.buffer(b), t + p.first * e, p.count * e); });
        },
        nothing,
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          timed(c.chunks, root, p.count * e, [&] { copy_out(t + p.first * e, seg_.buffer(b), p.count * e, stream); });
        });
  }

  // Each rank copies its piece into its slot, then every slot but its own out.
  void all_gather(const Call& c) {
    const int n = size(), r = rank();
    const DType d = c.in->dtype();
    const int64_t e = dtype_size(d), m = c.in->numel();
    const char* in = at(c.in, 0);
    char* out = at(c.out, 0);
    if (n == 1) return copy_bytes(out, in, m * e);
    const int64_t pe = slot_elems(e), pieces = std::max<int64_t>(1, ceil_div(m, pe));
    const bool stream = n * m * e >= kStreamBytes;
    auto piece = [&](int64_t k) { return Range{k * pe, std::max<int64_t>(0, std::min(pe, m - k * pe))}; };
    Steps steps;
    steps.combine = "copy-in";
    pipeline(
        make_sig(c.op, d, ReduceOp::sum, -1, m), pieces, true, false, true, steps,
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          timed(c.chunks, -1, p.count * e, [&] { copy_bytes(seg_.slot(b, r), in + p.first * e, p.count * e); });
        },
        nothing,
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          copy_bytes(out + (r * m + p.first) * e, in + p.first * e, p.count * e);  // own block: no staging
          for (int i = 1; i < n; ++i) {
            const int q = (r + i) % n;
            timed(c.chunks, q, p.count * e,
                  [&] { copy_out(out + (q * m + p.first) * e, seg_.slot(b, q), p.count * e, stream); });
          }
        });
  }

  // Each rank copies the blocks of the others into its slot (one sub-slot per destination);
  // each reduces its own block from every slot, straight into its output.
  void reduce_scatter(const Call& c) {
    const int n = size(), r = rank();
    const DType d = c.in->dtype();
    const int64_t e = dtype_size(d), m = c.out->numel();
    const ReduceOp op = c.reduce_op;
    const char* in = at(c.in, 0);
    char* out = at(c.out, 0);
    if (n == 1) {
      copy_bytes(out, in, m * e);
      comm::finish_avg(out, m, d, op, n);
      return;
    }
    const int64_t align = line_elems(e);
    int64_t pe = slot_elems(e) / n;
    if (pe >= align) pe = pe / align * align;
    pe = std::max<int64_t>(1, pe);
    const int64_t pieces = std::max<int64_t>(1, ceil_div(m, pe));
    auto piece = [&](int64_t k) { return Range{k * pe, std::max<int64_t>(0, std::min(pe, m - k * pe))}; };
    pipeline(
        make_sig(c.op, d, op, -1, m), pieces, true, true, false, Steps{},
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          timed(c.chunks, -1, (n - 1) * p.count * e, [&] {
            for (int i = 1; i < n; ++i) {
              const int dest = (r + i) % n;
              copy_bytes(seg_.slot(b, r) + dest * pe * e, in + (dest * m + p.first) * e, p.count * e);
            }
          });
        },
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          if (p.count == 0) return;
          char* dst = out + p.first * e;  // may be the very same bytes as the own block of `in`: read first, element by element
          timed(c.chunks, -1, (n - 1) * p.count * e, [&] {
            for (int i = 1; i < n; ++i) {
              const char* src = seg_.slot(b, (r + i) % n) + r * pe * e;
              if (i == 1) comm::reduce_pair(dst, in + (r * m + p.first) * e, src, p.count, d, op);
              else comm::reduce_into(dst, src, p.count, d, op);
            }
            comm::finish_avg(dst, p.count, d, op, n);
          });
        },
        nothing);
  }

  // The root copies block q into slot q; rank q copies it out.
  void scatter(const Call& c) {
    const int n = size(), r = rank(), root = c.root;
    const DType d = c.out->dtype();
    const int64_t e = dtype_size(d), m = c.out->numel();
    const char* in = at(c.in, 0);  // the root's only
    char* out = at(c.out, 0);
    if (n == 1) return copy_bytes(out, in, m * e);
    const int64_t pe = slot_elems(e), pieces = std::max<int64_t>(1, ceil_div(m, pe));
    const bool stream = m * e >= kStreamBytes;
    auto piece = [&](int64_t k) { return Range{k * pe, std::max<int64_t>(0, std::min(pe, m - k * pe))}; };
    Steps steps;
    steps.in = steps.combine = "the root's copy-in";
    pipeline(
        make_sig(c.op, d, ReduceOp::sum, root, m), pieces, r == root, false, true, steps,
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          for (int i = 1; i < n; ++i) {
            const int q = (r + i) % n;
            timed(c.chunks, q, p.count * e, [&] { copy_bytes(seg_.slot(b, q), in + (q * m + p.first) * e, p.count * e); });
          }
        },
        nothing,
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          if (r == root) return copy_bytes(out + p.first * e, in + (r * m + p.first) * e, p.count * e);
          timed(c.chunks, root, p.count * e, [&] { copy_out(out + p.first * e, seg_.slot(b, r), p.count * e, stream); });
        });
  }

  // Every rank but the root copies its piece into its slot; the root copies every slot out.
  void gather(const Call& c) {
    const int n = size(), r = rank(), root = c.root;
    const DType d = c.in->dtype();
    const int64_t e = dtype_size(d), m = c.in->numel();
    const char* in = at(c.in, 0);
    char* out = at(c.out, 0);  // the root's only
    if (n == 1) return copy_bytes(out, in, m * e);
    const int64_t pe = slot_elems(e), pieces = std::max<int64_t>(1, ceil_div(m, pe));
    const bool stream = n * m * e >= kStreamBytes;
    auto piece = [&](int64_t k) { return Range{k * pe, std::max<int64_t>(0, std::min(pe, m - k * pe))}; };
    pipeline(
        make_sig(c.op, d, ReduceOp::sum, root, m), pieces, r != root, false, r == root, Steps{"copy-out of an earlier piece", "copy-in", "copy-in"},
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          timed(c.chunks, root, p.count * e, [&] { copy_bytes(seg_.slot(b, r), in + p.first * e, p.count * e); });
        },
        nothing,
        [&](int64_t k, int64_t b) {
          const Range p = piece(k);
          copy_bytes(out + (r * m + p.first) * e, in + p.first * e, p.count * e);
          for (int i = 1; i < n; ++i) {
            const int q = (r + i) % n;
            timed(c.chunks, q, p.count * e, [&] { copy_out(out + (q * m + p.first) * e, seg_.slot(b, q), p.count * e, stream); });
          }
        });
  }

  void barrier() {
    if (size() == 1) return;
    Steps steps;
    steps.in = "arrival";
    pipeline(make_sig(Collective::barrier, DType::f32, ReduceOp::sum, -1, 0), 1, false, false, false, steps, nothing,
             nothing, nothing);
  }

  // Point to point: a channel per ordered pair with kDepth pieces in flight. A send returns once
  // its last piece is in the channel (eager, as MPI's shared-memory transport for small
  // messages); a message larger than the channel waits for the receiver to drain it.
  void send_message(int peer, const void* data, int64_t bytes, int32_t kind, int64_t value,
                    std::vector<Chunk>* chunks, const std::string& what) {
    ChannelTx& tx = seg_.tx(rank(), peer);
    ChannelRx& rx = seg_.rx(rank(), peer);
    const int64_t per = seg_.l.p2p, pieces = std::max<int64_t>(1, ceil_div(bytes, per));
    const std::string where = what + " to rank " + std::to_string(peer);
    for (int64_t k = 0; k < pieces; ++k) {
      const uint64_t s = sent_[static_cast<size_t>(peer)];
      const int64_t b = static_cast<int64_t>(s % kDepth);
      wait_for([&](int) { return rx.taken.load() + kDepth < s + 1; }, peer, {where.c_str(), "the receiver's copy-out", k, pieces, true});
      const int64_t len = std::min(per, bytes - k * per);
      tx.head[b] = PieceHead{bytes, std::max<int64_t>(0, len), value, kind};
      timed(chunks, peer, len, [&] {
        copy_bytes(seg_.channel(rank(), peer, b), static_cast<const char*>(data) + k * per, len);
      });
      sent_[static_cast<size_t>(peer)] = s + 1;
      publish(tx.sent, s + 1);
    }
  }

  // Returns the message's value. A message of the wrong size or kind is drained (so the sender
  // is not left waiting) and reported.
  int64_t recv_message(int peer, void* data, int64_t bytes, int32_t kind, std::vector<Chunk>* chunks,
                       const std::string& what) {
    ChannelTx& tx = seg_.tx(peer, rank());
    ChannelRx& rx = seg_.rx(peer, rank());
    const int64_t per = seg_.l.p2p;
    const std::string where = what + " from rank " + std::to_string(peer);
    int64_t pieces = 1, value = 0;
    std::string mismatch;
    for (int64_t k = 0; k < pieces; ++k) {
      const uint64_t s = received_[static_cast<size_t>(peer)];
      const int64_t b = static_cast<int64_t>(s % kDepth);
      wait_for([&](int) { return tx.sent.load() < s + 1; }, peer, {where.c_str(), "the sender's copy-in", k, pieces, true});
      const PieceHead head = tx.head[b];
      if (k == 0) {
        pieces = std::max<int64_t>(1, ceil_div(head.message_bytes, per));
        value = head.value;
        if (head.kind != kind)
          mismatch = "rank " + std::to_string(peer) + " sent " +
                     (head.kind == kValue ? "the start-time agreement of a send" : "data") + " where rank " +
                     std::to_string(rank()) + " expects " + (kind == kValue ? "the start-time agreement" : "data") +
                     " — the ranks disagree on the order of their sends and recvs";
        else if (head.message_bytes != bytes)
          mismatch = "rank " + std::to_string(peer) + " sent " + std::to_string(head.message_bytes) + " bytes but rank " +
                     std::to_string(rank()) + " expects " + std::to_string(bytes) + " — post matching sizes on both sides";
      }
      if (mismatch.empty())
        timed(chunks, peer, head.piece_bytes, [&] {
          copy_bytes(static_cast<char*>(data) + k * per, seg_.channel(peer, rank(), b), head.piece_bytes);
        });
      received_[static_cast<size_t>(peer)] = s + 1;
      publish(rx.taken, s + 1);
    }
    if (!mismatch.empty()) throw Error("comm", "shm: " + where + ": " + mismatch);
    return value;
  }

  Segment seg_;
  int64_t timeout_ns_;
  uint64_t next_piece_ = 0;          // pieces the group has run through the staging buffers
  std::vector<uint64_t> sent_, received_;  // pieces through each channel from / to this rank
};

// ---------------------------------------------------------------------------------------------
// Launching the ranks: the segment comes from shm_segment.h, the processes from core/proc.

// Rank r's whole life, in its own process, on its own mapping of the segment.
int rank_process(const Segment& seg, int r, SharedSegment& mem, const CommOptions& options,
                 const std::function<void(ProcessGroup&)>& rank_main) {
  const Header& h = seg.header();
  if (h.magic != kMagic || h.world != seg.l.n || h.total_bytes != seg.l.total)
    throw Error("comm", "shm: rank " + std::to_string(r) + ": the shared segment is not this launch's");
  // The last rank to open the name unlinks it: from now on only the mappings keep it alive.
  if (mem.sharing() == ShmSharing::named_file && seg.header().opened.fetch_add(1) + 1 == h.world) mem.unlink_name();
  ShmGroup group(seg, r, options);
  rank_main(group);
  return 0;
}

}  // namespace

void launch_procs(int world_size, ShmSharing sharing, CommOptions options,
                  const std::function<void(ProcessGroup& group)>& rank_main) {
  if (world_size < 1 || world_size > kMaxRanks)
    throw UsageError("comm", "--ranks must be in [1, " + std::to_string(kMaxRanks) + "] for the shm backend, got " +
                                 std::to_string(world_size));
  const Layout layout = make_layout(world_size, slot_bytes_for(world_size), p2p_bytes_for(world_size));
  SharedSegment mem(layout.total, sharing, "scalelab-shm");
  const Segment seg{mem.data(), layout};
  seg.initialise();
  Children children;  // after the segment: killed and reaped on every path before it is unmapped
  children.hold_usage_errors();  // bad input, met by every rank alike, is said once (below)
  for (int r = 0; r < world_size; ++r)
    mem.fork_child(children, "rank " + std::to_string(r), options.timeout, [&, r](char* base, int64_t) {
      return rank_process(Segment{base, layout}, r, mem, options, rank_main);
    });

  // Wait for every child. A child that exits is marked in the segment (and the ranks woken), so
  // a rank waiting for it fails at once naming it; once a rank has failed, the ranks still
  // running get the timeout (and a second) to notice, then are killed.
  struct Outcome {
    int status = 0;
    int64_t when_ns = -1;  // when it was seen to end
    bool killed_by_us = false;
  };
  std::vector<Outcome> outcome(static_cast<size_t>(world_size));
  const auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const int64_t grace_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.timeout).count() + 1'000'000'000;
  int64_t first_failure_ns = -1;
  int first_failed = -1;
  int alive = world_size;
  bool killed = false;
  while (alive > 0) {
    for (int r = 0; r < world_size; ++r) {
      Outcome& o = outcome[static_cast<size_t>(r)];
      if (o.when_ns >= 0 || !children.ended(r, &o.status)) continue;
      --alive;
      o.when_ns = now_ns();
      seg.exit(r).status = o.status;
      seg.exit(r).exited.store(1);
      notify_all(seg);
      if (!(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) && first_failure_ns < 0) {
        first_failure_ns = o.when_ns;
        first_failed = r;
      }
    }
    if (alive == 0) break;
    if (first_failure_ns >= 0 && !killed && now_ns() - first_failure_ns > grace_ns) {
      killed = true;
      for (Outcome& o : outcome) o.killed_by_us = o.when_ns < 0;
      children.kill_running();
    }
    int64_t ms = 200;
    if (first_failure_ns >= 0 && !killed)
      ms = std::clamp<int64_t>((first_failure_ns + grace_ns - now_ns()) / 1000000 + 1, 1, 200);
    children.wait_any(std::chrono::milliseconds(ms));
  }

  std::vector<int> failed;
  for (int r = 0; r < world_size; ++r) {
    const int s = outcome[static_cast<size_t>(r)].status;
    if (!(WIFEXITED(s) && WEXITSTATUS(s) == 0)) failed.push_back(r);
  }
  if (failed.empty()) return;  // the segment unmaps (and unlinks) itself
  // Ranks that met bad input: one error when every failed rank says the same, as a threads launch
  // would; else each, as its rank.
  std::vector<std::pair<std::string, std::string>> usage(static_cast<size_t>(world_size));
  bool all_same_usage = true;
  for (int r : failed) {
    usage[static_cast<size_t>(r)] = children.usage_error(r);
    all_same_usage = all_same_usage && !usage[static_cast<size_t>(r)].first.empty() &&
                     usage[static_cast<size_t>(r)] == usage[static_cast<size_t>(failed.front())];
  }
  if (all_same_usage) {
    const auto& [component, message] = usage[static_cast<size_t>(failed.front())];
    throw UsageError(component, message);
  }
  for (int r : failed)
    if (!usage[static_cast<size_t>(r)].first.empty())
      write_stderr("[rank " + std::to_string(r) + "] [" + usage[static_cast<size_t>(r)].first + "] " +
                   usage[static_cast<size_t>(r)].second + "\n");
  std::stable_sort(failed.begin(), failed.end(), [&](int a, int b) {
    return outcome[static_cast<size_t>(a)].when_ns < outcome[static_cast<size_t>(b)].when_ns;
  });
  std::string text = "shm: " + std::to_string(failed.size()) + " of " + std::to_string(world_size) +
                     " ranks failed, in the order they ended: ";
  for (size_t i = 0; i < failed.size(); ++i) {
    const int r = failed[i];
    const Outcome& o = outcome[static_cast<size_t>(r)];
    text += (i ? ", rank " : "rank ") + std::to_string(r) + " " + wait_status_text(o.status);
    if (o.killed_by_us)
      text += " (by launch_procs: still running " + seconds_text(grace_ns) + " after rank " +
              std::to_string(first_failed) + " failed)";
  }
  text += " — each rank's own error is above on stderr, prefixed [rank i]";
  throw Error("comm", text);
}

}  // namespace scalelab
