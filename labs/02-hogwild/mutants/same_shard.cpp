// mutant: every worker takes shard 0 of each batch (rows 0, W, 2W, …): the other rows are never
//   trained on, and the workers all race over the same samples
// caught-by: processes
// The reference solution with take_shard's rank replaced by 0 (the macro).
#include "lab.h"
#define take_shard(batch, rank, world, shard) scalelab::take_shard(batch, 0, world, shard)
#include "labs/02-hogwild/solution/hogwild.cpp"
