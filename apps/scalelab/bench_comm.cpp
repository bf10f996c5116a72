// `scalelab bench comm`: collectives timed like nccl-tests (size count type redop time algbw busbw
// #wrong), with the bound this machine's memory bandwidth puts on a shared-memory implementation,
// and with --vs mpi (Open MPI's own collective) or --vs gloo (torch.distributed over gloo, one
// process per rank), the peer on the same sizes and ranks, measured in the same run.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "apps/scalelab/bench.h"
#include "apps/scalelab/python_peer.h"
#include "core/comm/backends.h"
#include "core/comm/shm/shm_group.h"
#include "core/comm/threads/threads_group.h"
#include "core/device/cpu/cpu_executor.h"
#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/kernels/cpu_kernels.h"
#include "core/limits.h"
#include "core/memory_ledger.h"
#include "core/proc/host_memory.h"

namespace scalelab {

namespace {

using nlohmann::json;

struct Row {
  int64_t bytes = 0;
  int64_t count = 0;
  double time_us = 0;
  double algbw = 0, busbw = 0;  // GB/s
  int64_t wrong = -1;           // −1: not checked (sim runs no numerics)
  double bound_busbw = 0;
  double peer_busbw = 0;
  // sim: the algorithm and protocol the cost model priced the call with (NCCL's tuner picks the
  // cheapest per size, so they change along the sweep); empty on a real backend.
  std::string algorithm, protocol;
};

// The tensors of one size: what each collective reads and writes on this rank, and the count
// nccl-tests reports (elements of the per-rank payload).
struct Buffers {
  Tensor in, out;
  int64_t count = 0;
};

int dtype_code(DType d) { return d == DType::f16 ? 1 : d == DType::bf16 ? 2 : 0; }

// Rank r's element i is (r + 1) + (i mod 7): every result is a small integer known exactly.
float input_value(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 7); }

void fill_inputs(Device& dev, const Tensor& t, int rank, int64_t offset_stride = 0) {
  if (!t.defined() || !dev.computes()) return;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = input_value(rank, i + offset_stride);
  std::vector<char> raw(static_cast<size_t>(t.nbytes()) + 1);
  kernels::cast(v.data(), 0, raw.data(), dtype_code(t.dtype()), t.numel());
  dev.upload({"bench"}, t, raw.data());
}

std::vector<float> read_back(Device& dev, const Tensor& t) {
  std::vector<char> raw(static_cast<size_t>(t.nbytes()) + 1);
  dev.download({"bench"}, raw.data(), t);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  kernels::cast(raw.data(), dtype_code(t.dtype()), v.data(), 0, t.numel());
  return v;
}

// `bytes` is nccl-tests' size: the tensor of all_reduce / broadcast / reduce / send, the whole
// (ranks × piece) buffer of all_gather, reduce_scatter, scatter and gather.
Buffers make_buffers(Device& dev, Collective op, int64_t bytes, DType dtype, int n, int rank) {
  const int64_t elem = dtype_size(dtype);
  Buffers b;
  auto alloc = [&](int64_t count) { return dev.empty({count}, dtype, MemoryCategory::comm_buffers, "bench"); };
  switch (op) {
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::scatter:
    case Collective::gather: {
      const int64_t piece = bytes / elem / n;
      b.count = piece;
      const bool big_in = op == Collective::reduce_scatter || (op == Collective::scatter && rank == 0);
      const bool big_out = op == Collective::all_gather || (op == Collective::gather && rank == 0);
      b.in = big_in ? alloc(piece * n) : (op == Collective::scatter ? Tensor() : alloc(piece));
      b.out = big_out ? alloc(piece * n) : (op == Collective::gather ? Tensor() : alloc(piece));
      break;
    }
    default:
      b.count = bytes / elem;
      b.in = alloc(b.count);
      b.out = op == Collective::all_reduce || op == Collective::reduce ? alloc(b.count) : b.in;
  }
  return b;
}

void run_once(ProcessGroup& pg, Collective op, ReduceOp redop, const Buffers& b) {
  const int n = pg.size(), r = pg.rank();
  switch (op) {
    case Collective::all_reduce: pg.all_reduce(b.in, b.out, redop); break;
    case Collective::broadcast: pg.broadcast(b.in, 0); break;
    case Collective::reduce: pg.reduce(b.in, r == 0 ? b.out : Tensor(), 0, redop); break;
    case Collective::all_gather: pg.all_gather(b.in, b.out); break;
    case Collective::reduce_scatter: pg.reduce_scatter(b.in, b.out, redop); break;
    case Collective::scatter: pg.scatter(b.in, b.out, 0); break;
    case Collective::gather: pg.gather(b.in, b.out, 0); break;
    case Collective::send:
    case Collective::recv:
      // Pairs (0→1, 2→3, …): every even rank sends to the next, which receives.
      if (r % 2 == 0 && r + 1 < n) pg.send(b.in, r + 1);
      else if (r % 2 == 1) pg.recv(b.in, r - 1);
      break;
    case Collective::barrier: pg.barrier(); break;
  }
}

// Elements of this rank's output that differ from the closed form.
int64_t count_wrong(Device& dev, ProcessGroup& pg, Collective op, ReduceOp redop, const Buffers& b) {
  const int n = pg.size(), r = pg.rank();
  auto reduced = [&](int64_t i) {
    const float k = static_cast<float>(i % 7);
    switch (redop) {
      case ReduceOp::sum: return static_cast<float>(n * (n + 1) / 2) + n * k;
      case ReduceOp::avg: return static_cast<float>(n + 1) / 2.0f + k;
      case ReduceOp::max: return static_cast<float>(n) + k;
    }
    return 0.0f;
  };
  int64_t wrong = 0;
  auto expect = [&](const Tensor& t, auto want) {
    const auto got = read_back(dev, t);
    for (int64_t i = 0; i < t.numel(); ++i) wrong += got[static_cast<size_t>(i)] != want(i);
  };
  switch (op) {
    case Collective::all_reduce: expect(b.out, reduced); break;
    case Collective::reduce:
      if (r == 0) expect(b.out, reduced);
      break;
    case Collective::broadcast: expect(b.in, [&](int64_t i) { return input_value(0, i); }); break;
    case Collective::all_gather:
      expect(b.out, [&](int64_t i) { return input_value(static_cast<int>(i / b.count), i % b.count); });
      break;
    case Collective::reduce_scatter: expect(b.out, [&](int64_t i) { return reduced(r * b.count + i); }); break;
    case Collective::scatter: expect(b.out, [&](int64_t i) { return input_value(r, i); }); break;
    case Collective::gather:
      if (r == 0) expect(b.out, [&](int64_t i) { return input_value(static_cast<int>(i / b.count), i % b.count); });
      break;
    case Collective::send:
    case Collective::recv:
      if (r % 2 == 1) expect(b.in, [&](int64_t i) { return input_value(r - 1, i); });
      break;
    case Collective::barrier: break;
  }
  return wrong;
}

// Inputs as the closed form expects them: scatter's root holds every rank's piece.
void prepare(Device& dev, Collective op, const Buffers& b, int rank, int n) {
  if (op == Collective::scatter) {
    if (rank == 0) {
      std::vector<float> v(static_cast<size_t>(b.in.numel()));
      for (int64_t i = 0; i < b.in.numel(); ++i) v[static_cast<size_t>(i)] = input_value(static_cast<int>(i / b.count), i % b.count);
      std::vector<char> raw(static_cast<size_t>(b.in.nbytes()) + 1);
      kernels::cast(v.data(), 0, raw.data(), dtype_code(b.in.dtype()), b.in.numel());
      dev.upload({"bench"}, b.in, raw.data());
    }
    return;
  }
  (void)n;
  fill_inputs(dev, b.in, rank);
}

// The part every rank runs, whatever the backend: returns the rows on every rank.
std::vector<Row> bench_rank(ProcessGroup& pg, Device& dev, const BenchCommOptions& o) {
  const Collective op = parse_collective(o.op);
  const ReduceOp redop = parse_reduce_op(o.redop);
  const DType dtype = parse_dtype(o.dtype);
  const int n = pg.size();
  auto* sim = dynamic_cast<SimClock*>(&dev.clock());
  Tensor scratch = dev.empty({1}, DType::f32, MemoryCategory::workspace, "bench max");
  std::vector<Row> rows;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    Buffers b = make_buffers(dev, op, bytes, dtype, n, pg.rank());
    Row row;
    row.count = b.count;
    row.bytes = op == Collective::all_gather || op == Collective::reduce_scatter || op == Collective::scatter ||
                        op == Collective::gather
                    ? b.count * n * dtype_size(dtype)
                    : b.count * dtype_size(dtype);
    double seconds = 0;
    if (sim) {
      // Modelled: the comm lane's advance over one call, after every rank has arrived.
      pg.barrier();
      const int64_t before = sim->lane_free_ns(Lane::comm);
      run_once(pg, op, redop, b);
      seconds = static_cast<double>(sim->lane_free_ns(Lane::comm) - before) * 1e-9;
      const CollectiveChoice choice = sim->model().collective_choice(op, static_cast<double>(row.bytes), n);
      row.algorithm = choice.algorithm;
      row.protocol = choice.protocol;
    } else {
      prepare(dev, op, b, pg.rank(), n);
      for (int i = 0; i < o.warmup; ++i) run_once(pg, op, redop, b);
      // Fewer iterations for large sizes, never fewer than 7: the median needs a few.
      const int64_t scaled = static_cast<int64_t>(o.iters) * (16 << 20) / std::max<int64_t>(bytes, 1);
      const int iters = static_cast<int>(std::clamp<int64_t>(scaled, std::min(o.iters, 7), o.iters));
      // Each call timed alone between barriers; per call the slowest rank's time (as nccl-tests
      // reports), then the median over calls: one descheduled call on a shared machine does not
      // move the figure.
      Tensor times = dev.empty({iters}, DType::f32, MemoryCategory::workspace, "bench times");
      std::vector<float> mine(static_cast<size_t>(iters));
      for (int i = 0; i < iters; ++i) {
        pg.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        run_once(pg, op, redop, b);
        mine[static_cast<size_t>(i)] = std::chrono::duration<float>(std::chrono::steady_clock::now() - t0).count();
      }
      dev.upload({"bench"}, times, mine.data());
      pg.all_reduce(times, ReduceOp::max);
      dev.download({"bench"}, mine.data(), times);
      std::sort(mine.begin(), mine.end());
      seconds = mine[mine.size() / 2];
      std::vector<float> v(1);
      // Correctness after timing: fresh inputs, one call, compare with the closed form.
      prepare(dev, op, b, pg.rank(), n);
      if (op == Collective::all_reduce || op == Collective::reduce) fill_inputs(dev, b.out, -1);
      run_once(pg, op, redop, b);
      v[0] = static_cast<float>(count_wrong(dev, pg, op, redop, b));
      dev.upload({"bench"}, scratch, v.data());
      pg.all_reduce(scratch, ReduceOp::sum);
      dev.download({"bench"}, v.data(), scratch);
      row.wrong = static_cast<int64_t>(v[0]);
    }
    row.time_us = seconds * 1e6;
    row.algbw = seconds > 0 ? static_cast<double>(row.bytes) / seconds * 1e-9 : 0;
    row.busbw = row.algbw * busbw_factor(op, n);
    rows.push_back(row);
    if (bytes == 0) break;
  }
  return rows;
}

