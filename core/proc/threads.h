#pragma once
// Processes computing at once share the cores. With `processes` of them on this host, each runs
// its host numerics (OpenBLAS) on cores / processes threads, at least one: otherwise their BLAS
// threads fight over the cores (PyTorch's advice too: threads per process = cores / processes).
// Each of those processes calls it once, before it computes.
#include <vector>

namespace scalelab {

// The cores this process may run on (its affinity mask: a container or taskset may allow fewer
// than the machine has); at least one entry.
std::vector<int> usable_cores();

void share_cores(int processes);

// The cores worker `process` of `processes` keeps to, out of `cores`: its own cores / processes of
// them where there are enough, else one, core `process` mod their number — the workers spread
// evenly, as many on each core as the others.
std::vector<int> share_of_cores(int process, int processes, const std::vector<int>& cores);

// Keeps the calling process to its share (above) of usable_cores(). Left to the scheduler, the
// workers a parent wakes together were often started on the parent's core and ran there one
// after another, a whole round each, while the other core stood idle (Hogwild on 2 cores, 2
// workers: 6.4–6.8 ms a step; kept to a core each, 5.5–5.7). Returns false, changing nothing,
// where the mask cannot be read or set.
bool keep_to_share_of_cores(int process, int processes);

}  // namespace scalelab
