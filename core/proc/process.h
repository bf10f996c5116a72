#pragma once
// Process plumbing for everything that forks: the shm backend's ranks (launch_procs) and the
// Hogwild workers. A child is named, dies with its parent, never returns into the caller's code,
// and is reaped on every path — an error, an exception, a destructor — so no process is left behind.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace scalelab {

// A wait status in words: "exit status 1", "killed by signal 9 (Killed)".
std::string wait_status_text(int status);

// Flushes the C++ streams and stdio: called before a fork, or the child would print the parent's
// buffered output again, and before a child _exits.
void flush_stdio();

// Writes straight to file descriptor 2, unbuffered: what a child says just before it _exits.
void write_stderr(const std::string& text) noexcept;

// The children of this process, as the parent sees them. The destructor kills (SIGKILL) and
// reaps any still running, and never throws.
class Children {
 public:
  Children() = default;
  ~Children();
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;

  // Forks child number count() named `name` ("rank 2", "hogwild-0"). The child dies with this
  // process (PR_SET_PDEATHSIG), shows in ps as the name with '-' for ' ' (15 characters at most),
  // runs child_main and _exits with its result; an exception is printed to stderr as
  // "[name] <what>" and exits 1. Call it from the thread that owns the process's state (only the
  // calling thread survives a fork). Throws Error("proc", ...) when fork fails.
  pid_t spawn(const std::string& name, const std::function<int()>& child_main);

  // From now on a child's UsageError (bad input, which every rank meets alike) is not printed by
  // the child: it exits 2 and hands the error to the parent, which says it once (usage_error()).
  void hold_usage_errors() { hold_usage_errors_ = true; }
  // The UsageError child i ended with, as "[component] message" split in two; empty when none.
  std::pair<std::string, std::string> usage_error(int i);

  int count() const { return static_cast<int>(pids_.size()); }
  pid_t pid(int i) const { return pids_[static_cast<size_t>(i)]; }
  // True, with its wait status, once child i has ended (it is reaped then); false while it runs.
  bool ended(int i, int* status);
  // Sleeps until a child ends or `at_most` has passed (on a kernel without pidfds, 1 ms at most).
  void wait_any(std::chrono::milliseconds at_most);
  // SIGKILL to every child still running (they are reaped by ended() or reap_all()).
  void kill_running() noexcept;
  // Waits up to `grace` for every child to end, then kills and reaps the rest.
  void reap_all(std::chrono::milliseconds grace) noexcept;

 private:
  std::vector<pid_t> pids_;
  std::vector<int> pidfds_;  // -1 before Linux 5.3
  std::vector<bool> reaped_;
  std::vector<int> status_;
  std::vector<int> usage_fds_;  // read ends of the pipes held usage errors come through; -1 when none
  bool hold_usage_errors_ = false;
};

}  // namespace scalelab
