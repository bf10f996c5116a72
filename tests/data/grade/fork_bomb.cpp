// The grade test's fork bomb: ring_all_reduce forks for ever (lab 01's solution otherwise).
// Expected: `timeout` within the check's limit, bounded by the process limit, every process killed.
// The reference solution with ring_all_reduce replaced by the version below (the macro renames the
// reference's own).
#include <unistd.h>

#include "lab.h"
#define ring_all_reduce reference_ring_all_reduce
#include "labs/01-collectives/solution/ring.cpp"
#undef ring_all_reduce

namespace lab01 {

void ring_all_reduce(ProcessGroup& pg, const Tensor& data) {
  (void)pg, (void)data;
  for (;;) ::fork();
}

}  // namespace lab01
