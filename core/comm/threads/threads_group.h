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
//
// `ranks_run` < world_size (a sim dry run of alike ranks, RunSetup::devices_run): only the first
// ranks_run ranks exist as threads, and the groups meet among them, but each group is of
// world_size ranks — what the cost model prices its collectives by. Moving data needs every rank:
// such groups refuse a collective that computes.
std::vector<std::unique_ptr<ProcessGroup>> make_threads_groups(int world_size, CommOptions options = {},
                                                               int ranks_run = 0);

}  // namespace scalelab
