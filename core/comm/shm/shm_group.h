#pragma once
// The `shm` backend: the ranks are forked processes that share one POSIX shared-memory segment,
// the torch.multiprocessing model. A tensor lives in its process's private memory, so every
// collective stages through the segment: each rank copies its input in, the ranks reduce a slice
// each, each copies the result out — in pieces of about a MiB, pipelined, so the staging area
// stays small (cache-sized) and one rank's copy-in overlaps another's reduction.
//
// The segment (core/comm/shm/shm_segment.h) reaches the children in either of torch.multiprocessing's
// sharing strategies (--shm-sharing: fd_passing, named_file); the processes are forked and reaped
// by core/proc.
#include <functional>
#include <string>

#include "core/comm/process_group.h"
#include "core/comm/shm/shm_segment.h"

namespace scalelab {

// Forks world_size children; child i builds the ProcessGroup of rank i and runs rank_main on it,
// then exits (never returning into the caller). An exception in a rank is printed to stderr as
// "[rank i] <what>" and makes that child exit 1. A rank that dies makes the others fail (at once
// when the parent sees it, by timeout otherwise), and once a rank has failed the parent kills any
// rank still running options.timeout (+1 s) later. Returns when every child has exited, throwing
// Error("comm", ...) that names each failed rank and how (exit status N / killed by signal S).
// Call it before the caller starts threads of its own: only the calling thread survives a fork.
void launch_procs(int world_size, ShmSharing sharing, CommOptions options,
                  const std::function<void(ProcessGroup& group)>& rank_main);

}  // namespace scalelab