// Aggregate memcpy bandwidth of this machine (bytes copied per second, all cores copying at once).
double measure_memcpy_Bps(int64_t bytes, int threads) {
  bytes = std::max<int64_t>(bytes, 64 << 20);  // beyond every cache: DRAM bandwidth
  // Allocated as tensors are (CpuExecutor: 2 MiB aligned, huge pages offered), so the bound and
  // the collectives see the same kind of memory.
  CpuExecutor host;
  std::vector<void*> src(static_cast<size_t>(threads)), dst(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    src[t] = host.allocate(bytes);
    dst[t] = host.allocate(bytes);
    std::memset(src[t], 1, static_cast<size_t>(bytes));
    std::memset(dst[t], 2, static_cast<size_t>(bytes));
  }
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool =
        start_threads(threads, [&](int t) { std::memcpy(dst[t], src[t], static_cast<size_t>(bytes)); }, "--ranks");
    for (auto& th : pool) th.join();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (int t = 0; t < threads; ++t) {
    host.deallocate(src[t]);
    host.deallocate(dst[t]);
  }
  return static_cast<double>(bytes) * threads / best;
}

// The least memory traffic (in bytes copied: (reads + writes) / 2) any shared-memory
// implementation needs: every input read once, every output written once.
double least_copy_bytes(Collective op, double S, int n) {
  switch (op) {
    case Collective::all_reduce: return n * S;                  // n inputs of S read, n outputs of S written
    case Collective::reduce_scatter: return (n + 1) * S / 2;    // n inputs of S read, n outputs of S/n written
    case Collective::all_gather: return (n + 1) * S / 2;        // n inputs of S/n read, n outputs of S written
    case Collective::broadcast: return n * S / 2;               // S read, n−1 copies of S written
    case Collective::reduce: return (n + 1) * S / 2;            // n inputs read, one output written
    default: return S;                                          // scatter, gather, send: S crosses once
  }
}

