// `scalelab calibrate`: measures this machine's cpu (or cuda) device as a run uses it and writes a
// hardware profile that `--device sim --hw FILE` prices runs with. A table of probes, each timing one
// thing — GEMMs, element-wise ops, copies, collectives, the host's cache and cores — through the same
// Device calls a training step makes (so the per-call costs a step pays, bookkeeping and the event
// bus, are in the figures) and writing its fields of the profile; one loop runs them in the order of
// the device's schedule, as nccl-tests and ggml's test-backend-ops run theirs. `scalelab calibrate
// --list` prints the table and the schedules (calibration/probes.h).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cctype>
#include <cmath>
#include <cstdarg>
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
#include "calibration/probes.h"
#include "core/device/device.h"
#include "core/device/host_cores.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/limits.h"
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

// On a terminal one line, redrawn at each measurement; in a log a line as each probe starts.
class ProgressLine {
 public:
  explicit ProgressLine(int probes) : probes_(probes), tty_(::isatty(STDERR_FILENO) != 0) {}
  // The loop: probe `index` (from 0) of the schedule starts.
  void probe(int index, const std::string& name) {
    index_ = index;
    name_ = name;
    if (tty_) step("");
    else print(name + " (" + std::to_string(index + 1) + " of " + std::to_string(probes_) + ")", "\n");
  }
  // A probe: what it times now.
  void step(const std::string& what) {
    if (tty_) print(what.empty() ? name_ : name_ + ": " + what, "");
  }
  void end() {
    index_ = probes_;
    print("done", "\n");
  }

 private:
  void print(const std::string& what, const char* newline) {
    // On a terminal padded, so the line drawn over a longer one leaves none of it.
    std::fprintf(stderr, "%s[calibrate] %3d%%  %-*s%s", tty_ ? "\r" : "", 100 * index_ / std::max(1, probes_), tty_ ? 64 : 0, what.c_str(),
                 newline);
    std::fflush(stderr);
  }
  int probes_, index_ = 0;
  std::string name_;
  bool tty_;
};

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

}  // namespace

// What the probes share: the options, the devices they time, the profile being written (its fields,
// their "sources", calibration.raw and calibration.fits), each probe's lines of the closing summary,
// the progress line — and what a probe run more than once, or a later probe, needs of an earlier run.
struct CalibrationSession {
  CalibrationSession(const CalibrateOptions& o, int probes)
      : options(o), cuda(o.device == "cuda"), quick(o.quick), budget(o.quick ? 0.02 : cuda ? 0.1 : 0.15), progress(probes) {
    device_options.kind = cuda ? DeviceKind::cuda : DeviceKind::cpu;
    device_options.bus = &bus;
    devices = make_devices(device_options);
  }
  const CalibrateOptions& options;
  const bool cuda;      // the cuda device (else the cpu)
  const bool quick;     // a smaller grid and shorter timings
  const double budget;  // seconds per measurement (GPU timings move little from one call to the next)
  EventBus bus;         // there as in training; the probes clear its store
  DeviceOptions device_options;
  std::vector<std::unique_ptr<Device>> devices;
  Device& dev() { return *devices[0]; }  // the device the probes time

  json profile;
  json& device() { return profile["device"]; }
  json& sources() { return profile["sources"]; }
  json& raw() { return profile["calibration"]["raw"]; }
  json& fits() { return profile["calibration"]["fits"]; }
  std::map<std::string, std::string> summary;  // probe → its lines, printed in the table's order
  std::vector<std::string> warnings;           // cuda: what could not be measured, and what the profile does instead
  ProgressLine progress;

  // cpu: the host-cache sweeps and round trips so far (the profile has their median), and the
  // flusher that gives the cold times.
  std::vector<double> cache_in_effect, round_trips;
  json cache_sweeps = json::array(), retouch_sweeps = json::array();
  int cold_calls() const { return quick ? 3 : 5; }
  CacheFlusher& flush() {
    // Past what any sweep touched (1 GiB): 448 MiB had left a copy's data partly cached.
    if (!flusher) {
      const double cache = cache_in_effect.empty() ? 0.0 : cache_in_effect.front();
      flusher = std::make_unique<CacheFlusher>(static_cast<size_t>(std::max(4 * cache, 1024.0 * (1 << 20))));
    }
    return *flusher;
  }
  // cuda: each element-wise kind's rates (bytes, B/s) and the large copy's, which set the
  // bandwidth the curves are shares of.
  std::map<std::string, std::vector<std::pair<double, double>>> elementwise_rates;
  double device_memory_Bps = 0;

 private:
  std::unique_ptr<CacheFlusher> flusher;
};

namespace {

// The probes (defined below; the table says what each measures and writes): how each runs on the
// cpu device and on the cuda device.
void host_cache_cpu(CalibrationSession& s);
void turns_cpu(CalibrationSession& s);
void gemm_cpu(CalibrationSession& s);
void gemm_cuda(CalibrationSession& s);
void elementwise_cpu(CalibrationSession& s);
void elementwise_cuda(CalibrationSession& s);
void launch_cuda(CalibrationSession& s);
void host_gap_cuda(CalibrationSession& s);
void device_memory_cuda(CalibrationSession& s);
void host_copy_cpu(CalibrationSession& s);
void host_copy_cuda(CalibrationSession& s);
void peer_copy_cpu(CalibrationSession& s);
void peer_copy_cuda(CalibrationSession& s);
void collectives_cpu(CalibrationSession& s);
void collectives_cuda(CalibrationSession& s);
void core_round_trip_cpu(CalibrationSession& s);

// The options checked (the message says what to pass instead) and the file to write.
std::string checked_output(const CalibrateOptions& o);
// What a profile has besides the probes' fields: the machine, its memory, how it was measured.
void begin_cpu_profile(CalibrationSession& s);
void begin_cuda_profile(CalibrationSession& s);
// The profile written (read back first: the sim must accept it) and the summary printed.
void finish_profile(CalibrationSession& s, const std::string& out, double seconds);

}  // namespace

const std::vector<CalibrationProbe>& calibration_probes() {
  static const std::vector<CalibrationProbe> probes = {
      {"host_cache", "y += x on 8 MiB after touching more and more other memory (a sweep each run), and after touching it four times",
       "host_cache_bytes, host_cache_curve, host_cache_retouch", host_cache_cpu, nullptr},
      {"turns", "the devices' threads taking turns for a layer's forward (a GEMM, then its bias+ReLU), against one thread",
       "turn_handoff_s, turn_gemm_extra_s, turns_on_one_core", turns_cpu, nullptr},
      {"gemm", "Device::gemm over a grid of MLP shapes (forward, dW, dx) in rounds: hot, cold (caches flushed), adding to C; "
               "on cuda each dtype (f32, bf16, f16)",
       "peak_flops, gemm_efficiency, gemm_curves, gemm_table", gemm_cpu, gemm_cuda},
      {"elementwise", "each element-wise kind a step makes (sgd, adam, bias+ReLU, axpy, …) over sizes 4× apart, hot and cold",
       "mem_bandwidth_Bps, elementwise_curves, launch_overhead_s (cpu: α of axpy and bias+ReLU)", elementwise_cpu, elementwise_cuda},
      {"launch", "a tiny op (scale of 256 floats) called back to back", "launch_overhead_s", nullptr, launch_cuda},
      {"host_gap", "a short run of single: the host's time from one op's end to the next op's start within a step, less a tiny op's "
                   "own overhead (after launch)",
       "host_op_gap_s", nullptr, host_gap_cuda},
      {"device_memory", "one large copy inside the device (after elementwise)",
       "mem_bandwidth_Bps (the larger of it and the element-wise best), elementwise_curves (as shares of it)", nullptr, device_memory_cuda},
      {"host_copy", "Device::upload by size (cuda: also downloads), hot and cold", "links.host", host_copy_cpu, host_copy_cuda},
      {"peer_copy", "Device::copy between two devices by size, hot and cold", "links.intra_node", peer_copy_cpu, peer_copy_cuda},
      {"collectives", "the threads backend's all_reduce, reduce_scatter, all_gather on --devices and 2 ranks and a send between 2, "
                      "as `bench comm` times them (cpu full run: shm's all_reduce too, for the record; after peer_copy)",
       "collectives (intra_hop_s, intra_efficiency, measured)", collectives_cpu, collectives_cuda},
      {"core_round_trip", "a cache line from the turn-taker's core to OpenBLAS's helper's and back (a time each run)",
       "core_round_trip_s (not priced: bench predict compares it with now)", core_round_trip_cpu, nullptr},
  };
  return probes;
}

