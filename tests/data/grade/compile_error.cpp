// The grade test's submission that does not compile (lab 01's solution with a typo).
// Expected: `builds` failed with the compiler's first errors, every other check blocked.
// The reference solution with ring_all_reduce replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define ring_all_reduce reference_ring_all_reduce
#include "labs/01-collectives/solution/ring.cpp"
#undef ring_all_reduce

namespace lab01 {

void ring_all_reduce(ProcessGroup& pg, const Tensor& data) {
  const int n = pg.size()
  rigth = n;
  reference_ring_all_reduce(pg, data);
}

}  // namespace lab01
