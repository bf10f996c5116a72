// `scalelab calibrate`: measures this machine as the cpu device uses it — GEMMs over a grid of
// shapes (a table and an efficiency curve), element-wise ops (curves by size and kind), host and
// device-to-device copies (curves by size), all of them hot and cold, the cache in effect, and the
// threads (and shm) all-reduce's α and β — and writes a hardware profile that
// `--device sim --hw FILE` prices runs with. Every op is timed through the same Device calls a
// training step makes, so the per-call costs a step pays (bookkeeping, the event bus) are in the figures.
// The probes, what each measures and the profile fields it writes: calibration/probes.cpp
// (`scalelab calibrate --list`); keep that table in step with what run_calibrate and calibrate_cuda do.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "calibration/calibration.h"
#include "core/device/device.h"
#include "core/device/host_cores.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/trace/events.h"
#include "run/train.h"

namespace scalelab {

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t.empty() ? 0.0 : t[t.size() / 2];
}

namespace {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

using OpMaker = std::function<std::function<void()>(Device&)>;

// Times of calls of `op`, repeated for about `budget_s` (at least `min_calls`, after 2 untimed).
std::vector<double> call_times(const std::function<void()>& op, double budget_s, EventBus& bus, size_t min_calls = 5) {
  op();
  op();
  std::vector<double> t;
  const auto start = clock_type::now();
  while (t.size() < min_calls ||
         (std::chrono::duration<double>(clock_type::now() - start).count() < budget_s && t.size() < 10000)) {
    const auto t0 = clock_type::now();
    op();
    t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    if (bus.events().size() > 4096) bus.clear();  // the bus is there as in training; its store is not
  }
  return t;
}

double time_call(const std::function<void()>& op, double budget_s, EventBus& bus) {
  return median(call_times(op, budget_s, bus));
}

// As call_times, but with the operands in the shared cache, not the cores' own: the op is made
// `copies` times over (each with its own tensors) and the calls go round them, so between two
// calls on the same operands the others' bytes have passed through the cores' caches. A run
// touches a layer's weights once a step, with other layers' data between.
std::vector<double> warm_call_times(const OpMaker& make, Device& dev, int64_t op_bytes, double budget_s, EventBus& bus) {
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  const double between = std::max(16.0 * (1 << 20), 2.0 * cores * static_cast<double>(std::max(0L, l2)));
  const int copies = static_cast<int>(std::clamp(std::ceil(between / std::max<double>(1.0, static_cast<double>(op_bytes))), 1.0, 64.0));
  std::vector<std::function<void()>> ops;
  for (int i = 0; i < copies; ++i) ops.push_back(make(dev));
  size_t next = 0;
  return call_times([&] { ops[next++ % ops.size()](); }, budget_s, bus, 2);
}

// Whatever the host's caches hold, pushed out: a buffer larger than the last-level cache, one
// write per cache line. A call timed after it reads its data from DRAM, as a step's ops do when the
// bytes the devices move in a step outgrow the cache.
class CacheFlusher {
 public:
  explicit CacheFlusher(size_t bytes) : junk_(bytes / sizeof(float), 1.0f) {}
  void operator()() {
    for (size_t i = 0; i < junk_.size(); i += 16) junk_[i] += 1.0f;
  }

