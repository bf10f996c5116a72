// mutant: 1F1B's cool-down runs the backwards left newest first (B m−1 … B m−w), as autograd would
//   unwind them; but each layer keeps its inputs in a queue, so the backwards must come in the
//   order of the forwards (the strategy refuses the list)
// caught-by: well_formed
// The reference solution with one_f_one_b_schedule replaced by the version below (the macro renames
// the reference's own).
#include <algorithm>

#include "lab.h"
#define one_f_one_b_schedule reference_one_f_one_b_schedule
#include "labs/07-pipeline/solution/schedule.cpp"
#undef one_f_one_b_schedule

namespace lab07 {

std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  const int warmup = std::min(stages - stage - 1, micro_batches);
  std::vector<Task> tasks;
  for (int i = 0; i < warmup; ++i) tasks.push_back(F(i));
  for (int i = 0; i < micro_batches - warmup; ++i) {
    tasks.push_back(F(warmup + i));
    tasks.push_back(B(i));
  }
  for (int i = micro_batches - 1; i >= micro_batches - warmup; --i) tasks.push_back(B(i));
  return tasks;
}

}  // namespace lab07
