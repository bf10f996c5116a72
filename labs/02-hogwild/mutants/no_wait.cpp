// mutant: the parent starts the workers and reads the weights straight away, without waiting for
//   them (no p.join()): it gets the weights of before the training, and its Workers kill them
// caught-by: processes
// The reference solution with hogwild replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define hogwild reference_hogwild
#include "labs/02-hogwild/solution/hogwild.cpp"
#undef hogwild

namespace lab02 {

HostWeights hogwild(Device& device, const HostWeights& init, const Job& job) {
  Mlp model(device, init);
  Segment segment = share_memory(model, job.sharing, job.name);
  Workers workers;
  for (int r = 0; r < job.workers; ++r) workers.start([&, r] { return worker(r, model, job); });
  HostWeights trained = model.download();  // the workers are still training
  release(segment);
  return trained;
}

}  // namespace lab02
