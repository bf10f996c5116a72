// Lab 04 — your file. Write the functions below (their contracts are in lab.h), answer the question
// in answers.json, then grade them:
//   scalelab grade 04-model-parallel
// Read first: README.md of this lab; strategies/model_parallel.cpp (the library's model parallel:
// its train_step is Task 2).
#include "lab.h"

namespace lab04 {

using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::Phase;

std::vector<int> layer_devices(int layers, int devices) {
  // TODO: contiguous groups in order, at least one layer each, sizes differing by at most one.
  (void)layers, (void)devices;
  throw lab::Todo("layer_devices", "labs/04-model-parallel/mp.cpp");
}

double model_parallel_step(Controller& c, const HostBatch& batch) {
  // TODO: 1. upload x to the first device, y to the last; 2. forward, copying the activations to
  // the next device at each boundary; 3. the loss on the last device; 4. backward, copying the
  // gradient back at each boundary; 5. step.
  (void)c, (void)batch;
  throw lab::Todo("model_parallel_step", "labs/04-model-parallel/mp.cpp");
}

double pipelined_step(Controller& c, const HostBatch& batch, int64_t split_size) {
  // TODO: the same step with the batch in chunks of split_size rows: every chunk's forward, the
  // losses, every chunk's backward in the same order, the weight gradients added up; one step.
  (void)c, (void)batch, (void)split_size;
  throw lab::Todo("pipelined_step", "labs/04-model-parallel/mp.cpp");
}

}  // namespace lab04
