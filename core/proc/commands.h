#pragma once
// A parent driving N worker processes by commands, through a block of shared memory:
//   the parent writes what goes with a command (in the caller's part of the segment), then
//   issues it — mailbox r's `go` is bumped and worker r woken; the worker does it, writes its
//   results, and reports — report r's `done` = go, then the parent's bell rung. The parent waits
//   for the reports with a timeout, and names a worker that failed (its error), died (how) or
//   did not report (stopped or hung): never a hang.
// One writer per cache line: the parent writes the mailboxes, worker r its report only.
// Worker r is child r of the Children the parent forked them with.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/proc/process.h"

namespace scalelab {

struct CommandOptions {
  std::string component;  // errors are Error(component, ...)
  std::chrono::milliseconds timeout{60000};
  std::string timeout_option = "--comm-timeout";  // named when a worker does not report in time
};

namespace detail {
struct CommandHeader;
struct Mailbox;
struct Report;
}  // namespace detail

// The bytes of the block for `workers` workers; it starts the caller's segment (page-aligned).
int64_t command_block_bytes(int workers);

class Commander {
 public:
  // Builds the block in `block` (fresh shared memory), before the workers are forked.
  Commander(char* block, int workers, Children& children, CommandOptions options);

  // Worker r's next command: what goes with it must be written before.
  void issue(int r, int32_t command) noexcept;
  void issue_all(int32_t command) noexcept;
  // Until every worker (or only worker `only`) has reported its latest command. `doing` completes
  // the messages: "worker 2 (pid 123) died <doing>: killed by signal 9".
  void wait(const std::string& doing, int only = -1);
  // After a failure the workers are not to be used again: throws naming the first failure.
  void check_usable(const std::string& what) const;
  bool broken() const { return !broken_.empty(); }
  int workers() const { return n_; }
  // Issues `stop` to every worker unless one failed, then reaps them all (killing any that do not
  // end within the timeout, 2 s at most). Never throws.
  void stop_all(int32_t stop) noexcept;

 private:
  std::string worker_text(int r) const;
  [[noreturn]] void fail(const std::string& text);

  detail::CommandHeader* header_;
  detail::Mailbox* mailboxes_;
  detail::Report* reports_;
  int n_;
  Children& children_;
  CommandOptions options_;
  std::vector<uint32_t> issued_;  // per worker: the number of its latest command
  std::string broken_;            // the first failure
};

// The worker's side: runs handle(command) for each command issued to worker `rank`, and reports
// it done, until handle returns false (exit status 0), a command throws (its error goes into the
// report; 1) or the parent is gone (1). Returns the exit status.
int serve_commands(char* block, int rank, const std::function<bool(int32_t command)>& handle);

}  // namespace scalelab
