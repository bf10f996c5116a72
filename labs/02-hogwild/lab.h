#pragma once
// Lab 02 — Hogwild with torch.multiprocessing: worker PROCESSES train one model whose parameters
// live in shared memory. You write the functions declared under "Task" below, in hogwild.cpp; the
// rest is given. The grader builds your hogwild.cpp into harness.cpp and runs the checks of
// checks.json (`scalelab grade 02-hogwild`).
//
// PyTorch's mnist_hogwild example, which this lab follows step by step:
//
//     model = Net()
//     model.share_memory()                     # Task 1: the parameters into shared memory
//     processes = []
//     for rank in range(num_processes):        # Task 3: fork the workers …
//         p = mp.Process(target=train, args=(rank, model))   # Task 2: … each runs train()
//         p.start(); processes.append(p)
//     for p in processes: p.join()             # … and wait for every one
//
// On Linux mp.Process forks: each worker inherits the parent's model, whose parameters now point
// into a MAP_SHARED mapping — so every process computes on the SAME floats, and an optimizer step
// one worker takes is there for all the others at once. No lock, no all-reduce: that is Hogwild.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/nn/shared_weights.h"
#include "core/proc/layout.h"
#include "core/proc/process.h"
#include "labs/common/harness.h"
#include "labs/common/reference.h"
#include "strategies/distributed_sampler.h"

namespace lab02 {

using scalelab::Device;
using scalelab::HostBatch;
using scalelab::HostWeights;
using scalelab::Model;
using scalelab::ModelSpec;
using scalelab::Optimizer;
using scalelab::OptimizerConfig;
using scalelab::take_shard;  // take_shard(batch, rank, world, shard): rows rank, rank + world, … of batch

// torch.multiprocessing's two sharing strategies for CPU tensors (set_sharing_strategy).
enum class Sharing {
  file_descriptor,  // an ANONYMOUS segment: memfd_create(name, 0) — it has no name in any folder,
                    // a process reaches it through a descriptor, and it goes when the last
                    // descriptor and mapping are gone: nothing can be left behind
  file_system,      // a NAMED file in /dev/shm: shm_open("/" + name, O_CREAT | O_EXCL | O_RDWR, 0600)
                    // — any process can open it by its name, and it stays until shm_unlink'ed,
                    // even after every process has exited (torch runs torch_shm_manager to clean up)
};
inline const char* sharing_name(Sharing s) { return s == Sharing::file_system ? "file_system" : "file_descriptor"; }

// The shared segment, as the parent holds it.
struct Segment {
  Sharing sharing = Sharing::file_descriptor;
  std::string name;       // as given to share_memory: the memfd's label, or the file /dev/shm/<name>
  int fd = -1;            // the segment's descriptor, while open
  char* base = nullptr;   // this process's mapping (MAP_SHARED), while mapped
  int64_t bytes = 0;      // the mapping's size
  bool linked = false;    // file_system: /dev/shm/<name> still exists (shm_unlink not called yet)
};

// ---- Given ----------------------------------------------------------------------------------------

// Where a model's parameters go in a segment (core/nn/shared_weights.h): fc1.weight, fc1.bias,
// fc2.weight, … one after another, each on cache lines of its own. The segment is ONE area of
// bytes() for all of them.
class ParamLayout {
 public:
  explicit ParamLayout(const ModelSpec& spec) : weights_(spec, layout_) {}
  int64_t bytes() const { return layout_.bytes(); }  // the segment's size: every parameter, rounded up to a page
  // Copies `w` (weights of this spec) into the segment at `base`, and reads them back.
  void write(char* base, const HostWeights& w) const { weights_.write(base, w); }
  HostWeights read(const char* base) const { return weights_.read(base); }
  // Points `model`'s parameters at their floats in the segment at `base`: from now on the model
  // computes on the shared weights, and its optimizer writes into them (its private copies are
  // freed). Write the model's current weights there first.
  void point(Model& model, char* base) const { weights_.share(model, model.layers().front().device(), base); }

