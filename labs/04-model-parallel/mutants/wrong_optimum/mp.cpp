// mutant: the reference solution, but answers.json says 8: the smallest split, "the most chunks
//   overlap the most" — forgetting what every chunk costs on every device (kernel launches, the
//   weights read again by each small GEMM, a copy's latency)
// caught-by: optimum
// (The code is the reference solution's; only answers.json differs.)
#include "labs/04-model-parallel/solution/mp.cpp"
