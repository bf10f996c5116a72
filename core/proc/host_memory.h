#pragma once
// How much memory this process may use: the host's physical memory, or less where a cgroup (a
// container, a CI job, a Slurm allocation) caps it — the cap is what the OOM killer enforces.
#include <cstdint>

namespace scalelab {

struct HostMemory {
  double bytes = 0;          // 0: unknown
  bool cgroup_limited = false;  // the figure is a cgroup's limit, below the physical memory
};

HostMemory host_memory();

}  // namespace scalelab
