#include "core/proc/process.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <thread>

#include "core/error.h"
#include "core/limits.h"

namespace scalelab {

std::string wait_status_text(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int s = WTERMSIG(status);
    const char* what = strsignal(s);
    return "killed by signal " + std::to_string(s) + (what ? std::string(" (") + what + ")" : std::string());
  }
  return "wait status " + std::to_string(status);
}

void flush_stdio() {
  std::cout.flush();
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);
}

namespace {

void write_all(int fd, const std::string& text) noexcept {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    done += static_cast<size_t>(w);
  }
}

}  // namespace

void write_stderr(const std::string& text) noexcept { write_all(2, text); }

Children::~Children() {
  reap_all(std::chrono::milliseconds(0));
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
  for (int fd : usage_fds_)
    if (fd >= 0) close(fd);
}

pid_t Children::spawn(const std::string& name, const std::function<int()>& child_main) {
  const pid_t parent = getpid();
  int usage_pipe[2] = {-1, -1};
  if (hold_usage_errors_ && pipe2(usage_pipe, O_CLOEXEC) != 0) usage_pipe[0] = usage_pipe[1] = -1;  // print it then
  flush_stdio();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    if (usage_pipe[0] >= 0) close(usage_pipe[0]), close(usage_pipe[1]);
    throw Error("proc", "fork of " + name + ": " + std::strerror(err) +
                            " — lower --devices, or raise the process limit (ulimit -u, or the cgroup's pids.max)");
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);   // a dead parent takes its children with it
    if (getppid() != parent) _exit(1);  // it died before prctl
    std::string comm = name.substr(0, 15);
    for (char& c : comm) c = c == ' ' ? '-' : c;
    prctl(PR_SET_NAME, comm.c_str());
    for (int fd : pidfds_)  // the parent's watch on earlier children: not this child's business
      if (fd >= 0) close(fd);
    for (int fd : usage_fds_)
      if (fd >= 0) close(fd);
    if (usage_pipe[0] >= 0) close(usage_pipe[0]);
    int status = 1;
    try {
      status = child_main();
    } catch (const UsageError& e) {
      if (usage_pipe[1] >= 0) {
        write_all(usage_pipe[1], e.component() + '\0' + e.message());
        status = 2;
      } else {
        write_stderr("[" + name + "] " + e.what() + "\n");
      }
    } catch (const std::bad_alloc&) {
      write_stderr("[" + name + "] " + kOutOfHostMemory + "\n");
    } catch (const std::exception& e) {
      write_stderr("[" + name + "] " + e.what() + "\n");
    } catch (...) {
      write_stderr("[" + name + "] an exception that is not a std::exception\n");
    }
    flush_stdio();
    _exit(status);
  }
  if (usage_pipe[1] >= 0) close(usage_pipe[1]);
  usage_fds_.push_back(usage_pipe[0]);
  pids_.push_back(pid);
  pidfds_.push_back(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  reaped_.push_back(false);
  status_.push_back(0);
  return pid;
}

std::pair<std::string, std::string> Children::usage_error(int i) {
  const int fd = usage_fds_[static_cast<size_t>(i)];
  if (fd < 0) return {};
  std::string text;
  char buf[4096];
  for (;;) {  // the child has ended (or will write nothing more): read to the end
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  const size_t split = text.find('\0');
  if (split == std::string::npos) return {};
  return {text.substr(0, split), text.substr(split + 1)};
}

bool Children::ended(int i, int* status) {
  const size_t k = static_cast<size_t>(i);
  if (!reaped_[k]) {
    int s = 0;
    const pid_t w = waitpid(pids_[k], &s, WNOHANG);
    if (w == 0 || (w < 0 && errno == EINTR)) return false;
    reaped_[k] = true;
    status_[k] = w < 0 ? 255 << 8 : s;  // reaped elsewhere (SIGCHLD ignored?): count it as a failure
  }
  *status = status_[k];
  return true;
}

void Children::wait_any(std::chrono::milliseconds at_most) {
  std::vector<pollfd> watch;
  size_t running = 0;
  for (size_t k = 0; k < pids_.size(); ++k)
    if (!reaped_[k]) {
      ++running;
      if (pidfds_[k] >= 0) watch.push_back({pidfds_[k], POLLIN, 0});
    }
  if (running == 0) return;
  // A pidfd becomes readable when its process ends; without one for every child, nap and re-check.
  if (watch.size() == running) poll(watch.data(), watch.size(), static_cast<int>(at_most.count()));
  else std::this_thread::sleep_for(std::min(at_most, std::chrono::milliseconds(1)));
}

void Children::kill_running() noexcept {
  for (size_t k = 0; k < pids_.size(); ++k)
    if (!reaped_[k]) kill(pids_[k], SIGKILL);
}

void Children::reap_all(std::chrono::milliseconds grace) noexcept {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  for (;;) {
    bool all = true;
    for (int i = 0; i < count(); ++i) all = ended(i, &status) && all;
    const auto now = std::chrono::steady_clock::now();
    if (all || now >= deadline) break;
    wait_any(std::chrono::ceil<std::chrono::milliseconds>(deadline - now));
  }
  for (size_t k = 0; k < pids_.size(); ++k)
    if (!reaped_[k]) {
      kill(pids_[k], SIGKILL);
      while (waitpid(pids_[k], &status_[k], 0) < 0 && errno == EINTR) {
      }
      reaped_[k] = true;
    }
}

}  // namespace scalelab
