// Lab 01's checks (the instructor's test program). The grader builds it with the student's
// ring.cpp and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed, 1
// failed. Numbers are checked exactly (rank-dependent small integers: every sum is exact in f32);
// speed is checked on the simulated A100 node, so the grade does not depend on this machine.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/threads/threads_group.h"
#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/trace/events.h"
#include "lab.h"
#include "labs/common/world.h"
#include "labs/common/verdict.h"

using namespace scalelab;
using lab::Args;
using lab::str;

namespace {

// A rank that never comes makes the others give up after this long, naming it.
constexpr auto kCommTimeout = std::chrono::milliseconds(2000);

// Rank r's element i: small integers, so every sum is exact whatever the order of the adds.
float value(int rank, int64_t i) { return static_cast<float>((rank + 1) * 10 + i % 7); }
float sum_over_ranks(int n, int64_t i) { return static_cast<float>(10 * n * (n + 1) / 2 + n * (i % 7)); }



// Written on the host directly (cpu and sim tensors live in host memory): no upload event, no
// simulated time before the collective starts.
Tensor filled(Device& dev, int64_t count, const std::function<float(int64_t)>& v,
              MemoryCategory category = MemoryCategory::comm_buffers) {
  Tensor t = dev.empty({count}, DType::f32, category, "lab01 data");
  float* p = t.data<float>();
  for (int64_t i = 0; i < count; ++i) p[i] = v(i);
  return t;
}

// ring_all_reduce called by every rank of an n-rank world (cpu, or sim of `profile`) on its tensor
// of `count` elements, rank r's element i = v(r, i), allocated in `category`. The tensors are
// declared after the world, so they are released before its devices.
struct AllReduced {
  std::unique_ptr<lab::World> world;
  std::vector<Tensor> data;
};
AllReduced all_reduce_on(int n, int64_t count, const std::string& profile, const std::function<float(int, int64_t)>& v,
                         MemoryCategory category = MemoryCategory::comm_buffers) {
  AllReduced a{lab::make_world(n, profile, kCommTimeout), std::vector<Tensor>(static_cast<size_t>(n))};
  lab::run_ranks(n, [&](int r) {
    Device& dev = *a.world->devices[static_cast<size_t>(r)];
    a.data[static_cast<size_t>(r)] = filled(dev, count, [&](int64_t i) { return v(r, i); }, category);
    lab01::ring_all_reduce(*a.world->groups[static_cast<size_t>(r)], a.data[static_cast<size_t>(r)]);
  });
  return a;
}

// The first element of `t` that differs from want(i), as a failure naming the case.
void expect_elements(const Tensor& t, const std::function<float(int64_t)>& want, const std::string& what) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (p[i] != want(i)) lab::fail(what + ", element " + str(i) + " of " + str(t.numel()), str(want(i)), str(p[i]));
}


// ---------------------------------------------------------------------------------------------

// Task 1: every rank sends a tensor holding its rank to the right and receives the left's.
void exchange(const Args& a) {
  const auto ranks = a.ints("ranks", "2-8");
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    auto w = lab::make_world(n, "", kCommTimeout);
    std::vector<float> got(static_cast<size_t>(n), -1);
    lab::run_ranks(n, [&](int r) {
      Device& dev = *w->devices[static_cast<size_t>(r)];
      Tensor out = filled(dev, 3, [&](int64_t) { return static_cast<float>(r); });
      Tensor in = filled(dev, 3, [](int64_t) { return -1.0f; });
      lab01::ring_exchange(*w->groups[static_cast<size_t>(r)], out, lab01::mod(r + 1, n), in, lab01::mod(r - 1, n));
      got[static_cast<size_t>(r)] = in.data<float>()[2];
    });
    for (int r = 0; r < n; ++r)
      lab::expect(got[static_cast<size_t>(r)] == lab01::mod(r - 1, n),
                  "n = " + str(n) + ": what rank " + str(r) + " received from its left", str(lab01::mod(r - 1, n)),
                  str(got[static_cast<size_t>(r)]));
  }
  std::printf("passed: every rank received its left neighbour's tensor, n = %s, no deadlock\n", lab::list_text(ranks).c_str());
}

