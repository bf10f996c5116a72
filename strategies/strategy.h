#pragma once
// A strategy is one way of spreading training over devices. Each lives in its own file here and
// reads like the lecture it accompanies. All of them take the same global batch and must produce
// the same weights as `single` (the equivalence contract in ../shared/DESIGN.md).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/mlp.h"
#include "core/run/config.h"
#include "core/trace/events.h"

namespace scalelab {

struct StrategyContext {
  const TrainConfig& config;
  std::vector<Device*> devices;
  EventBus& bus;
  HostWeights initial_weights;  // the same for every strategy: drawn from the seed
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // One optimizer step on a global batch (host memory); returns the mean loss over the batch.
  virtual double train_step(const HostBatch& batch, int64_t step) = 0;
  // The current weights, copied to the host.
  virtual HostWeights weights() = 0;
};

struct StrategyInfo {
  std::string name;
  std::string summary;  // one line for `scalelab strategies`
  std::function<std::unique_ptr<Strategy>(StrategyContext&)> make;
};

const std::vector<StrategyInfo>& strategy_registry();
// Throws UsageError listing the known strategies.
const StrategyInfo& find_strategy(const std::string& name);

}  // namespace scalelab
