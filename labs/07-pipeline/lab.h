#pragma once
// Lab 07 — pipeline schedules. You write the two functions declared first below, in schedule.cpp;
// the helpers after them are given. The grader builds your schedule.cpp into harness.cpp and runs
// the checks of checks.json (`scalelab grade 07-pipeline`).
//
// A pipeline cuts the model's layers into p stages, one per device, and the batch into m
// micro-batches. Each stage runs a list of tasks, in order, every training step:
//   F i  the forward of micro-batch i: receive its activations from the stage before (stage 0
//        reads its rows of the batch), run this stage's layers, send the output to the stage after
//        (the last stage computes the loss instead);
//   B i  the backward of micro-batch i: receive the gradient of its output from the stage after
//        (the last stage has it from the loss), run the layers backward, send the gradient of its
//        input to the stage before.
// A schedule is the function that gives stage `stage` of `stages` its list. The harness runs the
// library's real pipeline strategy (strategies/pipeline.cpp, through make_pipeline_with_schedule
// in strategies/pipeline.h) with your schedule on every stage: real layers, real sends and
// receives between the stages' threads.
//
// Three rules for every list, checked before anything runs (check_pipeline_schedule): each
// micro-batch 0 … m − 1 has its forward and its backward exactly once; a backward comes after its
// forward; and the backwards come in the order of the forwards — each layer keeps the inputs of its
// forwards in a queue, and a backward takes the oldest (Linear::backward in core/nn/linear.cpp).
//
// A send is a rendezvous: it returns once the stage at the other end has received it. So the
// lists of two neighbouring stages must agree on the order of what crosses the link between them;
// if they do not, each waits for the other, the process group gives up after 2 s and the check
// fails naming the message that never came. One more rule of the strategy: when a stage's backward
// is followed by a forward, it receives that forward's activations *before* it sends the
// backward's gradient (the stage before sends those activations first, then waits for the
// gradient — see "Sends wait until the peer receives" in strategies/pipeline.cpp).
#include <string>
#include <vector>

#include "labs/common/harness.h"
#include "strategies/pipeline.h"

namespace lab07 {

using Pass = scalelab::PipelinePass;  // Pass::forward, Pass::backward
using Task = scalelab::PipelineTask;  // {pass, micro_batch}

// Task 1. GPipe: every forward, then every backward — F 0, F 1, …, F m−1, B 0, …, B m−1 on every
// stage. Stage 0 then holds all m micro-batches' activations at once.
std::vector<Task> gpipe_schedule(int stages, int stage, int micro_batches);

// Task 2. 1F1B (PipeDream-Flush): stage s of p first runs a warm-up of forwards that fills the
// pipe, as many as there are stages after it (never more than m); then one forward and one
// backward in turn; then the backwards left over (cool-down). Stage s then holds at most p − s
// micro-batches' activations at once, and the bubble is the same as GPipe's.
std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches);

// ---- Given ---------------------------------------------------------------------------------

inline Task F(int micro_batch) { return {Pass::forward, micro_batch}; }   // the forward of micro-batch i
inline Task B(int micro_batch) { return {Pass::backward, micro_batch}; }  // its backward

// "F0 F1 B0 B1": a list as text (print one while you work: std::puts(lab07::text(tasks).c_str())).
inline std::string text(const std::vector<Task>& tasks) {
  std::string s;
  for (const Task& t : tasks)
    s += (s.empty() ? "" : " ") + std::string(t.pass == Pass::forward ? "F" : "B") + std::to_string(t.micro_batch);
  return s;
}

}  // namespace lab07
