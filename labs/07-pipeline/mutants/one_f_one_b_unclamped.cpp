// mutant: 1F1B's warm-up not capped at m: with fewer micro-batches than stages after this one
//   (m = 2 on stage 0 of 4), the warm-up asks for forwards of micro-batches that do not exist, and
//   the cool-down for backwards of negative ones
// caught-by: well_formed
// The reference solution with one_f_one_b_schedule replaced by the version below (the macro renames
// the reference's own).
#include "lab.h"
#define one_f_one_b_schedule reference_one_f_one_b_schedule
#include "labs/07-pipeline/solution/schedule.cpp"
#undef one_f_one_b_schedule

namespace lab07 {

std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  const int warmup = stages - stage - 1;
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
