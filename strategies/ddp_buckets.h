#pragma once
// DDP's gradient buckets, as a pure function of the parameters' sizes (PyTorch:
// torch.distributed._compute_bucket_assignment_by_size, used by DistributedDataParallel).
//
// Why buckets: one all-reduce per parameter pays the collective's latency once per tensor; one
// all-reduce of everything can only start when backward has ended. Buckets of ~25 MB are the
// middle way: a bucket is all-reduced as soon as its last gradient is written, while backward goes
// on computing the gradients of the earlier layers.
#include <cstdint>
#include <vector>

namespace scalelab {

// `param_bytes[i]` is the size of parameter i in model order (fc1.weight, fc1.bias, fc2.weight, …).
// Parameters are taken in REVERSE order, because backward writes the last layer's gradients first.
// A bucket closes when adding the next parameter would take it over its cap; a parameter larger
// than the cap gets a bucket of its own. The first bucket's cap is the small `first_bucket_cap_bytes`
// (PyTorch: 1 MB), so the first all-reduce starts early; the others use `bucket_cap_bytes` (25 MB).
// Returns, per bucket in the order they fill, the indices of its parameters (in the order taken).
//
// Example: sizes {400, 40, 300, 30} (fc1.w, fc1.b, fc2.w, fc2.b), caps 100 (first) and 500:
// reversed, 30 starts bucket 0; 30 + 300 > 100 closes it → {3}; then 300 + 40 = 340 ≤ 500,
// 340 + 400 > 500 → {2, 1}; then {0}. Result: {{3}, {2, 1}, {0}}.
//
// Differs from PyTorch's C++ in one detail: PyTorch closes a bucket after the parameter that makes
// it reach the cap (so a bucket may overshoot by one parameter); here it never exceeds the cap
// unless a single parameter does. Throws UsageError on a cap ≤ 0 or a negative size.
std::vector<std::vector<int>> compute_bucket_assignment_by_size(const std::vector<int64_t>& param_bytes,
                                                                int64_t bucket_cap_bytes,
                                                                int64_t first_bucket_cap_bytes);

}  // namespace scalelab
