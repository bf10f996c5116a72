#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device/sim/profile.h"
#include "run/train.h"
#include "strategies/train_config.h"

namespace scalelab {

struct BenchComputeOptions {
  std::string model = "mlp:784-1024-1024-10";
  int64_t batch = 512;
  int steps = 20;
  int warmup = 0;              // untimed steps first; 0: 3 on cpu, 10 on cuda
  std::string device = "cpu";  // cpu (bound: OpenBLAS) | cuda (bound: cuBLAS; peer: PyTorch eager on the GPU)
  std::string amp = "off";     // cuda: off (f32, TF32 off) | bf16 (autocast, f32 master weights)
  std::string vs;  // "torch": PyTorch's step of the same MLP (cpu: on as many threads), same run
  std::string json_path;
};

struct BenchCommOptions {
  std::string comm = "threads";  // threads | shm | mpi | nccl
  int ranks = 0;                 // 0: 4, or mpirun's -np with --comm mpi
  std::string op = "all_reduce";
  std::string redop = "sum";
  std::string dtype = "f32";
  int64_t min_bytes = 1024;
  int64_t max_bytes = 64ll << 20;
  int iters = 20;
  int warmup = 5;
  std::string vs;      // mpi: Open MPI's collective, gloo: torch.distributed's; same sizes, same run
  std::string device = "cpu";
  std::string hw;      // --device sim: modelled times on this profile
  std::string shm_sharing = "fd_passing";
  std::string algorithm = "ring";  // threads / shm all-reduce: ring | direct
  int64_t timeout_ms = 60000;
  bool quiet = false;  // no table (the --vs mpi peer run)
  std::string json_path;
};

// Collectives timed like nccl-tests, with the memory-bandwidth bound and the Open MPI peer.
int bench_comm(const BenchCommOptions& options);

struct BenchSimOptions {
  // 784-16384×5-10: 1.087e9 parameters (four 16384² layers), the "1B-parameter MLP".
  std::string model = "mlp:784-16384-16384-16384-16384-16384-10";
  std::string hw = "h100-ib-1024x8";
  std::vector<int> devices;  // empty: the budget cases, 1024 and 4096
  int steps = 1;
  int per_device_batch = 1;
  std::string json_path;
};

// DDP dry runs at scale, each case in a child process: wall time and peak RSS next to the budgets.
int bench_sim(const BenchSimOptions& options);

struct TourOptions {
  std::string hw = "a100-nvlink-8";
  int devices = 4;
  std::string model = "mlp:784-512-256-128-10";  // four layers: one per device for model parallel and pipeline
  std::string dataset = "fashion-mnist";
  int64_t batch = 128;
  int64_t steps = 300;
  uint64_t seed = 42;
  std::string out_dir = "out";
};

struct StrategyInfo;
// The devices a strategy runs on in a side-by-side table: `wanted`, as its rule allows (single: one).
int devices_allowed(const StrategyInfo& info, int wanted);

// Every strategy on the same simulated machine, in one table; a trace of each in out_dir.
int run_tour(const TourOptions& options);

// The training step's time on the cpu device next to OpenBLAS sgemm on the same GEMM shapes, or on
// the cuda device next to cuBLAS on them, measured in the same run; --vs torch adds PyTorch's step.
// Returns the process exit code.
int bench_compute(const BenchComputeOptions& options);

struct GradeCliOptions {
  std::string lab;           // a folder of labs/, e.g. 01-collectives
  std::string submission;    // a folder (or one file) with the student's files; default: the lab's stubs
  std::string results_path;  // Gradescope's results.json
  std::string junit_path;    // JUnit XML
  bool json = false;         // results.json on stdout instead of the table
  bool details = false;      // the table shows what passed checks measured too
  std::vector<std::string> only;  // --check NAME: run these checks alone
  std::string labs_dir;      // default: labs/ beside the sources, or $SCALELAB_LABS
  std::string toolchain;     // default: grade-toolchain.txt beside this executable
  std::string release_path;  // --release OUT.tar.gz: the student hand-out instead of grading
  std::string class_dir;     // --submissions DIR: one sub-folder (or file) per student, all graded
  std::string out_dir;       // with --submissions: per-student reports and grades.csv (default grades-<lab>)
  double timeout_s = 0;      // > 0: every check's time limit instead of the rubric's
  bool keep_scratch = false;
  bool mutants = false;         // grade the lab's shipped mutants
  bool mutation_score = false;  // grade automatic mutations of the solution
};

// The lab grader (labs/grader): builds a submission into a lab's harness and runs its rubric.
int run_grade(const GradeCliOptions& options);

struct CalibrateOptions {
  std::string device = "cpu";  // cpu | cuda (the GPU through the cuda device; logical devices for the collectives)
  std::string out;     // default: calibrated-<host>.json here
  bool quick = false;  // a smaller grid and shorter timings (~20 s): for tests
  int devices = 4;     // ranks of the threads all-reduce measured
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

// How this machine runs now what its calibration measured: a GEMM of the table, timed as
// calibrate timed it (a shared VM's GEMMs ran 0.8–1.6× their calibrated times a minute later), and
// a cache line's round trip between the turn-taker's core and OpenBLAS's helper's
// (core_round_trip_s, core/device/host_cores.h): on the AMD VM every element-wise op of a training step
// ran 2–3× slower for minutes at a time, exactly while that round trip was 350–420 ns instead of
// 70–125: as a guest can tell, the host had placed the two vCPUs apart, and half of each GEMM's
// output, which the helper writes, then crossed between them. (SGD timed alone, or after a GEMM, read 0.88–1.01×
// through such a stretch: an element-wise probe does not catch it.)
struct SpeedProbe {
  std::string what;
  double calibrated_s = 0, now_s = 0;
  double moved_past = 1.10;  // a ratio beyond this either way (or below its inverse): the machine has moved
  double ratio() const { return calibrated_s > 0 ? now_s / calibrated_s : 0; }
  bool moved() const { return ratio() > moved_past || ratio() * moved_past < 1; }
};
// The round trip moved by jitter alone up to 1.8× while the cores stayed close (70–125 ns); placed
// apart it was 3× or more.
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
