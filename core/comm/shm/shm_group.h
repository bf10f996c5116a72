#pragma once
// The `shm` backend: the ranks are forked processes that share one POSIX shared-memory segment,
// the torch.multiprocessing model. A tensor lives in its process's private memory, so every
// collective stages through the segment: each rank copies its input in, the ranks reduce a slice
// each, each copies the result out — in pieces of about a MiB, pipelined, so the staging area
// stays small (cache-sized) and one rank's copy-in overlaps another's reduction.
//
// The segment reaches the children in one of torch.multiprocessing's two sharing strategies:
//   fd_passing  (torch's "file_descriptor"): an anonymous memfd whose descriptor the parent sends
//               to each child over a Unix socket (SCM_RIGHTS). It has no name: nothing can leak.
//   named_file  (torch's "file_system"): a named segment /dev/shm/scalelab-<pid>-<n> that each
//               child opens by name. A name outlives its users, so the last rank to open it
//               unlinks it, and the parent unlinks it anyway at the end.
#include <cstdint>
#include <functional>
#include <string>

#include "core/comm/process_group.h"

namespace scalelab {

enum class ShmSharing : uint8_t { fd_passing, named_file };
const char* shm_sharing_name(ShmSharing sharing);
ShmSharing parse_shm_sharing(const std::string& name);  // throws UsageError naming --shm-sharing

// Forks world_size children; child i builds the ProcessGroup of rank i and runs rank_main on it,
// then exits (never returning into the caller). An exception in a rank is printed to stderr as
// "[rank i] <what>" and makes that child exit 1. A rank that dies makes the others fail (at once
// when the parent sees it, by timeout otherwise), and once a rank has failed the parent kills any
// rank still running options.timeout (+1 s) later. Returns when every child has exited, throwing
// Error("comm", ...) that names each failed rank and how (exit status N / killed by signal S).
// Call it before the caller starts threads of its own: only the calling thread survives a fork.
void launch_procs(int world_size, ShmSharing sharing, CommOptions options,
                  const std::function<void(ProcessGroup& group)>& rank_main);

// The prefix of every named segment this process creates ("/scalelab-<pid>-"), so a test can
// check /dev/shm for leftovers.
std::string shm_name_prefix();

}  // namespace scalelab
