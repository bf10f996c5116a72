// mutant: one bucket for the whole replica (lab 05's reducer with a cap larger than the model), on
//   the first device: the second device's gradients travel to it and back, the first device holds
//   a buffer for every gradient — and the bucket is packed when the second half's backward is done,
//   before the first half's gradients are written
// caught-by: memory
// The reference solution with make_buckets replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define make_buckets reference_make_buckets
#include "labs/06-ddp-mp/solution/ddp_mp.cpp"
#undef make_buckets

namespace lab06 {

std::vector<Bucket> make_buckets(const std::vector<Parameter*>& params) {
  std::vector<int> all;  // every parameter, in model order: the buffer on fc1.weight's device
  for (int i = 0; i < static_cast<int>(params.size()); ++i) all.push_back(i);
  return {make_bucket(params, all, 0)};
}

}  // namespace lab06
