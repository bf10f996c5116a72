#pragma once
#include "strategies/strategy.h"

namespace scalelab {

// One factory per strategy file.
std::unique_ptr<Strategy> make_single(StrategyContext& ctx);

}  // namespace scalelab