std::string human_bytes(int64_t b) {
  char buf[32];
  if (b >= (1 << 30) && b % (1 << 30) == 0) std::snprintf(buf, sizeof buf, "%lldG", static_cast<long long>(b >> 30));
  else if (b >= (1 << 20) && b % (1 << 20) == 0) std::snprintf(buf, sizeof buf, "%lldM", static_cast<long long>(b >> 20));
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%lldK", static_cast<long long>(b >> 10));
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(b));
  return buf;
}

// Open MPI's run on the same sizes and ranks: this program again, under mpirun, with --comm mpi.
std::map<int64_t, double> run_mpi_peer(const BenchCommOptions& o) {
  char self[4096] = {0};
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) throw Error("bench", "cannot find this executable to launch the MPI peer run");
  const std::string out = (std::filesystem::temp_directory_path() / ("scalelab-mpi-peer-" + std::to_string(::getpid()) + ".json")).string();
  std::ostringstream cmd;
  cmd << "mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -np " << o.ranks << " '" << self
      << "' bench comm --comm mpi --ranks " << o.ranks << " --op " << o.op << " --redop " << o.redop << " --dtype "
      << o.dtype << " --min-bytes " << o.min_bytes << " --max-bytes " << o.max_bytes << " --iters " << o.iters
      << " --warmup " << o.warmup << " --quiet --json '" << out << "'";
  std::fprintf(stderr, "# --vs mpi: %s\n", cmd.str().c_str());
  const int status = std::system(cmd.str().c_str());
  std::map<int64_t, double> peer;
  std::ifstream in(out);
  if (status != 0 || !in)
    throw Error("bench", "the Open MPI peer run failed (exit " + std::to_string(status) +
                             ") — check `mpirun` works: apt-get install openmpi-bin, or drop --vs mpi");
  json j = json::parse(in);
  for (const json& r : j["rows"]) peer[r["bytes"].get<int64_t>()] = r["busbw"].get<double>();
  std::filesystem::remove(out);
  return peer;
}

