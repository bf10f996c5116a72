// mutant: a broadcast in which the root sends to every rank in turn: n − 1 rounds instead of ⌈log2
//   n⌉
// caught-by: broadcast_rounds
// The reference solution with tree_broadcast replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define tree_broadcast reference_tree_broadcast
#include "labs/01-collectives/solution/ring.cpp"
#undef tree_broadcast

namespace lab01 {

void tree_broadcast(ProcessGroup& pg, const Tensor& data, int root) {
  const int n = pg.size();
  const int me = mod(pg.rank() - root, n);  // counted from the root
  if (me == 0) {
    for (int k = 1; k < n; ++k) pg.send(data, mod(k + root, n));
  } else {
    pg.recv(data, root);
  }
}

}  // namespace lab01
