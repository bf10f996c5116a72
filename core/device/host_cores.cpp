#include "core/device/host_cores.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/limits.h"

namespace scalelab {

namespace {

// Keeps the calling thread to `core`; false where it cannot be (a core outside the process's mask).
bool keep_this_thread_to(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  return ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set) == 0;
}

// Whether this process computes alone on its cores: not a forked child, not sharing them out.
std::atomic<bool> g_alone{true};

// Bumped where OpenBLAS may have new helpers not yet placed: where its thread count is set, and
// after a fork (OpenBLAS stops its helpers before one and starts new ones at its next call).
std::atomic<int> g_blas_threads_set{0};

const int g_fork_hook = ::pthread_atfork(nullptr, [] { ++g_blas_threads_set; }, [] { g_alone = false; });

}  // namespace

std::vector<int> usable_cores() { return process_cores(); }

void share_cores(int processes) {
  const int cores = static_cast<int>(process_cores().size());
  if (processes > 1) g_alone = false;
  openblas_set_num_threads(std::max(1, cores / std::max(1, processes)));
  ++g_blas_threads_set;
}

namespace {
using SetAffinity = int (*)(int, size_t, cpu_set_t*);
// Looked up, not linked: an OpenBLAS built for OpenMP, or another BLAS, has no such call.
SetAffinity blas_set_affinity() {
  static const auto set = reinterpret_cast<SetAffinity>(::dlsym(RTLD_DEFAULT, "openblas_setaffinity"));
  return set;
}
}  // namespace

void computes_beside_other_processes() { g_alone = false; }

bool turns_kept_on_one_core() {
  return g_alone && process_cores().size() >= 2 && blas_set_affinity() != nullptr && openblas_get_num_threads() >= 2;
}

void keep_turns_off_blas_helper_cores() {
  thread_local bool kept = false;
  static std::atomic<int> helpers_placed_at{-1};  // the g_blas_threads_set the helpers were placed at
  const int set_at = g_blas_threads_set.load();
  if (kept && helpers_placed_at.load() == set_at) return;
  if (!turns_kept_on_one_core()) return;
  const std::vector<int>& cores = process_cores();
  const int threads = openblas_get_num_threads();
  static std::mutex placing;
  {
    std::lock_guard<std::mutex> lock(placing);
    if (helpers_placed_at.load() != set_at) {
      // Setting the count starts the helpers where a fork stopped them, so there are threads to place.
      openblas_set_num_threads(threads);
      // openblas_setaffinity's thread i < threads − 1 is helper i (the last index is the caller).
      const size_t others = cores.size() - 1;
      for (int i = 0; i + 1 < threads; ++i) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cores[1 + static_cast<size_t>(i) % others], &set);
        blas_set_affinity()(i, sizeof set, &set);
      }
      helpers_placed_at = set_at;
    }
  }
  if (!kept) {
    keep_this_thread_to(cores.front());
    kept = true;
  }
}

std::vector<int> share_of_cores(int process, int processes, const std::vector<int>& cores) {
  const int n = static_cast<int>(cores.size());
  if (n == 0 || processes < 1 || process < 0 || process >= processes) return {};
  if (processes > n) return {cores[static_cast<size_t>(process % n)]};
  const int per = n / processes;
  return {cores.begin() + process * per, cores.begin() + (process + 1) * per};
}

bool keep_to_share_of_cores(int process, int processes) {
  const std::vector<int> mine = share_of_cores(process, processes, process_cores());
  if (mine.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : mine) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) return false;
  process_cores() = mine;
  return true;
}

double core_round_trip_s(int a, int b) {
  if (a == b || a < 0 || b < 0 || a >= CPU_SETSIZE || b >= CPU_SETSIZE) return 0;
  constexpr int kRounds = 5, kTrips = 20000;
  // The flag alone on its cache line: 1 = the ball is at b, 0 = back at a, -1 = stop.
  struct alignas(64) Flag {
    std::atomic<int> v{0};
  };
  Flag flag;
  std::atomic<int> answerer_ready{0};  // 1: kept to b; -1: could not be
  std::thread answerer = start_thread([&] {
    answerer_ready = keep_this_thread_to(b) ? 1 : -1;
    if (answerer_ready < 0) return;
    for (;;) {
      int v;
      while ((v = flag.v.load(std::memory_order_acquire)) == 0) {
      }
      if (v < 0) return;
      flag.v.store(0, std::memory_order_release);
    }
  });
  // The caller's own mask, put back after: it may be a device thread kept to its core.
  cpu_set_t before;
  const bool had_mask = ::pthread_getaffinity_np(::pthread_self(), sizeof before, &before) == 0;
  while (answerer_ready == 0) std::this_thread::yield();
  std::vector<double> rounds;
  if (answerer_ready > 0 && had_mask && keep_this_thread_to(a)) {
    for (int r = 0; r < kRounds; ++r) {
      const auto start = std::chrono::steady_clock::now();
      double seconds = 0;
      int trips = 0;
      // A round stops at 0.1 s: where the other core is busy with another process each trip waits
      // for a time slice, and 20 000 of them would take minutes.
      while (trips < kTrips && seconds < 0.1) {
        for (int i = 0; i < 256; ++i, ++trips) {
          flag.v.store(1, std::memory_order_release);
          while (flag.v.load(std::memory_order_acquire) != 0) {
          }
        }
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      rounds.push_back(seconds / trips);
    }
  }
  flag.v.store(-1, std::memory_order_release);
  answerer.join();
  if (had_mask) ::pthread_setaffinity_np(::pthread_self(), sizeof before, &before);
  if (rounds.empty()) return 0;
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace scalelab
