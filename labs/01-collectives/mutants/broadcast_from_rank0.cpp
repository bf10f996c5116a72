// mutant: broadcast from rank 0 whatever the root: ranks are counted from 0, not from the root
// caught-by: broadcast_exact
// The reference solution with tree_broadcast replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define tree_broadcast reference_tree_broadcast
#include "labs/01-collectives/solution/ring.cpp"
#undef tree_broadcast

namespace lab01 {

void tree_broadcast(ProcessGroup& pg, const Tensor& data, int root) {
  const int n = pg.size();
  const int me = pg.rank();  // (root unused: rank 0 is taken to be the root)
  (void)root;
  // Round k (step = 2^k): the ranks below `step` have the data; each sends it `step` further on.
  for (int step = 1; step < n; step *= 2) {
    if (me < step) {
      if (me + step < n) pg.send(data, me + step);
    } else if (me < 2 * step) {
      pg.recv(data, me - step);
    }
  }
}

}  // namespace lab01