const std::vector<std::string>& calibration_schedule(const std::string& device) {
  // On the cpu the host's cache in effect and the cores' placement move with what the machine's
  // other tenants do: swept and timed at the start, the middle and the end, the median kept.
  static const std::vector<std::string> cpu = {"core_round_trip", "host_cache", "turns", "gemm", "host_cache", "core_round_trip",
                                               "elementwise", "host_copy", "peer_copy", "host_cache", "collectives", "core_round_trip"};
  static const std::vector<std::string> cuda = {"gemm", "elementwise", "launch", "host_gap", "device_memory", "host_copy", "peer_copy",
                                                "collectives"};
  if (device == "cpu") return cpu;
  if (device == "cuda") return cuda;
  throw UsageError("calibrate", "--device " + device + ": only the cpu and cuda devices are measured here — pass --device cpu "
                                "or --device cuda (a sim device's figures are the profile itself, see profiles/README.md)");
}

// The loop: every probe of the device's schedule, in turn, on one session.
int run_calibrate(const CalibrateOptions& o) {
  const std::vector<std::string>& schedule = calibration_schedule(o.device);
  const std::string out = checked_output(o);
  const auto started = clock_type::now();
  CalibrationSession s(o, static_cast<int>(schedule.size()));
  if (s.cuda) begin_cuda_profile(s);
  else begin_cpu_profile(s);
  for (size_t i = 0; i < schedule.size(); ++i) {
    const auto& probes = calibration_probes();
    const auto probe = std::find_if(probes.begin(), probes.end(), [&](const CalibrationProbe& p) { return p.name == schedule[i]; });
    const ProbeRun run = probe == probes.end() ? nullptr : s.cuda ? probe->cuda : probe->cpu;
    if (!run) throw Error("calibrate", "internal: the " + o.device + " schedule names '" + schedule[i] + "', which no probe runs on " + o.device + "; please report it");
    s.progress.probe(static_cast<int>(i), probe->name);
    run(s);
  }
  s.progress.end();
  finish_profile(s, out, std::chrono::duration<double>(clock_type::now() - started).count());
  return 0;
}

namespace {

// ---- measuring: timed calls, the host's cache and cores, fits, the ops timed ---------------------

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
      std::vector<std::thread> threads = start_threads(static_cast<int>(ds.size()), [&](int k) {
        const Layer l = layer(*ds[static_cast<size_t>(k)]);
        for (int i = 0; i < 100; ++i) forward(*ds[static_cast<size_t>(k)], l);
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
    thread_ = start_thread([this, &dev] {
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

// A cpu copy series: its sizes, times hot and cold, and α + bytes/B fitted.
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

// A cuda copy series: its sizes, times per call and on the GPU, and α + bytes/B fitted.
struct CudaCopySeries {
  std::vector<double> bytes, seconds, seconds_gpu;
  AlphaBeta fit;
  json raw() const {
    json r = json::array();
    for (size_t i = 0; i < bytes.size(); ++i) r.push_back({{"bytes", bytes[i]}, {"seconds", seconds[i]}, {"seconds_gpu", seconds_gpu[i]}});
    return r;
  }
};

// ---- the probes ---------------------------------------------------------------------------------

// printf into a string: a probe's lines of the closing summary.
__attribute__((format(printf, 1, 2))) std::string strf(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), format, again);
  va_end(again);
  out.pop_back();
  return out;
}

// links.<link>'s bandwidth, or an internal error naming the probe the schedule must run first.
double link_bandwidth(CalibrationSession& s, const char* link, const char* probe, const char* before) {
  const json& links = s.profile["links"];
  if (!links.contains(link))
    throw Error("calibrate", std::string("internal: the ") + before + " probe needs links." + link + ", which " + probe +
                                 " measures: the schedule must run " + probe + " first; please report it");
  return links[link]["bandwidth_Bps"].get<double>();
}

// The host's last-level cache in effect, and how it treats a byte touched again.
void host_cache_cpu(CalibrationSession& s) {
  // A sweep each run; the profile has the median of the sweeps so far.
  s.progress.step("sweep " + std::to_string(s.cache_in_effect.size() + 1));
  s.cache_in_effect.push_back(measure_host_cache(s.cache_sweeps));
  if (s.cache_in_effect.back() > 0) measure_retouch(s.cache_in_effect.back(), s.retouch_sweeps);
  const double host_cache = median(s.cache_in_effect);
  json& raw = s.raw();
  for (const json& sweep : s.cache_sweeps)
    if (sweep["bytes_in_effect"].get<double>() == host_cache) raw["host_cache"] = sweep["rows"];  // the median's
  raw["host_cache_sweeps"] = s.cache_sweeps;
  std::vector<double> retouches;
  for (const json& sweep : s.retouch_sweeps)
    if (sweep["retouch"].get<double>() >= 0) retouches.push_back(sweep["retouch"].get<double>());
  const double retouch = host_cache > 0 && !retouches.empty() ? median(retouches) : -1.0;
  raw["host_cache_retouch"] = s.retouch_sweeps;

  json& device = s.device();
  json& sources = s.sources();
  sources["host_cache_bytes"] = "measured: y += x on 8 MiB after touching more and more other memory; the size at which it is halfway to DRAM's time, ÷ 1.5; the median of three sweeps, at the start, after the GEMMs and after the copies (calibration.raw.host_cache_sweeps)";
  for (const char* field : {"host_cache_bytes", "host_cache_curve", "host_cache_retouch"}) {
    device.erase(field);  // this run's median replaces the last
    if (std::string(field) != "host_cache_bytes") sources.erase(field);
  }
  if (!(host_cache > 0)) {  // none found: every op priced hot
    s.summary["host_cache"] = "  host cache     no cliff found between in-cache and DRAM times: every op priced as measured hot\n";
    return;
  }
  device["host_cache_bytes"] = host_cache;
  device["host_cache_curve"] = cold_share_curve(s.cache_sweeps);
  sources["host_cache_curve"] = "measured: the same sweeps, point by point — the median over the three of how far y += x's time has gone from its hot time to its DRAM time (the most memory touched), never falling; bytes = the memory touched + its own 16 MiB";
  if (retouch >= 0) {
    device["host_cache_retouch"] = retouch;
    sources["host_cache_retouch"] = "measured: y += x after touching D bytes four times, against D once and 4D once: Σ (four times − once) ÷ Σ (4D − once) over D = ¼ … 1 × the cache in effect, after each of the three sweeps, the median (calibration.raw.host_cache_retouch)";
  }
  std::string lines = strf("  host cache     %s in effect: past it a step's data come from DRAM (every op also measured cold);\n"
                           "                 cold share by bytes moved:",
                           format_bytes(static_cast<int64_t>(host_cache)).c_str());
  const json& curve = device["host_cache_curve"];
  for (size_t i = 0; i < curve["bytes"].size(); ++i)
    lines += strf(" %s %.2f", format_bytes(curve["bytes"][i].get<int64_t>()).c_str(), curve["cold_share"][i].get<double>());
  lines += "\n";
  if (retouch >= 0)
    lines += strf("                 a byte touched again counts %.2f of a new one (0: only the distinct bytes a step touches push\n"
                  "                 data out, as in an LRU cache; 1: every byte it moves)\n", retouch);
  else
    lines += "                 touching the same bytes again could not be told from touching new ones: every byte moved counts\n";
  s.summary["host_cache"] = lines;
}

// The gap when the cores pass from one device's thread to another's, and a GEMM's extra right after.
void turns_cpu(CalibrationSession& s) {
  const TurnCosts turns = measure_turn_costs(s.options.devices, s.raw());
  json& device = s.device();
  json& sources = s.sources();
  device["turn_handoff_s"] = turns.handoff_s;
  device["turn_gemm_extra_s"] = turns.gemm_extra_s;
  if (turns_kept_on_one_core()) {
    device["turns_on_one_core"] = true;
    sources["turns_on_one_core"] = "this process kept its turn-taking threads to core " + std::to_string(usable_cores().front()) +
                                   " and OpenBLAS's helpers to the others (core/device/host_cores.h)";
  }
  sources["turn_handoff_s"] = "measured: " + std::to_string(s.options.devices) +
                              " device threads taking turns for a layer's forward (a GEMM, then its bias+ReLU); the mean gap when the turn passes to another";
  sources["turn_gemm_extra_s"] = "measured: the median GEMM (32x256x256) of those rounds less the median of the same ops on the same devices driven by one thread, round by round; the median over 9 rounds (calibration.raw.turn_gemm_extra)";
  s.summary["turns"] = strf("  turn handoff   %.1f µs between two devices' ops (the next thread wakes); a GEMM right after takes %.1f µs more\n",
                            turns.handoff_s * 1e6, turns.gemm_extra_s * 1e6);
}

// Device::gemm's time per shape of the grid: hot, cold and adding to C.
void gemm_cpu(CalibrationSession& s) {
  // Hot: the operands in the shared cache, not the cores' own. The best rate is the peak, the
  // shares of it by m·n·k the curve.
  const int gemm_rounds = s.quick ? 2 : 3;  // see "In rounds" below
  const std::vector<int64_t> rows = s.quick ? std::vector<int64_t>{8, 32, 128} : std::vector<int64_t>{8, 32, 128, 512};
  const std::vector<int64_t> widths =
      s.quick ? std::vector<int64_t>{16, 64, 256, 1024} : std::vector<int64_t>{16, 64, 256, 1024, 2048};
  const std::vector<GemmShape> grid = gemm_grid(rows, widths);
  Device& dev = s.dev();
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
      for (double t : warm_call_times(make, dev, g.operand_bytes(), s.budget / gemm_rounds, s.bus)) warm_times[i].push_back(t);
      for (double t : cold_call_times(make(dev), s.flush(), cold_per_round, s.bus)) cold_times[i].push_back(t);
      // dW = dyᵀ·x is the GEMM a gradient accumulates into (micro-batches, no_sync windows).
      if (g.ta && !g.tb)
        for (double t : warm_call_times(gemm_op(g, true), dev, g.operand_bytes(), s.budget / gemm_rounds, s.bus))
          accumulate_times[i].push_back(t);
      s.progress.step(std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) + ", round " +
                      std::to_string(round + 1) + " of " + std::to_string(gemm_rounds));
    }
  for (size_t i = 0; i < grid.size(); ++i) {
    const GemmShape& g = grid[i];
    const double t = median(warm_times[i]), cold = median(cold_times[i]);
    const double mnk = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    rates.push_back({mnk, 2 * mnk / t});
    raw_gemm.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.ta}, {"trans_b", g.tb}, {"seconds", t},
                        {"seconds_cold", cold}});
    if (!accumulate_times[i].empty()) raw_gemm.back()["seconds_accumulate"] = median(accumulate_times[i]);
  }
  double peak = 0;
  for (const auto& [mnk, rate] : rates) peak = std::max(peak, rate);
  std::vector<std::pair<double, double>> shares;
  for (const auto& [mnk, rate] : rates) shares.push_back({mnk, rate / peak});
  const SizeCurve curve = curve_from(shares);
  s.raw()["gemm"] = raw_gemm;

  json& device = s.device();
  device["peak_flops"] = {{"f32", peak}};
  device["gemm_efficiency"] = curve.efficiency.back();
  device["gemm_curves"] = {{"source", "scalelab calibrate: Device::gemm on the cpu device over " + std::to_string(grid.size()) +
                                          " MLP shapes (forward, dW, dx), median time per call; peak = the best rate measured"},
                           {"f32", {{"mnk", curve.sizes}, {"efficiency", curve.efficiency}}}};
  device["gemm_table"] = {{"source", "scalelab calibrate: Device::gemm on the cpu device, median time per call, shape by shape"},
                          {"f32", raw_gemm}};
  json& sources = s.sources();
  sources["peak_flops"] = "measured: the best GEMM rate over the grid (calibration.raw.gemm)";
  sources["gemm_curves"] = "measured: share of that peak per m·n·k, median over the shapes of each factor of 2";
  sources["gemm_table"] = "measured: every shape of the grid, its time hot and cold (the caches flushed), and the dW shapes' adding to C (beta = 1); f32 GEMMs are priced by the nearest shapes of their transposition";

  std::string lines = strf("  gemm f32       peak %.1f GFLOP/s (best of %zu shapes); share of it by m·n·k:\n", peak * 1e-9, grid.size());
  for (size_t i = 0; i < curve.sizes.size(); ++i) lines += strf("                 %12.3g  %5.3f\n", curve.sizes[i], curve.efficiency[i]);
  std::vector<double> adding;  // time adding to C / writing it, the dW shapes
  for (const json& r : raw_gemm)
    if (r.contains("seconds_accumulate")) adding.push_back(r["seconds_accumulate"].get<double>() / r["seconds"].get<double>());
  if (!adding.empty())
    lines += strf("  gemm adding    dW adding to C (beta = 1) takes %.2f … %.2f (median %.2f) of writing it (%zu shapes)\n",
                  *std::min_element(adding.begin(), adding.end()), *std::max_element(adding.begin(), adding.end()), median(adding),
                  adding.size());
  s.summary["gemm"] = lines;
}

