// mutant: 1F1B without the warm-up: every stage alternates F0 B0 F1 B1 … from the start. Stage 1's
//   B0 first receives F1's activations from stage 0, which is itself waiting in its own B0 for
//   stage 1's gradient: a deadlock, ended by the process group's 2 s timeout
// caught-by: one_f_one_b_equivalence
// The reference solution with one_f_one_b_schedule replaced by the version below (the macro renames
// the reference's own).
#include "lab.h"
#define one_f_one_b_schedule reference_one_f_one_b_schedule
#include "labs/07-pipeline/solution/schedule.cpp"
#undef one_f_one_b_schedule

namespace lab07 {

std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  (void)stages, (void)stage;
  std::vector<Task> tasks;
  for (int i = 0; i < micro_batches; ++i) {
    tasks.push_back(F(i));
    tasks.push_back(B(i));
  }
  return tasks;
}

}  // namespace lab07
