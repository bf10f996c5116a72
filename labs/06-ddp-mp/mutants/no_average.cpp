// mutant: forgot to average: the gradients are the SUM over the ranks, N times too large
// caught-by: equivalence
// The reference solution with lab.h's scale() made to do nothing (the macro stands for every call
// of it there): each bucket goes back into the gradients as the all-reduce summed it.
#include "lab.h"
#define scale(bucket, alpha, k) ((void)(alpha))
#include "labs/06-ddp-mp/solution/ddp_mp.cpp"
#undef scale
