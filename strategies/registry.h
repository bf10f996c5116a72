#pragma once
#include "strategies/strategy.h"

namespace scalelab {

// One factory per strategy file.
std::unique_ptr<Strategy> make_single(StrategyContext& ctx);
std::unique_ptr<Strategy> make_multiprocessing(StrategyContext& ctx);
std::unique_ptr<Strategy> make_data_parallel(StrategyContext& ctx);
std::unique_ptr<Strategy> make_model_parallel(StrategyContext& ctx);
std::unique_ptr<Strategy> make_pipeline(StrategyContext& ctx);
// A pipeline of `stages` stages over `spec`, --batch cut into --micro-batches: throws UsageError
// where a stage would have no layer or the micro-batches would be unequal; interleaved
// (virtual_stages > 1), where a virtual stage would have no layer or m is no multiple of p.
void check_pipeline_shape(int stages, int micro_batches, int64_t batch, const ModelSpec& spec, int virtual_stages = 1);
// A device needs at least one layer of its own. Throws UsageError naming both counts.
void check_model_parallel_shape(int devices, const ModelSpec& spec);
std::unique_ptr<Strategy> make_ddp(StrategyContext& ctx);
std::unique_ptr<Strategy> make_ddp_mp(StrategyContext& ctx);
std::unique_ptr<Strategy> make_zero(StrategyContext& ctx);
std::unique_ptr<Strategy> make_tensor_parallel(StrategyContext& ctx);
// A GPT whose heads and MLP width --devices ranks share equally: throws UsageError naming the
// value and the fix otherwise.
void check_tensor_parallel_shape(const TrainConfig& config);

}  // namespace scalelab
