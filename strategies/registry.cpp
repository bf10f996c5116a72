#include "strategies/registry.h"

#include "core/error.h"

namespace scalelab {

const std::vector<StrategyInfo>& strategy_registry() {
  static const std::vector<StrategyInfo> registry = {
      {"single", "the whole model on one device: the reference every strategy is checked against", make_single},
  };
  return registry;
}

const StrategyInfo& find_strategy(const std::string& name) {
  std::string known;
  for (const auto& s : strategy_registry()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw UsageError("strategy", "--strategy '" + name + "' is unknown — use one of: " + known);
}

}  // namespace scalelab
