#pragma once
// Lab 01 — collectives from send and recv. You write the three functions declared first below,
// in ring.cpp; the helpers after them are given. The grader builds your ring.cpp into harness.cpp
// and runs the checks of checks.json (`scalelab grade 01-collectives`).
//
// The ranks are threads of one process (the `threads` backend of core/comm): rank r holds the
// ProcessGroup `pg` with pg.rank() == r and a flat f32 tensor `data` on its own device. You move
// data only with pg.send and pg.recv. A send is a rendezvous: it returns once the receiver has
// taken the message, so two ranks that both send to each other first wait for ever (the group
// gives up after 2 s and the check fails naming the ranks that never came).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/comm/process_group.h"
#include "core/device/device.h"
#include "core/tensor.h"
#include "labs/common/harness.h"

namespace lab01 {

using scalelab::ProcessGroup;
using scalelab::Tensor;

// Task 1. Send `out` to rank `to` and receive `in` from rank `from`, when every rank of a ring
// calls it at the same moment (to = r + 1, from = r − 1 mod n). It must neither deadlock nor
// serialise the ring: every send should meet its receive at once.
void ring_exchange(ProcessGroup& pg, const Tensor& out, int to, const Tensor& in, int from);

// Task 2. Sum `data` over every rank, in place: reduce-scatter, then all-gather, around the ring
// r → r + 1. 2(n − 1) calls of ring_exchange per rank, each moving one chunk of about count / n
// elements (use chunk(), slice(), add_into()), received into one chunk of scratch (scratch_like)
// reused every step. Every rank must end with the same bits. Any count ≥ 1, any n ≥ 1.
void ring_all_reduce(ProcessGroup& pg, const Tensor& data);

// Task 3. Copy `data` of rank `root` to every rank through a binomial tree: in round k
// (k = 0, 1, …) every rank that already has the data sends it to the rank 2^k further on (counted
// from the root), so ⌈log2 n⌉ rounds reach everyone.
void tree_broadcast(ProcessGroup& pg, const Tensor& data, int root);

// ---- Given ---------------------------------------------------------------------------------

// Elements [first, first + count) of a flat tensor.
struct Range {
  int64_t first = 0, count = 0;
};

// Chunk c of `count` elements cut into `parts` nearly equal chunks (their sizes differ by at most
// one; some are empty when count < parts).
inline Range chunk(int64_t count, int parts, int c) {
  const int64_t first = count * c / parts, last = count * (c + 1) / parts;
  return {first, last - first};
}

// A view of the elements `r` of a flat tensor, sharing its storage: send it, receive into it.
inline Tensor slice(const Tensor& t, Range r) { return t.view(r.first, {r.count}); }

// x mod n in [0, n), for negative x too.
inline int mod(int x, int n) { return ((x % n) + n) % n; }

// A scratch f32 tensor of `count` elements on the device of `like`.
inline Tensor scratch_like(const Tensor& like, int64_t count) {
  return like.device()->empty({count}, scalelab::DType::f32, scalelab::MemoryCategory::comm_buffers, "lab01 scratch");
}

// dst += src, element by element (f32, same number of elements). On the simulated devices this
// costs no time of its own: NCCL reduces while it copies, so the model counts the add in the
// receive. dst is ready when both were.
inline void add_into(const Tensor& dst, const Tensor& src) {
  if (dst.numel() != src.numel())
    throw std::invalid_argument("add_into: dst has " + std::to_string(dst.numel()) + " elements, src " +
                                std::to_string(src.numel()) + " — add chunks of the same size");
  if (!dst.is_meta() && !src.is_meta()) {
    float* d = dst.data<float>();
    const float* s = src.data<float>();
    for (int64_t i = 0; i < dst.numel(); ++i) d[i] += s[i];
  }
  dst.set_ready_ns(std::max(dst.ready_ns(), src.ready_ns()));
}

}  // namespace lab01
