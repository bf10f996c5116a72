#pragma once
// The pipeline strategy with a schedule given from outside: the same stages, micro-batches, sends
// and receives as `--strategy pipeline`, but each stage runs the task list that `schedule` returns
// instead of GPipe's or 1F1B's (lab 07's harness runs a student's schedules through it). What a
// schedule is, and the two the strategy knows, is strategies/pipeline_schedule.h.
#include <memory>

#include "strategies/pipeline_schedule.h"
#include "strategies/strategy.h"

namespace scalelab {

// The pipeline strategy (the registry's make_pipeline) running `schedule` on every stage; --schedule
// is ignored. Every stage's list is checked (check_pipeline_schedule) before anything runs.
std::unique_ptr<Strategy> make_pipeline_with_schedule(StrategyContext& ctx, PipelineSchedule schedule);

}  // namespace scalelab