// Task 2: exact sums on every rank, for every n and count.
void exact_sums(const Args& a) {
  const auto ranks = a.ints("ranks", "1-8");
  const auto counts = a.ints("counts", "1,7,1000,4099");
  for (long long nl : ranks)
    for (long long count : counts) {
      const int n = static_cast<int>(nl);
      const AllReduced run = all_reduce_on(n, count, "", value);
      for (int r = 0; r < n; ++r)
        expect_elements(run.data[static_cast<size_t>(r)], [&](int64_t i) { return sum_over_ranks(n, i); },
                        "ring_all_reduce with n = " + str(n) + ", count = " + str(count) + ": rank " + str(r));
    }
  std::printf("passed: exact sums on every rank for n = %s and counts %s\n", lab::list_text(ranks).c_str(),
              a.get("counts", "1,7,1000,4099").c_str());
}

// Task 2: every rank ends with the same bits. The ring adds each chunk once, on one rank, and the
// all-gather copies that sum: no rank adds in an order of its own. These values are not exact in
// f32, so a rank that summed the others' data itself would come out a few ulps apart.
float inexact_value(int rank, int64_t i) { return 0.1f * static_cast<float>(rank + 1) + 1.0f / static_cast<float>(3 + i % 11); }

// A float to its last bit: 9 digits and the bits in hex.
std::string exactly(float v) {
  uint32_t u = 0;
  std::memcpy(&u, &v, sizeof u);
  char text[48];
  std::snprintf(text, sizeof text, "%.9g (bits 0x%08x)", static_cast<double>(v), u);
  return text;
}

void agreement(const Args& a) {
  const auto ranks = a.ints("ranks", "3,5,8");
  const int64_t count = std::stoll(a.get("count", "1001"));
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const AllReduced run = all_reduce_on(n, count, "", inexact_value);
    const float* first = run.data[0].data<float>();
    for (int64_t i = 0; i < count; ++i) {
      double want = 0;
      for (int k = 0; k < n; ++k) want += inexact_value(k, i);
      lab::expect(std::abs(first[i] - want) <= 1e-5 * std::abs(want),
                  "ring_all_reduce with n = " + str(n) + " of inexact values: rank 0's element " + str(i),
                  "the sum over the ranks, " + str(want) + " within 1e-5", str(first[i]));
    }
    for (int r = 1; r < n; ++r) {
      const float* mine = run.data[static_cast<size_t>(r)].data<float>();
      for (int64_t i = 0; i < count; ++i)
        lab::expect(mine[i] == first[i],
                    "n = " + str(n) + ", count = " + str(count) + ": rank " + str(r) + "'s element " + str(i) +
                        " against rank 0's",
                    "the same bits on every rank (each chunk summed once, then copied round the ring)",
                    exactly(mine[i]) + " against " + exactly(first[i]));
    }
  }
  std::printf("passed: every rank holds the same bits, n = %s\n", lab::list_text(ranks).c_str());
}

// The comm events of a run, per rank: sends, receives and the bytes of each send.
struct Messages {
  std::vector<int> sends, recvs;
  std::vector<std::vector<int64_t>> sent;  // by rank, each send's bytes in order
};
Messages messages(const lab::World& w, int n) {
  Messages m{std::vector<int>(static_cast<size_t>(n)), std::vector<int>(static_cast<size_t>(n)),
             std::vector<std::vector<int64_t>>(static_cast<size_t>(n))};
  for (const Event& e : w.bus.events()) {
    if (e.lane != Lane::comm) continue;
    if (e.role == Role::send) {
      ++m.sends[static_cast<size_t>(e.device)];
      m.sent[static_cast<size_t>(e.device)].push_back(e.bytes);
    } else if (e.role == Role::recv) {
      ++m.recvs[static_cast<size_t>(e.device)];
    } else {
      lab::fail("n = " + str(n) + ": rank " + str(e.device) + " called " + e.kind, "only send and recv",
                "a call of the library's own " + e.kind);
    }
  }
  return m;
}

