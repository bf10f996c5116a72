// mutant: the segment is released on the way out of a successful run only: when a worker fails,
//   hogwild throws past the release, and the mapping, the descriptor and the /dev/shm file stay
// caught-by: no_leak
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
  const auto deadline = Workers::Clock::now() + job.timeout;
  for (int r = 0; r < job.workers; ++r) {
    const std::optional<int> status = workers.wait(r, deadline);
    if (!status) throw std::runtime_error("worker " + std::to_string(r) + " did not finish in time");
    if (*status != 0) throw std::runtime_error("worker " + std::to_string(r) + ": " + Workers::status_text(*status));
  }
  HostWeights trained = model.download();
  release(segment);  // reached only when every worker succeeded
  return trained;
}

}  // namespace lab02
