// Lab 07 — the reference schedules.
#include <algorithm>

#include "lab.h"

namespace lab07 {

std::vector<Task> gpipe_schedule(int stages, int stage, int micro_batches) {
  (void)stages, (void)stage;  // the same list on every stage
  std::vector<Task> tasks;
  for (int i = 0; i < micro_batches; ++i) tasks.push_back(F(i));
  for (int i = 0; i < micro_batches; ++i) tasks.push_back(B(i));
  return tasks;
}

std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  // Stage s fills the pipe with one forward per stage after it: the last stage none, stage 0
  // p − 1 (and never more than there are micro-batches).
  const int warmup = std::min(stages - stage - 1, micro_batches);
  std::vector<Task> tasks;
  for (int i = 0; i < warmup; ++i) tasks.push_back(F(i));
  // Steady state: the forward of the next micro-batch, then the backward of the oldest.
  for (int i = 0; i < micro_batches - warmup; ++i) {
    tasks.push_back(F(warmup + i));
    tasks.push_back(B(i));
  }
  // Cool-down: the backwards of the warm-up's micro-batches.
  for (int i = micro_batches - warmup; i < micro_batches; ++i) tasks.push_back(B(i));
  return tasks;
}

}  // namespace lab07
