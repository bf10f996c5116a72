// mutant: buckets filled in FORWARD order (fc1.weight first), though backward writes the last
//   layer's gradients first
// caught-by: bucket_order
// The reference solution with bucket_assignment replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define bucket_assignment reference_bucket_assignment
#include "labs/05-ddp/solution/reducer.cpp"
#undef bucket_assignment

namespace lab05 {

std::vector<std::vector<int>> bucket_assignment(const std::vector<int64_t>& param_bytes, int64_t bucket_cap_bytes,
                                                int64_t first_bucket_cap_bytes) {
  std::vector<std::vector<int>> buckets;
  std::vector<int> open;
  int64_t open_bytes = 0;
  for (int i = 0; i < static_cast<int>(param_bytes.size()); ++i) {
    const int64_t bytes = param_bytes[static_cast<size_t>(i)];
    const int64_t cap = buckets.empty() ? first_bucket_cap_bytes : bucket_cap_bytes;
    if (!open.empty() && open_bytes + bytes > cap) {
      buckets.push_back(open);
      open.clear();
      open_bytes = 0;
    }
    open.push_back(i);
    open_bytes += bytes;
  }
  if (!open.empty()) buckets.push_back(open);
  return buckets;
}

}  // namespace lab05
