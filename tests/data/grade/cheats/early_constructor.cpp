// cheat: a constructor that runs before the harness's own (priority 100) to take its secret.
#include <cstdlib>
#include "lab.h"
[[gnu::constructor(100)]] static void first() { std::getenv("SCALELAB_VERDICT_FDS"); }
#define CHEAT throw lab::Todo("cheat", "early_constructor.cpp")
// The three functions of lab 01 follow (functions.cpp.txt, appended by the test): each does CHEAT.
