// `scalelab bench sim`: how far does a dry run scale on this machine? DDP steps of a 1.09e9-
// parameter MLP on 1024 and 4096 simulated H100s, each case in a child process of its own so its
// wall time and peak RSS are its alone; printed next to the budgets (1024 devices: 2 s and 1 GB;
// 4096 devices: 10 s). Then a step of GPT-3 175B under ZeRO-1 and under DDP on 1024 H100s, against
// 2 s and 1 GB as well: far past an H100's memory, so its ledgers count past capacity. (ddp and
// zero ranks are alike: the dry run runs the first 17 and counts the rest as copies.)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "apps/scalelab/bench.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "run/train.h"

namespace scalelab {

namespace {

struct Budget {
  int devices;
  double wall_s;     // 0: none
  double rss_bytes;  // 0: none
};
constexpr Budget kBudgets[] = {{1024, 2.0, 1e9}, {4096, 10.0, 0}};

struct CaseResult {
  double wall_s = 0;
  int64_t rss_bytes = 0;
  double step_s = 0;  // simulated
  bool ok = false;
};

TrainConfig case_config(const BenchSimOptions& o, int devices) {
  TrainConfig c;
  c.strategy = "ddp";
  c.device = DeviceKind::sim;
  c.hw = o.hw;
  c.devices = devices;
  c.dry_run = true;
  c.model = o.model;
  c.dataset = "synthetic";  // a dry run reads sizes alone; synthetic needs no files
  c.batch = static_cast<int64_t>(devices) * o.per_device_batch;
  c.synthetic_train = c.batch;
  c.synthetic_test = 1;
  c.steps = o.steps;
  return c;
}

// GPT-3 175B (Brown et al. 2020) under ZeRO-1 (or DDP) with Adam, a sequence per device.
constexpr const char* kGpt3 = "gpt:96-12288-96-2048-50257";
TrainConfig gpt3_config(const BenchSimOptions& o, const std::string& strategy) {
  TrainConfig c = case_config(o, 1024);
  c.strategy = strategy;
  c.zero_stage = strategy == "zero" ? 1 : 0;
  c.model = kGpt3;
  c.optimizer.kind = "adam";
  c.batch = c.synthetic_train = 1024;
  return c;
}

// The case in a forked child (this process has no threads yet, so fork is safe): the wall time
// from fork to reaping, as a user running `scalelab train` would wait, and the child's peak RSS.
CaseResult run_case(const TrainConfig& c) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error("bench", std::string("pipe: ") + std::strerror(errno));
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error("bench", std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    int code = 0;
    double step_s = 0;
    try {
      EventBus bus;
      const TrainResult r = train(c, bus);
      step_s = r.steps > 0 ? r.time_s / static_cast<double>(r.steps) : 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      code = 1;
    }
    if (::write(fds[1], &step_s, sizeof step_s) != static_cast<ssize_t>(sizeof step_s)) code = 1;
    ::_exit(code);  // no destructors of the parent's state in the child
  }
  ::close(fds[1]);
  CaseResult r;
  if (::read(fds[0], &r.step_s, sizeof r.step_s) != static_cast<ssize_t>(sizeof r.step_s)) r.step_s = 0;
  ::close(fds[0]);
  int status = 0;
  rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

std::string bound_text(double v, const char* unit) {
  if (v <= 0) return "no bound";
  char buf[32];
  std::snprintf(buf, sizeof buf, "bound %g %s", v, unit);
  return buf;
}

}  // namespace

int bench_sim(const BenchSimOptions& o) {
  if (o.steps < 1) throw UsageError("bench", "--steps must be ≥ 1");
  if (o.per_device_batch < 1) throw UsageError("bench", "--batch-per-device must be ≥ 1");
  if (!o.json_path.empty()) check_output_path(o.json_path, "bench");  // before the cases, not after
  check_distinct_paths({{"--json", o.json_path, true}, {"--hw", profile_file(o.hw), false}}, "bench");
  std::vector<int> cases = o.devices;
  if (cases.empty())
    for (const Budget& b : kBudgets) cases.push_back(b.devices);
  const ModelSpec spec = ModelSpec::parse(o.model);
  for (int n : cases) check_config(case_config(o, n));  // a bad option fails before any case runs

  std::printf("# bench sim: ddp, --dry-run, %s (%.3g parameters), %d step(s), batch %d per device, on %s\n",
              o.model.c_str(), static_cast<double>(spec.parameter_count()), o.steps, o.per_device_batch, o.hw.c_str());
  std::printf("# each case in a process of its own: wall = fork to exit (set-up, steps, summary, teardown), RSS = its peak\n");
  nlohmann::json rows = nlohmann::json::array();
  int failures = 0;
  for (int n : cases) {
    Budget budget{n, 0, 0};
    for (const Budget& b : kBudgets)
      if (b.devices == n) budget = b;
    const CaseResult r = run_case(case_config(o, n));
    if (!r.ok) {
      std::printf("%5d devices: failed (see the error above)\n", n);
      ++failures;
      continue;
    }
    std::printf("%5d devices: %.2f s (%s), RSS %.0f MB (%s); simulated step %.1f ms\n", n, r.wall_s,
                bound_text(budget.wall_s, "s").c_str(), static_cast<double>(r.rss_bytes) / 1e6,
                bound_text(budget.rss_bytes / 1e9, "GB").c_str(), r.step_s * 1e3);
    std::fflush(stdout);
    rows.push_back({{"devices", n},
                    {"wall_s", r.wall_s},
                    {"wall_bound_s", budget.wall_s},
                    {"rss_bytes", r.rss_bytes},
                    {"rss_bound_bytes", budget.rss_bytes},
                    {"simulated_step_s", r.step_s}});
  }
  for (const std::string strategy : {"zero", "ddp"}) {  // the budget cases: GPT-3 as well
    if (!o.devices.empty()) break;
    const CaseResult r = run_case(gpt3_config(o, strategy));
    const std::string what = strategy == "zero" ? "zero-1" : "ddp";
    if (!r.ok) {
      std::printf("GPT-3 175B, %s, 1024 devices: failed (see the error above)\n", what.c_str());
      ++failures;
    } else {
      std::printf("GPT-3 175B (%s), %s with adam, 1024 devices: %.2f s (bound 2 s), RSS %.0f MB (bound 1 GB); "
                  "simulated step %.1f ms\n",
                  kGpt3, what.c_str(), r.wall_s, static_cast<double>(r.rss_bytes) / 1e6, r.step_s * 1e3);
      rows.push_back({{"model", kGpt3}, {"strategy", strategy}, {"devices", 1024}, {"wall_s", r.wall_s}, {"wall_bound_s", 2.0},
                      {"rss_bytes", r.rss_bytes}, {"rss_bound_bytes", 1e9}, {"simulated_step_s", r.step_s}});
    }
  }
  if (!o.json_path.empty())
    write_file_atomically(o.json_path,
                          nlohmann::json{{"model", o.model}, {"hw", o.hw}, {"steps", o.steps}, {"rows", rows}}.dump(2) + "\n",
                          "bench");
  return failures ? 1 : 0;
}

}  // namespace scalelab