// ring_all_reduce on n = --ranks (default 2…8) ranks of --count (default 1003) elements; then
// check(n, count, messages, rank r, "n = …: rank r") for every rank. The ranks and count used.
using RankCheck = std::function<void(int n, int64_t count, const Messages& m, int r, const std::string& who)>;
std::vector<long long> each_rank_messages(const Args& a, const RankCheck& check) {
  const auto ranks = a.ints("ranks", "2-8");
  const int64_t count = std::stoll(a.get("count", "1003"));
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const AllReduced run = all_reduce_on(n, count, "", value);
    const Messages m = messages(*run.world, n);
    for (int r = 0; r < n; ++r) check(n, count, m, r, "n = " + str(n) + ", count = " + str(count) + ": rank " + str(r));
  }
  return ranks;
}

// Task 2: 2(n − 1) sends and receives per rank; nothing but send and recv.
void steps(const Args& a) {
  const auto ranks = each_rank_messages(a, [](int n, int64_t, const Messages& m, int r, const std::string& who) {
    lab::expect(m.sends[static_cast<size_t>(r)] == 2 * (n - 1), who + "'s sends", "2(n − 1) = " + str(2 * (n - 1)),
                str(m.sends[static_cast<size_t>(r)]));
    lab::expect(m.recvs[static_cast<size_t>(r)] == 2 * (n - 1), who + "'s receives", "2(n − 1) = " + str(2 * (n - 1)),
                str(m.recvs[static_cast<size_t>(r)]));
  });
  std::printf("passed: 2(n − 1) sends and receives per rank, n = %s\n", lab::list_text(ranks).c_str());
}

// Task 2: the bytes moved. Each send is one chunk, ⌊count / n⌋ or ⌈count / n⌉ elements (chunk()
// keeps them within one of each other), and a rank sends every chunk but one in each phase:
// 2(S − one chunk) bytes, 2(n − 1)/n · S — not the whole tensor, and no chunk of its own size.
void bytes(const Args& a) {
  const auto ranks = each_rank_messages(a, [](int n, int64_t count, const Messages& m, int r, const std::string& who) {
    const int64_t S = count * 4, small = count / n * 4, large = (count + n - 1) / n * 4;
    const std::vector<int64_t>& sent = m.sent[static_cast<size_t>(r)];
    int64_t total = 0;
    for (size_t k = 0; k < sent.size(); ++k) {
      lab::expect(sent[k] == small || sent[k] == large, who + "'s send " + str(k + 1) + " of " + str(sent.size()),
                  "one chunk: " + str(small) + " or " + str(large) + " bytes (⌊count / n⌋ or ⌈count / n⌉ f32)",
                  str(sent[k]) + " bytes");
      total += sent[k];
    }
    lab::expect(total >= 2 * (S - large) && total <= 2 * (S - small), who + "'s bytes sent",
                "2(S − one chunk), between " + str(2 * (S - large)) + " and " + str(2 * (S - small)), str(total));
  });
  std::printf("passed: one chunk a send, 2(n − 1)/n · S bytes per rank, n = %s\n", lab::list_text(ranks).c_str());
}

