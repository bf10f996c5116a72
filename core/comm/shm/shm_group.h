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
#include <sys/types.h>

#include <atomic>
#include <chrono>
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

// ---------------------------------------------------------------------------------------------
// A shared segment for callers that lay out their own data in it (the multiprocessing strategy
// keeps a model's parameters in one), handed to forked children by the same two strategies:
//   1. the parent creates it (zero-filled) and maps it;
//   2. fork_child() forks a child that drops the mapping fork handed down and maps the segment
//      afresh the torch.multiprocessing way — the memfd's descriptor over a Unix socket
//      (fd_passing; /proc/<pid>/maps shows /memfd:<label>), or the name (named_file; maps shows
//      /dev/shm/scalelab-<pid>-<label without "scalelab-">-<n>) — then runs the caller's
//      function and _exits;
//   3. once every child has opened it, unlink_name() removes the name: the mappings keep the
//      memory, and nothing is left in /dev/shm even if a process is killed later.
// The destructor unmaps and unlinks (if still named); it never throws. Children are the
// caller's to reap (waitpid), as their pids are returned.
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

  // The child runs child_main(its mapping, bytes) and _exits with the result; an exception is
  // printed to stderr as "[child_name] <what>" and exits 1. The child is named child_name (at most
  // 15 characters: /proc/<pid>/comm, ps), dies with the parent (PR_SET_PDEATHSIG), and waits at
  // most `timeout` for the descriptor. Call it from the thread that owns the process's state
  // (only the calling thread survives a fork), and before unlink_name().
  pid_t fork_child(const std::string& child_name, std::chrono::milliseconds timeout,
                   const std::function<int(char* data, int64_t bytes)>& child_main);
  void unlink_name() noexcept;

 private:
  int64_t bytes_ = 0;
  ShmSharing sharing_;
  std::string label_, name_;
  int fd_ = -1;  // fd_passing: kept to send to each child
  char* map_ = nullptr;
};

// A futex on a word in a shared segment (not FUTEX_PRIVATE, so it works across processes):
// sleep while `word` still holds `expected`, at most `timeout`; wake every sleeper.
void shared_futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout);
void shared_futex_wake_all(std::atomic<uint32_t>& word);

// A wait status in words: "exit status 1", "killed by signal 9 (Killed)".
std::string wait_status_text(int status);

}  // namespace scalelab
