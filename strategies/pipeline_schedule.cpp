// The pipeline's schedules: the order in which a stage runs its tasks, F i (the forward of
// micro-batch i) and B i (its backward), in one training step. What a stage does for each task —
// receive, compute, send — is strategies/pipeline.cpp.
//
// The two schedules for p = 4 stages and m = 8 micro-batches. Each row is the list a stage runs,
// read left to right; a column is a time slot if F and B take one slot each ("..": idle, waiting
// for a neighbour: the bubble).
//
// GPipe: all forwards, then all backwards.
//   stage 0  F0 F1 F2 F3 F4 F5 F6 F7 .. .. .. .. .. .. B0 B1 B2 B3 B4 B5 B6 B7
//   stage 1  .. F0 F1 F2 F3 F4 F5 F6 F7 .. .. .. .. B0 B1 B2 B3 B4 B5 B6 B7 ..
//   stage 2  .. .. F0 F1 F2 F3 F4 F5 F6 F7 .. .. B0 B1 B2 B3 B4 B5 B6 B7 .. ..
//   stage 3  .. .. .. F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7 .. .. ..
//
// 1F1B: p − s − 1 forwards to fill the pipe (warm-up), then one forward and one backward in turn
// (steady state), then the backwards left (cool-down).
//   stage 0  F0 F1 F2 F3 .. .. .. B0 F4 B1 F5 B2 F6 B3 F7 B4 .. B5 .. B6 .. B7
//   stage 1  .. F0 F1 F2 .. .. B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .. B6 .. B7 ..
//   stage 2  .. .. F0 F1 .. B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .. B7 .. ..
//   stage 3  .. .. .. F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .. .. ..
//
// Both leave each stage idle p − 1 slots of forward and p − 1 of backward out of m + p − 1 each:
// the bubble is (p − 1) / (m + p − 1), 3/11 here, and more micro-batches shrink it. What 1F1B
// changes is memory: a stage keeps each micro-batch's activations from its forward to its
// backward, so under GPipe stage 0 holds all m of them at once, under 1F1B at most p.
#include "strategies/pipeline_schedule.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace scalelab {
namespace {
using Pass = PipelinePass;
using Task = PipelineTask;
}  // namespace

// slide: gpipe-schedule
// GPipe: F 0 … F m−1, then B 0 … B m−1, the same list on every stage.
std::vector<Task> gpipe_schedule(int /*stages*/, int /*stage*/, int micro_batches) {
  std::vector<Task> tasks;
  for (int i = 0; i < micro_batches; ++i) tasks.push_back({Pass::forward, i});
  for (int i = 0; i < micro_batches; ++i) tasks.push_back({Pass::backward, i});
  return tasks;
// end slide
}

// slide: one-f-one-b-schedule
// 1F1B (PipeDream-Flush): stage s of p runs w = min(p − s − 1, m) forwards, then m − w pairs
// (forward w + i, backward i), then the w backwards left.
std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  const int warmup = std::min(stages - stage - 1, micro_batches);
  std::vector<Task> tasks;
  for (int i = 0; i < warmup; ++i) tasks.push_back({Pass::forward, i});
  for (int i = 0; i < micro_batches - warmup; ++i) {
    tasks.push_back({Pass::forward, warmup + i});
    tasks.push_back({Pass::backward, i});
  }
  for (int i = micro_batches - warmup; i < micro_batches; ++i) tasks.push_back({Pass::backward, i});
  return tasks;
// end slide
}

// A list a stage can run: every micro-batch's F and B once, each B after its F, the Bs in the order
// of the Fs (strategies/pipeline_schedule.h says why each).
void check_pipeline_schedule(const std::vector<PipelineTask>& tasks, int stages, int stage, int micro_batches) {
  const std::string where = "the schedule of stage " + std::to_string(stage) + " (" + std::to_string(stages) +
                            " stages, " + std::to_string(micro_batches) + " micro-batches)";
  std::vector<int> forwards(static_cast<size_t>(micro_batches)), backwards(static_cast<size_t>(micro_batches));
  std::vector<int> forward_order;  // the micro-batches in the order of their forwards
  size_t backwards_run = 0;
  for (size_t k = 0; k < tasks.size(); ++k) {
    const int i = tasks[k].micro_batch;
    const bool forward = tasks[k].pass == PipelinePass::forward;
    const std::string task = std::string(forward ? "F" : "B") + " " + std::to_string(i);
    if (tasks[k].pass != PipelinePass::forward && tasks[k].pass != PipelinePass::backward)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " is neither a forward nor a backward");
    if (i < 0 || i >= micro_batches)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " is " + task +
                                  ", but the micro-batches are 0 … " + std::to_string(micro_batches - 1));
    int& seen = forward ? forwards[static_cast<size_t>(i)] : backwards[static_cast<size_t>(i)];
    if (seen++ > 0) throw Error("pipeline", where + ": task " + std::to_string(k) + " runs " + task + " a second time");
    if (!forward && forwards[static_cast<size_t>(i)] == 0)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " runs B " + std::to_string(i) +
                                  " before F " + std::to_string(i) + " — a backward needs its forward's activations");
    if (forward) {
      forward_order.push_back(i);
    } else if (forward_order[backwards_run++] != i) {
      // Each layer keeps the inputs of its forwards in a queue and its backward takes the oldest
      // (Linear::backward), so the backwards must come in the order of the forwards.
      throw Error("pipeline", where + ": task " + std::to_string(k) + " runs B " + std::to_string(i) + " where B " +
                                  std::to_string(forward_order[backwards_run - 1]) +
                                  " is due — the backwards run in the order of the forwards (each layer keeps its "
                                  "inputs in a queue, oldest first)");
    }
  }
  for (int i = 0; i < micro_batches; ++i)
    if (forwards[static_cast<size_t>(i)] == 0 || backwards[static_cast<size_t>(i)] == 0)
      throw Error("pipeline", where + " never runs " + (forwards[static_cast<size_t>(i)] == 0 ? "F " : "B ") +
                                  std::to_string(i) + " — every micro-batch needs its forward and its backward");
}

}  // namespace scalelab