// Device::gemm's time per call on the cuda device, per shape of the grid and dtype.
void gemm_cuda(CalibrationSession& s) {
  // Each dtype's best rate is its peak, the shares of it by m·n·k its curve; f32's shapes also the
  // table (and the dW shapes adding to C, as a gradient accumulates).
  const int gemm_rounds = s.quick ? 1 : 2;
  // The cpu's grid, and larger shapes: a GPU reaches its peak only there.
  const std::vector<int64_t> rows = s.quick ? std::vector<int64_t>{8, 128, 512} : std::vector<int64_t>{8, 32, 128, 512, 2048};
  const std::vector<int64_t> widths =
      s.quick ? std::vector<int64_t>{64, 256, 1024, 4096} : std::vector<int64_t>{16, 64, 256, 1024, 2048, 4096, 8192};
  const std::vector<GemmShape> grid = gemm_grid(rows, widths);
  struct GemmDtype {
    DType dtype;
    const char* name;
  };
  const std::vector<GemmDtype> gemm_dtypes = s.quick ? std::vector<GemmDtype>{{DType::f32, "f32"}, {DType::bf16, "bf16"}}
                                                     : std::vector<GemmDtype>{{DType::f32, "f32"}, {DType::bf16, "bf16"}, {DType::f16, "f16"}};
  Device& dev = s.dev();
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
          const CudaTiming t = cuda_time_call(gemm_op(g, false, gd.dtype)(dev), s.budget / gemm_rounds, s.bus);
          call_times[i].push_back(t.call_s);
          gpu_times[i].push_back(t.gpu_s);
          if (gd.dtype == DType::f32 && g.ta && !g.tb)
            accumulate_times[i].push_back(cuda_time_call(gemm_op(g, true, gd.dtype)(dev), s.budget / gemm_rounds, s.bus).call_s);
        } catch (const std::exception& e) {
          failed = std::string(gd.name) + " GEMM " + std::to_string(g.m) + "×" + std::to_string(g.n) + "×" + std::to_string(g.k) +
                   ": " + e.what();
          break;
        }
        s.progress.step(std::string(gd.name) + " " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) +
                        ", round " + std::to_string(round + 1) + " of " + std::to_string(gemm_rounds));
      }
    if (!failed.empty()) {
      if (gd.dtype == DType::f32) throw Error("calibrate", "--device cuda: " + failed + " — the f32 GEMM is what every run makes; check `scalelab train --device cuda --strategy single`");
      s.warnings.push_back(std::string(gd.name) + " GEMMs not measured (" + failed + "): the profile has no " + gd.name +
                           " peak or curve, and prices " + gd.name + " GEMMs at the f32 ones'");
      continue;
    }
    std::vector<std::pair<double, double>> rates;  // m·n·k, FLOP/s
    json rows_json = json::array();
    for (size_t i = 0; i < grid.size(); ++i) {
      const GemmShape& g = grid[i];
      const double t = median(call_times[i]), gpu = median(gpu_times[i]);
      const double mnk = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
      rates.push_back({mnk, 2 * mnk / t});
      rows_json.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.ta}, {"trans_b", g.tb}, {"seconds", t}, {"seconds_gpu", gpu}});
      if (gd.dtype == DType::f32) {
        gemm_table.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.ta}, {"trans_b", g.tb}, {"seconds", t}});
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
  s.raw()["gemm"] = raw_gemm;

  json& device = s.device();
  device["peak_flops"] = peaks;
  device["gemm_efficiency"] = gemm_summary.at("f32").second.efficiency.back();
  device["gemm_curves"] = gemm_curves;
  device["gemm_table"] = {{"source", "scalelab calibrate --device cuda: Device::gemm on the cuda device (f32, TF32 off), median host time per call, shape by shape"},
                          {"f32", gemm_table}};
  json& sources = s.sources();
  sources["peak_flops"] = "measured: the best GEMM rate over the grid, per dtype (calibration.raw.gemm); no tf32: the executor runs f32 GEMMs without TF32";
  sources["gemm_curves"] = "measured: share of that peak per m·n·k, median over the shapes of each factor of 2";
  sources["gemm_table"] = "measured: every f32 shape of the grid, and the dW shapes adding to C (beta = 1); f32 GEMMs are priced by the nearest shapes of their transposition";

  std::string lines;
  for (const GemmDtype& gd : gemm_dtypes) {
    if (!gemm_summary.count(gd.name)) continue;  // not measured: a WARNING says why
    const std::pair<double, SizeCurve>& summary = gemm_summary.at(gd.name);
    lines += strf("  gemm %-9s peak %.1f TFLOP/s (best of %zu shapes); share of it by m·n·k:\n", gd.name, summary.first * 1e-12, grid.size());
    for (size_t i = 0; i < summary.second.sizes.size(); ++i)
      lines += strf("                 %12.3g  %5.3f\n", summary.second.sizes[i], summary.second.efficiency[i]);
  }
  const json* largest = nullptr;
  for (const json& r : raw_gemm.at("f32"))
    if (!largest || r["m"].get<double>() * r["n"].get<double>() * r["k"].get<double>() >
                        (*largest)["m"].get<double>() * (*largest)["n"].get<double>() * (*largest)["k"].get<double>())
      largest = &r;
  if (largest)
    lines += strf("                 largest f32 shape %lld×%lld×%lld: %.3f ms per call, %.3f ms on the GPU\n",
                  (*largest)["m"].get<long long>(), (*largest)["n"].get<long long>(), (*largest)["k"].get<long long>(),
                  (*largest)["seconds"].get<double>() * 1e3, (*largest)["seconds_gpu"].get<double>() * 1e3);
  s.summary["gemm"] = lines;
}