// Task 2: the memory the ring holds besides the data: one chunk to receive into (a reduce-scatter
// step adds it into place, and the all-gather receives straight into place), freed when the call
// returns. The data is a gradient bucket here (category grads), so the ledger shows the rest.
void scratch_memory(const Args& a) {
  const auto ranks = a.ints("ranks", "2-8");
  const int64_t count = std::stoll(a.get("count", "4099"));
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const AllReduced run = all_reduce_on(n, count, "", value, MemoryCategory::grads);
    const int64_t data = count * 4, chunk = (count + n - 1) / n * 4;
    int64_t most = 0;
    for (int r = 0; r < n; ++r) {
      const MemoryLedger& ledger = run.world->devices[static_cast<size_t>(r)]->memory();
      const std::string who = "ring_all_reduce with n = " + str(n) + ", count = " + str(count) + ": rank " + str(r);
      const int64_t extra = ledger.peak_total() - data;
      lab::expect(extra <= chunk, who + ": the most it held besides the data",
                  "at most one chunk, ⌈count / n⌉ · 4 = " + str(chunk) + " bytes (receive a chunk, add it, reuse)",
                  str(extra) + " bytes");
      lab::expect(ledger.live_total() == data, who + ": what it still holds after the call",
                  "the data alone, " + str(data) + " bytes (the scratch freed)", str(ledger.live_total()) + " bytes");
      most = std::max(most, extra);
    }
    report += "  n = " + str(n) + ": at most " + str(most) + " bytes besides the data (one chunk: " + str(chunk) + ")\n";
  }
  std::printf("passed: one chunk of scratch at the most, freed on return\n%s", report.c_str());
}

// The simulated time of one call on every rank: the first comm event's begin to the last's end.
double comm_span_seconds(const EventBus& bus) {
  int64_t begin = INT64_MAX, end = 0;
  for (const Event& e : bus.events())
    if (e.lane == Lane::comm) {
      begin = std::min(begin, e.t_begin_ns);
      end = std::max(end, e.t_end_ns);
    }
  return end > begin ? static_cast<double>(end - begin) * 1e-9 : 0.0;
}

// Task 2: bus bandwidth on the simulated A100 node. On sim a send and a receive each hold the
// rank's comm lane for α + bytes / B (one at a time), so one ring step costs at least
// 2(α + chunk / B) and 2(n − 1) steps 4(n − 1)(α + chunk / B). busbw = S / t · 2(n − 1) / n; the
// check wants ≥ 95 % of that bound.
void busbw(const Args& a) {
  const std::string profile = a.get("hw", "a100-nvlink-8");
  const auto ranks = a.ints("ranks", "4,8");
  const int64_t count = std::stoll(a.get("count", "1048579"));  // 4 MiB and 3 elements: chunks differ
  const HardwareProfile p = load_profile(profile);
  const double alpha = p.intra_node.latency_s, B = p.intra_node.bandwidth_Bps;
  std::string report;
  for (long long nl : ranks) {
    const int n = static_cast<int>(nl);
    const AllReduced run = all_reduce_on(n, count, profile, value);
    for (int r = 0; r < n; ++r)
      expect_elements(run.data[static_cast<size_t>(r)], [&](int64_t i) { return sum_over_ranks(n, i); },
                      "ring_all_reduce on sim with n = " + str(n) + ": rank " + str(r));
    const double S = static_cast<double>(count) * 4, factor = 2.0 * (n - 1) / n;
    const double chunk = std::ceil(static_cast<double>(count) / n) * 4;
    const double t = comm_span_seconds(run.world->bus);
    const double bound_t = 4.0 * (n - 1) * (alpha + chunk / B);
    const double got = t > 0 ? S / t * factor : 0, bound = S / bound_t * factor;
    char line[256];
    std::snprintf(line, sizeof line, "n = %d: %.2f µs simulated, busbw %.1f GB/s = %.1f %% of the bound %.1f GB/s",
                  n, t * 1e6, got * 1e-9, 100 * got / bound, bound * 1e-9);
    lab::expect(got >= 0.95 * bound,
                "bus bandwidth of ring_all_reduce on " + profile + " (link " + str(B * 1e-9) + " GB/s, α " +
                    str(alpha * 1e6) + " µs), n = " + str(n) + ", " + str(count) + " f32",
                "≥ 95 % of the ring's bound " + str(bound * 1e-9) + " GB/s (2(n − 1) steps of one send and one "
                "receive of a chunk, each α + chunk / B)",
                line);
    report += std::string("  ") + line + "\n";
  }
  std::printf("passed: bus bandwidth within 5 %% of the ring's bound\n%s", report.c_str());
}

