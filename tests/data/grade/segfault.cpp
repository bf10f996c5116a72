// The grade test's submission that writes far outside its tensor in ring_all_reduce (lab 01's
// solution otherwise). Expected: `crashed` with SIGSEGV.
// The reference solution with ring_all_reduce replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define ring_all_reduce reference_ring_all_reduce
#include "labs/01-collectives/solution/ring.cpp"
#undef ring_all_reduce

namespace lab01 {

void ring_all_reduce(ProcessGroup& pg, const Tensor& data) {
  data.data<float>()[-(1ll << 40) + pg.rank()] = 1.0f;  // 4 TB before the tensor: unmapped
}

}  // namespace lab01
