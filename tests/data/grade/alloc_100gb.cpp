// The grade test's submission that asks for 100 GB in ring_all_reduce (lab 01's solution
// otherwise). Expected: `failed` (std::bad_alloc under the check's memory limit), not a machine
// out of memory.
// The reference solution with ring_all_reduce replaced by the version below (the macro renames the
// reference's own).
#include <vector>

#include "lab.h"
#define ring_all_reduce reference_ring_all_reduce
#include "labs/01-collectives/solution/ring.cpp"
#undef ring_all_reduce

namespace lab01 {

void ring_all_reduce(ProcessGroup& pg, const Tensor& data) {
  std::vector<char> huge(100ull << 30, 1);  // 100 GB, every page touched
  if (huge[12345] == 1) reference_ring_all_reduce(pg, data);
}

}  // namespace lab01