// PyTorch's run on the same sizes and ranks: torch.distributed over gloo, N processes on localhost.
std::map<int64_t, double> run_gloo_peer(const BenchCommOptions& o) {
  std::ostringstream args;
  args << "--ranks " << o.ranks << " --op " << o.op << " --dtype " << o.dtype << " --min-bytes " << o.min_bytes
       << " --max-bytes " << o.max_bytes << " --iters " << o.iters << " --warmup " << o.warmup;
  const json j = run_python_peer("gloo_collective.py", args.str(), "--vs gloo");
  std::map<int64_t, double> peer;
  for (const json& r : j["rows"])
    peer[r["bytes"].get<int64_t>()] = r["busbw"].get<double>();
  return peer;
}

// `link_Bps`: sim, the profile's device↔device bandwidth each way (0: not a sim run).
void print_and_save(const BenchCommOptions& o, std::vector<Row>& rows, double memcpy_Bps, bool simulated,
                    const std::string& hw, double link_Bps = 0) {
  const Collective op = parse_collective(o.op);
  const int n = o.ranks;
  std::map<int64_t, double> peer;
  if (o.vs == "mpi") peer = run_mpi_peer(o);
  if (o.vs == "gloo") peer = run_gloo_peer(o);
  for (Row& r : rows) {
    if (memcpy_Bps > 0) {
      const double t = least_copy_bytes(op, static_cast<double>(r.bytes), n) / memcpy_Bps;
      r.bound_busbw = t > 0 ? static_cast<double>(r.bytes) / t * busbw_factor(op, n) * 1e-9 : 0;
    }
    if (peer.count(r.bytes)) r.peer_busbw = peer[r.bytes];
  }
  if (!o.quiet) {
    std::printf("# bench comm: %s over %d ranks, backend %s (%s)%s, %s, redop %s\n", o.op.c_str(), n, o.comm.c_str(),
                o.algorithm.c_str(),
                simulated ? (" on sim (" + hw + "): modelled times").c_str() : "", o.dtype.c_str(), o.redop.c_str());
    std::printf("# algbw = size / time; busbw = algbw × %s (nccl-tests' factor for %s)\n",
                op == Collective::all_reduce ? "2(n-1)/n"
                : op == Collective::all_gather || op == Collective::reduce_scatter ? "(n-1)/n"
                                                                                    : "1",
                o.op.c_str());
    if (memcpy_Bps > 0)
      std::printf("# bound: busbw if the least memory traffic any shared-memory %s needs (all_reduce: n·size bytes "
                  "copied) ran at the memcpy bandwidth measured now, %.2f GB/s (all cores, beyond the caches: "
                  "sizes that fit in cache can beat it)\n",
                  o.op.c_str(), memcpy_Bps * 1e-9);
    std::printf("%12s %12s %6s %6s %12s %9s %9s %7s", "size", "count", "type", "redop", "time(us)", "algbw", "busbw",
                "#wrong");
    if (memcpy_Bps > 0) std::printf(" %9s %6s", "bound", "%bound");
    if (!peer.empty()) std::printf(" %9s %6s", o.vs == "gloo" ? "pytorch" : "mpi", "ratio");
    if (simulated) std::printf("  algorithm");
    std::printf("\n");
    for (const Row& r : rows) {
      std::printf("%12s %12lld %6s %6s %12.2f %9.3f %9.3f %7s", human_bytes(r.bytes).c_str(), static_cast<long long>(r.count),
                  o.dtype.c_str(), o.redop.c_str(), r.time_us, r.algbw, r.busbw,
                  r.wrong < 0 ? "n/a" : std::to_string(r.wrong).c_str());
      if (memcpy_Bps > 0) std::printf(" %9.3f %5.0f%%", r.bound_busbw, r.bound_busbw > 0 ? 100 * r.busbw / r.bound_busbw : 0.0);
      if (!peer.empty()) std::printf(" %9.3f %6.2f", r.peer_busbw, r.peer_busbw > 0 ? r.busbw / r.peer_busbw : 0.0);
      if (simulated) std::printf("  %s%s%s", r.algorithm.c_str(), r.protocol.empty() ? "" : "/", r.protocol.c_str());
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  if (!o.json_path.empty()) {
    json out{{"op", o.op}, {"comm", o.comm}, {"ranks", n}, {"dtype", o.dtype}, {"redop", o.redop},
             {"simulated", simulated}, {"memcpy_GBps", memcpy_Bps * 1e-9}, {"rows", json::array()}};
    if (simulated) {
      out["hw"] = hw;
      out["link_GBps"] = link_Bps * 1e-9;
    }
    for (const Row& r : rows)
      out["rows"].push_back({{"op", o.op}, {"bytes", r.bytes}, {"count", r.count}, {"time_us", r.time_us},
                             {"algbw", r.algbw}, {"busbw", r.busbw}, {"wrong", r.wrong < 0 ? json(nullptr) : json(r.wrong)},
                             {"bound_busbw", memcpy_Bps > 0 ? json(r.bound_busbw) : json(nullptr)},
                             {"peer_busbw", peer.empty() ? json(nullptr) : json(r.peer_busbw)}});
    if (simulated)
      for (size_t i = 0; i < rows.size(); ++i) {
        out["rows"][i]["algorithm"] = rows[i].algorithm;
        out["rows"][i]["protocol"] = rows[i].protocol;
      }
    write_file_atomically(o.json_path, out.dump(2) + "\n", "bench");
  }
}

// Every rank of the host backends is a thread (shm: a process) with buffers of its own: past this
// many, a run measures the scheduler rather than the collective, and the buffers alone can exhaust
// the host (100000 ranks of a 64 MB all-gather).
constexpr int kMaxHostRanks = 1024;
// Sizes double from --min-bytes; past 16 GiB a buffer is larger than any device's memory.
constexpr int64_t kMaxBenchBytes = int64_t{16} << 30;

void validate(const BenchCommOptions& o) {
  if (o.ranks < 1 && o.comm != "mpi") throw UsageError("bench", "--ranks must be ≥ 1, got " + std::to_string(o.ranks));
  if (o.ranks > kMaxHostRanks && (o.comm == "threads" || o.comm == "shm"))
    throw UsageError("bench", "--ranks " + std::to_string(o.ranks) + ": at most " + std::to_string(kMaxHostRanks) +
                                  " ranks on --comm " + o.comm + " (each rank is a " +
                                  (o.comm == "shm" ? "process" : "thread") +
                                  " with buffers of its own; past that the host runs out of memory) — pass --ranks ≤ " +
                                  std::to_string(kMaxHostRanks));
  if (o.max_bytes > kMaxBenchBytes)
    throw UsageError("bench", "--max-bytes " + std::to_string(o.max_bytes) + " is more than 16G — pass --max-bytes ≤ 16G");
  if (!o.hw.empty() && o.device != "sim")
    throw UsageError("bench", "--hw models times on simulated devices only (it would be ignored) — add --device sim, or drop --hw");
  if (o.min_bytes < 0 || o.max_bytes < o.min_bytes)
    throw UsageError("bench", "--min-bytes must be ≥ 0 and ≤ --max-bytes, got " + std::to_string(o.min_bytes) + " and " +
                                  std::to_string(o.max_bytes));
  if (o.min_bytes == 0 && o.max_bytes > 0)
    throw UsageError("bench", "--min-bytes 0 measures only the empty call; pass --min-bytes ≥ 1 to sweep sizes");
  const Collective op = parse_collective(o.op);
  if ((op == Collective::send || op == Collective::recv) && o.ranks < 2)
    throw UsageError("bench", "send/recv needs --ranks ≥ 2");
  parse_reduce_op(o.redop);
  if (parse_dtype(o.dtype) == DType::i32) throw UsageError("bench", "--dtype must be f32, f16 or bf16");
  // The smallest size that moves one element per rank: below it a call moves 0 bytes and the row
  // measures nothing.
  const bool split = op == Collective::all_gather || op == Collective::reduce_scatter || op == Collective::scatter ||
                     op == Collective::gather;
  const int64_t smallest = dtype_size(parse_dtype(o.dtype)) * (split ? std::max(1, o.ranks) : 1);
  if (op != Collective::barrier && o.min_bytes > 0 && o.min_bytes < smallest)
    throw UsageError("bench", "--min-bytes " + std::to_string(o.min_bytes) + " is less than one " + o.dtype +
                                  " element" + (split ? " per rank" : "") + ", so its calls would move 0 bytes — pass --min-bytes ≥ " +
                                  std::to_string(smallest));
  if (o.vs != "" && o.vs != "mpi" && o.vs != "gloo")
    throw UsageError("bench", "--vs '" + o.vs + "' is unknown — the peer is mpi or gloo");
  // What torch.distributed's gloo backend has on the CPU, summed as ours sums.
  if (o.vs == "gloo" && ((op != Collective::all_reduce && op != Collective::broadcast && op != Collective::all_gather) ||
                         o.redop != "sum"))
    throw UsageError("bench", "--vs gloo times all_reduce, broadcast and all_gather with --redop sum — pass one of those, or drop --vs gloo");
  if (o.iters < 1 || o.warmup < 0) throw UsageError("bench", "--iters must be ≥ 1 and --warmup ≥ 0");
  if (o.timeout_ms < 1) throw UsageError("bench", "--comm-timeout must be ≥ 1 ms");
  parse_comm_algorithm(o.algorithm);
}


// The ranks' failures in the order they happened: the first is the cause, the others are usually
// ranks timing out waiting for it. record() is called while a rank's exception is handled.
class RankFailures {
 public:
  explicit RankFailures(int ranks) : text_(static_cast<size_t>(ranks)), order_(static_cast<size_t>(ranks), -1) {}
  void record(int rank) {
    std::string text;
    try {
      throw;
    } catch (const std::bad_alloc&) {
      text = "[memory] out of host memory (std::bad_alloc) — lower --ranks or --max-bytes, or raise the "
             "address-space limit (ulimit -v)";
    } catch (const std::exception& e) {
      text = e.what();
    } catch (...) {
      text = "an exception that is not a std::exception";
    }
    text_[static_cast<size_t>(rank)] = text;
    order_[static_cast<size_t>(rank)] = count_++;
  }
  void throw_first() const {
    for (size_t r = 0; r < text_.size(); ++r)
      if (order_[r] == 0) throw Error("bench", text_[r]);
  }

 private:
  std::vector<std::string> text_;
  std::vector<int> order_;
  std::atomic<int> count_{0};
};

}  // namespace

int bench_comm(const BenchCommOptions& options) {
  BenchCommOptions o = options;
  // mpi takes its ranks from mpirun; nccl one per GPU; the host backends 4.
  if (o.ranks == 0 && o.comm == "nccl") o.ranks = std::max(1, cuda_device_count());
  if (o.ranks == 0 && o.comm != "mpi") o.ranks = 4;
  validate(o);
  if (o.vs == "gloo") check_python_peer("gloo_collective.py", "--vs gloo");
  if (!o.json_path.empty()) check_output_path(o.json_path, "bench");  // before the sweep, not after
  check_distinct_paths({{"--json", o.json_path, true}, {"--hw", o.hw.empty() ? "" : profile_file(o.hw), false}}, "bench");
  if (o.device == "cpu" && (o.comm == "threads" || o.comm == "shm")) {
    // Every rank holds an input and an output of up to --max-bytes in host memory (scatter and
    // gather: rank 0 the whole buffer); more than the host has ends in std::bad_alloc or the OOM killer.
    const double need = 2.0 * static_cast<double>(o.max_bytes) * o.ranks;
    const double host = host_memory().bytes;
    if (host > 0 && need > host) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "--ranks %d × --max-bytes %lld: about %.3g GB of buffers, this host has %.3g GB",
                    o.ranks, static_cast<long long>(o.max_bytes), need / 1e9, host / 1e9);
      throw UsageError("bench", std::string(buf) + " — pass fewer --ranks or a smaller --max-bytes, or model it: --device sim --hw PROFILE");
    }
  }
  const bool sim = o.device == "sim";
  if (!sim && o.device != "cpu" && o.device != "cuda")
    throw UsageError("bench", "--device must be cpu, cuda (--comm threads or nccl) or sim, got '" + o.device + "'");
  if (sim && o.hw.empty()) throw UsageError("bench", "--device sim needs --hw PROFILE (see `scalelab profiles`)");
  CommOptions copt;
  copt.timeout = std::chrono::milliseconds(o.timeout_ms);
  copt.algorithm = parse_comm_algorithm(o.algorithm);
  DeviceOptions dopt;
  const bool cuda = o.device == "cuda";
  // cuda with --comm threads: the ranks are cuda devices of this process (logical devices of one
  // GPU, or GPUs), their buffers in device memory; nccl makes its own devices below.
  if (cuda && o.comm != "threads" && o.comm != "nccl")
    throw UsageError("bench", "--device cuda with --comm " + o.comm + ": cuda ranks are threads of this process — use --comm threads or --comm nccl");
  dopt.kind = sim ? DeviceKind::sim : cuda ? DeviceKind::cuda : DeviceKind::cpu;
  if (sim) {
    dopt.profile = load_profile(o.hw);
    // Said here in bench's words: the devices' own message names train's --devices.
    if (o.ranks > dopt.profile.device_count())
      throw UsageError("bench", "--ranks " + std::to_string(o.ranks) + ": profile " + dopt.profile.name + " has " +
                                    std::to_string(dopt.profile.device_count()) + " devices — pass --ranks ≤ " +
                                    std::to_string(dopt.profile.device_count()) + ", or a larger profile (see `scalelab profiles`)");
    dopt.dry_run = true;  // modelled times need no numbers: any size, any number of ranks
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The bound is the best the machine does: measured before and after the ranks run, the larger
  // kept, so a noisy moment on a shared machine does not lower it.
  double memcpy_before = 0;
  auto memcpy_bound = [&](int ranks) {
    if (sim || cuda) return 0.0;  // the bound is the host's memcpy: nothing to do with device memory
    return std::max(memcpy_before, measure_memcpy_Bps(o.max_bytes, std::min(ranks, cores)));
  };
  if (!sim && !cuda && o.comm != "mpi" && o.comm != "nccl") memcpy_before = memcpy_bound(o.ranks);

  if (o.comm == "threads") {
    auto groups = make_threads_groups(o.ranks, copt);
    dopt.count = o.ranks;
    auto devices = make_devices(dopt);
    std::vector<std::vector<Row>> rows(static_cast<size_t>(o.ranks));
    RankFailures failures(o.ranks);
    std::vector<std::thread> threads = start_threads(o.ranks, [&](int r) {
      try {
        rows[r] = bench_rank(*groups[r], *devices[r], o);
      } catch (...) {
        failures.record(r);
      }
    }, "--ranks");
    for (auto& t : threads) t.join();
    failures.throw_first();
    const double bound = memcpy_bound(o.ranks);
    print_and_save(o, rows[0], bound, sim, dopt.profile.name, sim ? dopt.profile.intra_node.bandwidth_Bps : 0.0);
    return 0;
  }
  if (o.comm == "shm") {
    if (sim) throw UsageError("bench", "--comm shm runs real processes: use --comm threads for modelled times on sim");
    const std::string rows_file = (std::filesystem::temp_directory_path() / ("scalelab-shm-rows-" + std::to_string(::getpid()) + ".json")).string();
    launch_procs(o.ranks, parse_shm_sharing(o.shm_sharing), copt, [&](ProcessGroup& pg) {
      DeviceOptions one;
      auto devices = make_devices(one);
      auto rows = bench_rank(pg, *devices[0], o);
      if (pg.rank() != 0) return;
      json j = json::array();
      for (const Row& r : rows) j.push_back({r.bytes, r.count, r.time_us, r.algbw, r.busbw, r.wrong});
      write_file_atomically(rows_file, j.dump(), "bench");
    });
    std::ifstream in(rows_file);
    json j = json::parse(in);
    std::filesystem::remove(rows_file);
    std::vector<Row> rows;
    for (const json& a : j) {
      Row r;
      r.bytes = a[0];
      r.count = a[1];
      r.time_us = a[2];
      r.algbw = a[3];
      r.busbw = a[4];
      r.wrong = a[5];
      rows.push_back(r);
    }
    print_and_save(o, rows, memcpy_bound(o.ranks), false, "");
    return 0;
  }
  if (o.comm == "mpi") {
    if (!launched_by_mpirun())
      throw UsageError("bench", "--comm mpi runs one rank per process: launch it as `mpirun -np " +
                                    std::to_string(o.ranks) + " scalelab bench comm --comm mpi ...`");
    auto pg = make_mpi_group(copt);
    if (o.ranks != 0 && pg->size() != o.ranks)
      throw UsageError("bench", "--ranks " + std::to_string(o.ranks) + " but mpirun started " + std::to_string(pg->size()) +
                                    " ranks — pass the same number to both, or leave out --ranks");
    BenchCommOptions mine = o;
    mine.ranks = pg->size();
    dopt.count = 1;
    auto devices = make_devices(dopt);
    auto rows = bench_rank(*pg, *devices[0], mine);
    if (pg->rank() == 0) {
      mine.vs.clear();  // the peer of an MPI run is itself
      print_and_save(mine, rows, mine.quiet ? 0.0 : memcpy_bound(mine.ranks), sim, dopt.profile.name);
    }
    return 0;
  }
  if (o.comm == "nccl") {
    // One thread per GPU, the NCCL unique id passed through a file; the same rank code as above.
    const int gpus = cuda_device_count();
    if (gpus < o.ranks)
      throw UsageError("bench", "--comm nccl with --ranks " + std::to_string(o.ranks) + " needs as many CUDA devices, " +
                                    std::to_string(gpus) + " found — pass --ranks ≤ " + std::to_string(gpus));
    DeviceOptions gpu;
    gpu.kind = DeviceKind::cuda;
    gpu.count = o.ranks;
    auto devices = make_devices(gpu);
    NcclBootstrap boot;
    boot.unique_id_file = (std::filesystem::temp_directory_path() / ("scalelab-nccl-id-" + std::to_string(::getpid()))).string();
    std::vector<std::vector<Row>> rows(static_cast<size_t>(o.ranks));
    RankFailures failures(o.ranks);
    std::vector<std::thread> threads = start_threads(o.ranks, [&](int r) {
      try {
        auto pg = make_nccl_group(r, o.ranks, r, boot, copt);
        rows[r] = bench_rank(*pg, *devices[r], o);
      } catch (...) {
        failures.record(r);
      }
    }, "--ranks");
    for (auto& t : threads) t.join();
    std::filesystem::remove(boot.unique_id_file);
    failures.throw_first();
    print_and_save(o, rows[0], 0.0, false, "");
    return 0;
  }
  throw UsageError("bench", "--comm '" + o.comm + "' is unknown — use threads, shm, mpi or nccl");
}

}  // namespace scalelab
