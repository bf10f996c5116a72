// mutant: forgot to unscale: the optimizer steps with gradients S times too large
// caught-by: unscaled_equivalence
// (A whole file: the reference solution with the change above.)
#include <cstdio>
#include <stdexcept>

#include "lab.h"

namespace lab09 {

using scalelab::Phase;
using scalelab::ReduceOp;

bool unscale_and_update(const std::vector<Tensor>& grads, ProcessGroup& group, Device& device, const Tensor& flag,
                        ScalerState& state, const ScalerOptions& options) {
  const float inverse = 1.0f / state.scale;
  (void)inverse;
  bool found = false;
  for (const Tensor& g : grads) {
    if (device.has_non_finite({"amp.check", Phase::optim}, g)) found = true;
  }
  float f = found ? 1.0f : 0.0f;  // every rank decides alike: overflow anywhere is overflow everywhere
  device.upload({"amp.found_inf", Phase::optim}, flag, &f);
  group.all_reduce(flag, ReduceOp::max);
  device.download({"amp.found_inf", Phase::optim}, &f, flag);
  if (f != 0.0f) {
    state.scale *= options.backoff_factor;
    state.good_steps = 0;
    ++state.skipped_steps;
    return false;
  }
  if (++state.good_steps == options.growth_interval) {
    state.scale *= options.growth_factor;
    state.good_steps = 0;
  }
  return true;
}

void save_checkpoint(const std::string& path, const TrainState& state, ProcessGroup& group) {
  if (group.rank() == 0) {
    const std::string tmp = path + ".tmp";
    write_file(tmp, encode_state(state));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
  }
  group.barrier();  // no rank goes on before the file is in place
}

TrainState load_checkpoint(const std::string& path) { return decode_state(read_file(path)); }

}  // namespace lab09