// Each element-wise kind a step makes, by size, hot and cold.
void elementwise_cpu(CalibrationSession& s) {
  // Up to 16 MiB per tensor (64 MiB in a full run): past the last-level cache, as a large layer's
  // weights and their optimizer state are. An SGD step on a layer's 4 MiB weights reads from DRAM;
  // a bias+ReLU on a batch's activations from cache. The bytes are those the cost model counts,
  // read off the op's event. axpy and bias+ReLU also give α + bytes/B: the price of a kind without a curve.
  const int elementwise_sizes = s.quick ? 8 : 9;  // 4^i × 256 floats
  Device& dev = s.dev();
  // One op measured alone: the cpu devices of a run take turns on the host's cores (HostCores),
  // so an op of one costs about what it costs alone; the turns are the model's to price
  // (calibration/host_turns.h). And cold: its data in DRAM, as in a run whose steps move more than the cache holds.
  const auto measure = [&](const OpMaker& make) { return time_call(make(dev), s.budget, s.bus); };
  const auto measure_cold = [&](const OpMaker& make) { return time_call_cold(make(dev), s.flush(), s.cold_calls(), s.bus); };
  std::vector<double> ew_bytes, ew_seconds;
  std::map<std::string, std::vector<std::pair<double, double>>> ew_rates;  // kind → (bytes, B/s)
  std::map<std::string, std::vector<double>> ew_cold_rates;               // kind → B/s cold, by size
  json raw_ew = json::array();
  for (const ElementwiseKind& kind : elementwise_kinds())
    for (int i = 0; i < elementwise_sizes; ++i) {
      const int64_t n = int64_t{256} << (2 * i);
      const int64_t cols = 256, rows_n = n / cols;
      const OpMaker make = [&](Device& d) { return kind.make(d, rows_n, cols); };
      const double t = measure(make), cold = measure_cold(make);
      make(dev)();
      const double bytes = static_cast<double>(s.bus.events().back().bytes);
      ew_rates[kind.name].push_back({bytes, bytes / t});
      ew_cold_rates[kind.name].push_back(bytes / cold);
      if (std::string(kind.name) == "axpy" || std::string(kind.name) == "bias_relu") {
        ew_bytes.push_back(bytes);
        ew_seconds.push_back(t);
      }
      raw_ew.push_back({{"op", kind.name}, {"bytes", bytes}, {"seconds", t}, {"seconds_cold", cold}});
      s.progress.step(std::string(kind.name) + " " + std::to_string(n * 4) + " B");
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
  s.raw()["elementwise"] = raw_ew;
  s.fits()["elementwise"] = {{"launch_overhead_s", ew.alpha_s}, {"mem_bandwidth_Bps", ew.bandwidth_Bps}, {"rms_log_error", ew.rms_log_error}};
  json& device = s.device();
  device["mem_bandwidth_Bps"] = mem_peak;
  device["elementwise_curves"] = ew_curves;
  device["launch_overhead_s"] = ew.alpha_s;
  json& sources = s.sources();
  sources["efficiency_cold"] = "measured: each curve's sizes again after flushing the caches; priced as the share of data past host_cache_bytes";
  sources["mem_bandwidth_Bps"] = "measured: the best rate of any element-wise kind from 1 KiB to " +
                                 std::to_string((256ll << (2 * (elementwise_sizes - 1))) * 4 >> 20) + " MiB per tensor (calibration.raw.elementwise)";
  sources["elementwise_curves"] = "measured: each kind's share of that rate by bytes touched";
  sources["launch_overhead_s"] = "measured: the α of α + bytes/B fitted to axpy and bias+ReLU — the per-op cost of a kind without a curve";

  std::string lines = strf("  element-wise   best %.2f GB/s; by kind, GB/s at the smallest / largest size:\n", mem_peak * 1e-9);
  for (const auto& [kind, rates] : ew_rates)
    lines += strf("                 %-14s %7.2f / %7.2f\n", kind.c_str(), rates.front().second * 1e-9, rates.back().second * 1e-9);
  lines += strf("                 α + bytes/B (kinds without a curve): %.2f µs, %.2f GB/s (fit rms %.0f %%)\n", ew.alpha_s * 1e6,
                ew.bandwidth_Bps * 1e-9, 100 * (std::exp(ew.rms_log_error) - 1));
  s.summary["elementwise"] = lines;
}

// The cuda device's memory bandwidth — the larger of the best element-wise rate (in L2 they can pass
// HBM's) and the large copy's (0 until device_memory has run) — and each element-wise kind's curve as
// shares of it. Returns the best element-wise rate.
double write_cuda_memory_figures(CalibrationSession& s) {
  double ew_best = 0;
  for (const auto& [kind, rates] : s.elementwise_rates)
    for (const auto& [bytes, rate] : rates) ew_best = std::max(ew_best, rate);
  const double mem_bw = std::max(ew_best, s.device_memory_Bps);
  const size_t sizes = s.elementwise_rates.empty() ? 0 : s.elementwise_rates.begin()->second.size();
  json ew_curves{{"source", "scalelab calibrate --device cuda: each kind's Device call on the cuda device, median host time per call (launch and the "
                            "CudaClock's wait included), " + std::to_string(sizes) + " sizes; share of device.mem_bandwidth_Bps"}};
  for (const auto& [kind, rates] : s.elementwise_rates) {
    json bytes = json::array(), shares = json::array();
    for (const auto& [b, rate] : rates) {
      bytes.push_back(b);
      shares.push_back(std::clamp(rate / mem_bw, 1e-6, 1.0));
    }
    ew_curves[kind] = {{"bytes", bytes}, {"efficiency", shares}};
  }
  s.device()["mem_bandwidth_Bps"] = mem_bw;
  s.device()["elementwise_curves"] = ew_curves;
  return ew_best;
}

// Each element-wise kind a step makes, by size, per call on the cuda device.
void elementwise_cuda(CalibrationSession& s) {
  // Each kind's share of the best rate by bytes touched (read off the op's event); axpy and
  // bias+ReLU also give α + bytes/B.
  // 4^i × 256 floats: 1 KiB … 256 MiB per tensor (past an H100's 50 MB L2).
  const int elementwise_sizes = s.quick ? 7 : 10;
  std::vector<double> ew_bytes, ew_seconds;
  json raw_ew = json::array();
  for (const ElementwiseKind& kind : elementwise_kinds())
    for (int i = 0; i < elementwise_sizes; ++i) {
      const int64_t n = int64_t{256} << (2 * i);
      const std::function<void()> op = kind.make(s.dev(), n / 256, 256);
      const CudaTiming t = cuda_time_call(op, s.budget, s.bus);
      const double bytes = event_bytes(op, s.bus);
      s.elementwise_rates[kind.name].push_back({bytes, bytes / t.call_s});
      if (std::string(kind.name) == "axpy" || std::string(kind.name) == "bias_relu") {
        ew_bytes.push_back(bytes);
        ew_seconds.push_back(t.call_s);
      }
      raw_ew.push_back({{"op", kind.name}, {"bytes", bytes}, {"seconds", t.call_s}, {"seconds_gpu", t.gpu_s}});
      s.progress.step(std::string(kind.name) + " " + std::to_string(n * 4) + " B");
    }
  s.raw()["elementwise"] = raw_ew;
  const AlphaBeta ew = fit_alpha_beta(ew_bytes, ew_seconds, 1, 1);
  s.fits()["elementwise"] = {{"launch_overhead_s", ew.alpha_s}, {"mem_bandwidth_Bps", ew.bandwidth_Bps}, {"rms_log_error", ew.rms_log_error}};
  write_cuda_memory_figures(s);
  s.sources()["elementwise_curves"] = "measured: each kind's share of mem_bandwidth_Bps by bytes touched, per call as a run pays it";

  std::string lines = "  element-wise   by kind, GB/s per call at the smallest / largest size:\n";
  for (const auto& [kind, rates] : s.elementwise_rates)
    lines += strf("                 %-14s %9.3f / %9.1f\n", kind.c_str(), rates.front().second * 1e-9, rates.back().second * 1e-9);
  lines += strf("                 α + bytes/B (fitted to axpy and bias+ReLU): %.2f µs, %.0f GB/s (fit rms %.0f %%)\n", ew.alpha_s * 1e6,
                ew.bandwidth_Bps * 1e-9, 100 * (std::exp(ew.rms_log_error) - 1));
  s.summary["elementwise"] = lines;
}

// The launch overhead: a tiny op (scale of 256 floats) called back to back.
void launch_cuda(CalibrationSession& s) {
  // The wall time of N calls ÷ N is how far apart a step's ops are when they do nothing; its GPU
  // time is beside it.
  const std::vector<ElementwiseKind> kinds = elementwise_kinds();
  const auto scale = std::find_if(kinds.begin(), kinds.end(), [](const ElementwiseKind& k) { return std::string(k.name) == "scale"; });
  const std::function<void()> tiny = scale->make(s.dev(), 1, 256);
  const CudaTiming t = cuda_time_call(tiny, s.budget, s.bus);
  const int calls = s.quick ? 200 : 2000;
  s.bus.clear();
  const auto t0 = clock_type::now();
  for (int i = 0; i < calls; ++i) {
    tiny();
    if (s.bus.event_count() > 4096) s.bus.clear();
  }
  const double launch = std::chrono::duration<double>(clock_type::now() - t0).count() / calls;
  s.raw()["tiny_op"] = {{"op", "scale"}, {"bytes", event_bytes(tiny, s.bus)}, {"calls", calls}, {"seconds_per_call", launch},
                        {"median_call_s", t.call_s}, {"median_gpu_s", t.gpu_s}};
  s.device()["launch_overhead_s"] = launch;
  s.sources()["launch_overhead_s"] = "measured: " + std::to_string(calls) +
                                     " calls of a tiny op (scale, 1 KiB) back to back, wall time ÷ calls — the per-op cost of a kind without a curve";
  s.summary["launch"] = strf("  launch         %.2f µs per tiny op back to back (median call %.2f µs, of it on the GPU %.2f µs)\n",
                             launch * 1e6, t.call_s * 1e6, t.gpu_s * 1e6);
}

// The host's time between two ops of a training step, beyond what a back-to-back call pays.
void host_gap_cuda(CalibrationSession& s) {
  // A step also allocates and frees its tensors and runs the strategy's own code between ops.
  // Measured on a short run of single, as the run pays it: the mean gap from one op's end to the
  // next op's start within a step, from the third step on, less the tiny op's call − GPU time (from
  // launch). The sim puts it before each op of a device, after that device's last op.
  if (!s.raw().contains("tiny_op"))
    throw Error("calibrate", "internal: the host_gap probe needs the tiny op's overhead, which launch measures: the schedule must run launch first; please report it");
  TrainConfig c;
  c.strategy = "single";
  c.device = DeviceKind::cuda;
  c.model = "mlp:784-1024-1024-1024-10";
  c.dataset = "synthetic";
  c.synthetic_train = 4096;
  c.synthetic_test = 128;
  c.batch = 128;
  c.steps = s.quick ? 10 : 30;
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
  const json& tiny = s.raw()["tiny_op"];
  const double call_overhead = tiny["median_call_s"].get<double>() - tiny["median_gpu_s"].get<double>();
  const double host_op_gap = std::max(0.0, step_gap - call_overhead);
  const std::string run = "single, " + c.model + ", batch 128, " + std::to_string(c.steps) + " steps";
  s.raw()["step_host_gap"] = {{"run", run}, {"gaps", gaps}, {"mean_gap_s", step_gap}, {"tiny_op_call_overhead_s", call_overhead}};
  s.device()["host_op_gap_s"] = host_op_gap;
  s.summary["host_gap"] = strf("  host gap       %.2f µs before each op of a device, after its last (a step's mean gap between ops, %.2f µs, less a call's "
                               "own %.2f µs; %s)\n",
                               host_op_gap * 1e6, step_gap * 1e6, call_overhead * 1e6, run.c_str());
}

// Device memory's bandwidth: one large copy inside the device.
void device_memory_cuda(CalibrationSession& s) {
  // Device::copy, read + write as the event counts it, timed by its event: at this size the GPU's
  // time is the call's.
  const int64_t hbm_copy_bytes = s.quick ? int64_t{256} << 20 : int64_t{1} << 30;
  Device& dev = s.dev();
  const int64_t floats = hbm_copy_bytes / 4;
  Tensor src = filled_tensor(dev, {floats}, "src"), dst = filled_tensor(dev, {floats}, "dst");
  const std::function<void()> copy = [&] { dev.copy({"calibrate"}, src, dst); };
  const CudaTiming t = cuda_time_call(copy, s.budget, s.bus);
  const double bytes = event_bytes(copy, s.bus);
  s.device_memory_Bps = bytes / t.gpu_s;
  s.raw()["device_memory_copy"] = {{"copied_bytes", hbm_copy_bytes}, {"bytes", bytes}, {"seconds", t.call_s}, {"seconds_gpu", t.gpu_s},
                                   {"Bps", s.device_memory_Bps}};
  const double ew_best = write_cuda_memory_figures(s);  // the curves are shares of the larger
  s.sources()["mem_bandwidth_Bps"] = "measured: the larger of the best element-wise rate and a " + format_bytes(hbm_copy_bytes) +
                                     " copy inside the device by its GPU time (calibration.raw.device_memory_copy)";
  s.summary["device_memory"] = strf("  device memory  %.0f GB/s: a %s copy inside the device (read + write, GPU time); best element-wise %.0f GB/s\n",
                                    s.device_memory_Bps * 1e-9, format_bytes(hbm_copy_bytes).c_str(), ew_best * 1e-9);
}

// The cpu's copies by size (each a factor of 4 up from 4 KiB), hot and cold: α + bytes/B fitted,
// and the curve — a memcpy runs at the caches' speed while it fits them and at DRAM's beyond, which
// no single α and B describe — and the raw times. time_one(floats): the copy's time, hot and cold.
CopySeries cpu_copy_series(CalibrationSession& s, const char* what, const std::function<std::pair<double, double>(int64_t floats)>& time_one,
                           json& raw_rows) {
  const int copy_sizes = s.quick ? 6 : 7;
  CopySeries series;
  raw_rows = json::array();
  for (int i = 0; i < copy_sizes; ++i) {
    const int64_t n = int64_t{1024} << (2 * i);
    const auto [t, cold] = time_one(n);
    series.bytes.push_back(static_cast<double>(4 * n));
    series.seconds.push_back(t);
    series.seconds_cold.push_back(cold);
    raw_rows.push_back({{"bytes", 4 * n}, {"seconds", t}, {"seconds_cold", cold}});
    s.progress.step(std::string(what) + " " + std::to_string(4 * n) + " B");
  }
  series.fit = fit_alpha_beta(series.bytes, series.seconds, 1, 1);
  return series;
}

// A copy series' line of the summary: GB/s by size, and how far α + bytes/B would miss.
std::string cpu_copy_line(const char* what, const CopySeries& series) {
  std::string line = strf("  %s    GB/s by size (the curve; α + bytes/B would miss by %.0f %% rms):", what,
                          100 * (std::exp(series.fit.rms_log_error) - 1));
  for (size_t i = 0; i < series.bytes.size(); ++i)
    line += strf(" %s %.1f", format_bytes(static_cast<int64_t>(series.bytes[i])).c_str(), series.bytes[i] / series.seconds[i] * 1e-9);
  return line + "\n";
}

// The host link: uploads by size (host → device memory; on cpu a memcpy), hot and cold.
void host_copy_cpu(CalibrationSession& s) {
  json raw_rows;
  const CopySeries host = cpu_copy_series(s, "upload", [&](int64_t n) {
    const OpMaker upload = [n](Device& d) -> std::function<void()> {
      Tensor dst = d.empty({n}, DType::f32, MemoryCategory::workspace, "dst");
      auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(n), 1.0f);
      return [&d, dst, values] { d.upload({"calibrate"}, dst, values->data()); };
    };
    return std::pair{time_call(upload(s.dev()), s.budget, s.bus), time_call_cold(upload(s.dev()), s.flush(), s.cold_calls(), s.bus)};
  }, raw_rows);
  s.raw()["host_copy"] = raw_rows;
  s.profile["links"]["host"] = host.link();
  s.fits()["host_copy"] = {{"latency_s", host.fit.alpha_s}, {"bandwidth_Bps", host.fit.bandwidth_Bps}, {"rms_log_error", host.fit.rms_log_error}};
  s.sources()["links.host"] = "measured: Device::upload; bandwidth = the best rate, curve = each size's share of it, α fitted";
  s.summary["host_copy"] = cpu_copy_line("host copy ", host);
}

