#pragma once
// A pipeline's schedule: the order in which each stage runs the forwards and backwards of the
// micro-batches in one training step. The two the lecture teaches (GPipe, 1F1B) and the check that
// a list is one a stage can run are here; what a stage does for each task is strategies/pipeline.cpp.
#include <cstdint>
#include <functional>
#include <vector>

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

// The lecture's two schedules (drawn in strategies/pipeline_schedule.cpp). GPipe: every forward,
// then every backward, the same list on every stage. 1F1B (PipeDream-Flush): a warm-up of
// min(p − s − 1, m) forwards, then one forward and one backward in turn, then the backwards left.
std::vector<PipelineTask> gpipe_schedule(int stages, int stage, int micro_batches);
std::vector<PipelineTask> one_f_one_b_schedule(int stages, int stage, int micro_batches);

// Throws Error("pipeline", …) naming the stage and what is wrong unless `tasks` runs the forward and
// the backward of every micro-batch 0 … micro_batches − 1 exactly once, each backward after its
// forward, the backwards in the order of the forwards (each layer keeps the inputs of its forwards
// in a queue and its backward takes the oldest). Whether the stages' lists fit together — each
// send meeting its receive — shows only when they run: a pair that does not fit waits until the
// process group's timeout.
void check_pipeline_schedule(const std::vector<PipelineTask>& tasks, int stages, int stage, int micro_batches);

}  // namespace scalelab
