#pragma once
// The host's cores: which this process may use, how processes share them, and where the cpu
// device's turn-taking thread and OpenBLAS's helpers keep (clock.h's HostCores calls in here).
// Processes computing at once share the cores. With `processes` of them on this host, each runs
// its host numerics (OpenBLAS) on cores / processes threads, at least one: otherwise their BLAS
// threads fight over the cores (PyTorch's advice too: threads per process = cores / processes).
// Each of those processes calls it once, before it computes.
#include <vector>

namespace scalelab {

// The cores this process may run on (its affinity mask: a container or taskset may allow fewer
// than the machine has); at least one entry.
std::vector<int> usable_cores();

void share_cores(int processes);

// The cores worker `process` of `processes` keeps to, out of `cores`: its own cores / processes of
// them where there are enough, else one, core `process` mod their number — the workers spread
// evenly, as many on each core as the others.
std::vector<int> share_of_cores(int process, int processes, const std::vector<int>& cores);

// Keeps the calling process to its share (above) of usable_cores(): left to the scheduler, workers
// a parent wakes together may all start on the parent's core and run one after another. Returns
// false, changing nothing, where the mask cannot be read or set.
bool keep_to_share_of_cores(int process, int processes);

// The thread that holds the host's cores (HostCores) kept off the cores of OpenBLAS's helper
// threads: OpenBLAS splits a GEMM between the calling thread and its helpers, and a caller woken on
// a helper's core shares it while another core stands idle (the GEMM at twice its time). So, in a process that computes alone (not a forked worker, not one of
// several processes sharing the cores), the helpers keep to the cores after the first of
// usable_cores() (read before any thread keeps to one), and each thread that takes a turn to the
// first, from its first turn on.
// Called by HostCores::acquire with the turn held (no other thread is in OpenBLAS then); does
// nothing where there is one core, one BLAS thread, or an OpenBLAS without openblas_setaffinity.
void keep_turns_off_blas_helper_cores();
// This process computes beside others on the same cores (an MPI rank): its turns keep to no core.
void computes_beside_other_processes();
// Whether it does so here: this process computes alone, on 2 or more cores, with OpenBLAS's helpers
// and openblas_setaffinity.
bool turns_kept_on_one_core();

// OpenBLAS computes a GEMM of up to this m·n·k on its caller alone, and a larger one with its
// helpers too (interface/gemm.c: SMP_THRESHOLD_MIN × GEMM_MULTITHREAD_THRESHOLD, 65536 × 4). While the
// helpers finish their share the caller yields its core — where another thread taking turns can ask
// for the next one (take_turns_on_host, HostShare::one_core_yield_gemm_mnk).
constexpr double kBlasOneThreadMaxMnk = 65536.0 * 4;

// How long a cache line takes to go from core `a` to core `b` and back: two threads kept to them
// pass a flag to and fro (the median of 5 rounds of up to 20 000, each at most 0.1 s). On a VM it
// says whether the host has placed the cores apart (no shared last-level cache: several times
// longer, and element-wise ops that read the other core's GEMM output slow with it; figures in
// docs/calibration.md). 0 where a thread cannot be kept to its core.
double core_round_trip_s(int a, int b);

}  // namespace scalelab
