// mutant: no_sync that never accumulates: each backward overwrites the gradients, so the step
//   uses the last batch's only
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
  w.accumulate = false;
  w.sync = in_window == k - 1;
  w.grad_scale = 1.0f / static_cast<float>(k);
  return w;
}

}  // namespace lab05