// The link between devices: copies between two cpu devices by size, hot and cold.
void peer_copy_cpu(CalibrationSession& s) {
  // Device::copy across devices (a memcpy): point-to-point copies (model parallel's activations,
  // DataParallel's scatter and replicate) are priced with it.
  DeviceOptions two = s.device_options;
  two.count = 2;
  auto pair = make_devices(two);
  json raw_rows;
  const CopySeries peer = cpu_copy_series(s, "copy between devices", [&](int64_t n) {
    Tensor src = pair[0]->empty({n}, DType::f32, MemoryCategory::workspace, "src");
    Tensor dst = pair[1]->empty({n}, DType::f32, MemoryCategory::workspace, "dst");
    pair[0]->fill({"calibrate"}, src, 1.0f);
    const auto copy = [&] { pair[1]->copy({"calibrate"}, src, dst); };  // the destination copies in
    return std::pair{time_call(copy, s.budget, s.bus), time_call_cold(copy, s.flush(), s.cold_calls(), s.bus)};
  }, raw_rows);
  s.raw()["peer_copy"] = raw_rows;
  s.profile["links"]["intra_node"] = peer.link();
  s.fits()["peer_copy"] = {{"latency_s", peer.fit.alpha_s}, {"bandwidth_Bps", peer.fit.bandwidth_Bps}, {"rms_log_error", peer.fit.rms_log_error}};
  s.sources()["links.intra_node"] = "measured: Device::copy between two cpu devices; bandwidth = the best rate, curve = each size's share of it, α fitted";
  s.summary["peer_copy"] = cpu_copy_line("peer copy ", peer);
}

