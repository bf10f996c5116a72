#pragma once
// The `threads` backend: the ranks are threads of one process, so a rank can read its neighbour's
// buffer directly. The algorithms are written out step by step — ring reduce-scatter then ring
// all-gather for all_reduce, a binomial tree for broadcast — and each step is reported as a chunk
// (peer, bytes) so the dashboard can draw the ring.
#include <memory>
#include <vector>

#include "core/comm/process_group.h"

namespace scalelab {

// One group per rank; hand group i to the thread that plays rank i.
std::vector<std::unique_ptr<ProcessGroup>> make_threads_groups(int world_size, CommOptions options = {});

}  // namespace scalelab
