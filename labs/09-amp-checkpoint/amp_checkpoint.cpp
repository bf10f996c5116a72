// Lab 09 — your file. Write the functions lab.h declares under "Task"; each throws lab::Todo
// until you do. Grade it with `scalelab grade 09-amp-checkpoint`.
#include <cstdio>
#include <stdexcept>

#include "lab.h"

namespace lab09 {

using scalelab::Phase;
using scalelab::ReduceOp;

bool unscale_and_update(const std::vector<Tensor>& grads, ProcessGroup& group, Device& device, const Tensor& flag,
                        ScalerState& state, const ScalerOptions& options) {
  // TODO: unscale every gradient by 1/S, look for inf/nan, agree over the group (all-reduce max of
  // the flag), then halve and skip, or count a good step (and grow after growth_interval of them).
  (void)grads, (void)group, (void)device, (void)flag, (void)state, (void)options;
  throw lab::Todo("unscale_and_update", "labs/09-amp-checkpoint/amp_checkpoint.cpp");
}

void save_checkpoint(const std::string& path, const TrainState& state, ProcessGroup& group) {
  // TODO: rank 0 writes encode_state(state) to path + ".tmp" and renames it to path; then every
  // rank waits at group.barrier().
  (void)path, (void)state, (void)group;
  throw lab::Todo("save_checkpoint", "labs/09-amp-checkpoint/amp_checkpoint.cpp");
}

TrainState load_checkpoint(const std::string& path) {
  // TODO: decode_state(read_file(path)).
  (void)path;
  throw lab::Todo("load_checkpoint", "labs/09-amp-checkpoint/amp_checkpoint.cpp");
}

}  // namespace lab09
