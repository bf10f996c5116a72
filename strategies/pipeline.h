#pragma once
// The pipeline strategy with a schedule given from outside: the same stages, micro-batches, sends
// and receives as `--strategy pipeline`, but each stage runs the task list that `schedule` returns
// instead of GPipe's or 1F1B's (lab 07's harness runs a student's schedules through it). What a
// schedule is, and the two the strategy knows, is explained in strategies/pipeline.cpp.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "strategies/strategy.h"

namespace scalelab {

enum class PipelinePass : uint8_t { forward, backward };

// One task of a stage: the forward or the backward of one micro-batch.
struct PipelineTask {
  PipelinePass pass;
  int micro_batch;
};

// The tasks stage `stage` (0 … stages − 1) runs in one training step, in order, when the batch is
// cut into `micro_batches`. A pure function of its arguments: it is called once per stage and step.
using PipelineSchedule = std::function<std::vector<PipelineTask>(int stages, int stage, int micro_batches)>;

// Throws Error("pipeline", …) naming the stage and what is wrong unless `tasks` runs the forward and
// the backward of every micro-batch 0 … micro_batches − 1 exactly once, each backward after its
// forward, the backwards in the order of the forwards (each layer keeps the inputs of its forwards
// in a queue and its backward takes the oldest). (Whether the stages' lists fit together — each send meeting its receive — shows only
// when they run: a pair that does not fit waits until the process group's timeout.)
void check_pipeline_schedule(const std::vector<PipelineTask>& tasks, int stages, int stage, int micro_batches);

// The pipeline strategy (the registry's make_pipeline) running `schedule` on every stage; --schedule
// is ignored. Every stage's list is checked (check_pipeline_schedule) before anything runs.
std::unique_ptr<Strategy> make_pipeline_with_schedule(StrategyContext& ctx, PipelineSchedule schedule);

}  // namespace scalelab