 private:
  std::vector<float> junk_;
};

// The times of `calls` calls, each after a flush.
std::vector<double> cold_call_times(const std::function<void()>& op, CacheFlusher& flush, int calls, EventBus& bus) {
  op();
  std::vector<double> t;
  for (int i = 0; i < calls; ++i) {
    flush();
    const auto t0 = clock_type::now();
    op();
    t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    if (bus.events().size() > 4096) bus.clear();
  }
  return t;
}

// The median of `calls` calls, each after a flush.
double time_call_cold(const std::function<void()>& op, CacheFlusher& flush, int calls, EventBus& bus) {
  return median(cold_call_times(op, flush, calls, bus));
}

// The cache probes' op: y += x over their 8 MiB vectors, timed.
double timed_axpy(std::vector<float>& y, const std::vector<float>& x) {
  const auto t0 = clock_type::now();
  for (size_t i = 0; i < x.size(); ++i) y[i] += 1e-3f * x[i];
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Touches every cache line of the first `floats` of `other`, `times` over: the memory that passes
// through the cache between two of the probe's ops.
void touch_lines(std::vector<float>& other, size_t floats, int times = 1) {
  for (int k = 0; k < times; ++k)
    for (size_t i = 0; i < floats; i += 16) other[i] += 1.0f;
}

// The last-level cache, in effect (a VM's share of a socket's is less than lscpu says): y += x
// over 8 MiB vectors, timed after touching S MiB of other memory. Its time climbs from the hot
// one to DRAM's as S grows; the model's cold share clamp(moved / C − 1, 0, 1) is ½ at moved = 1.5 C,
// so C = (S + 16 MiB) / 1.5 at the S where the time is halfway (linear between the points). Each
// sweep is appended to `sweeps` with the C it gives.
double measure_host_cache(json& sweeps) {
  constexpr size_t kMiB = size_t{1} << 20;
  std::vector<float> x(2 * kMiB, 1.0f), y(2 * kMiB, 2.0f);  // 8 MiB each
  // To 1 GiB: here a copy's data were still partly cached after 448 MiB of other memory (16 MiB
  // at 10.7 GB/s; 7.0–7.3 after 512 MiB … 2 GiB), so the sweep's end is DRAM's time.
  const std::vector<size_t> sweep = {0, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
  std::vector<float> other(sweep.back() * kMiB / sizeof(float), 1.0f);
  std::vector<double> times;
  json rows = json::array();
  for (size_t mib : sweep) {
    std::vector<double> t;
    for (int rep = 0; rep < 7; ++rep) {
      touch_lines(other, mib * kMiB / sizeof(float));
      t.push_back(timed_axpy(y, x));
    }
    std::sort(t.begin(), t.end());
    times.push_back(t[t.size() / 2]);
    rows.push_back({{"touched_bytes", mib * kMiB}, {"seconds", times.back()}});
  }
  const double in_effect = [&] {
    const double hot = times.front(), cold = times.back();
    if (!(cold > hot * 1.2)) return 0.0;  // no cliff measured: no cache modelled
    for (size_t i = 1; i < sweep.size(); ++i) {
      const double share = (times[i] - hot) / (cold - hot);
      if (share < 0.5) continue;
      const double before = (times[i - 1] - hot) / (cold - hot);
      const double at = static_cast<double>(sweep[i - 1]) +
                        (0.5 - before) / std::max(share - before, 1e-9) * static_cast<double>(sweep[i] - sweep[i - 1]);
      return (at + 16.0) * static_cast<double>(kMiB) / 1.5;
    }
    return 0.0;
  }();
  sweeps.push_back({{"bytes_in_effect", in_effect}, {"rows", rows}});
  return in_effect;
}

// How the cache treats a byte touched again within a step (HostCalibration::host_cache_retouch):
// y += x on 8 MiB after touching D bytes of other memory once, the same D bytes four times, and 4D
// bytes once, the three interleaved so a slow moment of the machine falls on all of them, for D =
// ¼, ½, ¾ and 1 × the cache in effect. A cache that keeps what was used last (LRU) leaves y and x
// as warm after D four times as after D once: only distinct bytes push them out (0). One that every
// byte moved pushes through leaves them as cold as after 4D once (1). The estimate is the share of
// the way, summed over the D's: Σ (four times − once) / Σ (4D − once), each a cold share between
// the hot time (y += x again and again) and DRAM's (after 1 GiB). Here (AMD EPYC VM) D = 24 MiB
// four times left y += x 0.37–0.46 of the way to DRAM's time, once 0.34–0.47, 96 MiB once 0.85–0.89.
// Returns −1 when the D's could not tell the two apart (4D no colder than D).
double measure_retouch(double cache_bytes, json& sweeps) {
  constexpr size_t kMiB = size_t{1} << 20;
  std::vector<float> x(2 * kMiB, 1.0f), y(2 * kMiB, 2.0f);  // 8 MiB each, as the sweeps
  const size_t largest = std::max(static_cast<size_t>(4 * cache_bytes), 1024 * kMiB) / sizeof(float);
  std::vector<float> other(largest, 1.0f);
  const auto axpy = [&] { return timed_axpy(y, x); };
  const auto touch = [&](size_t floats, int times) { touch_lines(other, floats, times); };
  // Hot: back to back, so y and x have been read many times (one pass after DRAM is not hot yet
  // here: 340 µs against 210). DRAM: after 1 GiB, the sweeps' end.
  constexpr int reps = 9;
  std::vector<double> hot, dram;
  for (int rep = 0; rep < reps; ++rep) {
    axpy();
    hot.push_back(axpy());
  }
  for (int rep = 0; rep < reps; ++rep) {
    axpy();
    touch(largest, 1);
    dram.push_back(axpy());
  }
  const double t_hot = median(hot), t_dram = median(dram);
  if (!(t_dram > 1.2 * t_hot)) {  // no cliff this time: nothing to measure the touches against
    sweeps.push_back({{"seconds_hot", t_hot}, {"seconds_dram", t_dram}, {"rows", json::array()}, {"retouch", -1.0}});
    return -1.0;
  }
  const auto share = [&](const std::vector<double>& t) { return (median(t) - t_hot) / (t_dram - t_hot); };
  json rows = json::array();
  double again_minus_once = 0, more_minus_once = 0;
  for (double part : {0.25, 0.5, 0.75, 1.0}) {
    const size_t floats = static_cast<size_t>(part * cache_bytes) / sizeof(float);
    std::vector<double> once, again, four_times_as_much;
    for (int rep = 0; rep < reps; ++rep) {
      axpy();
      touch(floats, 1);
      once.push_back(axpy());
      axpy();
      touch(floats, 4);
      again.push_back(axpy());
      axpy();
      touch(4 * floats, 1);
      four_times_as_much.push_back(axpy());
    }
    const double s_once = share(once), s_again = share(again), s_more = share(four_times_as_much);
    rows.push_back({{"touched_bytes", floats * sizeof(float)}, {"cold_share_once", s_once},
                    {"cold_share_four_times", s_again}, {"cold_share_four_times_as_much", s_more}});
    again_minus_once += s_again - s_once;
    more_minus_once += s_more - s_once;
  }
  const double retouch = more_minus_once > 0.25 ? std::clamp(again_minus_once / more_minus_once, 0.0, 1.0) : -1.0;
  sweeps.push_back({{"seconds_hot", t_hot}, {"seconds_dram", t_dram}, {"rows", rows}, {"retouch", retouch}});
  return retouch;
}

// α and B of t = a·α + b·S/B that fit the measurements best in relative terms (least squares of
// log t over a log grid): small sizes pin α, large ones B, and neither swamps the other.
struct AlphaBeta {
  double alpha_s = 0, bandwidth_Bps = 0, rms_log_error = 0;
};
AlphaBeta fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds, double alpha_count,
                         double bytes_factor) {
  AlphaBeta best;
  double best_err = INFINITY;
  for (int i = 0; i <= 240; ++i) {
    const double alpha = 1e-9 * std::pow(10.0, i / 40.0);  // 1 ns … 1 ms
    for (int j = 0; j <= 240; ++j) {
      const double bw = 1e7 * std::pow(10.0, j / 40.0);  // 10 MB/s … 10 TB/s
      double err = 0;
      for (size_t s = 0; s < bytes.size(); ++s) {
        const double d = std::log((alpha_count * alpha + bytes_factor * bytes[s] / bw) / seconds[s]);
        err += d * d;
      }
      if (err < best_err) {
        best_err = err;
        best = {alpha, bw, std::sqrt(err / static_cast<double>(bytes.size()))};
      }
    }
  }
  return best;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "cpu";
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "this-machine";
  std::string s = buf;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
  return s;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

// On a terminal one line, redrawn at each measurement; in a log a plain line every 10 %.
class ProgressLine {
 public:
  explicit ProgressLine(int total) : total_(total), tty_(::isatty(STDERR_FILENO) != 0) {}
  void step(const std::string& what) {
    ++done_;
    const int pct = 100 * done_ / std::max(1, total_);
    if (tty_) {
      std::fprintf(stderr, "\r[calibrate] %3d%%  %-48s", pct, what.c_str());
    } else if (pct / 10 > printed_ / 10) {
      std::fprintf(stderr, "[calibrate] %3d%%  %s\n", pct, what.c_str());
      printed_ = pct;
    }
    std::fflush(stderr);
  }
  void end() {
    if (tty_) std::fprintf(stderr, "\n");
  }

 private:
  int total_, done_ = 0, printed_ = 0;
  bool tty_;
};

// The cold share by the bytes moved since, point by point from the sweeps of measure_host_cache:
// at each point, the median over the sweeps of how far y += x's time has gone from its hot time
// (nothing touched) to its DRAM time (the most touched), never falling; the bytes moved are the
// other memory touched plus y and x's own 16 MiB.
json cold_share_curve(const json& sweeps) {
  std::vector<std::vector<double>> shares;
  std::vector<double> moved;
  for (const json& sweep : sweeps) {
    const json& rows = sweep["rows"];
    const double hot = rows.front()["seconds"].get<double>(), cold = rows.back()["seconds"].get<double>();
    shares.resize(rows.size());
    moved.clear();
    for (size_t i = 0; i < rows.size(); ++i) {
      shares[i].push_back((rows[i]["seconds"].get<double>() - hot) / (cold - hot));
      moved.push_back(rows[i]["touched_bytes"].get<double>() + 16.0 * (1 << 20));
    }
  }
  json bytes = json::array(), share = json::array();
  double so_far = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    if (i > 0) so_far = std::clamp(std::max(so_far, median(shares[i])), 0.0, 1.0);
    bytes.push_back(moved[i]);
    share.push_back(so_far);
  }
  return {{"bytes", bytes}, {"cold_share", share}};
}

// Makes an op on a device (its tensors allocated there) and returns the call to time or repeat.

struct GemmShape {
  bool ta, tb;
  int64_t m, n, k;
  int64_t operand_bytes() const { return 4 * (m * k + k * n + m * n); }
};

// Makes one GEMM of shape g on a device (its operands filled), as calibrate times it: writing C
// (beta = 0), or adding to it (beta = 1) as a gradient accumulates.
// `dtype`: A, B and C's (f32; on cuda also bf16 and f16, the tensor cores' GEMMs).
OpMaker gemm_op(GemmShape g, bool accumulate = false, DType dtype = DType::f32) {
  return [g, accumulate, dtype](Device& d) -> std::function<void()> {
    Tensor a = d.empty({g.ta ? g.k : g.m, g.ta ? g.m : g.k}, dtype, MemoryCategory::workspace, "A");
    Tensor b = d.empty({g.tb ? g.n : g.k, g.tb ? g.k : g.n}, dtype, MemoryCategory::workspace, "B");
    Tensor c = d.empty({g.m, g.n}, dtype, MemoryCategory::workspace, "C");
    d.fill({"calibrate"}, a, 0.5f);
    d.fill({"calibrate"}, b, 0.25f);
    const float beta = accumulate ? 1.0f : 0.0f;
    return [&d, g, a, b, c, beta] { d.gemm({"calibrate"}, g.ta, g.tb, a, b, c, beta); };
  };
}

// The GEMMs an MLP step makes — forward x·Wᵀ, dW = dyᵀ·x, dx = dy·W — for batches `rows` and
// layer widths `widths`.
std::vector<GemmShape> gemm_grid(const std::vector<int64_t>& rows, const std::vector<int64_t>& widths) {
  std::vector<GemmShape> g;
  for (int64_t b : rows)
    for (int64_t w : widths) {
      g.push_back({false, true, b, w, w});
      g.push_back({true, false, w, w, b});
      g.push_back({false, false, b, w, w});
    }
  return g;
}

// The curve from the measured shapes: sizes grouped in factors of 2 of m·n·k, the median share of
// peak of each group at the group's geometric mean size.
SizeCurve curve_from(const std::vector<std::pair<double, double>>& mnk_efficiency) {
  std::map<int, std::vector<std::pair<double, double>>> groups;
  for (const auto& [mnk, eff] : mnk_efficiency) groups[static_cast<int>(std::lround(std::log2(mnk)))].push_back({mnk, eff});
  SizeCurve c;
  for (auto& [bucket, v] : groups) {
    double log_sum = 0;
    std::vector<double> e;
    for (const auto& [mnk, eff] : v) {
      log_sum += std::log(mnk);
      e.push_back(eff);
    }
    std::sort(e.begin(), e.end());
    c.sizes.push_back(std::exp(log_sum / static_cast<double>(v.size())));
    c.efficiency.push_back(std::clamp(e[e.size() / 2], 1e-6, 1.0));
  }
  return c;
}

// The gap when the host's cores pass from one device's thread to another's: `devices` threads
// each ask for turns for a layer's forward — a 32×256×256 GEMM, then its bias+ReLU — again and
// again (HostCores serves them in turn, as it serves a run's devices); the gap between two ops of
// different devices. Real ops, not trivial ones: the waiting threads are then asleep, and
// OpenBLAS's helpers spinning, as in a run (with ops of 0.2 µs the gap came out 26 µs here). The
// GEMM and the element-wise op both, as a step passes the cores after either: timed after GEMMs
// alone the mean came out 14–19 µs, with the bias+ReLU 9.7–15.1 (nine calibrations), and a run of
// the tour's model's DDP or ZeRO steps left 11–14 between its devices' ops.
// And what a GEMM takes beyond its own time when its thread has just taken the cores from another:
// the same rounds run by one thread going round the devices, the GEMM's median against theirs.
struct TurnCosts {
  double handoff_s = 0;     // the mean gap when the cores pass to another thread
  double gemm_extra_s = 0;  // a GEMM after such a pass, against the same GEMM with no pass
};

TurnCosts measure_turn_costs(int devices, json& raw) {
  DeviceOptions o;
  o.count = devices;
  // One round: a layer's forward (a GEMM, then its bias+ReLU) 100 times on every device, either by
  // a thread of each, taking turns, or by one thread going round them — the same ops on the same
  // operands, the cores passing between threads or not.
  struct Round {
    double handoff_s;  // the mean gap where the turn passed to another thread (0 for one thread)
    double gemm_s;     // the median GEMM
  };
  auto round = [&](bool thread_each) {
    EventBus bus;
    o.bus = &bus;
    auto ds = make_devices(o);
    struct Layer {
      Tensor a, w, c, bias;
    };
    auto layer = [](Device& d) {
      Layer l{d.empty({32, 256}, DType::f32, MemoryCategory::workspace, "a"), d.empty({256, 256}, DType::f32, MemoryCategory::workspace, "w"),
              d.empty({32, 256}, DType::f32, MemoryCategory::workspace, "c"), d.empty({256}, DType::f32, MemoryCategory::workspace, "bias")};
      d.fill({"calibrate"}, l.a, 0.5f);
      d.fill({"calibrate"}, l.w, 0.25f);
      d.fill({"calibrate"}, l.bias, 0.0f);
      return l;
    };
    auto forward = [](Device& d, const Layer& l) {
      d.gemm({"calibrate"}, false, true, l.a, l.w, l.c);
      d.bias_act({"calibrate"}, l.c, l.bias, Activation::relu);
    };
    if (thread_each) {
      std::vector<std::thread> threads;
      for (auto& d : ds)
        threads.emplace_back([&d, &layer, &forward] {
          const Layer l = layer(*d);
          for (int i = 0; i < 100; ++i) forward(*d, l);
        });
      for (auto& t : threads) t.join();
    } else {
      std::vector<Layer> layers;
      for (auto& d : ds) layers.push_back(layer(*d));
      for (int i = 0; i < 100; ++i)
        for (size_t k = 0; k < ds.size(); ++k) forward(*ds[k], layers[k]);
    }
    std::vector<Event> ops;
    std::vector<double> gemms;
    for (const Event& e : bus.events())
      if (e.kind == "gemm" || e.kind == "bias_relu") ops.push_back(e);
    std::sort(ops.begin(), ops.end(), [](const Event& a, const Event& b) { return a.t_begin_ns < b.t_begin_ns; });
    // The mean gap, not the median: the gaps add up over a step, and they come in two kinds — a few
    // µs when the next thread is awake, tens when it must be woken. A gap over 1 ms is the
    // machine's (a thread descheduled), not the handoff's.
    double sum = 0;
    int counted = 0;
    for (size_t i = 1; i < ops.size(); ++i) {
      const double gap = 1e-9 * static_cast<double>(ops[i].t_begin_ns - ops[i - 1].t_end_ns);
      if (ops[i].thread != ops[i - 1].thread && gap >= 0 && gap < 1e-3) sum += gap, ++counted;
    }
    for (const Event& e : ops)
      if (e.kind == "gemm") gemms.push_back(1e-9 * static_cast<double>(e.t_end_ns - e.t_begin_ns));
    return Round{counted ? sum / counted : 0.0, median(gemms)};
  };
  // Which kind of gap dominates changes from one second to the next on a shared machine (a
  // round's mean, 4 … 29 µs here): the mean over 9 rounds; each round with threads taking turns
  // next to one without, so a slow second falls on both.
  std::vector<double> means, extras, gemm_turns, gemm_one_thread;
  for (int r = 0; r < 9; ++r) {
    const Round turns = round(true), one = round(false);
    means.push_back(turns.handoff_s);
    gemm_turns.push_back(turns.gemm_s);
    gemm_one_thread.push_back(one.gemm_s);
    extras.push_back(turns.gemm_s - one.gemm_s);
  }
  TurnCosts costs;
  for (double m : means) costs.handoff_s += m / static_cast<double>(means.size());
  costs.gemm_extra_s = std::max(0.0, median(extras));
  raw["turn_handoff"] = {{"devices", devices}, {"ops_per_device_per_round", 200}, {"round_mean_s", means}, {"mean_s", costs.handoff_s}};
  raw["turn_gemm_extra"] = {{"gemm", "32x256x256"}, {"gemm_median_s_threads_taking_turns", gemm_turns},
                            {"gemm_median_s_one_thread", gemm_one_thread}, {"extra_s", extras}, {"median_s", costs.gemm_extra_s}};
  return costs;
}

// A run's GEMMs leave OpenBLAS's helper threads spinning: they wait for more work (about 0.1 s)
// before they sleep, each on a core. The ranks' threads of a collective take no turns on the cores
// (core/device/clock.h), so in a run they have only the cores left. Measured with every core free,
// a 4-rank all-reduce of 16 MiB took 4.9 ms here, and 8.1 ms beside one spinning thread; the
// threads of a step's all-reduce ran one after another. While one of these lives, a small GEMM
// every 20 ms keeps the helpers as a training step leaves them.
class BlasHelpersSpinning {
 public:
  explicit BlasHelpersSpinning(Device& dev)
      : a_(dev.empty({256, 256}, DType::f32, MemoryCategory::workspace, "spin.a")),
        c_(dev.empty({256, 256}, DType::f32, MemoryCategory::workspace, "spin.c")) {
    dev.fill({"calibrate"}, a_, 0.5f);
    thread_ = std::thread([this, &dev] {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!stop_) {
        lock.unlock();
        try {
          dev.gemm({"calibrate"}, false, false, a_, a_, c_);
        } catch (const std::exception&) {
          return;  // the collectives are then timed with every core free
        }
        lock.lock();
        stopped_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stop_; });
      }
    });
  }
  ~BlasHelpersSpinning() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    stopped_.notify_all();
    thread_.join();
  }

 private:
  Tensor a_, c_;
  std::mutex mutex_;
  std::condition_variable stopped_;
  bool stop_ = false;
  std::thread thread_;
};