 private:
  scalelab::SegmentLayout layout_;  // first: weights_ places the parameters in it
  scalelab::SharedWeights weights_;
};

// What the harness asks the run to do.
struct Job {
  Sharing sharing = Sharing::file_descriptor;
  std::string name;                 // the segment's name (unique to this run: "lab02-<pid>-<n>")
  int workers = 2;                  // W processes
  std::vector<HostBatch> batches;   // one epoch of global batches, the same list for every worker:
                                    // worker r trains rows r, r + W, r + 2W, … of each (take_shard)
  OptimizerConfig optimizer;        // each worker builds its OWN optimizer from it
  std::chrono::milliseconds timeout{10000};  // the longest the parent waits for all its workers, together
};

// The harness's eyes (defined in harness.cpp): which process trained which rows, where that
// process's parameters live, when the parent began to wait for its workers, how many it started.
namespace detail {
void on_train_step(int rank, Model& model, const HostBatch& shard);
void on_parent_waits();
void on_worker_started();
}  // namespace detail

// One Hogwild step of worker `rank` on its shard: forward, loss, backward (the gradients are the
// worker's own, private), then optimizer.step(), which writes straight into the model's parameters
// — the shared ones, if the model points into the segment. No lock.
inline void train_step(int rank, Model& model, Optimizer& optimizer, const HostBatch& shard) {
  detail::on_train_step(rank, model, shard);
  lab::forward_backward(model.layers().front().device(), model, shard);
  optimizer.step();
}

// The worker processes of the parent (core/proc/process.h): start() forks one, which runs `work`
// and exits with what it returns — 0 for success; an exception is printed ("[worker 1] …") and
// exits 1. A worker never returns into the parent's code, and dies with the parent. Whatever is
// still running when the Workers object goes is killed (SIGKILL) and reaped.
class Workers {
 public:
  using Clock = std::chrono::steady_clock;

  // Forks the next worker (numbered 0, 1, 2, … in the order started); returns its number. The child
  // gets a copy of the parent's memory — its objects, its model — and shares what is MAP_SHARED.
  int start(const std::function<int()>& work) {
    detail::on_worker_started();
    const int r = children_.count();
    children_.spawn("worker " + std::to_string(r), work);
    return r;
  }
  int count() const { return children_.count(); }
  pid_t pid(int r) const { return children_.pid(r); }

  // Waits for worker r until `deadline`: its wait status once it has ended (it is reaped then), or
  // std::nullopt if it is still running at the deadline. A status of 0 is success. (Wait for your
  // workers with this: the harness holds them at their first step until the parent waits.)
  std::optional<int> wait(int r, Clock::time_point deadline) {
    detail::on_parent_waits();
    int status = 0;
    for (;;) {
      if (children_.ended(r, &status)) return status;
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // A wait status in words: "exit status 3", "killed by signal 9 (Killed)".
  static std::string status_text(int status) { return scalelab::wait_status_text(status); }
  // SIGKILL to every worker still running; reaps them all.
  void kill_all() noexcept { children_.reap_all(std::chrono::milliseconds(0)); }

 private:
  scalelab::Children children_;
};

// What you call besides (man 2 / man 3): memfd_create, shm_open, ftruncate, mmap (PROT_READ |
// PROT_WRITE, MAP_SHARED), munmap, close, shm_unlink — <sys/mman.h>, <fcntl.h>, <unistd.h>.
// Throw std::runtime_error (with strerror(errno)) when a call fails.

// ---- Task 1: model.share_memory() -------------------------------------------------------------------

// Moves `model`'s parameters into ONE new shared segment of ParamLayout(model.spec()).bytes(), made
// by `sharing` under `name` (see Sharing): create it, give it its size (ftruncate), map it
// MAP_SHARED, copy the model's current weights in (ParamLayout::write of model.download()) and
// point the model at them (ParamLayout::point). Returns the segment, still open and mapped (and
// for file_system still named: linked = true).
Segment share_memory(Model& model, Sharing sharing, const std::string& name);

// ---- Task 2: one worker (mp.Process's target) ------------------------------------------------------

// Runs in worker process `rank` of job.workers, after the fork: `model` is the parent's model as
// fork copied it — its parameters point into the shared mapping. Build this worker's OWN optimizer
// on the model's parameters, then for every batch of job.batches, in order: take this worker's
// shard (take_shard) and train_step on it. Returns the process's exit status: 0.
int worker(int rank, Model& model, const Job& job);

// ---- Task 3: the run -------------------------------------------------------------------------------

// The parent: a model on `device` from `init`; share_memory (job.sharing, job.name); start
// job.workers workers running worker(r, model, job) — ALL of them before waiting for any: they
// train at the same time; then wait for every one (Workers::wait), all within job.timeout from the
// start of the waiting. A worker that failed (a non-zero status, a signal) or did not end in time:
// throw std::runtime_error naming it — "worker 1 (pid 4242): exit status 3" — never hang. Then
// read the trained weights out of the shared segment and release it. Release it on EVERY path: a
// run that throws leaves nothing behind either (no process, no mapping, no descriptor, no
// /dev/shm file). Returns the trained weights.
HostWeights hogwild(Device& device, const HostWeights& init, const Job& job);

// ---- Task 4: cleaning up -----------------------------------------------------------------------------

// Undoes share_memory: unmaps the segment, closes its descriptor and — file_system — removes its
// name (shm_unlink); whatever of these is still to do (it may be called on a half-made segment or
// twice). Never throws. Afterwards the model's parameters point at memory that is gone: read the
// weights before.
void release(Segment& segment) noexcept;

}  // namespace lab02
