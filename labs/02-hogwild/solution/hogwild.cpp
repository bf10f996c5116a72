// Lab 02 — the reference solution.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lab.h"

namespace lab02 {

namespace {
[[noreturn]] void fail_call(const std::string& call) {
  throw std::runtime_error("share_memory: " + call + ": " + std::strerror(errno));
}
}  // namespace

Segment share_memory(Model& model, Sharing sharing, const std::string& name) {
  const ParamLayout layout(model.spec());
  Segment s;
  s.sharing = sharing;
  s.name = name;
  s.bytes = layout.bytes();
  try {
    // 1. The segment, by the strategy: an anonymous memfd, or a named file in /dev/shm.
    if (sharing == Sharing::file_descriptor) {
      s.fd = memfd_create(name.c_str(), 0);
      if (s.fd < 0) fail_call("memfd_create");
    } else {
      s.fd = shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (s.fd < 0) fail_call("shm_open /" + name);
      s.linked = true;  // from here on a name exists that outlives us unless unlinked
    }
    // 2. Its size, and one shared mapping of it.
    if (ftruncate(s.fd, static_cast<off_t>(s.bytes)) != 0) fail_call("ftruncate");
    void* p = mmap(nullptr, static_cast<size_t>(s.bytes), PROT_READ | PROT_WRITE, MAP_SHARED, s.fd, 0);
    if (p == MAP_FAILED) fail_call("mmap");
    s.base = static_cast<char*>(p);
    // 3. The weights go in, and the model now computes on them (torch: share_memory_()).
    layout.write(s.base, model.download());
    layout.point(model, s.base);
    return s;
  } catch (...) {
    release(s);  // a half-made segment leaves nothing behind either
    throw;
  }
}

int worker(int rank, Model& model, const Job& job) {
  // Its own optimizer (its momentum is private); the parameters it steps are the shared ones.
  Optimizer optimizer(job.optimizer, model.parameters());
  HostBatch shard;
  for (const HostBatch& batch : job.batches) {
    take_shard(batch, rank, job.workers, shard);
    train_step(rank, model, optimizer, shard);  // no lock: the update goes straight into the segment
  }
  return 0;
}

HostWeights hogwild(Device& device, const HostWeights& init, const Job& job) {
  Model model(device, init);
  Segment segment = share_memory(model, job.sharing, job.name);
  try {
    Workers workers;  // killed and reaped if we leave early
    // Every worker first: they train at the same time.
    for (int r = 0; r < job.workers; ++r) workers.start([&model, &job, r] { return worker(r, model, job); });
    // Then wait for all of them, within one deadline.
    const auto deadline = Workers::Clock::now() + job.timeout;
    for (int r = 0; r < job.workers; ++r) {
      const std::string who = "worker " + std::to_string(r) + " (pid " + std::to_string(workers.pid(r)) + ")";
      const std::optional<int> status = workers.wait(r, deadline);
      if (!status)
        throw std::runtime_error(who + " did not finish within " + std::to_string(job.timeout.count()) +
                                 " ms: killed");
      if (*status != 0) throw std::runtime_error(who + ": " + Workers::status_text(*status));
    }
    HostWeights trained = model.download();  // the shared weights, as the workers left them
    release(segment);
    return trained;
  } catch (...) {
    release(segment);
    throw;
  }
}

void release(Segment& segment) noexcept {
  if (segment.base) munmap(segment.base, static_cast<size_t>(segment.bytes));
  segment.base = nullptr;
  if (segment.fd >= 0) close(segment.fd);
  segment.fd = -1;
  if (segment.linked) shm_unlink(("/" + segment.name).c_str());
  segment.linked = false;
}

}  // namespace lab02
