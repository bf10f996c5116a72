// mutant: one forward too many in 1F1B's warm-up: p − s instead of p − s − 1 (counting the stages
//   from this one on rather than those after it). The neighbours still fit together and the
//   weights are right, but stage 0 holds p + 1 micro-batches' activations before its first backward
// caught-by: one_f_one_b_peak
// The reference solution with one_f_one_b_schedule replaced by the version below (the macro renames
// the reference's own).
#include <algorithm>

#include "lab.h"
#define one_f_one_b_schedule reference_one_f_one_b_schedule
#include "labs/07-pipeline/solution/schedule.cpp"
#undef one_f_one_b_schedule

namespace lab07 {

std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  const int warmup = std::min(stages - stage, micro_batches);
  std::vector<Task> tasks;
  for (int i = 0; i < warmup; ++i) tasks.push_back(F(i));
  for (int i = 0; i < micro_batches - warmup; ++i) {
    tasks.push_back(F(warmup + i));
    tasks.push_back(B(i));
  }
  for (int i = micro_batches - warmup; i < micro_batches; ++i) tasks.push_back(B(i));
  return tasks;
}

}  // namespace lab07
