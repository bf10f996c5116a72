#pragma once
// The host calibration (docs/calibration.md): `scalelab calibrate` measures this machine's cpu (or
// cuda) device into a profile with a HostCalibration, and `train --predict` / `bench predict`
// price runs on such a profile next to the same runs measured. It sits above run/ (it trains) and
// below the apps; nothing in core, strategies or run depends on it.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "run/train.h"
#include "strategies/train_config.h"

namespace scalelab {

// A collective timed over sizes as `scalelab bench comm` times it (quiet; its table, with "rows" of
// "bytes" and "time_us", written to `json_path`). The CLI passes its bench in (apps/scalelab/
// bench_comm.cpp): calibrate trusts the same timing a student's `bench comm` shows.
struct CollectiveTiming {
  std::string comm, op, device;
  int ranks = 0;
  int64_t min_bytes = 0, max_bytes = 0;
  int iters = 0, warmup = 0;
  std::string json_path;
};
using TimeCollective = std::function<void(const CollectiveTiming&)>;

struct CalibrateOptions {
  std::string device = "cpu";  // cpu | cuda (the GPU through the cuda device; logical devices for the collectives)
  std::string out;     // default: calibrated-<host>.json here
  bool quick = false;  // a smaller grid and shorter timings (~20 s): for tests
  int devices = 4;     // ranks of the threads all-reduce measured
  TimeCollective time_collective;  // required: how the collectives are timed (see CollectiveTiming)
};

// `scalelab calibrate`: measures the cpu (or cuda) device and writes a profile `--device sim --hw` reads.
int run_calibrate(const CalibrateOptions& options);

// `scalelab train --device cpu --predict PROFILE`: the run measured, then the same run priced on
// the profile (sim, dry run); the summary, then both step times and per-device busy/comm/idle with
// the error, and the time per op class (which class is off). `json_path` (the run's --json) gets
// both. Returns the process exit code.
int train_with_prediction(const TrainConfig& config, const std::string& profile, const ProgressFn& progress);

struct BenchPredictOptions {
  // Profiles of this machine (required; e.g. two calibrations, to see how far they differ): each run
  // is priced on every one, side by side.
  std::vector<std::string> hw;
  std::vector<std::string> models = {"mlp:784-512-256-128-10", "mlp:784-1024-1024-1024-10",
                                     "mlp:784-2048-2048-2048-10"};  // the tour's, and two larger
  int devices = 4;
  int64_t batch = 128;
  int64_t steps = 20;
  int repeats = 3;  // measured runs per config: their median is compared, their spread shown
  // Also price each model on every profile with its GEMM table scaled by how fast this machine's
  // GEMMs run just before that model's runs (gemm_speed_now): columns P1*, P2*, …
  bool retime_gemms = false;
  std::string json_path;
  // A table written before (--json): its measured runs are priced again on `hw`, nothing is run —
  // a change to the cost model, or another calibration, tried on measurements already taken.
  std::string measured_path;
  // cpu | cuda: the device the strategies are measured on (cuda: --devices logical devices where
  // the GPUs are fewer, collectives over the threads backend; no host-turns re-timing).
  std::string device = "cpu";
};

// The middle value (the upper of the two for an even count; 0 for none): one descheduled call
// on a shared machine does not move it.
double median(std::vector<double> values);

// How fast this machine's GEMMs of `shapes` (a model's: bench predict takes them from its runs) run
// now, timed as calibrate times them, against the profile's table's price of each: `shapes` the
// times, `ratio` the geometric mean of now ÷ calibrated (0: the profile has no GEMM table).
struct GemmSpeedNow {
  double ratio = 0;
  nlohmann::json shapes = nlohmann::json::array();
};
// `device`: cpu, or cuda (timed per call as `calibrate --device cuda` times it).
GemmSpeedNow gemm_speed_now(const HardwareProfile& profile, const std::vector<GemmPoint>& shapes,
                            DeviceKind device = DeviceKind::cpu);

// How this machine runs now what its calibration measured (docs/calibration.md): a GEMM of the
// table, timed as calibrate timed it, and a cache line's round trip between the turn-taker's core
// and OpenBLAS's helper's (core_round_trip_s, core/device/host_cores.h), which tells whether the host
// has placed the cores otherwise since — then element-wise ops that read the helper's writes change
// speed, which an element-wise probe of its own does not show.
struct SpeedProbe {
  std::string what;
  double calibrated_s = 0, now_s = 0;
  double moved_past = 1.10;  // a ratio beyond this either way (or below its inverse): the machine has moved
  double ratio() const { return calibrated_s > 0 ? now_s / calibrated_s : 0; }
  bool moved() const { return ratio() > moved_past || ratio() * moved_past < 1; }
};
// A round trip this many times its calibrated one (either way) says the cores were placed
// otherwise: jitter alone moves it less, cores placed apart more.
constexpr double kCoresMovedFactor = 2.0;
// On cuda only the GEMM: the round trip is the cpu device's turn-taker's.
std::vector<SpeedProbe> machine_speed_now(const HardwareProfile& profile, DeviceKind device = DeviceKind::cpu);

// Predicted next to measured for every strategy on each model, on each profile: a table with the
// errors, and for the closest profile the op class that is furthest off where the error is large.
int bench_predict(const BenchPredictOptions& options);

// How far this machine's measurements repeat: tables of bench predict (--json) measured minutes
// apart, each one's measured step times taken as the prediction of every other's — the floor
// under what any calibration of one moment can reach, printed next to the goal.
int bench_repeat(const std::vector<std::string>& tables);

}  // namespace scalelab
