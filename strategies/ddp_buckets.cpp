#include "strategies/ddp_buckets.h"

#include <string>

#include "core/error.h"

namespace scalelab {

std::vector<std::vector<int>> compute_bucket_assignment_by_size(const std::vector<int64_t>& param_bytes,
                                                                int64_t bucket_cap_bytes,
                                                                int64_t first_bucket_cap_bytes) {
  if (bucket_cap_bytes <= 0 || first_bucket_cap_bytes <= 0)
    throw UsageError("ddp", "bucket caps must be > 0 bytes, got " + std::to_string(first_bucket_cap_bytes) +
                                " (first) and " + std::to_string(bucket_cap_bytes) +
                                " — pass positive --first-bucket-mb and --bucket-mb");
  std::vector<std::vector<int>> buckets;
  std::vector<int> open;  // the bucket being filled
  int64_t open_bytes = 0;
  // Gradients become ready last layer first: walk the parameters from the end.
  for (int i = static_cast<int>(param_bytes.size()) - 1; i >= 0; --i) {
    const int64_t bytes = param_bytes[static_cast<size_t>(i)];
    if (bytes < 0)
      throw UsageError("ddp", "parameter " + std::to_string(i) + " has a negative size (" + std::to_string(bytes) +
                                  " bytes)");
    const int64_t cap = buckets.empty() ? first_bucket_cap_bytes : bucket_cap_bytes;
    // Close the open bucket if this parameter would take it over the cap. An empty bucket takes
    // any parameter, so one larger than the cap sits alone.
    if (!open.empty() && open_bytes + bytes > cap) {
      buckets.push_back(std::move(open));
      open.clear();
      open_bytes = 0;
    }
    open.push_back(i);
    open_bytes += bytes;
  }
  if (!open.empty()) buckets.push_back(std::move(open));
  return buckets;
}

}  // namespace scalelab
