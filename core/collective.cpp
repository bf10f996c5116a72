#include "core/collective.h"

#include "core/error.h"

namespace scalelab {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& name) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
    if (name == reduce_op_name(op)) return op;
  throw UsageError("comm", "unknown reduce operation '" + name + "' — use sum, avg or max");
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::broadcast: return "broadcast";
    case Collective::reduce: return "reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::scatter: return "scatter";
    case Collective::gather: return "gather";
    case Collective::send: return "send";
    case Collective::recv: return "recv";
    case Collective::barrier: return "barrier";
  }
  return "?";
}

Collective parse_collective(const std::string& name) {
  std::string known;
  for (int i = 0; i <= static_cast<int>(Collective::barrier); ++i) {
    const auto c = static_cast<Collective>(i);
    if (name == collective_name(c)) return c;
    known += (known.empty() ? "" : ", ") + std::string(collective_name(c));
  }
  throw UsageError("comm", "unknown collective '" + name + "' — use one of: " + known);
}

double busbw_factor(Collective c, int n) {
  if (n < 1) return 1;
  switch (c) {
    case Collective::all_reduce: return 2.0 * (n - 1) / n;
    case Collective::reduce_scatter:
    case Collective::all_gather: return static_cast<double>(n - 1) / n;
    default: return 1;
  }
}

}  // namespace scalelab
