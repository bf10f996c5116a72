// Lab 03 — your file. Write the functions below (their contracts are in lab.h), then grade them:
//   scalelab grade 03-data-parallel
// Read first: README.md of this lab; strategies/data_parallel.cpp (the library's DataParallel: its
// train_step is what you write here, without mixed precision).
#include "lab.h"

namespace lab03 {

using scalelab::DType;
using scalelab::Layer;
using scalelab::MemoryCategory;
using scalelab::Phase;
using scalelab::Role;

double data_parallel_step(Controller& c, const HostBatch& batch) {
  // TODO: 1. scatter the batch; 2. replicate the weights from device 0; 3. forward on every
  // replica; 4. gather the outputs on device 0, the loss there; 5. scatter the output gradient;
  // 6. backward on every replica; 7. reduce (sum) the gradients to device 0; 8. step.
  (void)c, (void)batch;
  throw lab::Todo("data_parallel_step", "labs/03-data-parallel/dp.cpp");
}

int64_t device0_extra_peak_bytes() {
  // TODO: compute it (README.md, "The numeric question") and return the number.
  throw lab::Todo("device0_extra_peak_bytes", "labs/03-data-parallel/dp.cpp");
}

}  // namespace lab03
