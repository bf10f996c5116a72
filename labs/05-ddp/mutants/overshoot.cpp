// mutant: a bucket closes only AFTER the parameter that takes it to or over its cap (it may
//   overshoot by one parameter: PyTorch's C++ detail, not the rule lab.h states)
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
  for (int i = static_cast<int>(param_bytes.size()) - 1; i >= 0; --i) {
    const int64_t cap = buckets.empty() ? first_bucket_cap_bytes : bucket_cap_bytes;
    open.push_back(i);
    open_bytes += param_bytes[static_cast<size_t>(i)];
    if (open_bytes >= cap) {
      buckets.push_back(open);
      open.clear();
      open_bytes = 0;
    }
  }
  if (!open.empty()) buckets.push_back(open);
  return buckets;
}

}  // namespace lab05