// `device`: the ranks' devices, cpu or cuda (then logical devices of this process, their buffers in
// device memory).
json measure_collective(const TimeCollective& time, const std::string& comm, const std::string& op, int ranks, int64_t max_bytes,
                        std::vector<double>& bytes, std::vector<double>& seconds, const std::string& device = "cpu") {
  if (!time) throw Error("calibrate", "internal: no collective timing was passed in (CalibrateOptions::time_collective); please report it");
  CollectiveTiming o;
  o.comm = comm;
  o.device = device;
  o.ranks = ranks;
  o.op = op;
  o.min_bytes = 4096;
  o.max_bytes = max_bytes;
  o.iters = 10;
  o.warmup = 2;
  o.json_path = (std::filesystem::temp_directory_path() /
                 ("scalelab-calibrate-" + comm + "-" + op + "-" + std::to_string(::getpid()) + ".json")).string();
  time(o);
  std::ifstream in(o.json_path);
  json j = json::parse(in);
  std::filesystem::remove(o.json_path);
  json raw = json::array();
  for (const json& r : j.at("rows")) {
    // On cuda the backend's device path is new: a call that sums wrongly is not a time to price with.
    if (device != "cpu" && r.contains("wrong") && r.at("wrong").is_number() && r.at("wrong").get<double>() > 0)
      throw Error("calibrate", comm + " " + op + " on " + std::to_string(ranks) + " " + device + " ranks: " +
                                   r.at("wrong").dump() + " wrong elements at " + r.at("bytes").dump() +
                                   " bytes — the backend's result is wrong on this device; check it with `scalelab bench comm --comm " +
                                   comm + " --device " + device + " --op " + op + " --ranks " + std::to_string(ranks) + "`");
    bytes.push_back(r.at("bytes").get<double>());
    seconds.push_back(r.at("time_us").get<double>() * 1e-6);
    raw.push_back({{"bytes", r.at("bytes")}, {"seconds", r.at("time_us").get<double>() * 1e-6}});
  }
  return raw;
}

// The round trip between the core the turns keep to and the first of OpenBLAS's helpers' cores
// (core_round_trip_s); 0 where there are not two cores.
double turn_to_helper_round_trip_s() {
  const std::vector<int> cores = usable_cores();
  return cores.size() >= 2 ? core_round_trip_s(cores[0], cores[1]) : 0.0;
}

// Each element-wise kind a step makes, as calibrate times it: make(device, rows, cols) fills its
// tensors on the device and returns the call.
struct ElementwiseKind {
  const char* name;
  std::function<std::function<void()>(Device&, int64_t rows, int64_t cols)> make;
};
Tensor filled_tensor(Device& d, std::vector<int64_t> shape, const char* what) {
  Tensor t = d.empty(std::move(shape), DType::f32, MemoryCategory::workspace, what);
  d.fill({"calibrate"}, t, 0.5f);
  return t;
}
std::vector<ElementwiseKind> elementwise_kinds() {
  return {
      {"axpy", [](Device& d, int64_t r, int64_t c) -> std::function<void()> {
         Tensor x = filled_tensor(d, {r, c}, "x"), y = filled_tensor(d, {r, c}, "y");
         return [&d, x, y] { d.axpy({"calibrate"}, 1e-3f, x, y); };
       }},
      {"bias_relu", [](Device& d, int64_t r, int64_t c) -> std::function<void()> {
         Tensor y = filled_tensor(d, {r, c}, "y"), bias = filled_tensor(d, {c}, "bias");
         return [&d, y, bias] { d.bias_act({"calibrate"}, y, bias, Activation::relu); };
       }},
      {"bias_relu_bwd", [](Device& d, int64_t r, int64_t c) -> std::function<void()> {
         Tensor dy = filled_tensor(d, {r, c}, "dy"), y = filled_tensor(d, {r, c}, "y"), db = filled_tensor(d, {c}, "dbias");
         return [&d, dy, y, db] { d.bias_act_backward({"calibrate"}, dy, y, db, Activation::relu); };
       }},
      {"sgd", [](Device& d, int64_t r, int64_t c) -> std::function<void()> {
         Tensor w = filled_tensor(d, {r, c}, "w"), g = filled_tensor(d, {r, c}, "g"), buf = filled_tensor(d, {r, c}, "momentum");
         SgdOptions o;
         o.lr = 1e-6f;
         o.momentum = 0.9f;  // the trainer's default
         return [&d, w, g, buf, o] { d.sgd({"calibrate"}, w, g, buf, o); };
       }},
      {"adam", [](Device& d, int64_t r, int64_t c) -> std::function<void()> {
         Tensor w = filled_tensor(d, {r, c}, "w"), g = filled_tensor(d, {r, c}, "g"), m = filled_tensor(d, {r, c}, "m"), v = filled_tensor(d, {r, c}, "v");
         return [&d, w, g, m, v] { d.adam({"calibrate"}, w, g, m, v, AdamOptions{}, 1); };
       }},
      {"copy", [](Device& d, int64_t r, int64_t c) -> std::function<void()> {
         Tensor x = filled_tensor(d, {r, c}, "src"), y = filled_tensor(d, {r, c}, "dst");
         return [&d, x, y] { d.copy({"calibrate"}, x, y); };
       }},
      {"scale", [](Device& d, int64_t r, int64_t c) -> std::function<void()> {
         Tensor x = filled_tensor(d, {r, c}, "x");
         return [&d, x] { d.scale({"calibrate"}, 1.0f, x); };
       }},
      {"softmax_xent", [](Device& d, int64_t r, int64_t c) -> std::function<void()> {
         // rows × 10 classes: a step's loss, by batch size
         const int64_t rows = r * c / 10;
         Tensor logits = filled_tensor(d, {rows, 10}, "logits"), dlogits = filled_tensor(d, {rows, 10}, "dlogits");
         Tensor labels = d.empty({rows}, DType::i32, MemoryCategory::workspace, "labels");
         d.fill({"calibrate"}, labels, 0.0f);
         return [&d, logits, labels, dlogits] { d.softmax_xent({"calibrate"}, logits, labels, dlogits); };
       }},
  };
}

// ---- the cuda device ---------------------------------------------------------------------------

// A cuda op's time per call, two ways. `call_s`: the host's wall time of the Device call — what a
// training step pays for it: the CudaClock waits for each op's end event, so the launch, that wait
// and the call's bookkeeping are in it, and a step's ops on one device follow each other at this
// pace (its events begin one call_s apart). `gpu_s`: the op's own event, timed with CUDA events on
// its stream — the GPU's time. The profile prices with call_s (a step's time is the sum of its
// ops' call_s, not of their gpu_s); gpu_s is kept beside it, and call_s − gpu_s is the per-op
// overhead.
struct CudaTiming {
  double call_s = 0, gpu_s = 0;
};

CudaTiming cuda_time_call(const std::function<void()>& op, double budget_s, EventBus& bus, size_t min_calls = 5) {
  op();
  op();
  std::vector<double> call, gpu;
  const auto start = clock_type::now();
  while (call.size() < min_calls ||
         (std::chrono::duration<double>(clock_type::now() - start).count() < budget_s && call.size() < 10000)) {
    if (bus.event_count() > 4096) bus.clear();  // the bus is there as in training; its store is not
    const size_t before = bus.event_count();
    const auto t0 = clock_type::now();
    op();
    call.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    double g = 0;
    for (const Event& e : bus.events_since(before)) g += 1e-9 * static_cast<double>(e.t_end_ns - e.t_begin_ns);
    gpu.push_back(g);
  }
  return {median(call), median(gpu)};
}

// The bytes the cost model counts for `op` (read off its event), calling it once more.
double event_bytes(const std::function<void()>& op, EventBus& bus) {
  const size_t before = bus.event_count();
  op();
  const std::vector<Event> emitted = bus.events_since(before);
  return emitted.empty() ? 0.0 : static_cast<double>(emitted.back().bytes);
}

// The name of the GPU CUDA sees first, as nvidia-smi gives it (where the driver's cuda_device_name gives none) ("NVIDIA H100 80GB HBM3"); "" where
// nvidia-smi cannot say.
std::string gpu_model() {
  std::string index = "0";
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible) {
    std::string first = visible;
    first = first.substr(0, first.find(','));
    if (!first.empty() && std::all_of(first.begin(), first.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; }))
      index = first;
  }
  FILE* pipe = ::popen(("nvidia-smi --query-gpu=name --format=csv,noheader -i " + index + " 2>/dev/null").c_str(), "r");
  if (!pipe) return "";
  char buf[256] = {};
  std::string name;
  if (std::fgets(buf, sizeof buf, pipe)) name = buf;
  ::pclose(pipe);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  return name;
}

// A link's figures from copies timed by size: its best rate as the bandwidth, each size's share of
// it as the curve, α fitted.
json link_from(const std::string& kind, const std::vector<double>& bytes, const std::vector<double>& seconds, double alpha_s) {
  double best = 0;
  for (size_t i = 0; i < bytes.size(); ++i) best = std::max(best, bytes[i] / seconds[i]);
  json shares = json::array();
  for (size_t i = 0; i < bytes.size(); ++i) shares.push_back(std::clamp(bytes[i] / seconds[i] / best, 1e-6, 1.0));
  return {{"kind", kind}, {"bandwidth_Bps", best}, {"latency_s", alpha_s}, {"curve", {{"bytes", bytes}, {"efficiency", shares}}}};
}

// "[cuda] scalelab was built …" → "scalelab was built …": a message quoted inside another.
std::string without_component(std::string message) {
  if (!message.empty() && message.front() == '[')
    if (const size_t close = message.find("] "); close != std::string::npos) message.erase(0, close + 2);
  return message;
}

