// mutant: no_sync without the 1/K scale: the step uses the SUM of the K batches' gradients, K times
//   the mean
// caught-by: no_sync
// The reference solution with no_sync_window replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define no_sync_window reference_no_sync_window
#include "labs/05-ddp/solution/reducer.cpp"
#undef no_sync_window

namespace lab05 {

NoSyncWindow no_sync_window(int k, int64_t step) {
  NoSyncWindow w;
  const int64_t in_window = step % k;
  w.accumulate = in_window != 0;
  w.sync = in_window == k - 1;
  w.grad_scale = 1.0f;
  return w;
}

}  // namespace lab05
