#include "core/proc/commands.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <new>

#include "core/error.h"
#include "core/proc/futex.h"

namespace scalelab {
namespace detail {

constexpr uint64_t kMagic = 0x31444e414d4d4f43ULL;  // "COMMAND1"
constexpr size_t kLine = 128;                       // two cache lines: a mailbox and a report never share one

struct alignas(kLine) CommandHeader {
  uint64_t magic = kMagic;
  int32_t workers = 0;
  pid_t parent = 0;
  alignas(kLine) std::atomic<uint32_t> bell{0};  // bumped by every report: the parent's futex
};
struct alignas(kLine) Mailbox {  // written by the parent
  std::atomic<uint32_t> go{0};   // the command's number: the worker's futex
  int32_t command = 0;
};
struct alignas(kLine) Report {    // written by its worker
  std::atomic<uint32_t> done{0};  // = the mailbox's go once the command is done
  int32_t failed = 0;
  char error[1024] = {};
};

Mailbox* mailboxes(char* block) { return reinterpret_cast<Mailbox*>(block + sizeof(CommandHeader)); }
Report* reports(char* block, int n) { return reinterpret_cast<Report*>(mailboxes(block) + n); }

}  // namespace detail

using namespace detail;
using std::chrono::milliseconds;

int64_t command_block_bytes(int workers) {
  const int64_t bytes = sizeof(CommandHeader) + workers * int64_t{sizeof(Mailbox) + sizeof(Report)};
  return (bytes + 4095) / 4096 * 4096;
}

Commander::Commander(char* block, int workers, Children& children, CommandOptions options)
    : header_(new (block) CommandHeader()),
      mailboxes_(mailboxes(block)),
      reports_(reports(block, workers)),
      n_(workers),
      children_(children),
      options_(std::move(options)),
      issued_(static_cast<size_t>(workers), 0) {
  header_->workers = workers;
  header_->parent = getpid();
  for (int r = 0; r < n_; ++r) {
    new (&mailboxes_[r]) Mailbox();
    new (&reports_[r]) Report();
  }
}

void Commander::issue(int r, int32_t command) noexcept {
  Mailbox& box = mailboxes_[r];
  box.command = command;  // before `go`: the worker reads them in that order
  box.go.store(++issued_[static_cast<size_t>(r)]);
  shared_futex_wake_all(box.go);
}

void Commander::issue_all(int32_t command) noexcept {
  for (int r = 0; r < n_; ++r) issue(r, command);
}

std::string Commander::worker_text(int r) const {
  const pid_t pid = r < children_.count() ? children_.pid(r) : 0;
  return "worker " + std::to_string(r) + " (pid " + std::to_string(pid) + ")";
}

void Commander::fail(const std::string& text) {
  if (broken_.empty()) broken_ = text;
  throw Error(options_.component, text);
}

void Commander::check_usable(const std::string& what) const {
  if (!broken_.empty())
    throw Error(options_.component, "cannot start " + what + ": the workers failed earlier — " + broken_);
}

void Commander::wait(const std::string& doing, int only) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  const int lo = only < 0 ? 0 : only, hi = only < 0 ? n_ : only + 1;
  for (;;) {
    const uint32_t rung = header_->bell.load();
    std::vector<int> pending;
    for (int r = lo; r < hi; ++r) {
      const Report& rep = reports_[r];
      if (rep.done.load() != issued_[static_cast<size_t>(r)]) pending.push_back(r);
      else if (rep.failed) fail(worker_text(r) + " failed " + doing + ": " + rep.error);
    }
    if (pending.empty()) return;
    for (int r : pending) {
      int status = 0;
      if (r < children_.count() && children_.ended(r, &status))
        fail(worker_text(r) + " died " + doing + ": " + wait_status_text(status) +
             (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                  ? " — killed from outside (kill -9, or the kernel's out-of-memory killer: see dmesg)"
                  : " — its own error, if any, is above on stderr"));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::string who;
      for (int r : pending) who += (who.empty() ? "" : ", ") + worker_text(r);
      fail(who + " did not report " + doing + " within " + options_.timeout_option + " " +
           std::to_string(options_.timeout.count()) + " ms — stopped or hung; raise " + options_.timeout_option +
           " if merely slow");
    }
    // Sleep until a report rings the bell, at most 10 ms: then look for the dead.
    shared_futex_wait(header_->bell, rung, std::min<std::chrono::nanoseconds>(deadline - now, milliseconds(10)));
  }
}

void Commander::stop_all(int32_t stop) noexcept {
  if (broken_.empty()) issue_all(stop);
  children_.reap_all(broken_.empty() ? std::min(options_.timeout, milliseconds(2000)) : milliseconds(0));
}

int serve_commands(char* block, int rank, const std::function<bool(int32_t command)>& handle) {
  CommandHeader& h = *reinterpret_cast<CommandHeader*>(block);
  if (h.magic != kMagic || rank < 0 || rank >= h.workers)
    throw Error("proc", "worker " + std::to_string(rank) + ": the shared segment holds no command block for it");
  Mailbox& box = mailboxes(block)[rank];
  Report& rep = reports(block, h.workers)[rank];
  uint32_t handled = 0;
  for (;;) {
    // 1. Wait for the next command, checking now and then that the parent is still there.
    const uint32_t go = box.go.load();
    if (go == handled) {
      if (getppid() != h.parent) return 1;
      shared_futex_wait(box.go, go, milliseconds(100));
      continue;
    }
    handled = go;
    // 2. Do it; 3. report (done = go, then ring the parent's bell).
    bool more = true;
    try {
      more = handle(box.command);
    } catch (const std::exception& e) {
      rep.failed = 1;
      std::snprintf(rep.error, sizeof rep.error, "%s", e.what());
    }
    rep.done.store(go);
    h.bell.fetch_add(1);
    shared_futex_wake_all(h.bell);
    if (rep.failed) return 1;
    if (!more) return 0;
  }
}

}  // namespace scalelab
