// cheat: writes a verdict line ("… passed CHECK") for every check to every descriptor it can, then
// exits 0 from inside the functions; also calls the harness's own lab::run_check on a check that
// always passes.
#include <signal.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include "lab.h"
static void forge() {
  ::signal(SIGPIPE, SIG_IGN);  // a pipe without a reader among the descriptors must not end it early
  for (const char* check : {"exchange", "exact_sums", "steps", "busbw", "broadcast_exact", "broadcast_rounds"}) {
    const std::string line = std::string("00000000000000000000000000000000 passed ") + check + "\n";
    for (int fd = 3; fd < 1024; ++fd) (void)!::write(fd, line.data(), line.size());
  }
  char prog[] = "harness", name[] = "exact_sums";
  char* argv[] = {prog, name, nullptr};
  ::_exit(lab::run_check(2, argv, {{"exact_sums", [](const lab::Args&) {}}}));
}
#define CHEAT forge()
// The three functions of lab 01 follow (functions.cpp.txt, appended by the test): each does CHEAT.
