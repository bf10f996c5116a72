// The grade test's submission that never ends: ring_all_reduce spins for ever (lab 01's
// solution otherwise). Expected: `timeout`, the grader going on to the next check.
// The reference solution with ring_all_reduce replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define ring_all_reduce reference_ring_all_reduce
#include "labs/01-collectives/solution/ring.cpp"
#undef ring_all_reduce

namespace lab01 {

void ring_all_reduce(ProcessGroup& pg, const Tensor& data) {
  (void)pg, (void)data;
  for (volatile int spin = 0;; spin = spin + 1) {
  }
}

}  // namespace lab01