// The cuda device's copies by size (4 KiB … 256 MiB), per call as a run pays it: α + bytes/B fitted.
CudaCopySeries cuda_copy_series(CalibrationSession& s, const std::string& what, const std::function<CudaTiming(int64_t floats)>& time_one) {
  const int copy_sizes = s.quick ? 6 : 9;
  CudaCopySeries series;
  for (int i = 0; i < copy_sizes; ++i) {
    const int64_t n = int64_t{1024} << (2 * i);
    const CudaTiming t = time_one(n);
    series.bytes.push_back(static_cast<double>(4 * n));
    series.seconds.push_back(t.call_s);
    series.seconds_gpu.push_back(t.gpu_s);
    s.progress.step(what + " " + std::to_string(4 * n) + " B");
  }
  series.fit = fit_alpha_beta(series.bytes, series.seconds, 1, 1);
  return series;
}

std::string cuda_copy_line(const char* what, const CudaCopySeries& series) {
  std::string line = strf("  %s   GB/s by size:", what);
  for (size_t i = 0; i < series.bytes.size(); ++i)
    line += strf(" %s %.1f", format_bytes(static_cast<int64_t>(series.bytes[i])).c_str(), series.bytes[i] / series.seconds[i] * 1e-9);
  return line + "\n";
}

// The host link: uploads and downloads by size (pageable host memory, as a run's batches are).
void host_copy_cuda(CalibrationSession& s) {
  Device& dev = s.dev();
  const CudaCopySeries upload = cuda_copy_series(s, "upload", [&](int64_t n) {
    Tensor dst = dev.empty({n}, DType::f32, MemoryCategory::workspace, "dst");
    std::vector<float> values(static_cast<size_t>(n), 1.0f);
    return cuda_time_call([&] { dev.upload({"calibrate"}, dst, values.data()); }, s.budget, s.bus);
  });
  const CudaCopySeries download = cuda_copy_series(s, "download", [&](int64_t n) {
    Tensor src = filled_tensor(dev, {n}, "src");
    std::vector<float> values(static_cast<size_t>(n));
    return cuda_time_call([&] { dev.download({"calibrate"}, values.data(), src); }, s.budget, s.bus);
  });
  s.raw()["host_copy"] = upload.raw();
  s.raw()["host_download"] = download.raw();
  s.profile["links"]["host"] = link_from("pcie (measured: upload)", upload.bytes, upload.seconds, upload.fit.alpha_s);
  s.fits()["host_copy"] = {{"latency_s", upload.fit.alpha_s}, {"bandwidth_Bps", upload.fit.bandwidth_Bps}, {"rms_log_error", upload.fit.rms_log_error}};
  s.fits()["host_download"] = {{"latency_s", download.fit.alpha_s}, {"bandwidth_Bps", download.fit.bandwidth_Bps},
                               {"rms_log_error", download.fit.rms_log_error}};
  s.sources()["links.host"] = "measured: Device::upload from pageable host memory; bandwidth = the best rate, curve = each size's share of it, α fitted (downloads in calibration.raw.host_download)";
  s.summary["host_copy"] = cuda_copy_line("upload      ", upload) + cuda_copy_line("download    ", download);
}

