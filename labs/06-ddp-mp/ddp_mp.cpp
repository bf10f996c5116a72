// Lab 06 — your file. Write the functions below (their contracts are in lab.h), then grade them:
//   scalelab grade 06-ddp-mp
// Read first: README.md of this lab; strategies/ddp_mp.cpp (the step of one rank of the library's
// DDP with model parallel), strategies/model_parallel.cpp (the copies across a device boundary) and
// strategies/ddp_common.cpp (GradientReducer: a bucket never mixes devices).
#include "lab.h"

namespace lab06 {

using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::Phase;

RankDevices rank_devices(int rank) {
  // TODO: the two devices of rank `rank`.
  (void)rank;
  throw lab::Todo("rank_devices", "labs/06-ddp-mp/ddp_mp.cpp");
}

int layer_side(int layer, int layers) {
  // TODO: 0 for the first ⌈layers/2⌉ layers, 1 for the rest.
  (void)layer, (void)layers;
  throw lab::Todo("layer_side", "labs/06-ddp-mp/ddp_mp.cpp");
}

std::vector<Bucket> make_buckets(const std::vector<Parameter*>& params) {
  // TODO: one bucket per device (make_bucket), the second device's first.
  (void)params;
  throw lab::Todo("make_buckets", "labs/06-ddp-mp/ddp_mp.cpp");
}

double rank_step(Replica& r, const HostBatch& shard) {
  // TODO: 1. upload the features to the first device, the labels to the second; 2. forward across
  // the two devices (copy the activation); 3. the loss on the second; 4. backward (copy the
  // gradient back), each bucket launched when its device's backward is done; 5. wait, average,
  // unpack; 6. the optimizer step.
  (void)r, (void)shard;
  throw lab::Todo("rank_step", "labs/06-ddp-mp/ddp_mp.cpp");
}

}  // namespace lab06
