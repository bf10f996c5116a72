// mutant: forgot the all-gather phase: each rank holds the full sum of one chunk only
// caught-by: exact_sums
// The reference solution with ring_all_reduce replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define ring_all_reduce reference_ring_all_reduce
#include "labs/01-collectives/solution/ring.cpp"
#undef ring_all_reduce

namespace lab01 {

void ring_all_reduce(ProcessGroup& pg, const Tensor& data) {
  const int n = pg.size(), r = pg.rank();
  if (n == 1) return;
  const int64_t count = data.numel();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  Tensor incoming = scratch_like(data, chunk(count, n, n - 1).count);  // the last chunk is the largest
  // Reduce-scatter: in step s rank r passes on chunk r − s (its own at s = 0, then the partial sum
  // it just made) and adds the partial sum of chunk r − s − 1 from its left into its own. After
  // n − 1 steps rank r holds the sum over every rank of chunk r + 1.
  for (int s = 0; s < n - 1; ++s) {
    const Range out = chunk(count, n, mod(r - s, n)), in = chunk(count, n, mod(r - s - 1, n));
    Tensor received = incoming.view(0, {in.count});
    ring_exchange(pg, slice(data, out), right, received, left);
    add_into(slice(data, in), received);
  }
}

}  // namespace lab01
