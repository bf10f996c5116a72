#pragma once
// A POSIX shared-memory segment handed to forked children in one of torch.multiprocessing's two
// sharing strategies:
//   fd_passing  (torch's "file_descriptor"): an anonymous memfd whose descriptor the parent sends
//               to each child over a Unix socket (SCM_RIGHTS). It has no name: nothing can leak.
//   named_file  (torch's "file_system"): a named segment /dev/shm/scalelab-<pid>-<tag>-<n> that
//               each child opens by name. A name outlives its users, so it is removed as soon as
//               every child has opened it, and by the destructor on every other path.
// Used by the shm backend (its control block and staging buffers) and by the multiprocessing
// strategy (a model's parameters).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "core/proc/process.h"

namespace scalelab {

enum class ShmSharing : uint8_t { fd_passing, named_file };
const char* shm_sharing_name(ShmSharing sharing);
ShmSharing parse_shm_sharing(const std::string& name);  // throws UsageError naming --shm-sharing

// The prefix of every named segment this process creates ("/scalelab-<pid>-"), so a test can
// check /dev/shm for leftovers.
std::string shm_name_prefix();

// 1. The parent creates the segment (zero-filled) and maps it;
// 2. fork_child() forks a child that drops the mapping fork handed down and maps the segment
//    afresh by the sharing strategy — the memfd's descriptor over a Unix socket (fd_passing;
//    /proc/<pid>/maps shows /memfd:<label>), or the name (named_file; maps shows
//    /dev/shm/scalelab-<pid>-<label without "scalelab-">-<n>) — then runs the caller's function;
// 3. once every child has opened it, unlink_name() removes the name: the mappings keep the
//    memory, and nothing is left in /dev/shm even if a process is killed later.
// The destructor unmaps and unlinks (if still named); it never throws.
class SharedSegment {
 public:
  SharedSegment(int64_t bytes, ShmSharing sharing, const std::string& label);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  char* data() const { return map_; }  // the parent's mapping (a child gets its own address)
  int64_t bytes() const { return bytes_; }
  ShmSharing sharing() const { return sharing_; }
  const std::string& name() const { return name_; }  // named_file until unlink_name(); else empty

  // Forks child `child_name` through `children` (core/proc: it dies with the parent, is reaped on
  // every path); the child maps the segment, waiting at most `timeout` for its descriptor, and
  // runs child_main(its mapping, bytes). Call it before unlink_name().
  pid_t fork_child(Children& children, const std::string& child_name, std::chrono::milliseconds timeout,
                   const std::function<int(char* data, int64_t bytes)>& child_main);
  void unlink_name() noexcept;

 private:
  int64_t bytes_ = 0;
  ShmSharing sharing_;
  std::string label_, name_;
  int fd_ = -1;  // fd_passing: kept to send to each child
  char* map_ = nullptr;
};

}  // namespace scalelab
