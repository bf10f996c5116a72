// cheat: a process that leaves the check's process group and session (fork, setsid, fork) and
// lives on, named sl-escaped, after the check has ended.
#include <sys/prctl.h>
#include <unistd.h>
#include "lab.h"
static void escape() {
  if (::fork() == 0) {
    ::setsid();
    if (::fork() == 0) {
      ::prctl(PR_SET_NAME, "sl-escaped");
      for (;;) ::sleep(1);
    }
    ::_exit(0);
  }
  ::usleep(100000);
  throw lab::Todo("escape", "setsid_escape.cpp");
}
#define CHEAT escape()
// The three functions of lab 01 follow (functions.cpp.txt, appended by the test): each does CHEAT.
