#pragma once
// The machine's limits as clear errors. Threads the system refuses (a process limit: ulimit -u, a
// cgroup's pids.max): std::thread then throws std::system_error, and a vector of threads unwound
// with some still joinable ends the process in std::terminate; these turn the refusal into an
// Error that says what to lower, with every thread already started joined first. Memory it
// refuses: what a std::bad_alloc that reaches the top of a process says.
#include <functional>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"

namespace scalelab {

// What a std::bad_alloc that reaches main() or a forked process's top says: new failed for want of
// host memory (the machine's, or an address-space limit: ulimit -v).
inline constexpr const char* kOutOfHostMemory =
    "[memory] out of host memory (std::bad_alloc) — lower --devices, --batch or --model, or raise the "
    "address-space limit (ulimit -v)";

// [threads] could not start thread N of M (Resource temporarily unavailable) — lower --devices, …
// (lower: the option that sets how many threads start, as the user types it).
Error thread_start_error(int number, int count, const std::system_error& e, const char* lower = "--devices");

// One thread running body; the refusal as thread_start_error(1, 1, …).
std::thread start_thread(std::function<void()> body, const char* lower = "--devices");

// count threads running body(i), i = 0 … count - 1. None runs body before all have started: if
// one cannot start, those started return without running it (they may be ranks that would wait
// for the missing one), are joined, and thread_start_error is thrown. Each thread keeps a copy of
// body, so it may outlive the call.
std::vector<std::thread> start_threads(int count, const std::function<void(int)>& body, const char* lower = "--devices");

// OpenBLAS, when the system refuses one of its threads (at start-up, or at a forked process's first
// product), prints why and raises SIGINT at itself, which would end the process as if Ctrl-C had
// been pressed. This makes a SIGINT the process raised at itself exit 1 with a [threads] error; a
// SIGINT from outside goes on to the handler that was there before (by default, the process ends).
// Forked processes keep it. A program that links this file has it installed before its libraries
// start (OpenBLAS starts its threads as it loads); calling it again does nothing.
void report_blas_thread_failures();

// OpenBLAS takes a work buffer (128 MiB in x86-64 builds) for each thread that computes a product,
// the first time it does, and retries that allocation for ever when the address space cannot hold
// it (ulimit -v): a run would hang, and so would fork() and exit(), which wait for OpenBLAS's
// threads. So under an address-space limit, room for the buffers of the threads OpenBLAS may use
// (twice each: glibc reserves as much again for a new thread's heap) is taken and given back, once
// per thread and process; where it holds fewer, OpenBLAS is told to use fewer threads, and where it
// holds not even one, Error("memory", …) is thrown. kernels::gemm calls it; main_within_limits
// first, as OpenBLAS's helpers start when the program loads.
void check_room_for_blas_buffers();

// What main() returns, through this: under an address-space limit (ulimit -v) an OpenBLAS thread
// may still be retrying its buffer's allocation, and exit() would wait for it for ever (OpenBLAS
// joins its threads as the program ends). There the output is flushed and the process ends at once.
int end_of_main(int code);

// main() of a program: room for OpenBLAS's buffers checked, then program(argc, argv), ended
// through end_of_main; an Error from the check is printed, exit 1.
int main_within_limits(int argc, char** argv, int (*program)(int, char**));

// The cores this process may use: those it had when first asked, or the share it was kept to
// (core/device/host_cores.h, keep_to_share_of_cores, narrows them).
std::vector<int>& process_cores();

}  // namespace scalelab
