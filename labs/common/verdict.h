#pragma once
// The harness's verdict, which only the harness can give. Include it in harness.cpp alone (never
// in lab.h: the student's files must not reach it) and end main() with
//
//   return lab::graded_main(argc, argv, {{"exact_sums", exact_sums}, …});
//
// Why: the grader ran a check as passed on exit status 0, and a submission can exit 0 whenever it
// likes (`static int q = (std::exit(0), 0);` scored full marks). Now the grader hands the harness a
// secret through a pipe (SCALELAB_VERDICT_FDS="SECRET_FD,VERDICT_FD"), which this file reads and
// closes in a constructor that runs before any of the submission's static initialisers (priority
// 101; the grader refuses constructors, attributes and asm in student code). A check passes only
// when the harness writes "SECRET passed CHECK" to the verdict pipe after the check returned, and
// the process then exits 0. Everything here has internal linkage: a submission cannot call it.
//
// What it cannot stop: student code that reads this process's memory for the secret. The grader's
// README says so.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "labs/common/harness.h"

namespace lab {
namespace {

struct VerdictChannel {
  std::string secret;
  int fd = -1;
};

VerdictChannel& verdict_channel() {
  static VerdictChannel channel;
  return channel;
}

// Runs before every default-priority static initialiser of the program, the submission's included.
__attribute__((constructor(101))) void take_verdict_channel() {
  const char* fds = std::getenv("SCALELAB_VERDICT_FDS");
  if (!fds) return;  // run by hand, not by the grader: no verdict is given
  char* end = nullptr;
  const long secret_fd = std::strtol(fds, &end, 10);
  const long verdict_fd = *end == ',' ? std::strtol(end + 1, nullptr, 10) : -1;
  ::unsetenv("SCALELAB_VERDICT_FDS");
  if (secret_fd < 0 || verdict_fd < 0) return;
  char buf[128];
  std::string secret;
  for (;;) {
    const ssize_t n = ::read(static_cast<int>(secret_fd), buf, sizeof buf);
    if (n > 0) secret.append(buf, static_cast<size_t>(n));
    if (n == 0 || (n < 0 && errno != EINTR) || secret.size() > 256) break;
  }
  ::close(static_cast<int>(secret_fd));
  verdict_channel().secret = secret;
  verdict_channel().fd = static_cast<int>(verdict_fd);
}

// main() of a graded harness: runs the check named by argv[1] (lab::run_check) and, when it passed,
// gives the verdict.
int graded_main(int argc, char** argv, const std::map<std::string, Check>& checks) {
  const int rc = run_check(argc, argv, checks);
  VerdictChannel& channel = verdict_channel();
  if (rc == 0 && channel.fd >= 0 && !channel.secret.empty()) {
    const std::string line = channel.secret + " passed " + argv[1] + "\n";
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(channel.fd, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
  }
  return rc;
}

}  // namespace
}  // namespace lab