// `scalelab calibrate --device cuda`: the GPU as the cuda device uses it, through the Device calls
// a run makes — GEMMs over the shapes grid (f32 as the executor runs it, TF32 off: a table and a
// curve; bf16 and f16: curves), each element-wise kind by size, a tiny op's pace (the launch
// overhead), a large copy in device memory (HBM), uploads and downloads (the host link), copies
// between two cuda devices (two logical devices of one GPU, or two GPUs) and the threads
// collectives on --devices logical devices. What only the cpu device has is not measured: the
// host's cache (a GPU step's data are in its memory; no cold times), the cores' turns and their
// hand-off, the core-to-core round trip, OpenBLAS's helper threads.
int calibrate_cuda(const CalibrateOptions& o) {
  if (cuda_device_count() < 1) {
    std::string why = "no CUDA device is visible";
    try {
      make_cuda_executor(0);
    } catch (const std::exception& e) {
      why = without_component(e.what());
    }
    // The device's own message says what to do where it says anything (built without CUDA: rebuild).
    throw UsageError("calibrate", "--device cuda: " + why +
                                      (why.find(" — ") != std::string::npos
                                           ? std::string()
                                           : " — run calibrate on the machine with the GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES), "
                                             "or pass --device cpu to measure this machine's cores"));
  }
  if (o.devices < 2 || o.devices > kMaxCpuDevices)
    throw UsageError("calibrate", "--device cuda --devices " + std::to_string(o.devices) + ": the threads collectives are measured on 2 … " +
                                      std::to_string(kMaxCpuDevices) + " cuda devices (logical devices of this GPU) — pass --devices N ≥ 2");
  const std::string out = o.out.empty() ? "calibrated-" + host_name() + "-cuda.json" : o.out;
  check_output_path(out, "calibrate");
  const auto started = clock_type::now();
  const int gpus = cuda_device_count();
  // GPU timings move little from one call to the next: shorter budgets than the cpu's, two rounds.
  const double budget = o.quick ? 0.02 : 0.1;
  const int gemm_rounds = o.quick ? 1 : 2;
  // The cpu's grid, and larger shapes: a GPU reaches its peak only there.
  const std::vector<int64_t> rows = o.quick ? std::vector<int64_t>{8, 128, 512} : std::vector<int64_t>{8, 32, 128, 512, 2048};
  const std::vector<int64_t> widths =
      o.quick ? std::vector<int64_t>{64, 256, 1024, 4096} : std::vector<int64_t>{16, 64, 256, 1024, 2048, 4096, 8192};
  const std::vector<GemmShape> grid = gemm_grid(rows, widths);
  struct GemmDtype {
    DType dtype;
    const char* name;
  };
  const std::vector<GemmDtype> gemm_dtypes = o.quick ? std::vector<GemmDtype>{{DType::f32, "f32"}, {DType::bf16, "bf16"}}
                                                     : std::vector<GemmDtype>{{DType::f32, "f32"}, {DType::bf16, "bf16"}, {DType::f16, "f16"}};
  // 4^i × 256 floats: 1 KiB … 256 MiB per tensor (past an H100's 50 MB L2).
  const int elementwise_sizes = o.quick ? 7 : 10;
  const int copy_sizes = o.quick ? 6 : 9;  // 4 KiB … 256 MiB
  const int64_t hbm_copy_bytes = o.quick ? int64_t{256} << 20 : int64_t{1} << 30;
  const int64_t largest_collective = o.quick ? 1 << 20 : 64 << 20;
  const std::vector<int> collective_ranks = o.devices == 2 ? std::vector<int>{2} : std::vector<int>{o.devices, 2};
  ProgressLine progress(static_cast<int>(grid.size() * gemm_dtypes.size()) * gemm_rounds + 8 * elementwise_sizes + 2 +
                        3 * copy_sizes + 3 * static_cast<int>(collective_ranks.size()) + 2);

  EventBus bus;
  DeviceOptions dopt;
  dopt.kind = DeviceKind::cuda;
  dopt.bus = &bus;
  auto devices = make_devices(dopt);
  Device& dev = *devices[0];
  const int64_t capacity = dev.memory().capacity();
  const std::string model = [] {
    std::string name = cuda_device_name(0);  // the driver's name; nvidia-smi's where it gives none
    if (name.empty()) name = gpu_model();
    return name.empty() ? std::string("NVIDIA GPU (neither the driver nor nvidia-smi named it)") : name;
  }();
  json raw;
  std::vector<std::string> warnings;

  // 1. GEMMs, each dtype over the grid, in rounds (as on the cpu): the best rate is the dtype's
  // peak, the shares of it by m·n·k its curve; f32's shapes also the table (and the dW shapes
  // adding to C, as a gradient accumulates).
  json gemm_curves{{"source", "scalelab calibrate --device cuda: Device::gemm on the cuda device (cuBLAS, f32 with TF32 off as the executor runs it) over " +
                                  std::to_string(grid.size()) + " MLP shapes (forward, dW, dx), median host time per call (the CudaClock waits for each op: "
                                  "launch and wait included, as a step pays them); peak = the best rate measured"}};
  json peaks = json::object(), raw_gemm = json::object(), gemm_table = json::array();
  std::map<std::string, std::pair<double, SizeCurve>> gemm_summary;  // dtype → peak, curve
  for (const GemmDtype& gd : gemm_dtypes) {
    std::vector<std::vector<double>> call_times(grid.size()), gpu_times(grid.size()), accumulate_times(grid.size());
    std::string failed;
    for (int round = 0; round < gemm_rounds && failed.empty(); ++round)
      for (size_t i = 0; i < grid.size(); ++i) {
        const GemmShape g = grid[i];
        try {
          const CudaTiming t = cuda_time_call(gemm_op(g, false, gd.dtype)(dev), budget / gemm_rounds, bus);
          call_times[i].push_back(t.call_s);
          gpu_times[i].push_back(t.gpu_s);
          if (gd.dtype == DType::f32 && g.ta && !g.tb)
            accumulate_times[i].push_back(cuda_time_call(gemm_op(g, true, gd.dtype)(dev), budget / gemm_rounds, bus).call_s);
        } catch (const std::exception& e) {
          failed = std::string(gd.name) + " GEMM " + std::to_string(g.m) + "×" + std::to_string(g.n) + "×" + std::to_string(g.k) +
                   ": " + e.what();
          break;
        }
        progress.step(std::string("gemm ") + gd.name + " " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                      std::to_string(g.k) + ", round " + std::to_string(round + 1) + " of " + std::to_string(gemm_rounds));
      }
    if (!failed.empty()) {
      if (gd.dtype == DType::f32) throw Error("calibrate", "--device cuda: " + failed + " — the f32 GEMM is what every run makes; check `scalelab train --device cuda --strategy single`");
      warnings.push_back(std::string(gd.name) + " GEMMs not measured (" + failed + "): the profile has no " + gd.name +
                         " peak or curve, and prices " + gd.name + " GEMMs at the f32 ones'");
      continue;
    }
    std::vector<std::pair<double, double>> rates;  // m·n·k, FLOP/s
    json rows_json = json::array();
    for (size_t i = 0; i < grid.size(); ++i) {
      const GemmShape& g = grid[i];
      const double s = median(call_times[i]), gpu = median(gpu_times[i]);
      const double mnk = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
      rates.push_back({mnk, 2 * mnk / s});
      rows_json.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.ta}, {"trans_b", g.tb}, {"seconds", s}, {"seconds_gpu", gpu}});
      if (gd.dtype == DType::f32) {
        gemm_table.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.ta}, {"trans_b", g.tb}, {"seconds", s}});
        if (!accumulate_times[i].empty()) {
          gemm_table.back()["seconds_accumulate"] = median(accumulate_times[i]);
          rows_json.back()["seconds_accumulate"] = median(accumulate_times[i]);
        }
      }
    }
    double peak = 0;
    for (const auto& [mnk, rate] : rates) peak = std::max(peak, rate);
    std::vector<std::pair<double, double>> shares;
    for (const auto& [mnk, rate] : rates) shares.push_back({mnk, rate / peak});
    const SizeCurve curve = curve_from(shares);
    peaks[gd.name] = peak;
    gemm_curves[gd.name] = {{"mnk", curve.sizes}, {"efficiency", curve.efficiency}};
    raw_gemm[gd.name] = rows_json;
    gemm_summary[gd.name] = {peak, curve};
  }
  raw["gemm"] = raw_gemm;

  // 2. Element-wise kinds by size: each kind's share of the best rate by bytes touched (the bytes
  // read off the op's event); axpy and bias+ReLU also give α + bytes/B.
  std::vector<double> ew_bytes, ew_seconds;
  std::map<std::string, std::vector<std::pair<double, double>>> ew_rates;  // kind → (bytes, B/s)
  json raw_ew = json::array();
  for (const ElementwiseKind& kind : elementwise_kinds())
    for (int i = 0; i < elementwise_sizes; ++i) {
      const int64_t n = int64_t{256} << (2 * i);
      const std::function<void()> op = kind.make(dev, n / 256, 256);
      const CudaTiming t = cuda_time_call(op, budget, bus);
      const double bytes = event_bytes(op, bus);
      ew_rates[kind.name].push_back({bytes, bytes / t.call_s});
      if (std::string(kind.name) == "axpy" || std::string(kind.name) == "bias_relu") {
        ew_bytes.push_back(bytes);
        ew_seconds.push_back(t.call_s);
      }
      raw_ew.push_back({{"op", kind.name}, {"bytes", bytes}, {"seconds", t.call_s}, {"seconds_gpu", t.gpu_s}});
      progress.step(std::string(kind.name) + " " + std::to_string(n * 4) + " B");
    }
  raw["elementwise"] = raw_ew;
  const AlphaBeta ew = fit_alpha_beta(ew_bytes, ew_seconds, 1, 1);

  // 3. The launch overhead: a tiny op (scale of 256 floats) called back to back — the wall time of
  // N calls ÷ N is how far apart a step's ops are when they do nothing; its GPU time is beside it.
  double launch = 0;
  {
    const std::vector<ElementwiseKind> kinds = elementwise_kinds();
    const auto scale = std::find_if(kinds.begin(), kinds.end(), [](const ElementwiseKind& k) { return std::string(k.name) == "scale"; });
    const std::function<void()> tiny = scale->make(dev, 1, 256);
    const CudaTiming t = cuda_time_call(tiny, budget, bus);
    const int calls = o.quick ? 200 : 2000;
    bus.clear();
    const auto t0 = clock_type::now();
    for (int i = 0; i < calls; ++i) {
      tiny();
      if (bus.event_count() > 4096) bus.clear();
    }
    launch = std::chrono::duration<double>(clock_type::now() - t0).count() / calls;
    raw["tiny_op"] = {{"op", "scale"}, {"bytes", event_bytes(tiny, bus)}, {"calls", calls}, {"seconds_per_call", launch},
                      {"median_call_s", t.call_s}, {"median_gpu_s", t.gpu_s}};
    progress.step("launch overhead (tiny op)");
  }

  // 3b. The host's time between two ops of a training step, beyond what a back-to-back call pays
  // (the tiny op's call − GPU time): a step also allocates and frees its tensors and runs the
  // strategy's own code between ops. Measured on a short run of single, as the run pays it: the
  // mean gap from one op's end to the next op's start within a step, from the third step on. The
  // sim puts it before each op of a device, after that device's last op (host_op_gap_s).
  double host_op_gap = 0;
  {
    TrainConfig c;
    c.strategy = "single";
    c.device = DeviceKind::cuda;
    c.model = "mlp:784-1024-1024-1024-10";
    c.dataset = "synthetic";
    c.synthetic_train = 4096;
    c.synthetic_test = 128;
    c.batch = 128;
    c.steps = o.quick ? 10 : 30;
    EventBus run_bus;
    train(c, run_bus);
    std::vector<Event> ops;
    for (const Event& e : run_bus.events())
      if (e.step >= 2 && e.device == 0 && (e.lane == Lane::compute || e.lane == Lane::copy)) ops.push_back(e);
    std::sort(ops.begin(), ops.end(), [](const Event& a, const Event& b) { return a.t_begin_ns < b.t_begin_ns; });
    double sum = 0;
    int64_t gaps = 0;
    for (size_t i = 1; i < ops.size(); ++i)
      if (ops[i].step == ops[i - 1].step) {
        sum += 1e-9 * static_cast<double>(std::max<int64_t>(0, ops[i].t_begin_ns - ops[i - 1].t_end_ns));
        ++gaps;
      }
    const double step_gap = gaps ? sum / static_cast<double>(gaps) : 0.0;
    const double call_overhead = raw["tiny_op"]["median_call_s"].get<double>() - raw["tiny_op"]["median_gpu_s"].get<double>();
    host_op_gap = std::max(0.0, step_gap - call_overhead);
    raw["step_host_gap"] = {{"run", "single, " + c.model + ", batch 128, " + std::to_string(c.steps) + " steps"},
                            {"gaps", gaps}, {"mean_gap_s", step_gap}, {"tiny_op_call_overhead_s", call_overhead}};
    progress.step("host gap between a step's ops");
  }

  // 4. Device memory: one large copy inside the device (Device::copy, read + write as the event
  // counts it), timed by its event — at this size the GPU's time is the call's.
  double hbm_Bps = 0;
  {
    const int64_t floats = hbm_copy_bytes / 4;
    Tensor src = filled_tensor(dev, {floats}, "src"), dst = filled_tensor(dev, {floats}, "dst");
    const std::function<void()> copy = [&] { dev.copy({"calibrate"}, src, dst); };
    const CudaTiming t = cuda_time_call(copy, budget, bus);
    const double bytes = event_bytes(copy, bus);
    hbm_Bps = bytes / t.gpu_s;
    raw["device_memory_copy"] = {{"copied_bytes", hbm_copy_bytes}, {"bytes", bytes}, {"seconds", t.call_s}, {"seconds_gpu", t.gpu_s},
                                 {"Bps", hbm_Bps}};
    progress.step("device memory copy " + format_bytes(hbm_copy_bytes));
  }
  double ew_best = 0;
  for (const auto& [kind, rates] : ew_rates)
    for (const auto& [bytes, rate] : rates) ew_best = std::max(ew_best, rate);
  // The curves are shares of this: the best of the element-wise rates (in L2 they can pass HBM's)
  // and the large copy's.
  const double mem_bw = std::max(ew_best, hbm_Bps);
  json ew_curves{{"source", "scalelab calibrate --device cuda: each kind's Device call on the cuda device, median host time per call (launch and the "
                            "CudaClock's wait included), " + std::to_string(elementwise_sizes) + " sizes; share of device.mem_bandwidth_Bps"}};
  for (const auto& [kind, rates] : ew_rates) {
    json sizes = json::array(), shares = json::array();
    for (const auto& [bytes, rate] : rates) {
      sizes.push_back(bytes);
      shares.push_back(std::clamp(rate / mem_bw, 1e-6, 1.0));
    }
    ew_curves[kind] = {{"bytes", sizes}, {"efficiency", shares}};
  }

  // 5. Copies by size: uploads and downloads (the host link; pageable host memory, as a run's
  // batches are), and copies from one cuda device into another (the link between devices).
  struct Series {
    std::vector<double> bytes, seconds, seconds_gpu;
    AlphaBeta fit;
    json raw() const {
      json r = json::array();
      for (size_t i = 0; i < bytes.size(); ++i) r.push_back({{"bytes", bytes[i]}, {"seconds", seconds[i]}, {"seconds_gpu", seconds_gpu[i]}});
      return r;
    }
  };
  const auto series = [&](const std::string& what, const std::function<CudaTiming(int64_t floats)>& time_one) {
    Series s;
    for (int i = 0; i < copy_sizes; ++i) {
      const int64_t n = int64_t{1024} << (2 * i);
      const CudaTiming t = time_one(n);
      s.bytes.push_back(static_cast<double>(4 * n));
      s.seconds.push_back(t.call_s);
      s.seconds_gpu.push_back(t.gpu_s);
      progress.step(what + " " + std::to_string(4 * n) + " B");
    }
    s.fit = fit_alpha_beta(s.bytes, s.seconds, 1, 1);
    return s;
  };
  const Series upload = series("upload", [&](int64_t n) {
    Tensor dst = dev.empty({n}, DType::f32, MemoryCategory::workspace, "dst");
    std::vector<float> values(static_cast<size_t>(n), 1.0f);
    return cuda_time_call([&] { dev.upload({"calibrate"}, dst, values.data()); }, budget, bus);
  });
  const Series download = series("download", [&](int64_t n) {
    Tensor src = filled_tensor(dev, {n}, "src");
    std::vector<float> values(static_cast<size_t>(n));
    return cuda_time_call([&] { dev.download({"calibrate"}, values.data(), src); }, budget, bus);
  });
  raw["host_copy"] = upload.raw();
  raw["host_download"] = download.raw();
  // Two cuda devices: logical devices of this GPU (each its own stream), or two GPUs.
  std::string peer_what;
  Series peer;
  {
    DeviceOptions two = dopt;
    two.count = 2;
    std::vector<std::unique_ptr<Device>> pair;
    try {
      pair = make_devices(two);
    } catch (const std::exception& e) {
      warnings.push_back("copies between two cuda devices not measured (" + std::string(e.what()) +
                         "): links.intra_node is a copy inside one device");
    }
    if (pair.size() == 2) {
      peer_what = "Device::copy from " + pair[0]->name() + " into " + pair[1]->name();
      peer = series("copy between devices", [&](int64_t n) {
        Tensor src = filled_tensor(*pair[0], {n}, "src");
        Tensor dst = pair[1]->empty({n}, DType::f32, MemoryCategory::workspace, "dst");
        return cuda_time_call([&] { pair[1]->copy({"calibrate"}, src, dst); }, budget, bus);  // the destination copies in
      });
    } else {
      peer_what = "Device::copy inside " + dev.name() + " (no second cuda device could be made)";
      peer = series("copy inside the device", [&](int64_t n) {
        Tensor src = filled_tensor(dev, {n}, "src"), dst = filled_tensor(dev, {n}, "dst");
        return cuda_time_call([&] { dev.copy({"calibrate"}, src, dst); }, budget, bus);
      });
    }
  }
  raw["peer_copy"] = peer.raw();
  const json host_link = link_from("pcie (measured: upload)", upload.bytes, upload.seconds, upload.fit.alpha_s);
  const json intra_link = link_from(gpus > 1 ? "device-to-device (measured)" : "device memory (measured: logical devices of one GPU)",
                                    peer.bytes, peer.seconds, peer.fit.alpha_s);

  // 6. The threads collectives on --devices cuda devices (and on 2; a send between 2), their buffers
  // in device memory, timed by size as bench comm times them.
  std::vector<double> ar_bytes, ar_seconds;
  json measured_collectives = json::array();
  std::string collectives_failed;
  try {
    for (const int n : collective_ranks)
      for (const char* op : {"all_reduce", "reduce_scatter", "all_gather", "send"}) {
        if (std::string(op) == "send" && n != 2) continue;
        std::vector<double> b, t;
        const json rows_json = measure_collective(o.time_collective, "threads", op, n, largest_collective, b, t, "cuda");
        measured_collectives.push_back({{"op", op}, {"ranks", n}, {"bytes", b}, {"seconds", t}});
        if (n == o.devices) {
          raw[std::string(op) + "_threads"] = rows_json;
          if (std::string(op) == "all_reduce") ar_bytes = b, ar_seconds = t;
        }
        progress.step(std::string(op) + " threads, " + std::to_string(n) + " cuda devices");
      }
  } catch (const std::exception& e) {
    collectives_failed = e.what();
    warnings.push_back("the threads collectives on cuda devices were not measured (" + collectives_failed +
                       "): the profile has no collectives section, and the sim prices them as the textbook ring on links.intra_node");
  }
  progress.end();

  const double seconds = std::chrono::duration<double>(clock_type::now() - started).count();
  json fits{{"elementwise", {{"launch_overhead_s", ew.alpha_s}, {"mem_bandwidth_Bps", ew.bandwidth_Bps}, {"rms_log_error", ew.rms_log_error}}},
            {"host_copy", {{"latency_s", upload.fit.alpha_s}, {"bandwidth_Bps", upload.fit.bandwidth_Bps}, {"rms_log_error", upload.fit.rms_log_error}}},
            {"host_download", {{"latency_s", download.fit.alpha_s}, {"bandwidth_Bps", download.fit.bandwidth_Bps}, {"rms_log_error", download.fit.rms_log_error}}},
            {"peer_copy", {{"latency_s", peer.fit.alpha_s}, {"bandwidth_Bps", peer.fit.bandwidth_Bps}, {"rms_log_error", peer.fit.rms_log_error}}}};
  const std::string command = "scalelab calibrate --device cuda" + std::string(o.quick ? " --quick" : "") +
                              (o.devices != 4 ? " --devices " + std::to_string(o.devices) : std::string());
  // A run's devices on sim: at least a GPU node's 8 (collectives on counts not measured get the
  // ring's closed form), and as many as were measured.
  const int devices_per_node = std::max({8, gpus, o.devices});
  const SizeCurve& f32_curve = gemm_summary.at("f32").second;
  json profile{
      {"name", "calibrated-" + host_name() + "-cuda"},
      {"description", "This machine's GPU (" + model + ", " + format_bytes(capacity) + ") as the cuda device uses it: f32 GEMMs with TF32 off, " +
                          "every op timed per call as a run pays it (the CudaClock waits for each), measured by `" + command + "` on " + utc_now() +
                          ". Not measured on cuda (cpu-host figures): the host cache sweeps and cold times, the cores' turn hand-off, the "
                          "core-to-core round trip, OpenBLAS's helper threads, shm's all-reduce — GPUs do not take turns on the host's cores"},
      {"nodes", 1},
      {"devices_per_node", devices_per_node},
      {"device",
       {{"model", model},
        {"peak_flops", peaks},
        {"gemm_efficiency", f32_curve.efficiency.back()},
        {"gemm_curves", gemm_curves},
        {"gemm_table", {{"source", "scalelab calibrate --device cuda: Device::gemm on the cuda device (f32, TF32 off), median host time per call, shape by shape"},
                        {"f32", gemm_table}}},
        {"mem_bandwidth_Bps", mem_bw},
        {"elementwise_curves", ew_curves},
        {"mem_capacity_bytes", capacity},
        {"launch_overhead_s", launch},
        {"host_op_gap_s", host_op_gap}}},
      {"links", {{"host", host_link}, {"intra_node", intra_link}}},
      {"calibration",
       {{"machine", host_name()}, {"device", "cuda"}, {"gpu", model}, {"gpus", gpus}, {"cpu", cpu_model()}, {"date", utc_now()},
        {"quick", o.quick}, {"devices", o.devices}, {"seconds", seconds}, {"fits", fits}, {"raw", raw}, {"warnings", warnings}}},
      {"sources",
       {{"peak_flops", "measured: the best GEMM rate over the grid, per dtype (calibration.raw.gemm); no tf32: the executor runs f32 GEMMs without TF32"},
        {"gemm_curves", "measured: share of that peak per m·n·k, median over the shapes of each factor of 2"},
        {"gemm_table", "measured: every f32 shape of the grid, and the dW shapes adding to C (beta = 1); f32 GEMMs are priced by the nearest shapes of their transposition"},
        {"mem_bandwidth_Bps", "measured: the larger of the best element-wise rate and a " + format_bytes(hbm_copy_bytes) +
                                  " copy inside the device by its GPU time (calibration.raw.device_memory_copy)"},
        {"elementwise_curves", "measured: each kind's share of mem_bandwidth_Bps by bytes touched, per call as a run pays it"},
        {"launch_overhead_s", "measured: " + std::to_string(raw["tiny_op"]["calls"].get<int>()) +
                                  " calls of a tiny op (scale, 1 KiB) back to back, wall time ÷ calls — the per-op cost of a kind without a curve"},
        {"links.host", "measured: Device::upload from pageable host memory; bandwidth = the best rate, curve = each size's share of it, α fitted (downloads in calibration.raw.host_download)"},
        {"links.intra_node", "measured: " + peer_what + "; bandwidth = the best rate, curve = each size's share of it, α fitted"},
        {"mem_capacity_bytes", "the device's capacity as its memory ledger has it (cudaMemGetInfo)"},
        {"devices_per_node", "at least 8 (a GPU node), the GPUs visible (" + std::to_string(gpus) + ") and --devices (" + std::to_string(o.devices) +
                                 "): cuda devices can be logical devices of one GPU"}}}};
  AlphaBeta threads_link;
  if (collectives_failed.empty() && !ar_bytes.empty()) {
    threads_link = fit_alpha_beta(ar_bytes, ar_seconds, 2.0 * (o.devices - 1), 2.0 * (o.devices - 1) / o.devices);
    profile["calibration"]["fits"]["all_reduce_threads"] = {{"ranks", o.devices}, {"latency_s", threads_link.alpha_s},
                                                            {"bandwidth_Bps", threads_link.bandwidth_Bps}, {"rms_log_error", threads_link.rms_log_error}};
    profile["collectives"] = {{"launch_s", 0},
                              {"intra_hop_s", threads_link.alpha_s},
                              {"intra_efficiency", std::clamp(threads_link.bandwidth_Bps / intra_link["bandwidth_Bps"].get<double>(), 1e-6, 1.0)},
                              {"protocols", {"Simple"}},
                              {"tree", false},
                              {"measured", measured_collectives}};
    profile["sources"]["collectives"] = "measured: threads-backend all_reduce, reduce_scatter and all_gather on " + std::to_string(o.devices) +
                                        " and 2 cuda devices, and send (a message between 2), their buffers in device memory; `measured` prices "
                                        "calls on those counts; others: 2(n−1)α + 2(n−1)/n·S/B fitted to the all_reduce on " +
                                        std::to_string(o.devices) + ", intra_efficiency = that B ÷ links.intra_node's B";
  }
  const std::string text = profile.dump(2) + "\n";
  // Read back before it replaces anything: the sim must accept what calibrate writes.
  write_file_atomically(out, text, "calibrate", [](const std::string& written) { load_profile(written); });

  std::printf("# scalelab calibrate --device cuda: %s, %s, %d GPU%s visible, %.1f s%s\n", model.c_str(), format_bytes(capacity).c_str(),
              gpus, gpus == 1 ? "" : "s", seconds, o.quick ? " (--quick)" : "");
  std::printf("  timing         every op per call as a run pays it (host wall time; the CudaClock waits for each op);\n"
              "                 the GPU's own time (CUDA events) is kept beside it in calibration.raw (seconds_gpu)\n");
  for (const GemmDtype& gd : gemm_dtypes) {
    if (!gemm_summary.count(gd.name)) continue;  // not measured: a WARNING below says why
    const std::string name = gd.name;
    const std::pair<double, SizeCurve>& summary = gemm_summary.at(name);
    std::printf("  gemm %-9s peak %.1f TFLOP/s (best of %zu shapes); share of it by m·n·k:\n", name.c_str(), summary.first * 1e-12, grid.size());
    for (size_t i = 0; i < summary.second.sizes.size(); ++i)
      std::printf("                 %12.3g  %5.3f\n", summary.second.sizes[i], summary.second.efficiency[i]);
  }
  {
    const json& f32_rows = raw_gemm.at("f32");
    const json* largest = nullptr;
    for (const json& r : f32_rows)
      if (!largest || r["m"].get<double>() * r["n"].get<double>() * r["k"].get<double>() >
                          (*largest)["m"].get<double>() * (*largest)["n"].get<double>() * (*largest)["k"].get<double>())
        largest = &r;
    if (largest)
      std::printf("                 largest f32 shape %lld×%lld×%lld: %.3f ms per call, %.3f ms on the GPU\n",
                  (*largest)["m"].get<long long>(), (*largest)["n"].get<long long>(), (*largest)["k"].get<long long>(),
                  (*largest)["seconds"].get<double>() * 1e3, (*largest)["seconds_gpu"].get<double>() * 1e3);
  }
  std::printf("  launch         %.2f µs per tiny op back to back (median call %.2f µs, of it on the GPU %.2f µs)\n", launch * 1e6,
              raw["tiny_op"]["median_call_s"].get<double>() * 1e6, raw["tiny_op"]["median_gpu_s"].get<double>() * 1e6);
  std::printf("  host gap       %.2f µs before each op of a device, after its last (a step's mean gap between ops, %.2f µs, less a call's "
              "own %.2f µs; %s)\n",
              profile["device"]["host_op_gap_s"].get<double>() * 1e6, raw["step_host_gap"]["mean_gap_s"].get<double>() * 1e6,
              raw["step_host_gap"]["tiny_op_call_overhead_s"].get<double>() * 1e6,
              raw["step_host_gap"]["run"].get<std::string>().c_str());
  std::printf("  device memory  %.0f GB/s: a %s copy inside the device (read + write, GPU time); best element-wise %.0f GB/s\n",
              hbm_Bps * 1e-9, format_bytes(hbm_copy_bytes).c_str(), ew_best * 1e-9);
  std::printf("  element-wise   by kind, GB/s per call at the smallest / largest size:\n");
  for (const auto& [kind, rates] : ew_rates)
    std::printf("                 %-14s %9.3f / %9.1f\n", kind.c_str(), rates.front().second * 1e-9, rates.back().second * 1e-9);
  std::printf("                 α + bytes/B (fitted to axpy and bias+ReLU): %.2f µs, %.0f GB/s (fit rms %.0f %%)\n", ew.alpha_s * 1e6,
              ew.bandwidth_Bps * 1e-9, 100 * (std::exp(ew.rms_log_error) - 1));
  for (const auto& [what, s] : {std::pair<const char*, const Series*>{"upload      ", &upload}, std::pair<const char*, const Series*>{"download    ", &download},
                                std::pair<const char*, const Series*>{"peer copy   ", &peer}}) {
    std::printf("  %s   GB/s by size:", what);
    for (size_t i = 0; i < s->bytes.size(); ++i)
      std::printf(" %s %.1f", format_bytes(static_cast<int64_t>(s->bytes[i])).c_str(), s->bytes[i] / s->seconds[i] * 1e-9);
    std::printf("\n");
  }
  std::printf("                 peer copy: %s\n", peer_what.c_str());
  if (collectives_failed.empty() && !ar_bytes.empty()) {
    std::printf("  all_reduce     threads, %d cuda devices: B %.2f GB/s, α %.2f µs (fit rms %.0f %%); µs by size:", o.devices,
                threads_link.bandwidth_Bps * 1e-9, threads_link.alpha_s * 1e6, 100 * (std::exp(threads_link.rms_log_error) - 1));
    for (size_t i = 0; i < ar_bytes.size(); ++i)
      std::printf(" %s %.1f", format_bytes(static_cast<int64_t>(ar_bytes[i])).c_str(), ar_seconds[i] * 1e6);
    std::printf("\n");
  }
  std::printf("  not measured   host cache, cold times, turn hand-off, core round trip, OpenBLAS helpers, shm (cpu-host figures)\n");
  for (const std::string& w : warnings) std::printf("  WARNING        %s\n", w.c_str());
  std::printf("  profile        %s (use it: --device sim --hw %s, or bench predict --device cuda --hw %s)\n", out.c_str(), out.c_str(),
              out.c_str());
  return 0;
}

}  // namespace

