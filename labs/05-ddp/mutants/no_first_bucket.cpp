// mutant: the small first bucket forgotten: every bucket, the first too, uses the 25 MiB cap, so
//   the first all-reduce waits for 25 MiB of gradients
// caught-by: bucket_defaults
// The reference solution with bucket_assignment replaced by the version below (the macro renames the
// reference's own).
#include "lab.h"
#define bucket_assignment reference_bucket_assignment
#include "labs/05-ddp/solution/reducer.cpp"
#undef bucket_assignment

namespace lab05 {

std::vector<std::vector<int>> bucket_assignment(const std::vector<int64_t>& param_bytes, int64_t bucket_cap_bytes,
                                                int64_t first_bucket_cap_bytes) {
  (void)first_bucket_cap_bytes;
  std::vector<std::vector<int>> buckets;
  std::vector<int> open;
  int64_t open_bytes = 0;
  for (int i = static_cast<int>(param_bytes.size()) - 1; i >= 0; --i) {
    const int64_t bytes = param_bytes[static_cast<size_t>(i)];
    if (!open.empty() && open_bytes + bytes > bucket_cap_bytes) {
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