// The link between devices: copies by size from one cuda device into another (logical or two GPUs).
void peer_copy_cuda(CalibrationSession& s) {
  std::string peer_what;
  CudaCopySeries peer;
  DeviceOptions two = s.device_options;
  two.count = 2;
  std::vector<std::unique_ptr<Device>> pair;
  try {
    pair = make_devices(two);
  } catch (const std::exception& e) {
    s.warnings.push_back("copies between two cuda devices not measured (" + std::string(e.what()) +
                         "): links.intra_node is a copy inside one device");
  }
  if (pair.size() == 2) {
    peer_what = "Device::copy from " + pair[0]->name() + " into " + pair[1]->name();
    peer = cuda_copy_series(s, "copy between devices", [&](int64_t n) {
      Tensor src = filled_tensor(*pair[0], {n}, "src");
      Tensor dst = pair[1]->empty({n}, DType::f32, MemoryCategory::workspace, "dst");
      return cuda_time_call([&] { pair[1]->copy({"calibrate"}, src, dst); }, s.budget, s.bus);  // the destination copies in
    });
  } else {
    Device& dev = s.dev();
    peer_what = "Device::copy inside " + dev.name() + " (no second cuda device could be made)";
    peer = cuda_copy_series(s, "copy inside the device", [&](int64_t n) {
      Tensor src = filled_tensor(dev, {n}, "src"), dst = filled_tensor(dev, {n}, "dst");
      return cuda_time_call([&] { dev.copy({"calibrate"}, src, dst); }, s.budget, s.bus);
    });
  }
  s.raw()["peer_copy"] = peer.raw();
  s.profile["links"]["intra_node"] =
      link_from(cuda_device_count() > 1 ? "device-to-device (measured)" : "device memory (measured: logical devices of one GPU)",
                peer.bytes, peer.seconds, peer.fit.alpha_s);
  s.fits()["peer_copy"] = {{"latency_s", peer.fit.alpha_s}, {"bandwidth_Bps", peer.fit.bandwidth_Bps}, {"rms_log_error", peer.fit.rms_log_error}};
  s.sources()["links.intra_node"] = "measured: " + peer_what + "; bandwidth = the best rate, curve = each size's share of it, α fitted";
  s.summary["peer_copy"] = cuda_copy_line("peer copy   ", peer) + strf("                 peer copy: %s\n", peer_what.c_str());
}

// The threads backend's all_reduce, reduce_scatter and all_gather on --devices ranks and on 2 (the
// groups of DDP + model parallel, 2 replicas of 2 stages, and of pipelines), and a send between 2 (a
// pipeline's neighbours), timed by size as bench comm times them: every one into `measured`, those
// on --devices into calibration.raw, the all_reduce's on --devices into `ar_bytes` and `ar_seconds`.
void time_threads_collectives(CalibrationSession& s, int64_t largest, json& measured, std::vector<double>& ar_bytes,
                              std::vector<double>& ar_seconds) {
  const int ranks = s.options.devices;
  for (const int n : ranks == 2 ? std::vector<int>{2} : std::vector<int>{ranks, 2})
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather", "send"}) {
      if (std::string(op) == "send" && n != 2) continue;
      std::vector<double> b, t;
      const json rows = measure_collective(s.options.time_collective, "threads", op, n, largest, b, t, s.cuda ? "cuda" : "cpu");
      measured.push_back({{"op", op}, {"ranks", n}, {"bytes", b}, {"seconds", t}});
      if (n == ranks) {
        s.raw()[std::string(op) + "_threads"] = rows;
        if (std::string(op) == "all_reduce") ar_bytes = b, ar_seconds = t;
      }
      s.progress.step(std::string(op) + " threads, " + std::to_string(n) + (s.cuda ? " cuda devices" : " ranks"));
    }
}

// The collectives section: the threads all-reduce as the ring's closed form on the link between
// devices — α per step, its bandwidth a share of the copies' (the ranks reduce as they go, and wait
// for each other) — and every collective as measured. Returns the ring's fit.
AlphaBeta write_threads_collectives(CalibrationSession& s, const std::vector<double>& ar_bytes, const std::vector<double>& ar_seconds,
                                    const json& measured) {
  const double copies_Bps = link_bandwidth(s, "intra_node", "peer_copy", "collectives");
  const int ranks = s.options.devices;
  const AlphaBeta ring = fit_alpha_beta(ar_bytes, ar_seconds, 2.0 * (ranks - 1), 2.0 * (ranks - 1) / ranks);
  s.fits()["all_reduce_threads"] = {{"ranks", ranks}, {"latency_s", ring.alpha_s}, {"bandwidth_Bps", ring.bandwidth_Bps},
                                    {"rms_log_error", ring.rms_log_error}};
  s.profile["collectives"] = {{"launch_s", 0},
                              {"intra_hop_s", ring.alpha_s},
                              {"intra_efficiency", std::clamp(ring.bandwidth_Bps / copies_Bps, 1e-6, 1.0)},
                              {"protocols", {"Simple"}},
                              {"tree", false},
                              {"measured", measured}};
  return ring;
}

// The collectives a strategy calls, over the threads backend, as a run leaves the host.
void collectives_cpu(CalibrationSession& s) {
  // With OpenBLAS's helpers spinning, as a run's GEMMs leave them. Timed by size they price calls on
  // those counts; the all-reduce's ring prices other counts. shm's all-reduce is measured too (full
  // run), for the record.
  const int ranks = s.options.devices;
  std::vector<double> ar_bytes, ar_seconds;
  json measured = json::array();
  {
    // A message between 2 ranks, as the threads backend passes it: the receiver woken, the copy,
    // the sender released — 13 µs for 256 KiB here, a memcpy's 7.
    BlasHelpersSpinning as_in_a_run(s.dev());
    time_threads_collectives(s, s.quick ? 1 << 20 : 16 << 20, measured, ar_bytes, ar_seconds);
  }
  const AlphaBeta ring = write_threads_collectives(s, ar_bytes, ar_seconds, measured);
  if (!s.quick) {
    std::vector<double> shm_bytes, shm_seconds;
    s.raw()["all_reduce_shm"] = measure_collective(s.options.time_collective, "shm", "all_reduce", ranks, 16 << 20, shm_bytes, shm_seconds);
    s.progress.step("all_reduce shm");
    const AlphaBeta shm = fit_alpha_beta(shm_bytes, shm_seconds, 2.0 * (ranks - 1), 2.0 * (ranks - 1) / ranks);
    s.fits()["all_reduce_shm"] = {{"ranks", ranks}, {"latency_s", shm.alpha_s}, {"bandwidth_Bps", shm.bandwidth_Bps},
                                  {"rms_log_error", shm.rms_log_error}};
  }
  s.sources()["collectives"] = "measured: threads-backend all_reduce, reduce_scatter and all_gather on " + std::to_string(ranks) +
                               " and 2 ranks, and send (a message between 2 ranks), with OpenBLAS's helper threads spinning as a run's GEMMs leave them; `measured` prices "
                               "calls on those rank counts; others: 2(n−1)α + 2(n−1)/n·S/B fitted to the all_reduce on " +
                               std::to_string(ranks) + ", intra_efficiency = that B ÷ the copies' B";
  s.summary["collectives"] = strf("  all_reduce     threads, %d ranks: B %.2f GB/s, α %.2f µs (fit rms %.0f %%)\n", ranks,
                                  ring.bandwidth_Bps * 1e-9, ring.alpha_s * 1e6, 100 * (std::exp(ring.rms_log_error) - 1));
}

// The collectives a strategy calls, over the threads backend, their buffers in device memory.
void collectives_cuda(CalibrationSession& s) {
  const int ranks = s.options.devices;
  std::vector<double> ar_bytes, ar_seconds;
  json measured = json::array();
  try {
    time_threads_collectives(s, s.quick ? 1 << 20 : 64 << 20, measured, ar_bytes, ar_seconds);
  } catch (const std::exception& e) {
    s.warnings.push_back("the threads collectives on cuda devices were not measured (" + std::string(e.what()) +
                         "): the profile has no collectives section, and the sim prices them as the textbook ring on links.intra_node");
    return;
  }
  if (ar_bytes.empty()) return;
  const AlphaBeta ring = write_threads_collectives(s, ar_bytes, ar_seconds, measured);
  s.sources()["collectives"] = "measured: threads-backend all_reduce, reduce_scatter and all_gather on " + std::to_string(ranks) +
                               " and 2 cuda devices, and send (a message between 2), their buffers in device memory; `measured` prices "
                               "calls on those counts; others: 2(n−1)α + 2(n−1)/n·S/B fitted to the all_reduce on " +
                               std::to_string(ranks) + ", intra_efficiency = that B ÷ links.intra_node's B";
  std::string line = strf("  all_reduce     threads, %d cuda devices: B %.2f GB/s, α %.2f µs (fit rms %.0f %%); µs by size:", ranks,
                          ring.bandwidth_Bps * 1e-9, ring.alpha_s * 1e6, 100 * (std::exp(ring.rms_log_error) - 1));
  for (size_t i = 0; i < ar_bytes.size(); ++i)
    line += strf(" %s %.1f", format_bytes(static_cast<int64_t>(ar_bytes[i])).c_str(), ar_seconds[i] * 1e6);
  s.summary["collectives"] = line + "\n";
}

