// Lab 01 — your file. Write the three functions below (their contracts are in lab.h), then grade
// them:   scalelab grade 01-collectives --submission labs/01-collectives
// Read first: README.md of this lab, and core/comm/threads/threads_group.cpp, where the library's
// own ring all-reduce and binomial broadcast move data between threads step by step.
#include "lab.h"

namespace lab01 {

void ring_exchange(ProcessGroup& pg, const Tensor& out, int to, const Tensor& in, int from) {
  // TODO: send `out` to `to` and receive `in` from `from` with pg.send and pg.recv, in an order
  // that cannot deadlock when every rank of the ring calls this at once.
  (void)pg, (void)out, (void)to, (void)in, (void)from;
  throw lab::Todo("ring_exchange", "labs/01-collectives/ring.cpp");
}

void ring_all_reduce(ProcessGroup& pg, const Tensor& data) {
  // TODO: n − 1 reduce-scatter steps, then n − 1 all-gather steps, each a ring_exchange of one
  // chunk (chunk, slice, add_into and scratch_like are given in lab.h).
  (void)pg, (void)data;
  throw lab::Todo("ring_all_reduce", "labs/01-collectives/ring.cpp");
}

void tree_broadcast(ProcessGroup& pg, const Tensor& data, int root) {
  // TODO: ⌈log2 n⌉ rounds; count ranks from the root (mod n).
  (void)pg, (void)data, (void)root;
  throw lab::Todo("tree_broadcast", "labs/01-collectives/ring.cpp");
}

}  // namespace lab01
