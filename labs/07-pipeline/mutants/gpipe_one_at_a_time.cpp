// mutant: GPipe that does not pipeline: each micro-batch's forward and then its backward (F0 B0 F1 B1
//   …), as model parallel would — not "every forward, then every backward" (run, it deadlocks: stage
//   s's B0 receives F1's activations before it sends B0's gradient, which stage s − 1 is still
//   waiting for)
// caught-by: well_formed
// The reference solution with gpipe_schedule replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define gpipe_schedule reference_gpipe_schedule
#include "labs/07-pipeline/solution/schedule.cpp"
#undef gpipe_schedule

namespace lab07 {

std::vector<Task> gpipe_schedule(int stages, int stage, int micro_batches) {
  (void)stages, (void)stage;
  std::vector<Task> tasks;
  for (int i = 0; i < micro_batches; ++i) {
    tasks.push_back(F(i));
    tasks.push_back(B(i));
  }
  return tasks;
}

}  // namespace lab07
