// mutant: every rank sends first, then receives: each send waits for a receiver that is itself
//   sending (deadlock; the group times out after 2 s)
// caught-by: exchange
// (A whole file: ring_all_reduce calls the ring_exchange below.)
#include "lab.h"

namespace lab01 {

void ring_exchange(ProcessGroup& pg, const Tensor& out, int to, const Tensor& in, int from) {
  // A send waits for its receiver, so if every rank sent first none would ever receive. Even
  // ranks send first and odd ranks receive first: every send meets a waiting receive, and each
  // step takes one send and one receive, whatever n (an odd n puts two even ranks side by side;
  // one of them waits a little, nobody waits for ever).
  pg.send(out, to);
  pg.recv(in, from);
}

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
  // All-gather: in step s rank r passes on the finished chunk r + 1 − s and receives the finished
  // chunk r − s straight into place.
  for (int s = 0; s < n - 1; ++s) {
    const Range out = chunk(count, n, mod(r + 1 - s, n)), in = chunk(count, n, mod(r - s, n));
    ring_exchange(pg, slice(data, out), right, slice(data, in), left);
  }
}

void tree_broadcast(ProcessGroup& pg, const Tensor& data, int root) {
  const int n = pg.size();
  const int me = mod(pg.rank() - root, n);  // counted from the root
  // Round k (step = 2^k): the ranks below `step` have the data; each sends it `step` further on.
  for (int step = 1; step < n; step *= 2) {
    if (me < step) {
      if (me + step < n) pg.send(data, mod(me + step + root, n));
    } else if (me < 2 * step) {
      pg.recv(data, mod(me - step + root, n));
    }
  }
}

}  // namespace lab01
