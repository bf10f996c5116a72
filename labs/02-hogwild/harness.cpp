// Lab 02's checks (the instructor's test program). The grader builds it with the student's
// hogwild.cpp and runs one check per process: `harness CHECK [--key value]...`, exit 0 passed,
// 1 failed. The harness is the parent process: it calls the student's share_memory and hogwild,
// which fork the workers. What it checks is read from the kernel (/proc/self/maps, /proc/self/fd,
// /dev/shm, the process table) and from the workers themselves: train_step calls the harness's
// hook (lab02::detail::on_train_step), which records in a log of shared memory which process
// trained which rows, where its parameters live, what its device copied between steps (its trace),
// and whether all the workers are inside a step at once (no lock).
//
// Hogwild races: two runs of the same submission end with other weights. So every check is built
// to pass or fail the same way every time — exact oracles (one worker is single, bit for bit),
// facts the kernel reports, what the hook holds at each worker's first step (no worker trains
// before the parent waits for them, and they all meet there: they must run at the same time), and
// an accuracy threshold far from where a working Hogwild lands. The deadline (one_deadline) is
// timed on the wall clock, as a deadline is: a hang reported within [timeout − 50 ms, timeout +
// 400 ms], where a fresh deadline per worker lands 560 ms later. What a passed check prints holds
// no raced number, and no message a pid.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/trace/events.h"
#include "lab.h"
#include "labs/common/reference.h"
#include "labs/common/verdict.h"

using namespace scalelab;
using lab::Args;
using lab::str;
using lab02::Sharing;

namespace {

constexpr int kMaxWorkers = 16;
constexpr auto kRendezvous = std::chrono::seconds(3);  // how long a worker waits at its first step for the others
constexpr int kMeetStep = 2;  // no_lock: the step every worker must be inside at once (after some training)

const std::string kSmallModel = "mlp:20-16-4";

// ---------------------------------------------------------------------------------------------
// What the kernel says about this process.

struct Mapping {
  uintptr_t begin = 0, end = 0;
  unsigned long inode = 0;  // two segments of one name (two memfds "x") differ here
  std::string perms, path;  // path without " (deleted)"
};

std::string without_deleted(std::string s) {
  const std::string d = " (deleted)";
  if (s.size() >= d.size() && s.compare(s.size() - d.size(), d.size(), d) == 0) s.resize(s.size() - d.size());
  return s;
}

std::vector<Mapping> mappings() {
  std::vector<Mapping> out;
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    Mapping m;
    char perms[8] = {};
    int path_at = 0;
    const char* format = "%" SCNxPTR "-%" SCNxPTR " %7s %*s %*s %lu %n";  // begin-end perms offset dev inode path
    if (std::sscanf(line.c_str(), format, &m.begin, &m.end, perms, &m.inode, &path_at) < 3) continue;
    m.perms = perms;
    if (path_at > 0 && static_cast<size_t>(path_at) <= line.size())
      m.path = without_deleted(line.substr(static_cast<size_t>(path_at)));
    out.push_back(m);
  }
  return out;
}

// How the segment of `name` shows in /proc/self/maps and /proc/self/fd, by the strategy.
std::string segment_path(Sharing s, const std::string& name) {
  return s == Sharing::file_descriptor ? "/memfd:" + name : "/dev/shm/" + name;
}

std::vector<Mapping> mappings_of(const std::string& path) {
  std::vector<Mapping> out;
  for (const Mapping& m : mappings())
    if (m.path == path) out.push_back(m);
  return out;
}

// The mapping that holds address p, if any.
const Mapping* mapping_at(const std::vector<Mapping>& all, const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const Mapping& m : all)
    if (a >= m.begin && a < m.end) return &m;
  return nullptr;
}

std::string mapping_text(const Mapping* m) {
  if (!m) return "no mapping at all";
  return (m->path.empty() ? std::string("an anonymous mapping") : m->path) + " (" + m->perms + ")";
}

// This process's descriptors that lead to `path`.
int descriptors_of(const std::string& path) {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char target[512];
      const ssize_t len = readlink(("/proc/self/fd/" + std::string(e->d_name)).c_str(), target, sizeof target - 1);
      if (len <= 0) continue;
      target[len] = 0;
      if (without_deleted(target) == path) ++n;
    }
    closedir(d);
  }
  return n;
}

// The entries of /dev/shm whose name starts with `prefix`.
std::vector<std::string> shm_entries(const std::string& prefix) {
  std::vector<std::string> found;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
    closedir(d);
  }
  return found;
}

// Children of this process still in the process table: running, or ended but never reaped.
std::vector<std::string> children_left() {
  std::vector<std::string> found;
  const std::string me = std::to_string(getpid());
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      const std::string pid = e->d_name;
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream status("/proc/" + pid + "/status");
      std::string line, name, state, ppid;
      while (std::getline(status, line)) {
        if (line.rfind("Name:", 0) == 0) name = line.substr(line.find_first_not_of(" \t", 5));
        if (line.rfind("State:", 0) == 0) state = line.substr(line.find_first_not_of(" \t", 6));
        if (line.rfind("PPid:", 0) == 0) ppid = line.substr(line.find_first_not_of(" \t", 5));
      }
      if (ppid == me) found.push_back(name + " (pid " + pid + ", " + state + ")");
    }
    closedir(d);
  }
  return found;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Names unique to this harness process: parallel graders never see each other's segments.
std::string name_prefix() { return "lab02-" + std::to_string(getpid()) + "-"; }
std::string unique_name() {
  static int n = 0;
  return name_prefix() + std::to_string(n++);
}

// After noting what a submission left in /dev/shm, the harness removes it: a check must not fill
// the grading machine's memory.
void remove_leftovers() {
  for (const std::string& e : shm_entries(name_prefix())) shm_unlink(("/" + e).c_str());
}

