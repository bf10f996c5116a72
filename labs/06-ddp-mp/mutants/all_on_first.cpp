// mutant: every layer on the rank's first device — the replica not split at all, the second device
//   left with the labels and the loss only: not the device map asked for
// caught-by: placement
// The reference solution with layer_side replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define layer_side reference_layer_side
#include "labs/06-ddp-mp/solution/ddp_mp.cpp"
#undef layer_side

namespace lab06 {

int layer_side(int layer, int layers) {
  (void)layer, (void)layers;
  return 0;
}

}  // namespace lab06