GemmSpeedNow gemm_speed_now(const HardwareProfile& profile, const std::vector<GemmPoint>& shapes, DeviceKind device) {
  GemmSpeedNow out;
  if (!profile.calibration || profile.calibration->gemm_table.empty()) return out;
  const GemmTable& table = profile.calibration->gemm_table;
  EventBus bus;
  DeviceOptions o;
  o.bus = &bus;
  o.kind = device;
  auto devices = make_devices(o);
  Device& dev = *devices[0];
  // In rounds, as calibrate times its table, each shape's calls pooled: a stretch of the machine
  // that falls on one round moves no shape's median. Timed in one go, a table's first three shapes
  // came out 14–28× their calibrated times (32×512×784: 3.98 ms against 0.17; the next shapes 1–2×)
  // and priced the tour's model's multi-device runs 3–9× over.
  constexpr int kRounds = 3;
  std::vector<GemmShape> timed_shapes;
  std::vector<double> calibrated;
  for (const GemmPoint& p : shapes) {
    const double c = table.seconds(p.m, p.n, p.k, p.trans_a, p.trans_b);
    if (!(c > 0)) continue;
    timed_shapes.push_back({p.trans_a, p.trans_b, static_cast<int64_t>(p.m), static_cast<int64_t>(p.n), static_cast<int64_t>(p.k)});
    calibrated.push_back(c);
  }
  std::vector<std::vector<double>> times(timed_shapes.size());
  for (int round = 0; round < kRounds; ++round)
    for (size_t i = 0; i < timed_shapes.size(); ++i) {
      const GemmShape& g = timed_shapes[i];
      if (device == DeviceKind::cuda) times[i].push_back(cuda_time_call(gemm_op(g)(dev), 0.1 / kRounds, bus).call_s);
      else
        for (double t : warm_call_times(gemm_op(g), dev, g.operand_bytes(), 0.1 / kRounds, bus)) times[i].push_back(t);
    }
  double log_sum = 0;
  int timed = 0;
  for (size_t i = 0; i < timed_shapes.size(); ++i) {
    const GemmShape& g = timed_shapes[i];
    const double now = median(times[i]);
    out.shapes.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.ta}, {"trans_b", g.tb},
                          {"calibrated_s", calibrated[i]}, {"now_s", now}});
    log_sum += std::log(now / calibrated[i]);
    ++timed;
  }
  out.ratio = timed ? std::exp(log_sum / timed) : 0.0;
  return out;
}