// Where `model`'s parameters live: "" if all of them are inside ONE mapping of the segment at
// `path`, mapped shared (MAP_SHARED); else what is wrong. `who` starts the sentence. `inode`, if
// given, gets the segment's.
std::string where_parameters_live(Model& model, const std::string& path, const std::string& who,
                                  unsigned long* inode = nullptr) {
  const std::vector<Mapping> all = mappings();
  const Mapping* first = nullptr;
  for (Parameter* p : model.parameters()) {
    const Mapping* m = mapping_at(all, p->value.data<float>());
    if (!m || m->path != path)
      return who + ": " + p->name + " lives in " + mapping_text(m) + ", not in the shared segment " + path +
             " (a private copy: no other process sees what is written there)";
    if (m->perms.size() < 4 || m->perms[3] != 's')
      return who + ": the segment " + path + " is mapped PRIVATE (" + m->perms +
             ", MAP_PRIVATE): each process writes a copy-on-write copy of its own — map it MAP_SHARED";
    if (first && m != first)
      return who + ": the parameters are spread over several mappings of " + path + " — ONE mapping of one segment";
    first = m;
  }
  if (inode && first) *inode = first->inode;
  return "";
}

// ---------------------------------------------------------------------------------------------
// The hook: what the workers tell the harness, through a log in shared memory made before the
// fork (MAP_SHARED | MAP_ANONYMOUS: every worker inherits it).

struct Log {
  std::atomic<int> parent_waits;  // the parent has called Workers::wait
  std::atomic<int64_t> wait_began_ns;  // when it first did (steady clock: the same in every process)
  std::atomic<unsigned long> segment_inode;  // the segment the parent had mapped then (0: none)
  std::atomic<int> arrived;       // workers that reached their first step
  std::atomic<int> inside_meet;   // workers inside their step kMeetStep (no_lock)
  std::atomic<int> pid[kMaxWorkers];
  std::atomic<int> steps[kMaxWorkers];
  // What went wrong, per worker (its first complaint), and in the last slot for a call with a bad
  // rank. The lowest worker's is reported: the same one every time, however the workers interleave.
  std::atomic<int> taken[kMaxWorkers + 1];
  char error[kMaxWorkers + 1][1024];
};

enum class FaultKind { none, exit3, sigkill, hang, slow };
struct Fault {
  FaultKind kind = FaultKind::none;
  int rank = -1, step = -1;
  std::chrono::milliseconds until{0};  // slow: the worker sleeps until this long after the parent began to wait
};

// What the hook holds the workers to, besides running in processes of their own: each check
// looks at its own question, so that one mistake does not fail every check.
enum Verify : unsigned {
  kNothingMore = 0,
  kMapping = 1,   // each worker's parameters inside one MAP_SHARED mapping of the segment
  kTogether = 2,  // every worker reaches its first step while the others are alive (a rendezvous)
  kShards = 4,    // worker r's step k trains rows r, r + W, … of batch k
  kNoLock = 8,    // every worker is inside its step kMeetStep at once: nothing keeps the others out
  kNoCopies = 16, // between two steps a worker copies nothing but its shard (the trace of its device)
};

// The run being watched: the workers get a copy of it with the rest of the parent's memory.
struct Watched {
  const lab02::Job* job = nullptr;
  Log* log = nullptr;
  pid_t parent = 0;
  std::vector<Fault> faults;
  unsigned verify = kNothingMore;
  int started = 0;  // Workers::start calls of the parent
};
Watched g_watched;

void record(int rank, const std::string& text) {
  Log& log = *g_watched.log;
  const int slot = rank >= 0 && rank < kMaxWorkers ? rank : kMaxWorkers;
  int none = 0;
  if (log.taken[slot].compare_exchange_strong(none, 1)) {
    std::strncpy(log.error[slot], text.c_str(), sizeof log.error[slot] - 1);
    log.error[slot][sizeof log.error[slot] - 1] = 0;
  }
}

// A wrong worker stops at once, silently (its exit status 97 goes to the parent); the log says why.
[[noreturn]] void stop_worker(int rank, const std::string& text) {
  record(rank, text);
  if (getpid() == g_watched.parent) throw std::runtime_error(text);
  _exit(97);
}

}  // namespace

