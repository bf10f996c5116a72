// cheat: the process exits 0 before main runs; no function is written.
#include <cstdlib>
#include "lab.h"
static int q = (std::exit(0), 0);
#define CHEAT throw lab::Todo("cheat", "exit_at_start.cpp")
// The three functions of lab 01 follow (functions.cpp.txt, appended by the test): each does CHEAT.