std::vector<SpeedProbe> machine_speed_now(const HardwareProfile& profile, DeviceKind device) {
  std::vector<SpeedProbe> probes;
  if (!profile.calibration) return probes;
  const HostCalibration& host = *profile.calibration;
  // A forward GEMM of the table, the largest up to 128×1024×1024 (a few ms), re-timed as
  // gemm_speed_now re-times a model's shapes.
  const GemmPoint* gemm = nullptr;
  for (const GemmPoint& p : host.gemm_table.points)
    if (!p.trans_a && p.trans_b && p.m * p.n * p.k <= 128.0 * 1024 * 1024 &&
        (!gemm || std::pair(p.m * p.n * p.k, p.m) > std::pair(gemm->m * gemm->n * gemm->k, gemm->m)))
      gemm = &p;  // of the largest, the most rows: a batch's forward
  if (gemm) {
    const GemmSpeedNow now = gemm_speed_now(profile, {*gemm}, device);
    if (!now.shapes.empty()) {
      char what[96];
      std::snprintf(what, sizeof what, "GEMM %.0f×%.0f×%.0f", gemm->m, gemm->n, gemm->k);
      probes.push_back({what, gemm->seconds, now.shapes[0].at("now_s").get<double>()});
    }
  }
  if (host.core_round_trip_s > 0 && device == DeviceKind::cpu)
    if (const double now = turn_to_helper_round_trip_s(); now > 0)
      probes.push_back({"core-to-core round trip", host.core_round_trip_s, now, kCoresMovedFactor});
  return probes;
}

