#include "core/proc/threads.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace scalelab {

std::vector<int> usable_cores() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  if (cores.empty())  // the mask could not be read: every core the machine has
    for (int c = 0; c < static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); ++c) cores.push_back(c);
  return cores;
}

void share_cores(int processes) {
  const int cores = static_cast<int>(usable_cores().size());
  openblas_set_num_threads(std::max(1, cores / std::max(1, processes)));
}

std::vector<int> share_of_cores(int process, int processes, const std::vector<int>& cores) {
  const int n = static_cast<int>(cores.size());
  if (n == 0 || processes < 1 || process < 0 || process >= processes) return {};
  if (processes > n) return {cores[static_cast<size_t>(process % n)]};
  const int per = n / processes;
  return {cores.begin() + process * per, cores.begin() + (process + 1) * per};
}

bool keep_to_share_of_cores(int process, int processes) {
  const std::vector<int> mine = share_of_cores(process, processes, usable_cores());
  if (mine.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : mine) CPU_SET(c, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

}  // namespace scalelab
