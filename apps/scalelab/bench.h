#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run/train.h"
#include "strategies/train_config.h"

namespace scalelab {

struct BenchComputeOptions {
  std::string model = "mlp:784-1024-1024-10";
  int64_t batch = 0;  // 0: 512 for an MLP, 64 for the ConvNet, 8 for a GPT
  int steps = 20;
  int warmup = 0;              // untimed steps first; 0: 3 on cpu, 10 on cuda
  std::string device = "cpu";  // cpu (bound: OpenBLAS) | cuda (bound: cuBLAS; peer: PyTorch eager on the GPU)
  std::string amp = "off";     // cuda: off (f32, TF32 off) | bf16 (autocast, f32 master weights)
  std::string vs;  // "torch": PyTorch's step of the same model (cpu: on as many threads), same run
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

}  // namespace scalelab