// How far apart the host has placed the cores: a cache line's round trip between two of them.
void core_round_trip_cpu(CalibrationSession& s) {
  // The turn-taker's core and OpenBLAS's helper's, a time each run: the placement can change within
  // minutes, and what a core reads of another's writes with it. The profile has the median.
  s.round_trips.push_back(turn_to_helper_round_trip_s());
  s.raw()["core_round_trip_s"] = s.round_trips;
  const double round_trip = median(s.round_trips);
  s.device().erase("core_round_trip_s");  // this run's median replaces the last
  s.sources().erase("core_round_trip_s");
  s.summary.erase("core_round_trip");
  if (!(round_trip > 0)) return;  // not two cores
  s.device()["core_round_trip_s"] = round_trip;
  s.sources()["core_round_trip_s"] = "measured: a cache line from core " + std::to_string(usable_cores()[0]) + " to core " +
                                     std::to_string(usable_cores()[1]) + " and back, at the start, middle and end of the calibration (calibration.raw.core_round_trip_s), the median; not priced: it says how the cores were placed when the rest was measured";
  std::string lines = strf("  core to core   a cache line's round trip %.0f ns (start, middle, end:", round_trip * 1e9);
  for (double t : s.round_trips) lines += strf(" %.0f", t * 1e9);
  lines += ")\n";
  const auto [least_trip, most_trip] = std::minmax_element(s.round_trips.begin(), s.round_trips.end());
  if (*least_trip > 0 && *most_trip > kCoresMovedFactor * *least_trip)
    lines += "                 the host moved this machine's cores during the calibration: element-wise ops that read\n"
             "                 another core's writes change speed with it (2–3× on a VM) — calibrate again\n";
  s.summary["core_round_trip"] = lines;
}

// ---- the profile around the probes ------------------------------------------------------------

std::string checked_output(const CalibrateOptions& o) {
  const bool cuda = o.device == "cuda";
  if (cuda && cuda_device_count() < 1) {
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
    throw UsageError("calibrate", cuda ? "--device cuda --devices " + std::to_string(o.devices) + ": the threads collectives are measured on 2 … " +
                                             std::to_string(kMaxCpuDevices) + " cuda devices (logical devices of this GPU) — pass --devices N ≥ 2"
                                       : "--devices " + std::to_string(o.devices) + ": the threads all-reduce is measured on 2 … " +
                                             std::to_string(kMaxCpuDevices) + " ranks — pass --devices N ≥ 2");
  const std::string out = o.out.empty() ? "calibrated-" + host_name() + (cuda ? "-cuda" : "") + ".json" : o.out;
  check_output_path(out, "calibrate");
  return out;
}

void begin_cpu_profile(CalibrationSession& s) {
  const CalibrateOptions& o = s.options;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  s.profile = {
      {"name", "calibrated-" + host_name()},
      {"description", "This machine (" + cpu_model() + ", " + std::to_string(cores) + " cores) as the cpu device uses it" +
                          ", measured by `scalelab calibrate" + (o.quick ? " --quick" : "") +
                          (o.devices != 4 ? " --devices " + std::to_string(o.devices) : std::string()) + "` on " + utc_now()},
      {"nodes", 1},
      {"devices_per_node", kMaxCpuDevices},
      {"device",
       {{"model", cpu_model()},
        {"mem_capacity_bytes", static_cast<int64_t>(pages > 0 && page > 0 ? static_cast<double>(pages) * page : 1e9)}}},
      {"calibration",
       {{"machine", host_name()}, {"cpu", cpu_model()}, {"cores", cores}, {"quick", o.quick}, {"devices", o.devices},
        {"fits", json::object()}, {"raw", json::object()}}},
      {"sources", {{"mem_capacity_bytes", "this machine's RAM"}}}};
}

void begin_cuda_profile(CalibrationSession& s) {
  const CalibrateOptions& o = s.options;
  const int gpus = cuda_device_count();
  const int64_t capacity = s.dev().memory().capacity();
  std::string model = cuda_device_name(0);  // the driver's name; nvidia-smi's where it gives none
  if (model.empty()) model = gpu_model();
  if (model.empty()) model = "NVIDIA GPU (neither the driver nor nvidia-smi named it)";
  const std::string command = "scalelab calibrate --device cuda" + std::string(o.quick ? " --quick" : "") +
                              (o.devices != 4 ? " --devices " + std::to_string(o.devices) : std::string());
  // A run's devices on sim: at least a GPU node's 8 (collectives on counts not measured get the
  // ring's closed form), and as many as were measured.
  const int devices_per_node = std::max({8, gpus, o.devices});
  s.profile = {
      {"name", "calibrated-" + host_name() + "-cuda"},
      {"description", "This machine's GPU (" + model + ", " + format_bytes(capacity) + ") as the cuda device uses it: f32 GEMMs with TF32 off, " +
                          "every op timed per call as a run pays it (the CudaClock waits for each), measured by `" + command + "` on " + utc_now() +
                          ". Not measured on cuda (cpu-host figures): the host cache sweeps and cold times, the cores' turn hand-off, the "
                          "core-to-core round trip, OpenBLAS's helper threads, shm's all-reduce — GPUs do not take turns on the host's cores"},
      {"nodes", 1},
      {"devices_per_node", devices_per_node},
      {"device", {{"model", model}, {"mem_capacity_bytes", capacity}}},
      {"calibration",
       {{"machine", host_name()}, {"device", "cuda"}, {"gpu", model}, {"gpus", gpus}, {"cpu", cpu_model()}, {"quick", o.quick},
        {"devices", o.devices}, {"fits", json::object()}, {"raw", json::object()}}},
      {"sources",
       {{"mem_capacity_bytes", "the device's capacity as its memory ledger has it (cudaMemGetInfo)"},
        {"devices_per_node", "at least 8 (a GPU node), the GPUs visible (" + std::to_string(gpus) + ") and --devices (" + std::to_string(o.devices) +
                                 "): cuda devices can be logical devices of one GPU"}}}};
}

void finish_profile(CalibrationSession& s, const std::string& out, double seconds) {
  json& calibration = s.profile["calibration"];
  calibration["date"] = utc_now();
  calibration["seconds"] = seconds;
  if (s.cuda) calibration["warnings"] = s.warnings;
  const std::string text = s.profile.dump(2) + "\n";
  // Read back before it replaces anything: the sim must accept what calibrate writes.
  write_file_atomically(out, text, "calibrate", [](const std::string& written) { load_profile(written); });

  const char* quick = s.quick ? " (--quick)" : "";
  if (s.cuda) {
    const int gpus = calibration["gpus"].get<int>();
    std::printf("# scalelab calibrate --device cuda: %s, %s, %d GPU%s visible, %.1f s%s\n", calibration["gpu"].get<std::string>().c_str(),
                format_bytes(s.device()["mem_capacity_bytes"].get<int64_t>()).c_str(), gpus, gpus == 1 ? "" : "s", seconds, quick);
    std::printf("  timing         every op per call as a run pays it (host wall time; the CudaClock waits for each op);\n"
                "                 the GPU's own time (CUDA events) is kept beside it in calibration.raw (seconds_gpu)\n");
  } else {
    std::printf("# scalelab calibrate: %s, %u cores, %.1f s%s\n", calibration["cpu"].get<std::string>().c_str(),
                calibration["cores"].get<unsigned>(), seconds, quick);
  }
  for (const CalibrationProbe& probe : calibration_probes())
    if (const auto lines = s.summary.find(probe.name); lines != s.summary.end()) std::fputs(lines->second.c_str(), stdout);
  if (s.cuda) {
    std::printf("  not measured   host cache, cold times, turn hand-off, core round trip, OpenBLAS helpers, shm (cpu-host figures)\n");
    for (const std::string& w : s.warnings) std::printf("  WARNING        %s\n", w.c_str());
    std::printf("  profile        %s (use it: --device sim --hw %s, or bench predict --device cuda --hw %s)\n", out.c_str(), out.c_str(),
                out.c_str());
  } else {
    std::printf("  profile        %s (use it: --device sim --hw %s, or train --device cpu --predict %s)\n", out.c_str(), out.c_str(),
                out.c_str());
  }
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

}  // namespace scalelab
