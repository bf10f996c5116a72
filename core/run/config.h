#pragma once
// Everything a training run is told, as the CLI (and later the dashboard) sets it.
#include <cstdint>
#include <string>

#include "core/device/device.h"
#include "core/nn/optimizer.h"

namespace scalelab {

struct TrainConfig {
  std::string strategy = "single";
  DeviceKind device = DeviceKind::cpu;
  std::string hw;  // hardware profile name or path (sim)
  int devices = 1;
  bool dry_run = false;
  std::string model = "mlp:784-256-128-10";
  std::string dataset = "fashion-mnist";  // fashion-mnist | synthetic
  std::string data_dir;                   // empty: the Debian package's directory
  int64_t epochs = 1;
  int64_t steps = 0;  // > 0 overrides epochs
  int64_t batch = 128;
  OptimizerConfig optimizer;
  uint64_t seed = 42;
  std::string trace_path;
  std::string json_path;
  int64_t synthetic_train = 8192;  // sizes of the synthetic set
  int64_t synthetic_test = 2048;

  // Throws UsageError naming the option and the fix.
  void validate() const;
};

}  // namespace scalelab
