#include "core/proc/threads.h"

#include <cblas.h>

#include <algorithm>
#include <thread>

namespace scalelab {

void share_cores(int processes) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  openblas_set_num_threads(std::max(1, cores / std::max(1, processes)));
}

}  // namespace scalelab
