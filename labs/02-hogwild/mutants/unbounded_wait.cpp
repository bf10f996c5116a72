// mutant: the parent waits for each worker with no deadline (p.join() without a timeout): a worker
//   that hangs hangs the parent, for ever
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
  std::string failed;
  {
    Workers workers;
    for (int r = 0; r < job.workers; ++r) workers.start([&, r] { return worker(r, model, job); });
    for (int r = 0; r < job.workers && failed.empty(); ++r) {
      const int status = *workers.wait(r, Workers::Clock::time_point::max());  // until it ends, however long
      if (status != 0) failed = "worker " + std::to_string(r) + ": " + Workers::status_text(status);
    }
  }
  HostWeights trained = model.download();
  release(segment);
  if (!failed.empty()) throw std::runtime_error(failed);
  return trained;
}

}  // namespace lab02
