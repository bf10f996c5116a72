#pragma once
#include "strategies/strategy.h"

namespace scalelab {

// One factory per strategy file.
std::unique_ptr<Strategy> make_single(StrategyContext& ctx);
std::unique_ptr<Strategy> make_multiprocessing(StrategyContext& ctx);
std::unique_ptr<Strategy> make_data_parallel(StrategyContext& ctx);
std::unique_ptr<Strategy> make_model_parallel(StrategyContext& ctx);
std::unique_ptr<Strategy> make_pipeline(StrategyContext& ctx);
std::unique_ptr<Strategy> make_ddp(StrategyContext& ctx);
std::unique_ptr<Strategy> make_ddp_mp(StrategyContext& ctx);
std::unique_ptr<Strategy> make_zero(StrategyContext& ctx);

}  // namespace scalelab
