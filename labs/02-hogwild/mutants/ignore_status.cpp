// mutant: the parent waits for every worker but never looks at how it ended: a worker that exited
//   with an error, or was killed, counts as finished, and a half-trained model is returned as if
//   all went well
// caught-by: worker_failure
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
  {
    Workers workers;
    for (int r = 0; r < job.workers; ++r) workers.start([&, r] { return worker(r, model, job); });
    const auto deadline = Workers::Clock::now() + job.timeout;
    for (int r = 0; r < job.workers; ++r) workers.wait(r, deadline);  // ended: fine, whatever its status
  }
  HostWeights trained = model.download();
  release(segment);
  return trained;
}

}  // namespace lab02
