// mutant: release unmaps and closes, but never removes the name: the file_system segment stays in
//   /dev/shm after every run, holding its memory until the machine reboots
// caught-by: no_leak
// The reference solution with its shm_unlink call made a no-op (the macro).
#include <sys/mman.h>
#define shm_unlink(name) ((void)(name), 0)
#include "labs/02-hogwild/solution/hogwild.cpp"
