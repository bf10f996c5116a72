#pragma once
#include <string>

namespace scalelab {

struct BenchComputeOptions {
  std::string model = "mlp:784-1024-1024-10";
  int64_t batch = 512;
  int steps = 20;
  std::string json_path;
};

// The training step's GFLOP/s on the cpu device next to OpenBLAS sgemm on the same GEMM shapes,
// measured in the same run. Returns the process exit code.
int bench_compute(const BenchComputeOptions& options);

}  // namespace scalelab