// Task 3: every rank ends with the root's data, for every root.
void broadcast_exact(const Args& a) {
  const auto ranks = a.ints("ranks", "1-8");
  const auto counts = a.ints("counts", "1,1001");
  for (long long nl : ranks)
    for (long long count : counts)
      for (int root = 0; root < nl; ++root) {
        const int n = static_cast<int>(nl);
        auto w = lab::make_world(n, "", kCommTimeout);
        std::vector<Tensor> data(static_cast<size_t>(n));
        lab::run_ranks(n, [&](int r) {
          Device& dev = *w->devices[static_cast<size_t>(r)];
          data[static_cast<size_t>(r)] = filled(dev, count, [&](int64_t i) { return value(r, i); });
          lab01::tree_broadcast(*w->groups[static_cast<size_t>(r)], data[static_cast<size_t>(r)], root);
        });
        for (int r = 0; r < n; ++r)
          expect_elements(data[static_cast<size_t>(r)], [&](int64_t i) { return value(root, i); },
                          "tree_broadcast from root " + str(root) + ", n = " + str(n) + ", count = " + str(count) +
                              ": rank " + str(r) + " (rank k holds " + str(10) + "(k + 1) + i mod 7)");
      }
  std::printf("passed: every rank holds the root's data, every root, n = %s\n", lab::list_text(ranks).c_str());
}

// Task 3: ⌈log2 n⌉ rounds on sim — one receive per rank, and the time of ⌈log2 n⌉ sends.
void broadcast_rounds(const Args& a) {
  const std::string profile = a.get("hw", "a100-nvlink-8");
  const auto ranks = a.ints("ranks", "5,8");
  const int64_t count = std::stoll(a.get("count", "262147"));
  const HardwareProfile p = load_profile(profile);
  const double one = p.intra_node.latency_s + static_cast<double>(count) * 4 / p.intra_node.bandwidth_Bps;
  std::string report;
  for (long long nl : ranks)
    for (int root : {0, static_cast<int>(nl) - 1}) {
      const int n = static_cast<int>(nl);
      auto w = lab::make_world(n, profile, kCommTimeout);
      lab::run_ranks(n, [&](int r) {
        Device& dev = *w->devices[static_cast<size_t>(r)];
        Tensor t = filled(dev, count, [&](int64_t i) { return value(r, i); });
        lab01::tree_broadcast(*w->groups[static_cast<size_t>(r)], t, root);
      });
      std::vector<int> recvs(static_cast<size_t>(n));
      for (const Event& e : w->bus.events())
        if (e.lane == Lane::comm && e.role == Role::recv) ++recvs[static_cast<size_t>(e.device)];
      for (int r = 0; r < n; ++r)
        lab::expect(recvs[static_cast<size_t>(r)] == (r == root ? 0 : 1),
                    "tree_broadcast from root " + str(root) + ", n = " + str(n) + ": receives of rank " + str(r),
                    r == root ? "0 (the root has the data)" : "1", str(recvs[static_cast<size_t>(r)]));
      const int rounds = static_cast<int>(std::ceil(std::log2(static_cast<double>(n))));
      const double t = comm_span_seconds(w->bus);
      char line[200];
      std::snprintf(line, sizeof line, "n = %d, root %d: %.2f µs simulated = %.2f sends of the whole tensor", n, root,
                    t * 1e6, t / one);
      lab::expect(t <= 1.05 * rounds * one,
                  "simulated time of tree_broadcast on " + profile + ", n = " + str(n) + ", root " + str(root),
                  "⌈log2 n⌉ = " + str(rounds) + " rounds of one send each, " + str(rounds * one * 1e6) + " µs",
                  line);
      report += std::string("  ") + line + "\n";
    }
  std::printf("passed: one receive per rank, ⌈log2 n⌉ rounds\n%s", report.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                        {{"exchange", exchange},
                         {"exact_sums", exact_sums},
                         {"agreement", agreement},
                         {"steps", steps},
                         {"bytes", bytes},
                         {"scratch_memory", scratch_memory},
                         {"busbw", busbw},
                         {"broadcast_exact", broadcast_exact},
                         {"broadcast_rounds", broadcast_rounds}});
}
