#pragma once
// The collectives and reduce operations, named once for the process group, the cost model, the
// benchmark and the trace.
#include <cstdint>
#include <string>

namespace scalelab {

enum class ReduceOp : uint8_t { sum, avg, max };
const char* reduce_op_name(ReduceOp op);
ReduceOp parse_reduce_op(const std::string& name);  // throws UsageError

enum class Collective : uint8_t {
  all_reduce, broadcast, reduce, all_gather, reduce_scatter, scatter, gather, send, recv, barrier
};
const char* collective_name(Collective c);
Collective parse_collective(const std::string& name);  // throws UsageError
// nccl-tests' bus bandwidth factor: busbw = algbw × factor (all-reduce 2(n−1)/n; reduce-scatter,
// all-gather (n−1)/n; everything else 1).
double busbw_factor(Collective c, int world_size);

}  // namespace scalelab
