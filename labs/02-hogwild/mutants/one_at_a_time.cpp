// mutant: each worker is waited for right after it is started, so the next one starts only when
//   the previous has finished: the right weights of a sort, but no two workers ever train at once
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
  try {
    Workers workers;
    for (int r = 0; r < job.workers; ++r) {
      workers.start([&, r] { return worker(r, model, job); });
      const std::optional<int> status = workers.wait(r, Workers::Clock::now() + job.timeout);
      if (!status || *status != 0)
        throw std::runtime_error("worker " + std::to_string(r) + " failed: " +
                                 (status ? Workers::status_text(*status) : std::string("timeout")));
    }
  } catch (...) {
    release(segment);
    throw;
  }
  HostWeights trained = model.download();
  release(segment);
  return trained;
}

}  // namespace lab02