namespace lab02::detail {

void on_train_step(int rank, Model& model, const HostBatch& shard) {
  if (!g_watched.log) return;
  // Per process: fork copies these, and a fresh process has trained nothing yet.
  static pid_t me = 0;
  static int my_rank = -1, calls = 0;
  static size_t events_seen = 0;  // kNoCopies: the device's trace up to this process's last step
  static int64_t shard_bytes = 0;  // and the bytes of that step's shard, which it uploads
  const pid_t pid = getpid();
  if (me != pid) me = pid, my_rank = -1, calls = 0, events_seen = 0, shard_bytes = 0;
  const lab02::Job& job = *g_watched.job;
  const int n = job.workers;
  Log& log = *g_watched.log;
  const std::string who = "worker " + str(rank) + " (pid " + str(pid) + ")";
  if (pid == g_watched.parent)
    stop_worker(rank, "train_step(" + str(rank) + ", …) ran in the parent process (pid " + str(pid) +
                          "): each worker is a process of its own — start it with Workers::start (mp.Process), "
                          "which forks");
  if (rank < 0 || rank >= n || rank >= kMaxWorkers)
    stop_worker(rank, "train_step was called with rank " + str(rank) + " in a job of " + str(n) + " workers");
  if (my_rank < 0) {
    my_rank = rank;
    int none = 0;
    if (!log.pid[rank].compare_exchange_strong(none, pid))
      stop_worker(rank, "two processes trained as worker " + str(rank) + ": pid " + str(none) + " and pid " + str(pid));
    unsigned long inode = 0;
    if (g_watched.verify & kMapping) {
      const std::string wrong = where_parameters_live(model, segment_path(job.sharing, job.name), who, &inode);
      if (!wrong.empty()) stop_worker(rank, wrong);
    }
    // No worker trains before the parent waits for them: a parent that does not wait reads the
    // initial weights, every time.
    const auto deadline = std::chrono::steady_clock::now() + kRendezvous;
    while (!log.parent_waits.load()) {
      if (std::chrono::steady_clock::now() > deadline)
        stop_worker(rank, who + " waited " + str(kRendezvous.count()) + " s at its first step for the parent to wait " +
                              "for its workers (Workers::wait), in vain");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // The same segment as the parent's, not another of the same name (a memfd of its own).
    const unsigned long parents = log.segment_inode.load();
    if (inode && parents && inode != parents)
      stop_worker(rank, who + ": its parameters are in a segment of its own named " +
                            segment_path(job.sharing, job.name) + " (another inode), not the parent's: every process " +
                            "must map the ONE segment the parent made");
    // The rendezvous: Hogwild's workers train at the same time, so every one of them reaches its
    // first step while the others are alive.
    const int here = log.arrived.fetch_add(1) + 1;
    while ((g_watched.verify & kTogether) && log.arrived.load() < n) {
      if (std::chrono::steady_clock::now() > deadline)
        stop_worker(rank, who + " waited " + str(kRendezvous.count()) +
                              " s at its first step for the others, but only " + str(log.arrived.load()) + " of " +
                              str(n) + " workers had started (it was number " +
                              str(here) + "): Hogwild's workers train at the same time — start every worker before "
                              "waiting for any, and take no lock around train_step");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } else if (rank != my_rank) {
    stop_worker(rank, who + " trained as worker " + str(my_rank) + " first, then as worker " + str(rank));
  }
  const int k = calls++;
  if (k >= static_cast<int>(job.batches.size()))
    stop_worker(rank, who + " took a step " + str(k + 1) + " on " + str(job.batches.size()) +
                          " batches: one step per batch");
  if (g_watched.verify & kShards) {
    HostBatch want;
    take_shard(job.batches[static_cast<size_t>(k)], rank, n, want);
    if (shard.size != want.size || shard.features != want.features || shard.x != want.x || shard.y != want.y)
      stop_worker(rank, who + ", its step " + str(k) + ": the rows it trained on are not its shard of batch " +
                            str(k) + " (rows " + str(rank) + ", " + str(rank) + " + " + str(n) + ", " + str(rank) +
                            " + " + str(2 * n) + ", … — take_shard(batch, " + str(rank) + ", " + str(n) +
                            ", shard))");
  }
  if (g_watched.verify & kNoCopies) {
    // The worker computes on the shared floats in place: between two of its steps its device moves
    // the last step's shard (batch.x, batch.y) and nothing else — no weights pulled or pushed.
    Device& device = model.layers().front().device();
    if (k > 0 && device.bus()) {
      int64_t moved = 0;
      for (const Event& e : device.bus()->events_since(events_seen))
        if (e.lane == Lane::copy) moved += e.bytes;
      if (moved != shard_bytes)
        stop_worker(rank, who + " copied " + str(moved) + " bytes between its steps " + str(k - 1) + " and " + str(k) +
                              ", its shard is " + str(shard_bytes) + " bytes: " + str(moved - shard_bytes) +
                              " bytes more (weights downloaded or uploaded every step?) — Hogwild's worker computes "
                              "on the shared floats in place, nothing is copied per step");
    }
    if (device.bus()) events_seen = device.bus()->event_count();
    shard_bytes = static_cast<int64_t>(shard.x.size() * sizeof(float) + shard.y.size() * sizeof(int32_t));
  }
  if ((g_watched.verify & kNoLock) && k == kMeetStep) {
    // Every worker inside train_step at once: a lock (a semaphore, taking turns) around the step
    // keeps the others out, and they never meet.
    log.inside_meet.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + kRendezvous;
    while (log.inside_meet.load() < n) {
      if (std::chrono::steady_clock::now() > deadline)
        stop_worker(rank, who + " waited " + str(kRendezvous.count()) + " s inside its step " + str(kMeetStep) +
                              " (in train_step) for the other workers to be inside theirs, but only " +
                              str(log.inside_meet.load()) + " of " + str(n) +
                              " were: something keeps a worker out of train_step while another is in it (a lock, a "
                              "semaphore, taking turns) — Hogwild's workers write the shared weights without any lock");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  for (const Fault& f : g_watched.faults) {
    if (f.kind == FaultKind::none || f.rank != rank || f.step != k) continue;
    if (f.kind == FaultKind::exit3) _exit(3);
    if (f.kind == FaultKind::sigkill) raise(SIGKILL);
    if (f.kind == FaultKind::hang)
      for (;;) pause();
    // slow: asleep until `until` after the parent began to wait, then on as usual
    const std::chrono::steady_clock::time_point began{std::chrono::nanoseconds(log.wait_began_ns.load())};
    std::this_thread::sleep_until(began + f.until);
  }
  log.steps[rank].fetch_add(1);
}

void on_worker_started() {
  if (g_watched.log && getpid() == g_watched.parent) ++g_watched.started;
}

void on_parent_waits() {
  if (!g_watched.log || getpid() != g_watched.parent || g_watched.log->parent_waits.load()) return;
  // The time and the segment first, then the flag: a worker that sees the flag reads them.
  g_watched.log->wait_began_ns.store(std::chrono::steady_clock::now().time_since_epoch().count());
  const lab02::Job& job = *g_watched.job;
  const std::vector<Mapping> maps = mappings_of(segment_path(job.sharing, job.name));
  if (!maps.empty()) g_watched.log->segment_inode.store(maps.front().inode);
  g_watched.log->parent_waits.store(1);
}

}  // namespace lab02::detail

namespace {

// ---------------------------------------------------------------------------------------------
// A watched run of the student's hogwild.

struct Outcome {
  HostWeights weights;
  bool threw = false;
  std::string error;      // what hogwild threw
  std::string hook;       // what the workers' hook recorded ("" nothing wrong)
  bool parent_waited = false;  // hogwild called Workers::wait
  std::chrono::milliseconds waited{0};  // from its first Workers::wait until hogwild returned or threw
  std::vector<int> pid, steps;
  std::vector<std::string> children;  // left in the process table after hogwild returned or threw
  int started = 0;  // workers the parent started (Workers::start)
};

OptimizerConfig optimizer_config() {
  OptimizerConfig c;
  c.kind = "sgd";
  c.lr = 0.05f;
  c.momentum = 0.5f;  // as PyTorch's mnist_hogwild example
  return c;
}

lab02::Job make_job(Sharing sharing, int workers, std::vector<HostBatch> batches) {
  lab02::Job j;
  j.sharing = sharing;
  j.name = unique_name();
  j.workers = workers;
  j.batches = std::move(batches);
  j.optimizer = optimizer_config();
  return j;
}

Outcome run(const lab02::Job& job, const HostWeights& init, unsigned verify, const std::vector<Fault>& faults = {}) {
  void* area = mmap(nullptr, sizeof(Log), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) throw std::runtime_error("harness: mmap of its log failed");
  Log* log = new (area) Log();
  g_watched = Watched{&job, log, getpid(), faults, verify};
  Outcome o;
  EventBus bus;
  DeviceOptions opt;
  opt.bus = &bus;
  auto devices = make_devices(opt);
  try {
    o.weights = lab02::hogwild(*devices[0], init, job);
  } catch (const lab::Todo&) {
    g_watched = Watched{};
    munmap(area, sizeof(Log));
    throw;
  } catch (const std::exception& e) {
    o.threw = true;
    o.error = e.what();
  }
  const int64_t ended_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  o.started = g_watched.started;
  g_watched = Watched{};
  o.parent_waited = log->parent_waits.load() != 0;
  if (o.parent_waited)
    o.waited = std::chrono::milliseconds((ended_ns - log->wait_began_ns.load()) / 1000000);
  for (int slot = 0; slot <= kMaxWorkers && o.hook.empty(); ++slot)
    if (log->taken[slot].load()) o.hook = log->error[slot];
  for (int r = 0; r < job.workers && r < kMaxWorkers; ++r) {
    o.pid.push_back(log->pid[r].load());
    o.steps.push_back(log->steps[r].load());
  }
  munmap(area, sizeof(Log));
  o.children = children_left();
  return o;
}

std::string run_text(const lab02::Job& job) {
  return "hogwild, " + str(job.workers) + " worker" + (job.workers == 1 ? "" : "s") + ", " +
         lab02::sharing_name(job.sharing);
}

// What the workers' hook found wrong, if anything.
void expect_no_complaint(const std::string& what, const Outcome& o) {
  if (!o.hook.empty())
    lab::fail(what + ": what the workers did",
              "every worker trains its shard in a process of its own, on the shared parameters", o.hook);
}

// A run that should have trained normally: the workers' hook found nothing wrong, hogwild did not
// throw, and no worker is left.
void expect_clean_run(const lab02::Job& job, const Outcome& o) {
  expect_no_complaint(run_text(job), o);
  lab::expect(o.parent_waited, run_text(job) + ": the parent", "waits for its workers (Workers::wait: p.join())",
              "it returned without waiting for them: the workers never trained (the harness holds them at their "
              "first step until the parent waits), and the weights it read are the initial ones");
  lab::expect(!o.threw, run_text(job) + ": hogwild threw", "the trained weights (no worker failed)", o.error);
  lab::expect(o.children.empty(), run_text(job) + ": worker processes after hogwild returned",
              "none: the parent waits for every worker (and so reaps it)", join(o.children));
}

std::vector<Sharing> sharings(const Args& a) {
  const std::string s = a.get("sharing", "both");
  if (s == "file_descriptor") return {Sharing::file_descriptor};
  if (s == "file_system") return {Sharing::file_system};
  return {Sharing::file_descriptor, Sharing::file_system};
}

// One epoch of batches of `batch` rows of a synthetic training set of `samples`, and its test set.
struct Data {
  DataSplit split;
  std::vector<HostBatch> batches;
};
Data make_data(const std::string& model, int64_t batch, int64_t samples, uint64_t seed) {
  const ModelSpec m = ModelSpec::parse(model);
  Data d;
  d.split = make_synthetic(samples, 2048, m.inputs(), static_cast<int>(m.outputs()), seed);
  Loader loader(d.split.train, batch, seed);
  d.batches.resize(static_cast<size_t>(loader.batches_per_epoch()));
  for (size_t s = 0; s < d.batches.size(); ++s) loader.fill(static_cast<int64_t>(s), d.batches[s]);
  return d;
}

// ---------------------------------------------------------------------------------------------
// Task 1: the parameters in ONE shared segment, named by the strategy — in the parent after
// share_memory, and in every worker during a run.
void shared(const Args& a) {
  const int workers = static_cast<int>(std::stoll(a.get("workers", "2")));
  const ModelSpec spec = ModelSpec::parse(kSmallModel);
  const HostWeights init = init_weights(spec, 7);
  const lab02::ParamLayout layout(spec);
  std::string report;
  for (Sharing sharing : sharings(a)) {
    const std::string strategy = lab02::sharing_name(sharing);
    const std::string name = unique_name(), path = segment_path(sharing, name);
    {
      EventBus bus;
      DeviceOptions opt;
      opt.bus = &bus;
      auto devices = make_devices(opt);
      Model model(*devices[0], init);
      lab02::Segment s = lab02::share_memory(model, sharing, name);
      const std::string what = "share_memory(model, " + strategy + ", \"" + name + "\")";
      const std::vector<Mapping> maps = mappings_of(path);
      std::string wrong = where_parameters_live(model, path, what);
      if (wrong.empty() && maps.size() != 1)
        wrong = what + ": " + str(maps.size()) + " mappings of " + path + " in the parent";
      if (wrong.empty() && static_cast<int64_t>(maps[0].end - maps[0].begin) != layout.bytes())
        wrong = what + ": the mapping of " + path + " is " + str(maps[0].end - maps[0].begin) + " bytes";
      if (wrong.empty() && s.base != reinterpret_cast<char*>(maps[0].begin))
        wrong = what + ": Segment::base is not where the segment is mapped";
      if (wrong.empty() && weights_checksum(model.download()) != weights_checksum(init))
        wrong = what + ": the model's weights changed (the segment must hold the model's current weights)";
      lab02::release(s);
      remove_leftovers();
      lab::expect(wrong.empty(), "the parameters in shared memory, " + strategy,
                  "every parameter inside ONE mapping (MAP_SHARED) of " + path + ", of ParamLayout::bytes() = " +
                      str(layout.bytes()) + " bytes, holding the model's weights",
                  wrong);
    }
    // In a run: every worker's parameters are in the same segment, and the parent sees their updates.
    const Data data = make_data(kSmallModel, 24, 24 * 6, 5);
    const lab02::Job job = make_job(sharing, workers, data.batches);
    const Outcome o = run(job, init, kMapping);
    remove_leftovers();
    expect_clean_run(job, o);
    for (int r = 0; r < workers; ++r)
      lab::expect(o.steps[static_cast<size_t>(r)] > 0, run_text(job) + ": steps of worker " + str(r),
                  "one per batch", "none");
    lab::expect(weights_checksum(o.weights) != weights_checksum(init), run_text(job) + ": the weights hogwild returned",
                "the workers' updates, read from the shared segment", "the initial weights, unchanged");
    const std::string shown = sharing == Sharing::file_descriptor ? "/memfd:<name>" : "/dev/shm/<name>";
    report += "  " + strategy + ": one MAP_SHARED mapping of " + shown + " in the parent and in each of " +
              str(workers) + " workers\n";
  }
  std::printf("passed: the parameters live in one shared segment\n%s", report.c_str());
}

// Task 3 with one worker: Hogwild is then plain SGD on the whole batch, step after step — single's
// weights bit for bit, which the parent can only return if it reads what its worker wrote.
void one_worker(const Args& a) {
  const std::string model = a.get("model", kSmallModel);
  const ModelSpec spec = ModelSpec::parse(model);
  const HostWeights init = init_weights(spec, 7);
  const Data data = make_data(model, 32, 32 * 12, 3);
  const HostWeights single = lab::train_single(model, optimizer_config(), data.batches);
  std::string report;
  for (Sharing sharing : sharings(a)) {
    const lab02::Job job = make_job(sharing, 1, data.batches);
    const Outcome o = run(job, init, kNothingMore);
    remove_leftovers();
    expect_clean_run(job, o);
    const bool same = weights_checksum(o.weights) == weights_checksum(single);
    const bool untouched = weights_checksum(o.weights) == weights_checksum(init);
    lab::expect(same, run_text(job) + ", " + model + ", " + str(job.batches.size()) +
                          " SGD steps (momentum 0.5) of batch 32: the weights hogwild returned, against single's",
                "single's, bit for bit (one worker trains the whole batch, step after step)",
                untouched ? std::string("the initial weights: the parent does not see what its worker wrote")
                          : "max relative difference " + str(max_relative_difference(o.weights, single)));
    report += std::string("  ") + lab02::sharing_name(sharing) + ": bit for bit\n";
  }
  std::printf("passed: one worker is single\n%s", report.c_str());
}

// Task 3: W processes at once, each its shard of every batch, all waited for.
void processes(const Args& a) {
  const std::string model = a.get("model", kSmallModel);
  const HostWeights init = init_weights(ModelSpec::parse(model), 7);
  const auto list = a.ints("workers", "2,4");
  std::string report;
  size_t i = 0;
  for (long long wl : list) {
    const int workers = static_cast<int>(wl);
    const int64_t batch = 8 * workers;
    const Data data = make_data(model, batch, batch * 10, 9);
    const std::vector<Sharing> s = sharings(a);
    const lab02::Job job = make_job(s[i++ % s.size()], workers, data.batches);
    const Outcome o = run(job, init, kTogether | kShards);
    remove_leftovers();
    expect_clean_run(job, o);
    lab::expect(o.started == workers, run_text(job) + ": processes started (Workers::start)",
                "one per worker: " + str(workers), str(o.started));
    for (int r = 0; r < workers; ++r) {
      const size_t k = static_cast<size_t>(r);
      lab::expect(o.pid[k] != 0, run_text(job) + ": worker " + str(r), "trains (train_step(" + str(r) + ", …))",
                  "never called train_step");
      lab::expect(o.steps[k] == static_cast<int>(job.batches.size()), run_text(job) + ": steps of worker " + str(r),
                  "one per batch: " + str(job.batches.size()), str(o.steps[k]));
    }
    report += "  " + str(workers) + " workers (" + lab02::sharing_name(job.sharing) + "): " + str(workers) +
              " processes at once, each its shard of " + str(job.batches.size()) + " batches, all reaped\n";
  }
  std::printf("passed: the workers are processes that train at the same time\n%s", report.c_str());
}

// Task 3: Hogwild's races cost little — the test accuracy after one epoch is within 0.02 of
// single's. (Printed: single's, and the threshold; --show 1 also prints what each run reached.)
void accuracy(const Args& a) {
  const std::string model = a.get("model", "mlp:12-32-10");
  const double tolerance = std::stod(a.get("tolerance", "0.02"));
  const bool show = a.get("show", "0") == "1";
  const int64_t batch = std::stoll(a.get("batch", "64"));
  const HostWeights init = init_weights(ModelSpec::parse(model), 7);
  const Data data = make_data(model, batch, std::stoll(a.get("samples", "16384")), 21);
  const auto accuracy_of = [&](const HostWeights& w) {
    return evaluate_accuracy(w, data.split.test.images.data(), data.split.test.labels.data(), data.split.test.count);
  };
  const double single = accuracy_of(lab::train_single(model, optimizer_config(), data.batches));
  std::string report;
  for (long long wl : a.ints("workers", "2,4"))
    for (Sharing sharing : sharings(a)) {
      const lab02::Job job = make_job(sharing, static_cast<int>(wl), data.batches);
      const Outcome o = run(job, init, kNothingMore);
      remove_leftovers();
      expect_clean_run(job, o);
      const double acc = accuracy_of(o.weights);
      char line[160];
      std::snprintf(line, sizeof line, "test accuracy %.4f (single: %.4f)", acc, single);
      lab::expect(acc >= single - tolerance,
                  run_text(job) + ", " + model + ", one epoch of batch " + str(batch) + " (" + str(job.batches.size()) +
                      " batches), SGD lr 0.05 momentum 0.5",
                  "test accuracy ≥ single's − " + str(tolerance), line);
      if (show) report += "  " + run_text(job) + ": " + line + "\n";
    }
  char head[200];
  std::snprintf(head, sizeof head,
                "passed: every Hogwild run within %.2f of single's test accuracy %.4f (%s, one epoch)\n", tolerance,
                single, model.c_str());
  std::printf("%s%s", head, report.c_str());
}

// Task 3: a worker that fails is reported, by number — whether it exits non-zero, is killed, or
// hangs (then within the job's timeout) — and nothing is left running.
void worker_failure(const Args& a) {
  const int workers = static_cast<int>(std::stoll(a.get("workers", "3")));
  const int bad = workers - 2 >= 0 ? 1 : 0;
  const HostWeights init = init_weights(ModelSpec::parse(kSmallModel), 7);
  const Data data = make_data(kSmallModel, 8 * workers, 8 * workers * 8, 13);
  struct Case {
    FaultKind kind;
    std::string what, words;
  };
  const std::vector<Case> cases = {{FaultKind::exit3, "exits with status 3", "exit status 3"},
                                   {FaultKind::sigkill, "is killed (SIGKILL)", "signal 9"},
                                   {FaultKind::hang, "hangs", ""}};
  std::string report;
  for (const Case& c : cases) {
    lab02::Job job = make_job(Sharing::file_descriptor, workers, data.batches);
    if (c.kind == FaultKind::hang) job.timeout = std::chrono::milliseconds(1500);
    const Outcome o = run(job, init, kNothingMore, {Fault{c.kind, bad, 2}});
    remove_leftovers();
    const std::string what = run_text(job) + ": worker " + str(bad) + " " + c.what + " at its step 2" +
                             (c.kind == FaultKind::hang ? " (job.timeout " + str(job.timeout.count()) + " ms)" : "");
    expect_no_complaint(what, o);
    lab::expect(o.threw, what, "hogwild throws, naming worker " + str(bad),
                "it returned weights as if every worker had finished");
    const bool named = o.error.find("worker " + str(bad)) != std::string::npos;
    const bool words = c.words.empty() || o.error.find(c.words) != std::string::npos;
    lab::expect(named && words, what + ": the error hogwild threw",
                "names worker " + str(bad) +
                    (c.words.empty() ? "" : " and says \"" + c.words + "\" (Workers::status_text)"),
                o.error);
    lab::expect(o.children.empty(), what + ": worker processes after hogwild threw",
                "none: every worker ended (killed if need be) and reaped", join(o.children));
    report += "  worker " + str(bad) + " " + c.what + ": reported\n";
  }
  std::printf("passed: a failed worker is reported by number, never hangs the parent\n%s", report.c_str());
}

// Task 4: after a run — normal, or one whose worker failed — nothing of the segment is left: no
// /dev/shm file, no mapping, no descriptor, no process.
void no_leak(const Args& a) {
  const int workers = static_cast<int>(std::stoll(a.get("workers", "2")));
  const HostWeights init = init_weights(ModelSpec::parse(kSmallModel), 7);
  const Data data = make_data(kSmallModel, 8 * workers, 8 * workers * 6, 17);
  for (Sharing sharing : sharings(a))
    for (bool failing : {false, true}) {
      const lab02::Job job = make_job(sharing, workers, data.batches);
      const std::string path = segment_path(sharing, job.name);
      const Outcome o = run(job, init, kNothingMore, {failing ? Fault{FaultKind::exit3, workers - 1, 1} : Fault{}});
      const std::vector<std::string> files = shm_entries(name_prefix());
      remove_leftovers();
      const std::string what = run_text(job) +
                               (failing ? ", worker " + str(workers - 1) + " exits with status 3" : "") +
                               ": after hogwild " + (o.threw ? "threw" : "returned");
      expect_no_complaint(what, o);
      if (!failing) lab::expect(!o.threw, what, "the trained weights", o.error);
      lab::expect(files.empty(), what + ": /dev/shm", "no file left (shm_unlink the name on every path)",
                  "left behind: /dev/shm/" + join(files));
      const size_t maps = mappings_of(path).size();
      lab::expect(maps == 0, what + ": mappings of " + path + " in the parent", "none (munmap)", str(maps));
      const int fds = descriptors_of(path);
      lab::expect(fds == 0, what + ": descriptors of " + path + " in the parent", "none (close)", str(fds));
      lab::expect(o.children.empty(), what + ": worker processes", "none left", join(o.children));
    }
  std::printf("passed: nothing left behind — no /dev/shm file, mapping, descriptor or process — after a normal run "
              "and after a failed worker, by both strategies\n");
}

// Task 3, no lock: at their step 2, after some training, every worker is inside train_step at the
// same time. A lock around the step (a semaphore, workers taking turns) lets one in at a time, and
// they never meet. (The first-step rendezvous of `processes` says the same about starting.)
void no_lock(const Args& a) {
  const int workers = static_cast<int>(std::stoll(a.get("workers", "3")));
  const HostWeights init = init_weights(ModelSpec::parse(kSmallModel), 7);
  const Data data = make_data(kSmallModel, 8 * workers, 8 * workers * 6, 19);
  lab02::Job job = make_job(Sharing::file_descriptor, workers, data.batches);
  // A worker stopped inside a locked step keeps the lock: the others wait for ever, and the parent
  // gives up on them at this deadline, not the default 10 s.
  job.timeout = kRendezvous + std::chrono::seconds(1);
  const Outcome o = run(job, init, kNoLock);
  remove_leftovers();
  expect_clean_run(job, o);
  std::printf("passed: %d workers were inside train_step at once at their step %d: no lock\n", workers, kMeetStep);
}

// Bytes moved: a worker's parameters are the shared floats, so between two of its steps its
// device copies its shard in and nothing else — no weights pulled from the segment or pushed to it.
void no_copies(const Args& a) {
  const int workers = static_cast<int>(std::stoll(a.get("workers", "2")));
  const HostWeights init = init_weights(ModelSpec::parse(kSmallModel), 7);
  const Data data = make_data(kSmallModel, 8 * workers, 8 * workers * 6, 23);
  std::string report;
  for (Sharing sharing : sharings(a)) {
    const lab02::Job job = make_job(sharing, workers, data.batches);
    const Outcome o = run(job, init, kNoCopies);
    remove_leftovers();
    expect_clean_run(job, o);
    report += "  " + run_text(job) + ": each worker copied its shard per step, no weights\n";
  }
  std::printf("passed: nothing but the shards copied between steps (the workers' traces)\n%s", report.c_str());
}

// Task 3, the deadline: job.timeout bounds the waiting for ALL the workers together, from the
// first Workers::wait. A worker that is slow but ends in time is waited for; a hang behind a slow
// worker is reported job.timeout after the waiting began — not that plus the slow one's time (a
// fresh deadline per worker).
void one_deadline(const Args& a) {
  const auto timeout = std::chrono::milliseconds(std::stoll(a.get("timeout_ms", "1200")));
  const auto slow = timeout * 7 / 10;  // the slow worker ends this long after the waiting began
  const auto slack = std::chrono::milliseconds(600);  // reaping, releasing, a loaded machine (CI runs tests side by side)
  const HostWeights init = init_weights(ModelSpec::parse(kSmallModel), 7);
  const Data data = make_data(kSmallModel, 24, 24 * 6, 29);
  const std::string limits = " (job.timeout " + str(timeout.count()) + " ms)";

  lab02::Job job = make_job(Sharing::file_descriptor, 3, data.batches);
  job.timeout = timeout;
  const Outcome fine = run(job, init, kNothingMore, {Fault{FaultKind::slow, 1, 1, slow}});
  remove_leftovers();
  const std::string what_fine = run_text(job) + ": worker 1 ends " + str(slow.count()) +
                                " ms after the waiting began" + limits;
  expect_no_complaint(what_fine, fine);
  lab::expect(!fine.threw, what_fine, "the trained weights: every worker ended within job.timeout", fine.error);

  job = make_job(Sharing::file_descriptor, 3, data.batches);
  job.timeout = timeout;
  const Outcome hung = run(job, init, kNothingMore,
                           {Fault{FaultKind::slow, 0, 1, slow}, Fault{FaultKind::hang, 1, 1}});
  remove_leftovers();
  const std::string what = run_text(job) + ": worker 0 ends " + str(slow.count()) +
                           " ms after the waiting began, worker 1 hangs" + limits;
  expect_no_complaint(what, hung);
  lab::expect(hung.threw && hung.error.find("worker 1") != std::string::npos, what, "hogwild throws, naming worker 1",
              hung.threw ? hung.error : std::string("it returned weights"));
  // Printed as a range, not the measured time: the same submission prints the same message.
  const auto early = timeout - std::chrono::milliseconds(50), late = timeout + slack;
  lab::expect(hung.waited >= early && hung.waited <= late, what + ": from the first Workers::wait until hogwild threw",
              str(timeout.count()) + " ms (up to " + str(late.count()) +
                  "): one deadline, job.timeout after the waiting began, for all the workers together",
              hung.waited > late ? "over " + str(late.count()) + " ms — a fresh deadline per worker adds the slow worker's time"
                                 : "under " + str(early.count()) + " ms — it gave up before job.timeout");
  lab::expect(hung.children.empty(), what + ": worker processes after hogwild threw", "none", join(hung.children));
  std::printf("passed: one deadline for all the workers — a slow worker that ends in time is waited for, a hang "
              "behind it is reported job.timeout after the waiting began\n");
}

// Task 1 on its failing paths: share_memory that cannot make its segment throws, and leaves
// nothing behind — and touches nothing it did not make. ftruncate is made to fail by a file-size
// limit below the segment's size (EFBIG); file_system's name is taken by a file made beforehand
// (EEXIST: shm_open's O_EXCL refuses to open another's segment, and release must not unlink it).
struct Attempt {
  bool threw = false;
  std::string error;
};
Attempt try_share_memory(Sharing sharing, const std::string& name) {
  EventBus bus;
  DeviceOptions opt;
  opt.bus = &bus;
  auto devices = make_devices(opt);
  Model model(*devices[0], init_weights(ModelSpec::parse(kSmallModel), 7));
  Attempt at;
  try {
    lab02::Segment s = lab02::share_memory(model, sharing, name);
    lab02::release(s);
  } catch (const lab::Todo&) {
    throw;
  } catch (const std::exception& e) {
    at = {true, e.what()};
  }
  return at;
}

// A file-size limit of `bytes` while it lives, SIGXFSZ ignored: growing a file past it (ftruncate)
// fails with EFBIG instead of killing the process. The limit and the handler are restored after.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(int64_t bytes) {
    getrlimit(RLIMIT_FSIZE, &before_);
    rlimit low = before_;
    low.rlim_cur = static_cast<rlim_t>(bytes);
    handler_ = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &low);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &before_);
    signal(SIGXFSZ, handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit before_{};
  void (*handler_)(int) = SIG_DFL;
};

void share_failure(const Args& a) {
  const int64_t bytes = lab02::ParamLayout(ModelSpec::parse(kSmallModel)).bytes();
  std::string report;
  for (Sharing sharing : sharings(a)) {
    const std::string name = unique_name(), path = segment_path(sharing, name);
    const std::string what = "share_memory(model, " + std::string(lab02::sharing_name(sharing)) + ", \"" + name +
                             "\") with ftruncate failing (a file-size limit of " + str(bytes / 2) + " bytes)";
    Attempt at;
    {
      const FileSizeLimit limit(bytes / 2);
      at = try_share_memory(sharing, name);
    }
    const std::vector<std::string> files = shm_entries(name);
    const size_t maps = mappings_of(path).size();
    const int fds = descriptors_of(path);
    remove_leftovers();
    lab::expect(at.threw, what, "it throws (std::runtime_error naming ftruncate and strerror(errno))",
                "it returned a segment");
    lab::expect(files.empty() && maps == 0 && fds == 0, what + ": after it threw (\"" + at.error + "\")",
                "nothing of the segment left: release what was made, then throw",
                str(files.size()) + " /dev/shm file(s), " + str(maps) + " mapping(s), " + str(fds) +
                    " descriptor(s) of " + path);
    report += std::string("  ") + lab02::sharing_name(sharing) + ": ftruncate fails: thrown, nothing left\n";
  }
  // file_system: the name is already taken by another's segment.
  const std::string name = unique_name(), marker = "another process's segment";
  const int fd = shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, 4096) != 0 || pwrite(fd, marker.data(), marker.size(), 0) != ssize_t(marker.size()))
    throw std::runtime_error("harness: could not make /dev/shm/" + name + ": " + std::strerror(errno));
  close(fd);
  const Attempt at = try_share_memory(Sharing::file_system, name);
  std::string left;
  if (const int back = shm_open(("/" + name).c_str(), O_RDONLY, 0); back >= 0) {
    left.resize(marker.size());
    if (pread(back, left.data(), left.size(), 0) != ssize_t(left.size())) left.clear();
    close(back);
  }
  remove_leftovers();
  const std::string what = "share_memory(model, file_system, \"" + name + "\") where /dev/shm/" + name +
                           " already exists (another's segment)";
  lab::expect(at.threw, what, "it throws (shm_open with O_CREAT | O_EXCL: File exists)",
              "it opened the existing file and wrote the model over it");
  lab::expect(left == marker, what + ": /dev/shm/" + name + " afterwards", "still there, untouched (\"" + marker + "\")",
              left.empty() ? std::string("gone: release unlinked a name it had not made (Segment::linked)")
                           : "overwritten: \"" + left + "\"");
  report += "  file_system, the name taken: thrown, the other's file untouched\n";
  // release twice (a catch block after a release, a destructor): the second must change nothing —
  // not close descriptor 0, the process's stdin, which a segment's descriptor never is.
  {
    EventBus bus;
    DeviceOptions opt;
    opt.bus = &bus;
    auto devices = make_devices(opt);
    Model model(*devices[0], init_weights(ModelSpec::parse(kSmallModel), 7));
    lab02::Segment twice = lab02::share_memory(model, Sharing::file_descriptor, unique_name());
    lab02::release(twice);
    lab02::release(twice);
    remove_leftovers();
    lab::expect(fcntl(0, F_GETFD) != -1, "release called twice on one segment",
                "the second does nothing (Segment::fd < 0 after the first: no descriptor)",
                "it closed descriptor 0, the process's stdin: the first release left fd = " + str(twice.fd));
    report += "  released twice: the second did nothing\n";
  }
  std::printf("passed: share_memory that fails throws and leaves nothing behind\n%s", report.c_str());
}

// What a failed check prints holds no pid: "lab02-<pid>-3", "worker 1 (pid …)" — so the same
// submission graded twice prints the same thing.
std::string steady_text(std::string text) {
  const std::string prefix = name_prefix();
  for (size_t at; (at = text.find(prefix)) != std::string::npos;) text.replace(at, prefix.size(), "lab02-<pid>-");
  for (size_t at = text.find("pid "); at != std::string::npos; at = text.find("pid ", at + 4)) {
    size_t end = at + 4;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end > at + 4) text.replace(at + 4, end - at - 4, "…");
  }
  return text;
}

lab::Check steady(const lab::Check& check) {
  return [check](const Args& a) {
    try {
      check(a);
    } catch (const lab::Todo&) {
      throw;
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error(steady_text(e.what()));
    }
  };
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                        {{"shared", steady(shared)},
                         {"one_worker", steady(one_worker)},
                         {"processes", steady(processes)},
                         {"accuracy", steady(accuracy)},
                         {"worker_failure", steady(worker_failure)},
                         {"no_leak", steady(no_leak)},
                         {"no_lock", steady(no_lock)},
                         {"no_copies", steady(no_copies)},
                         {"one_deadline", steady(one_deadline)},
                         {"share_failure", steady(share_failure)}});
}