int run_calibrate(const CalibrateOptions& o) {
  if (o.device == "cuda") return calibrate_cuda(o);
  if (o.device != "cpu")
    throw UsageError("calibrate", "--device " + o.device + ": only the cpu and cuda devices are measured here — pass --device cpu "
                                  "or --device cuda (a sim device's figures are the profile itself, see profiles/README.md)");
  if (o.devices < 2 || o.devices > kMaxCpuDevices)
    throw UsageError("calibrate", "--devices " + std::to_string(o.devices) + ": the threads all-reduce is measured on 2 … " +
                                      std::to_string(kMaxCpuDevices) + " ranks — pass --devices N ≥ 2");
  const std::string out = o.out.empty() ? "calibrated-" + host_name() + ".json" : o.out;
  check_output_path(out, "calibrate");
  const auto started = clock_type::now();
  const double budget = o.quick ? 0.02 : 0.15;  // seconds per measurement
  const int gemm_rounds = o.quick ? 2 : 3;       // see "In rounds" below
  const std::vector<int64_t> rows = o.quick ? std::vector<int64_t>{8, 32, 128} : std::vector<int64_t>{8, 32, 128, 512};
  const std::vector<int64_t> widths =
      o.quick ? std::vector<int64_t>{16, 64, 256, 1024} : std::vector<int64_t>{16, 64, 256, 1024, 2048};
  const std::vector<GemmShape> grid = gemm_grid(rows, widths);
  // Up to 16 MiB per tensor (64 MiB in a full run): past the last-level cache, as a large layer's
  // weights and their optimizer state are.
  const int elementwise_sizes = o.quick ? 8 : 9;  // 4^i × 256 floats
  const int copy_sizes = o.quick ? 6 : 7;
  ProgressLine progress(static_cast<int>(grid.size()) * gemm_rounds + 8 * elementwise_sizes + 2 * copy_sizes + 3 * (o.devices == 2 ? 1 : 2) + 1 + (o.quick ? 4 : 5));

  EventBus bus;
  DeviceOptions dopt;
  dopt.bus = &bus;
  auto devices = make_devices(dopt);
  Device& dev = *devices[0];
  json raw;
  // One op measured alone: the cpu devices of a run take turns on the host's cores (HostCores),
  // so an op of one costs about what it costs alone; the turns are the model's to price
  // (calibration/host_turns.h).
  auto measure = [&](const OpMaker& make) { return time_call(make(dev), budget, bus); };
  // … and cold: its data in DRAM, as in a run whose steps move more than the cache holds.
  // The cache in effect moves with what the socket's other tenants do (87 to 155 MiB from one
  // calibration to the next here, and a table priced at 155 came out 6–20 % short on every
  // multi-device run of the larger models): swept three times — now, after the GEMMs, after the
  // copies — and the median taken.
  // Each time, also how the cache treats bytes touched again (measure_retouch).
  json cache_sweeps = json::array(), retouch_sweeps = json::array();
  std::vector<double> in_effect;
  // How far apart the host has placed this VM's cores, at the start, the middle and the end: it
  // can change within minutes, and what a core reads of another's writes with it.
  std::vector<double> round_trips{turn_to_helper_round_trip_s()};
  const auto sweep_host_cache = [&] {
    in_effect.push_back(measure_host_cache(cache_sweeps));
    if (in_effect.back() > 0) measure_retouch(in_effect.back(), retouch_sweeps);
  };
  sweep_host_cache();
  progress.step("host cache, sweep 1 of 3");
  const TurnCosts turns = measure_turn_costs(o.devices, raw);
  const double turn_handoff = turns.handoff_s;
  progress.step("turn handoff");
  // Past what any sweep touched (1 GiB): 448 MiB had left a copy's data partly cached.
  CacheFlusher flush(static_cast<size_t>(std::max(4 * in_effect.front(), 1024.0 * (1 << 20))));
  const int cold_calls = o.quick ? 3 : 5;
  auto measure_cold = [&](const OpMaker& make) { return time_call_cold(make(dev), flush, cold_calls, bus); };

  // 1. GEMMs: FLOP/s per shape; the best is taken as the peak, the curve is the shares of it.
  std::vector<std::pair<double, double>> rates;  // m·n·k, FLOP/s
  json raw_gemm = json::array();
  // In rounds: each shape is timed a little in every round, so a slow stretch of this shared
  // machine moves every shape alike and the median over the rounds leaves it out. Timed one shape
  // after another, a shape could come out a third slower in one calibration than in the others
  // (128×1024×1024: 5.62 ms once, 4.06 … 4.28 in four other calibrations).
  const int cold_per_round = 2;
  std::vector<std::vector<double>> warm_times(grid.size()), cold_times(grid.size()), accumulate_times(grid.size());
  for (int round = 0; round < gemm_rounds; ++round)
    for (size_t i = 0; i < grid.size(); ++i) {
      const GemmShape g = grid[i];
      const OpMaker make = gemm_op(g);
      for (double t : warm_call_times(make, dev, g.operand_bytes(), budget / gemm_rounds, bus)) warm_times[i].push_back(t);
      for (double t : cold_call_times(make(dev), flush, cold_per_round, bus)) cold_times[i].push_back(t);
      // dW = dyᵀ·x is the GEMM a gradient accumulates into (micro-batches, no_sync windows).
      if (g.ta && !g.tb)
        for (double t : warm_call_times(gemm_op(g, true), dev, g.operand_bytes(), budget / gemm_rounds, bus))
          accumulate_times[i].push_back(t);
      progress.step("gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) + ", round " +
                    std::to_string(round + 1) + " of " + std::to_string(gemm_rounds));
    }
  for (size_t i = 0; i < grid.size(); ++i) {
    const GemmShape& g = grid[i];
    const double s = median(warm_times[i]), cold = median(cold_times[i]);
    const double mnk = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    rates.push_back({mnk, 2 * mnk / s});
    raw_gemm.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.ta}, {"trans_b", g.tb}, {"seconds", s},
                        {"seconds_cold", cold}});
    if (!accumulate_times[i].empty()) raw_gemm.back()["seconds_accumulate"] = median(accumulate_times[i]);
  }
  double peak = 0;
  for (const auto& [mnk, rate] : rates) peak = std::max(peak, rate);
  std::vector<std::pair<double, double>> shares;
  for (const auto& [mnk, rate] : rates) shares.push_back({mnk, rate / peak});
  const SizeCurve curve = curve_from(shares);
  raw["gemm"] = raw_gemm;

  sweep_host_cache();
  progress.step("host cache, sweep 2 of 3");
  round_trips.push_back(turn_to_helper_round_trip_s());

  // 2. Element-wise ops, each kind a step makes, over sizes a factor of 4 apart up to past the
  // last-level cache: the share of the best bandwidth measured, by bytes touched, is that kind's
  // curve (an SGD step on a layer's 4 MiB weights reads from DRAM; a bias+ReLU on a batch's
  // activations from cache). The bytes are those the cost model counts, read off the op's event.
  // axpy and bias+ReLU also give α + bytes/B: the price of a kind without a curve.
  const std::vector<ElementwiseKind> kinds = elementwise_kinds();
  std::vector<double> ew_bytes, ew_seconds;
  std::map<std::string, std::vector<std::pair<double, double>>> ew_rates;  // kind → (bytes, B/s)
  std::map<std::string, std::vector<double>> ew_cold_rates;               // kind → B/s cold, by size
  json raw_ew = json::array();
  for (const ElementwiseKind& kind : kinds)
    for (int i = 0; i < elementwise_sizes; ++i) {
      const int64_t n = int64_t{256} << (2 * i);
      const int64_t cols = 256, rows_n = n / cols;
      const OpMaker make = [&](Device& d) { return kind.make(d, rows_n, cols); };
      const double s = measure(make), cold = measure_cold(make);
      make(dev)();
      const double bytes = static_cast<double>(bus.events().back().bytes);
      ew_rates[kind.name].push_back({bytes, bytes / s});
      ew_cold_rates[kind.name].push_back(bytes / cold);
      if (std::string(kind.name) == "axpy" || std::string(kind.name) == "bias_relu") {
        ew_bytes.push_back(bytes);
        ew_seconds.push_back(s);
      }
      raw_ew.push_back({{"op", kind.name}, {"bytes", bytes}, {"seconds", s}, {"seconds_cold", cold}});
      progress.step(std::string(kind.name) + " " + std::to_string(n * 4) + " B");
    }
  const AlphaBeta ew = fit_alpha_beta(ew_bytes, ew_seconds, 1, 1);
  double mem_peak = 0;
  for (const auto& [kind, rates] : ew_rates)
    for (const auto& [bytes, rate] : rates) mem_peak = std::max(mem_peak, rate);
  json ew_curves{{"source", "scalelab calibrate: each kind's Device call on the cpu device, median time per call, " +
                                std::to_string(elementwise_sizes) + " sizes; share of the best rate of any kind"}};
  for (const auto& [kind, rates] : ew_rates) {
    json sizes = json::array(), shares = json::array(), cold_shares = json::array();
    for (size_t i = 0; i < rates.size(); ++i) {
      sizes.push_back(rates[i].first);
      shares.push_back(std::clamp(rates[i].second / mem_peak, 1e-6, 1.0));
      cold_shares.push_back(std::clamp(ew_cold_rates[kind][i] / mem_peak, 1e-6, 1.0));
    }
    ew_curves[kind] = {{"bytes", sizes}, {"efficiency", shares}, {"efficiency_cold", cold_shares}};
  }
  raw["elementwise"] = raw_ew;

  // One copy per size (each a factor of 4 up from 4 KiB): α + bytes/B fitted, and the curve — a
  // memcpy runs at the caches' speed while it fits them and at DRAM's beyond, which no single α
  // and B describe — and the raw times.
  struct CopySeries {
    AlphaBeta fit;
    std::vector<double> bytes, seconds, seconds_cold;
    // The link: its best rate as the bandwidth, each size's share of it as the curve (hot, cold).
    json link() const {
      double best = 0;
      for (size_t i = 0; i < bytes.size(); ++i) best = std::max(best, bytes[i] / seconds[i]);
      json shares = json::array(), cold_shares = json::array();
      for (size_t i = 0; i < bytes.size(); ++i) {
        shares.push_back(std::clamp(bytes[i] / seconds[i] / best, 1e-6, 1.0));
        cold_shares.push_back(std::clamp(bytes[i] / seconds_cold[i] / best, 1e-6, 1.0));
      }
      return {{"kind", "memory"}, {"bandwidth_Bps", best}, {"latency_s", fit.alpha_s},
              {"curve", {{"bytes", bytes}, {"efficiency", shares}, {"efficiency_cold", cold_shares}}}};
    }
  };
  // time_one(floats): the copy's time, hot and cold.
  auto copy_series = [&](const char* what, const std::function<std::pair<double, double>(int64_t floats)>& time_one) {
    CopySeries series;
    json raw_rows = json::array();
    for (int i = 0; i < copy_sizes; ++i) {
      const int64_t n = int64_t{1024} << (2 * i);
      const auto [s, cold] = time_one(n);
      series.bytes.push_back(static_cast<double>(4 * n));
      series.seconds.push_back(s);
      series.seconds_cold.push_back(cold);
      raw_rows.push_back({{"bytes", 4 * n}, {"seconds", s}, {"seconds_cold", cold}});
      progress.step(std::string(what) + " " + std::to_string(4 * n) + " B");
    }
    series.fit = fit_alpha_beta(series.bytes, series.seconds, 1, 1);
    return std::pair{series, raw_rows};
  };

  // 3. Host copies (upload: host → device memory; on cpu a memcpy).
  const auto [host, raw_host] = copy_series("upload", [&](int64_t n) {
    const OpMaker upload = [n](Device& d) -> std::function<void()> {
      Tensor dst = d.empty({n}, DType::f32, MemoryCategory::workspace, "dst");
      auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(n), 1.0f);
      return [&d, dst, values] { d.upload({"calibrate"}, dst, values->data()); };
    };
    return std::pair{measure(upload), measure_cold(upload)};
  });
  raw["host_copy"] = raw_host;

  // 4. Copies between two cpu devices (Device::copy across devices: a memcpy): the link between
  // devices, which point-to-point copies (model parallel's activations, DataParallel's scatter and
  // replicate) are priced with.
  DeviceOptions two = dopt;
  two.count = 2;
  auto pair = make_devices(two);
  const auto [peer, raw_peer] = copy_series("copy between devices", [&](int64_t n) {
    Tensor src = pair[0]->empty({n}, DType::f32, MemoryCategory::workspace, "src");
    Tensor dst = pair[1]->empty({n}, DType::f32, MemoryCategory::workspace, "dst");
    pair[0]->fill({"calibrate"}, src, 1.0f);
    const auto copy = [&] { pair[1]->copy({"calibrate"}, src, dst); };  // the destination copies in
    return std::pair{time_call(copy, budget, bus), time_call_cold(copy, flush, cold_calls, bus)};
  });
  raw["peer_copy"] = raw_peer;

  sweep_host_cache();
  progress.step("host cache, sweep 3 of 3");
  std::vector<double> sorted_in_effect = in_effect;
  std::sort(sorted_in_effect.begin(), sorted_in_effect.end());
  const double host_cache = sorted_in_effect[1];
  for (const json& sweep : cache_sweeps)
    if (sweep["bytes_in_effect"].get<double>() == host_cache) raw["host_cache"] = sweep["rows"];  // the median's, as before
  raw["host_cache_sweeps"] = cache_sweeps;
  std::vector<double> retouches;
  for (const json& sweep : retouch_sweeps)
    if (sweep["retouch"].get<double>() >= 0) retouches.push_back(sweep["retouch"].get<double>());
  const double retouch = host_cache > 0 && !retouches.empty() ? median(retouches) : -1.0;
  raw["host_cache_retouch"] = retouch_sweeps;

  // 5. The collectives a strategy calls, over the threads backend on --devices ranks (default 4,
  // the tour's count), as a run leaves the host: timed by size, they price calls on that many
  // ranks; the all-reduce also gives the ring's 2(n−1)α + 2(n−1)/n · S/B for other counts. shm's
  // all-reduce is measured too (full run), for the record.
  const int ranks = o.devices;
  const int64_t largest_collective = o.quick ? 1 << 20 : 16 << 20;
  std::vector<double> ar_bytes, ar_seconds;
  json measured_collectives = json::array();
  {
    BlasHelpersSpinning as_in_a_run(dev);
    // On 2 ranks too: the groups of DDP + model parallel (2 replicas of 2 stages) and of pipelines.
    // And a message from one rank to another (2 ranks: a pipeline's neighbours), as the threads
    // backend passes it: the receiver woken, the copy, the sender released — 13 µs for 256 KiB here,
    // a memcpy's 7.
    for (const int n : ranks == 2 ? std::vector<int>{2} : std::vector<int>{ranks, 2})
      for (const char* op : {"all_reduce", "reduce_scatter", "all_gather", "send"}) {
        if (std::string(op) == "send" && n != 2) continue;
        std::vector<double> b, t;
        const json rows = measure_collective(o.time_collective, "threads", op, n, largest_collective, b, t);
        measured_collectives.push_back({{"op", op}, {"ranks", n}, {"bytes", b}, {"seconds", t}});
        if (n == ranks) {
          raw[std::string(op) + "_threads"] = rows;
          if (std::string(op) == "all_reduce") ar_bytes = b, ar_seconds = t;
        }
        progress.step(std::string(op) + " threads, " + std::to_string(n) + " ranks");
      }
  }
  const AlphaBeta threads_link = fit_alpha_beta(ar_bytes, ar_seconds, 2.0 * (ranks - 1), 2.0 * (ranks - 1) / ranks);
  json fits{{"elementwise", {{"launch_overhead_s", ew.alpha_s}, {"mem_bandwidth_Bps", ew.bandwidth_Bps}, {"rms_log_error", ew.rms_log_error}}},
            {"host_copy", {{"latency_s", host.fit.alpha_s}, {"bandwidth_Bps", host.fit.bandwidth_Bps}, {"rms_log_error", host.fit.rms_log_error}}},
            {"peer_copy", {{"latency_s", peer.fit.alpha_s}, {"bandwidth_Bps", peer.fit.bandwidth_Bps}, {"rms_log_error", peer.fit.rms_log_error}}},
            {"all_reduce_threads", {{"ranks", ranks}, {"latency_s", threads_link.alpha_s}, {"bandwidth_Bps", threads_link.bandwidth_Bps},
                                    {"rms_log_error", threads_link.rms_log_error}}}};
  if (!o.quick) {
    std::vector<double> shm_bytes, shm_seconds;
    raw["all_reduce_shm"] = measure_collective(o.time_collective, "shm", "all_reduce", ranks, 16 << 20, shm_bytes, shm_seconds);
    progress.step("all_reduce shm");
    const AlphaBeta shm = fit_alpha_beta(shm_bytes, shm_seconds, 2.0 * (ranks - 1), 2.0 * (ranks - 1) / ranks);
    fits["all_reduce_shm"] = {{"ranks", ranks}, {"latency_s", shm.alpha_s}, {"bandwidth_Bps", shm.bandwidth_Bps},
                              {"rms_log_error", shm.rms_log_error}};
  }
  round_trips.push_back(turn_to_helper_round_trip_s());
  raw["core_round_trip_s"] = round_trips;
  progress.end();

  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const double seconds = std::chrono::duration<double>(clock_type::now() - started).count();
  const std::string name = "calibrated-" + host_name();
  json curve_json{{"mnk", curve.sizes}, {"efficiency", curve.efficiency}};
  json profile{
      {"name", name},
      {"description", "This machine (" + cpu_model() + ", " + std::to_string(cores) + " cores) as the cpu device uses it" +
                          ", measured by `scalelab calibrate" + (o.quick ? " --quick" : "") +
                          (o.devices != 4 ? " --devices " + std::to_string(o.devices) : std::string()) + "` on " + utc_now()},
      {"nodes", 1},
      {"devices_per_node", kMaxCpuDevices},
      {"device",
       {{"model", cpu_model()},
        {"peak_flops", {{"f32", peak}}},
        {"gemm_efficiency", curve.efficiency.back()},
        {"gemm_curves", {{"source", "scalelab calibrate: Device::gemm on the cpu device over " + std::to_string(grid.size()) +
                                        " MLP shapes (forward, dW, dx), median time per call; peak = the best rate measured"},
                         {"f32", curve_json}}},
        {"gemm_table", {{"source", "scalelab calibrate: Device::gemm on the cpu device, median time per call, shape by shape"},
                        {"f32", raw_gemm}}},
        {"mem_bandwidth_Bps", mem_peak},
        {"elementwise_curves", ew_curves},
        {"mem_capacity_bytes", static_cast<int64_t>(pages > 0 && page > 0 ? static_cast<double>(pages) * page : 1e9)},
        {"launch_overhead_s", ew.alpha_s}}},
      {"links",
       {{"host", host.link()}, {"intra_node", peer.link()}}},
      // The threads all-reduce as the ring's closed form on that link: α per step, its bandwidth a
      // share of the copies' (the ranks reduce as they go, and wait for each other).
      {"collectives",
       {{"launch_s", 0},
        {"intra_hop_s", threads_link.alpha_s},
        {"intra_efficiency", std::clamp(threads_link.bandwidth_Bps / peer.link()["bandwidth_Bps"].get<double>(), 1e-6, 1.0)},
        {"protocols", {"Simple"}},
        {"tree", false},
        {"measured", measured_collectives}}},
      {"calibration",
       {{"machine", host_name()}, {"cpu", cpu_model()}, {"cores", cores}, {"date", utc_now()}, {"quick", o.quick}, {"devices", o.devices},
        {"seconds", seconds}, {"fits", fits}, {"raw", raw}}},
      {"sources",
       {{"peak_flops", "measured: the best GEMM rate over the grid (calibration.raw.gemm)"},
        {"gemm_curves", "measured: share of that peak per m·n·k, median over the shapes of each factor of 2"},
        {"gemm_table", "measured: every shape of the grid, its time hot and cold (the caches flushed), and the dW shapes' adding to C (beta = 1); f32 GEMMs are priced by the nearest shapes of their transposition"},
        {"host_cache_bytes", "measured: y += x on 8 MiB after touching more and more other memory; the size at which it is halfway to DRAM's time, ÷ 1.5; the median of three sweeps, at the start, after the GEMMs and after the copies (calibration.raw.host_cache_sweeps)"},
        {"efficiency_cold", "measured: each curve's sizes again after flushing the caches; priced as the share of data past host_cache_bytes"},
        {"mem_bandwidth_Bps", "measured: the best rate of any element-wise kind from 1 KiB to " +
                                  std::to_string((256ll << (2 * (elementwise_sizes - 1))) * 4 >> 20) + " MiB per tensor (calibration.raw.elementwise)"},
        {"elementwise_curves", "measured: each kind's share of that rate by bytes touched"},
        {"launch_overhead_s", "measured: the α of α + bytes/B fitted to axpy and bias+ReLU — the per-op cost of a kind without a curve"},
        {"links.host", "measured: Device::upload; bandwidth = the best rate, curve = each size's share of it, α fitted"},
        {"links.intra_node", "measured: Device::copy between two cpu devices; bandwidth = the best rate, curve = each size's share of it, α fitted"},
        {"collectives", "measured: threads-backend all_reduce, reduce_scatter and all_gather on " + std::to_string(ranks) +
                            " and 2 ranks, and send (a message between 2 ranks), with OpenBLAS's helper threads spinning as a run's GEMMs leave them; `measured` prices "
                            "calls on those rank counts; others: 2(n−1)α + 2(n−1)/n·S/B fitted to the all_reduce on " +
                            std::to_string(ranks) + ", intra_efficiency = that B ÷ the copies' B"},
        {"mem_capacity_bytes", "this machine's RAM"}}}};
  if (host_cache > 0) {  // none found: every op priced hot
    profile["device"]["host_cache_bytes"] = host_cache;
    profile["device"]["host_cache_curve"] = cold_share_curve(cache_sweeps);
    profile["sources"]["host_cache_curve"] = "measured: the same sweeps, point by point — the median over the three of how far y += x's time has gone from its hot time to its DRAM time (the most memory touched), never falling; bytes = the memory touched + its own 16 MiB";
    if (retouch >= 0) {
      profile["device"]["host_cache_retouch"] = retouch;
      profile["sources"]["host_cache_retouch"] = "measured: y += x after touching D bytes four times, against D once and 4D once: Σ (four times − once) ÷ Σ (4D − once) over D = ¼ … 1 × the cache in effect, after each of the three sweeps, the median (calibration.raw.host_cache_retouch)";
    }
  }
  profile["device"]["turn_handoff_s"] = turn_handoff;
  profile["device"]["turn_gemm_extra_s"] = turns.gemm_extra_s;
  if (turns_kept_on_one_core()) {
    profile["device"]["turns_on_one_core"] = true;
    profile["sources"]["turns_on_one_core"] = "this process kept its turn-taking threads to core " + std::to_string(usable_cores().front()) +
                                              " and OpenBLAS's helpers to the others (core/device/host_cores.h)";
  }
  const double round_trip = median(round_trips);
  const auto [least_trip, most_trip] = std::minmax_element(round_trips.begin(), round_trips.end());
  if (round_trip > 0) {
    profile["device"]["core_round_trip_s"] = round_trip;
    profile["sources"]["core_round_trip_s"] = "measured: a cache line from core " + std::to_string(usable_cores()[0]) + " to core " +
                                              std::to_string(usable_cores()[1]) + " and back, at the start, middle and end of the calibration (calibration.raw.core_round_trip_s), the median; not priced: it says how the cores were placed when the rest was measured";
  }
  profile["sources"]["turn_handoff_s"] = "measured: " + std::to_string(o.devices) +
                                         " device threads taking turns for a layer's forward (a GEMM, then its bias+ReLU); the mean gap when the turn passes to another";
  profile["sources"]["turn_gemm_extra_s"] = "measured: the median GEMM (32x256x256) of those rounds less the median of the same ops on the same devices driven by one thread, round by round; the median over 9 rounds (calibration.raw.turn_gemm_extra)";
  const std::string text = profile.dump(2) + "\n";
  // Read back before it replaces anything: the sim must accept what calibrate writes.
  write_file_atomically(out, text, "calibrate", [](const std::string& written) { load_profile(written); });
  std::printf("# scalelab calibrate: %s, %u cores, %.1f s%s\n", cpu_model().c_str(), cores, seconds, o.quick ? " (--quick)" : "");
  std::printf("  gemm f32       peak %.1f GFLOP/s (best of %zu shapes); share of it by m·n·k:\n", peak * 1e-9, grid.size());
  for (size_t i = 0; i < curve.sizes.size(); ++i)
    std::printf("                 %12.3g  %5.3f\n", curve.sizes[i], curve.efficiency[i]);
  std::vector<double> adding;  // time adding to C / writing it, the dW shapes
  for (const json& r : raw_gemm)
    if (r.contains("seconds_accumulate")) adding.push_back(r["seconds_accumulate"].get<double>() / r["seconds"].get<double>());
  if (!adding.empty())
    std::printf("  gemm adding    dW adding to C (beta = 1) takes %.2f … %.2f (median %.2f) of writing it (%zu shapes)\n",
                *std::min_element(adding.begin(), adding.end()), *std::max_element(adding.begin(), adding.end()),
                median(adding), adding.size());
  std::printf("  turn handoff   %.1f µs between two devices' ops (the next thread wakes); a GEMM right after takes %.1f µs more\n",
              turn_handoff * 1e6, turns.gemm_extra_s * 1e6);
  if (round_trip > 0) {
    std::printf("  core to core   a cache line's round trip %.0f ns (start, middle, end:", round_trip * 1e9);
    for (double t : round_trips) std::printf(" %.0f", t * 1e9);
    std::printf(")\n");
    if (*least_trip > 0 && *most_trip > kCoresMovedFactor * *least_trip)
      std::printf("                 the host moved this machine's cores during the calibration: element-wise ops that read\n"
                  "                 another core's writes change speed with it (2–3× on a VM) — calibrate again\n");
  }
  if (host_cache > 0) {
    std::printf("  host cache     %s in effect: past it a step's data come from DRAM (every op also measured cold);\n"
                "                 cold share by bytes moved:",
                format_bytes(static_cast<int64_t>(host_cache)).c_str());
    const json& curve = profile["device"]["host_cache_curve"];
    for (size_t i = 0; i < curve["bytes"].size(); ++i)
      std::printf(" %s %.2f", format_bytes(curve["bytes"][i].get<int64_t>()).c_str(), curve["cold_share"][i].get<double>());
    std::printf("\n");
    if (retouch >= 0)
      std::printf("                 a byte touched again counts %.2f of a new one (0: only the distinct bytes a step touches push\n"
                  "                 data out, as in an LRU cache; 1: every byte it moves)\n", retouch);
    else
      std::printf("                 touching the same bytes again could not be told from touching new ones: every byte moved counts\n");
  } else
    std::printf("  host cache     no cliff found between in-cache and DRAM times: every op priced as measured hot\n");
  std::printf("  element-wise   best %.2f GB/s; by kind, GB/s at the smallest / largest size:\n", mem_peak * 1e-9);
  for (const auto& [kind, rates] : ew_rates)
    std::printf("                 %-14s %7.2f / %7.2f\n", kind.c_str(), rates.front().second * 1e-9, rates.back().second * 1e-9);
  std::printf("                 α + bytes/B (kinds without a curve): %.2f µs, %.2f GB/s (fit rms %.0f %%)\n", ew.alpha_s * 1e6,
              ew.bandwidth_Bps * 1e-9, 100 * (std::exp(ew.rms_log_error) - 1));
  for (const auto& [what, series] : {std::pair{"host copy ", &host}, std::pair{"peer copy ", &peer}}) {
    std::printf("  %s    GB/s by size (the curve; α + bytes/B would miss by %.0f %% rms):", what,
                100 * (std::exp(series->fit.rms_log_error) - 1));
    for (size_t i = 0; i < series->bytes.size(); ++i)
      std::printf(" %s %.1f", format_bytes(static_cast<int64_t>(series->bytes[i])).c_str(),
                  series->bytes[i] / series->seconds[i] * 1e-9);
    std::printf("\n");
  }
  std::printf("  all_reduce     threads, %d ranks: B %.2f GB/s, α %.2f µs (fit rms %.0f %%)\n", ranks,
              threads_link.bandwidth_Bps * 1e-9, threads_link.alpha_s * 1e6, 100 * (std::exp(threads_link.rms_log_error) - 1));
  std::printf("  profile        %s (use it: --device sim --hw %s, or train --device cpu --predict %s)\n", out.c_str(),
              out.c_str(), out.c_str());
  return 0;
}

}  // namespace scalelab
