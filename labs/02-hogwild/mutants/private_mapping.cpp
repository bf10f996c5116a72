// mutant: the segment mapped MAP_PRIVATE: copy-on-write, so each process writes a private copy of
//   the weights — the workers never see each other's updates, nor the parent theirs
// caught-by: shared
// The reference solution compiled with MAP_SHARED meaning MAP_PRIVATE (the macro).
#include <sys/mman.h>
#undef MAP_SHARED
#define MAP_SHARED MAP_PRIVATE
#include "labs/02-hogwild/solution/hogwild.cpp"
