#include "core/proc/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace scalelab {
namespace {

// A cgroup memory limit in bytes, or 0 where the file is absent or says "max" (no limit).
double cgroup_limit(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text == "max") return 0;
  try {
    return static_cast<double>(std::stoull(text));
  } catch (...) {
    return 0;
  }
}

}  // namespace

HostMemory host_memory() {
  HostMemory m;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) m.bytes = static_cast<double>(pages) * static_cast<double>(page);
  // cgroup v2 (unified), then v1; v1 reports "no limit" as a number near 2^63.
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const double limit = cgroup_limit(path);
    if (limit > 0 && (m.bytes == 0 || limit < m.bytes)) {
      m.bytes = limit;
      m.cgroup_limited = true;
    }
  }
  return m;
}

}  // namespace scalelab
