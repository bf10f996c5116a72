// mutant: 1F1B's warm-up of p − 1 forwards on every stage (forgot the "− stage"): two neighbours
//   with the same warm-up disagree in the steady state — stage s + 1's first backward receives its
//   next forward's activations before it sends its gradient, while stage s, already in its first
//   backward, waits for that gradient: a deadlock, ended by the process group's 2 s timeout
// caught-by: one_f_one_b_equivalence
// The reference solution with one_f_one_b_schedule replaced by the version below (the macro renames
// the reference's own).
#include <algorithm>

#include "lab.h"
#define one_f_one_b_schedule reference_one_f_one_b_schedule
#include "labs/07-pipeline/solution/schedule.cpp"
#undef one_f_one_b_schedule

namespace lab07 {

std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  const int warmup = std::min(stages - 1, micro_batches);
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
