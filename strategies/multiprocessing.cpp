// multiprocessing: Hogwild. N worker processes train ONE model whose parameters live in ONE
// shared-memory segment; each trains on its own shard of the data and writes its SGD updates
// straight into the shared weights, without any lock (Recht et al., "Hogwild!", 2011; PyTorch's
// torch.multiprocessing example mnist_hogwild: model.share_memory(), then mp.Process per worker).
//
// The lecture's torch.multiprocessing, step by step:
//   1. The parent puts the parameters in shared memory (torch: share_memory_()). One segment, in
//      one of torch's two sharing strategies (--shm-sharing):
//        fd_passing  ("file_descriptor"): an anonymous memfd; its descriptor travels to each
//                    worker over a Unix socket (SCM_RIGHTS). No name, so nothing can leak.
//        named_file  ("file_system"): /dev/shm/scalelab-<pid>-hogwild-<n>, which each
//                    worker opens by name. A name outlives its users, so the parent removes it
//                    as soon as every worker has opened it (and on every error path).
//      Either way a worker drops the mapping fork handed down and maps the segment afresh by that
//      strategy (core/comm/shm: SharedSegment): /proc/<worker>/maps shows /memfd:scalelab-hogwild
//      or /dev/shm/scalelab-… (deleted).
//   2. It forks N workers (torch: mp.Process). Each builds the model on its own device (cpu or sim,
//      in its own process) with the parameters *pointing into the segment*, and its own optimizer.
//   3. Each worker trains on its shard: forward reads the weights as they are at that instant —
//      other workers may be halfway through writing them — backward makes private gradients, and
//      the optimizer writes the update straight into the shared weights. No lock, no all-reduce:
//      updates interleave, and one can even be lost when two workers write the same weight at
//      once. Hogwild's bet: small updates make that cheap, and it saves all synchronisation.
//
// HOW IT FITS THE TRAINER — the design choice. The workers are forked once, when the strategy is
// made, and live until it is destroyed. Each train_step(global batch) is one ROUND: the parent
// copies shard r (rows r, r+N, r+2N, … of the batch) into worker r's mailbox in the segment and
// bumps its futex; from then on the workers run unsynchronised with each other, racing on the
// weights; train_step returns when all N have reported. We chose rounds over letting the workers
// run free for a whole epoch because --steps, the progress line, the loss of each step and the
// test accuracy after each epoch keep their meaning (train_step returns the mean loss of *that*
// batch; weights() reads weights nobody is writing), and the loader stays in the parent, so every
// strategy sees the same batches. Within a round the asynchrony is real — the trace shows the
// workers' forward, backward and SGD overlapping, each reading weights the others are writing —
// but staleness is bounded by one round, and the slowest worker sets the pace of each round
// (a free-running Hogwild would not wait for it).
//
// THE OPTIMIZER. Each worker has its own, as in PyTorch's example (every process builds
// optim.SGD(model.parameters(), momentum=…) over the shared parameters): momentum buffers (and
// Adam's m, v) are private to the worker, only the weights are shared. So the default --momentum
// 0.9 works, each worker's velocity made of its own gradients. Each worker steps with --lr on the
// mean gradient of its B/N rows: N updates per global batch where single makes one, like SGD with
// batch B/N run N-wide. Asynchronous, so it is held to test accuracy, not to single's weights:
// --check-equivalence is a UsageError. state() saves the weights and the mean over the workers
// of their optimizer buffers (a checkpoint holds one buffer per parameter); load_state() gives
// every worker that mean.
//
// EVENTS. Each worker records its ops on its own device, into its own event bus, in its own
// process; with its report it ships that round's events back through the segment, and the parent
// puts them on the run's bus under device r, next to its own per-round dispatch events (host
// lane). So the parent's trace shows everything: N processes side by side. Time base: on cpu
// every worker's clock counts from the parent's epoch (steady_clock is one clock for all
// processes); on sim each worker models its own device and starts a round where the parent's
// dispatch of its shard ended. Each worker's memory peaks are mirrored into device r's ledger;
// its "params" are the shared mapping, so every device shows them while RAM holds them once.
//
// FAILURES. A worker that throws writes its error into its report and exits 1; one that dies (a
// signal) or hangs is found by the parent, which polls waitpid while it waits for a round, at most
// --comm-timeout: train_step throws naming the worker, its pid, how it ended and its own error.
// The destructor stops the workers (killing any that do not stop), reaps every one, and unmaps the
// segment; a worker dies with the parent (PR_SET_PDEATHSIG).
#include <cblas.h>  // openblas_set_num_threads: one BLAS thread per worker when workers ≥ cores
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include "core/comm/shm/shm_group.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/nn/optimizer.h"
#include "strategies/registry.h"

namespace scalelab {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint64_t kMagic = 0x31444c4957474f48ULL;  // "HOGWILD1"
constexpr int kMaxWorkers = 64;
constexpr int64_t kLine = 128;  // two cache lines: a mailbox and a report never share one

// ---------------------------------------------------------------------------------------------
// The segment. One mapping holds everything the processes share:
//
//   header | mailboxes[N] | reports[N] | PARAMETERS | shards[N] | events[N] | optimizer exchange
//
// The parameters are the model (fc1.weight, fc1.bias, fc2.weight, …), each on a cache line. A
// mailbox is written by the parent only (the command for worker r, then `go` bumped); a report by
// worker r only (the result, then `done` = go). Nothing else is synchronised — least of all the
// parameters.

enum class Command : int32_t { attach, train, save_state, load_state, stop };

const char* command_text(Command c) {
  switch (c) {
    case Command::attach: return "start-up (mapping the segment, building the model)";
    case Command::train: return "training its shard";
    case Command::save_state: return "saving its optimizer state";
    case Command::load_state: return "loading the optimizer state";
    case Command::stop: return "stopping";
  }
  return "?";
}

struct alignas(kLine) Header {
  uint64_t magic = kMagic;
  int32_t workers = 0;
  alignas(kLine) std::atomic<uint32_t> reports{0};  // bumped by every report: the parent's futex
};

struct alignas(kLine) Mailbox {  // written by the parent
  std::atomic<uint32_t> go{0};   // command number; the worker's futex
  Command command = Command::attach;
  int64_t step = -1;
  int64_t rows = 0;              // of the shard in this worker's shard area
  int64_t start_ns = 0;          // sim: when the parent finished handing the shard over
  int64_t optimizer_steps = 0;   // load_state
};

// An Event flattened into fixed-size fields, so it can cross the process boundary.
struct WireEvent {
  int64_t t_begin_ns, t_end_ns, bytes, step;
  double flops;
  int32_t layer, micro_batch, bucket, peer;
  uint8_t lane, phase;
  char kind[24], name[40];
};

struct alignas(kLine) Report {   // written by worker r
  std::atomic<uint32_t> done{0}; // = the mailbox's go once the command is done
  int32_t failed = 0;
  double loss_sum = 0;           // Σ per-row loss over the shard (mean × rows)
  int64_t rows = 0;
  int64_t optimizer_steps = 0;
  int64_t events = 0, dropped_events = 0;
  int64_t peak[kMemoryCategoryCount] = {};
  char error[1024] = {};
};

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

struct Layout {
  int workers = 0;
  int64_t features = 0, max_rows = 0, max_events = 0;
  int state_tensors = 0;  // per parameter: 0 (sgd), 1 (momentum), 2 (adam)
  int64_t parameters = 0; // elements
  int64_t header = 0, mailboxes = 0, reports = 0, shards = 0, shard_bytes = 0, events = 0, exchange = 0, total = 0;
  std::vector<int64_t> param_at, param_numel;  // per parameter (weight, bias of each layer), offsets

  static Layout make(const ModelSpec& spec, int workers, int64_t batch, int state_tensors) {
    Layout l;
    l.workers = workers;
    l.features = spec.inputs();
    l.max_rows = (batch + workers - 1) / workers;
    // Per round a worker emits 2 uploads, 2 ops per layer forward, the loss, ≤ 3 per layer
    // backward and one update per parameter: 7L + 3 events. Room for more.
    l.max_events = 8 * spec.layer_count() + 16;
    l.state_tensors = state_tensors;
    int64_t at = 0;
    auto take = [&](int64_t bytes, int64_t align) {
      at = round_up(at, align);
      const int64_t offset = at;
      at += bytes;
      return offset;
    };
    l.header = take(sizeof(Header), 4096);
    l.mailboxes = take(workers * int64_t{sizeof(Mailbox)}, kLine);
    l.reports = take(workers * int64_t{sizeof(Report)}, kLine);
    at = round_up(at, 4096);
    for (int layer = 0; layer < spec.layer_count(); ++layer)
      for (int64_t numel : {spec.sizes[layer + 1] * spec.sizes[layer], spec.sizes[layer + 1]}) {
        l.param_at.push_back(take(numel * 4, 64));
        l.param_numel.push_back(numel);
        l.parameters += numel;
      }
    l.shard_bytes = round_up(l.max_rows * (l.features * 4 + 4), 4096);
    l.shards = take(workers * l.shard_bytes, 4096);
    l.events = take(workers * l.max_events * int64_t{sizeof(WireEvent)}, 4096);
    l.exchange = take(std::max<int64_t>(1, state_tensors * l.parameters) * 4, 4096);
    l.total = round_up(at, 4096);
    return l;
  }
};

// One process's view of the segment: its own mapping (the address differs between processes).
struct View {
  char* base = nullptr;
  const Layout* l = nullptr;

  Header& header() const { return *reinterpret_cast<Header*>(base + l->header); }
  Mailbox& mailbox(int r) const { return reinterpret_cast<Mailbox*>(base + l->mailboxes)[r]; }
  Report& report(int r) const { return reinterpret_cast<Report*>(base + l->reports)[r]; }
  float* param(size_t i) const { return reinterpret_cast<float*>(base + l->param_at[i]); }
  float* shard_x(int r) const { return reinterpret_cast<float*>(base + l->shards + r * l->shard_bytes); }
  int32_t* shard_y(int r) const { return reinterpret_cast<int32_t*>(shard_x(r) + l->max_rows * l->features); }
  WireEvent* events(int r) const {
    return reinterpret_cast<WireEvent*>(base + l->events) + r * l->max_events;
  }
  float* exchange() const { return reinterpret_cast<float*>(base + l->exchange); }

  HostWeights read_weights(const ModelSpec& spec) const {
    HostWeights w;
    w.spec = spec;
    for (int layer = 0; layer < spec.layer_count(); ++layer) {
      const size_t i = 2 * static_cast<size_t>(layer);
      w.weight.emplace_back(param(i), param(i) + l->param_numel[i]);
      w.bias.emplace_back(param(i + 1), param(i + 1) + l->param_numel[i + 1]);
    }
    return w;
  }
  void write_weights(const HostWeights& w) const {
    for (int layer = 0; layer < w.spec.layer_count(); ++layer) {
      const size_t i = 2 * static_cast<size_t>(layer);
      std::memcpy(param(i), w.weight[layer].data(), static_cast<size_t>(l->param_numel[i]) * 4);
      std::memcpy(param(i + 1), w.bias[layer].data(), static_cast<size_t>(l->param_numel[i + 1]) * 4);
    }
  }
};

void copy_text(char* dst, size_t size, const std::string& src) { std::snprintf(dst, size, "%s", src.c_str()); }

// ---------------------------------------------------------------------------------------------
// What a worker needs to know, copied into it by fork (the parent's memory, as it was).
struct WorkerSetup {
  TrainConfig config;
  ModelSpec spec;
  Layout layout;
  HardwareProfile profile;  // sim
  SteadyClock::time_point epoch;  // cpu: the parent's devices' clock epoch
  pid_t parent = 0;
};

// A tensor on `device` whose bytes are in the segment: the worker's model computes on the shared
// weights themselves, not on a copy. The segment owns the bytes (nothing to free).
Tensor shared_tensor(Device& device, float* data, std::vector<int64_t> shape) {
  auto storage = std::make_shared<Storage>();
  storage->device = &device;
  storage->category = MemoryCategory::params;
  storage->data = data;
  Tensor t(std::move(storage), std::move(shape), DType::f32);
  t.storage()->bytes = t.nbytes();
  return t;
}

// One worker process: its device, its event bus, its model (parameters in the segment), its
// optimizer. Lives in the child only.
class Worker {
 public:
  Worker(int rank, View seg, const WorkerSetup& s) : rank_(rank), seg_(seg), s_(s) {}

  // The worker's whole life; returns its exit status.
  int run() {
    Mailbox& box = seg_.mailbox(rank_);
    Report& rep = seg_.report(rank_);
    uint32_t handled = 0;
    for (;;) {
      // 1. Wait for the next command (the parent bumps `go`), checking the parent is still there.
      const uint32_t go = box.go.load();
      if (go == handled) {
        if (getppid() != s_.parent) return 1;
        shared_futex_wait(box.go, go, milliseconds(100));
        continue;
      }
      handled = go;
      const Command command = box.command;
      // 2. Do it; 3. report (done = go, then wake the parent).
      int status = -1;
      try {
        switch (command) {
          case Command::attach: attach(); break;
          case Command::train: train(box, rep); break;
          case Command::save_state: save_state(); break;
          case Command::load_state: load_state(box); break;
          case Command::stop: status = 0; break;
        }
      } catch (const std::exception& e) {
        rep.failed = 1;
        copy_text(rep.error, sizeof rep.error, e.what());
        status = 1;
      }
      if (optimizer_) rep.optimizer_steps = optimizer_->steps_taken();
      if (device_)
        for (int c = 0; c < kMemoryCategoryCount; ++c)
          rep.peak[c] = device_->memory().peak(static_cast<MemoryCategory>(c));
      rep.done.store(go);
      seg_.header().reports.fetch_add(1);
      shared_futex_wake_all(seg_.header().reports);
      if (status >= 0) return status;
    }
  }

 private:
  // Start-up: this process's own device and BLAS threads, then the model on the shared weights.
  void attach() {
    if (seg_.header().magic != kMagic || seg_.header().workers != s_.layout.workers)
      throw Error("multiprocessing", "worker " + std::to_string(rank_) + ": the shared segment is not this run's");
    // 1. Workers share the cores: one BLAS thread each once they outnumber them (PyTorch's
    //    advice too: threads per process = cores / processes), or BLAS threads fight each other.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    openblas_set_num_threads(std::max(1, cores / s_.layout.workers));
    // 2. The device, in this process: its numerics, its clock, its ledger, its event bus.
    DeviceOptions o;
    o.kind = s_.config.device;
    o.first_index = rank_;
    o.profile = s_.profile;
    o.dry_run = s_.config.dry_run;
    o.bus = &bus_;
    o.epoch = s_.epoch;  // the parent's: workers' events land on the trainer's time axis
    device_ = std::move(make_devices(o).front());
    // 3. The model, its parameters pointing into the segment (the private copies the constructor
    //    made are freed), and this worker's own optimizer over them.
    model_ = std::make_unique<Mlp>(*device_, seg_.read_weights(s_.spec));
    size_t i = 0;
    for (Parameter* p : model_->parameters()) {
      p->value = shared_tensor(*device_, seg_.param(i), p->value.shape());
      ++i;
    }
    device_->memory().allocate(MemoryCategory::params, s_.layout.parameters * 4, "shared parameters (mapped)");
    optimizer_ = std::make_unique<Optimizer>(s_.config.optimizer, model_->parameters());
    bus_.clear();  // start-up is not part of any step
  }

  // One round: this worker's shard, forward, backward, and the update into the shared weights.
  void train(const Mailbox& box, Report& rep) {
    const int64_t rows = box.rows, features = s_.layout.features;
    device_->set_step(box.step);
    rep.loss_sum = 0;
    if (rows > 0) {
      // 1. The shard from the segment to this worker's device (on sim: once the parent has
      //    handed it over, at start_ns).
      Tensor x = device_->empty({rows, features}, DType::f32, MemoryCategory::activations, "shard.x");
      Tensor y = device_->empty({rows}, DType::i32, MemoryCategory::activations, "shard.y");
      x.set_ready_ns(box.start_ns);
      y.set_ready_ns(box.start_ns);
      device_->upload({"shard.x", Phase::data}, x, seg_.shard_x(rank_));
      device_->upload({"shard.y", Phase::data}, y, seg_.shard_y(rank_));
      // 2. Forward: reads the shared weights as they are right now — other workers may be
      //    writing them at this very moment.
      Tensor logits = model_->forward(x);
      Tensor dlogits = device_->empty(logits.shape(), DType::f32, MemoryCategory::activations, "dlogits");
      const double loss = device_->softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);
      // 3. Backward: this worker's gradients, in its own private memory.
      model_->backward(dlogits);
      // 4. The update goes straight into the shared weights: no lock, no averaging with the
      //    other workers' gradients. (The same floats may be updated by another worker at once;
      //    Hogwild accepts the rare lost update.)
      optimizer_->step();
      rep.loss_sum = loss * static_cast<double>(rows);
    }
    rep.rows = rows;
    // 5. This round's events, back to the parent through the segment.
    const std::vector<Event> events = bus_.events();
    bus_.clear();
    WireEvent* out = seg_.events(rank_);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(events.size()), s_.layout.max_events);
    for (int64_t k = 0; k < n; ++k) {
      const Event& e = events[static_cast<size_t>(k)];
      WireEvent& w = out[k];
      w = WireEvent{};
      w.t_begin_ns = e.t_begin_ns;
      w.t_end_ns = e.t_end_ns;
      w.bytes = e.bytes;
      w.step = e.step;
      w.flops = e.flops;
      w.layer = e.layer;
      w.micro_batch = e.micro_batch;
      w.bucket = e.bucket;
      w.peer = e.peer;
      w.lane = static_cast<uint8_t>(e.lane);
      w.phase = static_cast<uint8_t>(e.phase);
      copy_text(w.kind, sizeof w.kind, e.kind);
      copy_text(w.name, sizeof w.name, e.name);
    }
    rep.events = n;
    rep.dropped_events = static_cast<int64_t>(events.size()) - n;
  }

  // The optimizer's buffers to the exchange area (the parent asks one worker at a time).
  void save_state() {
    float* out = seg_.exchange();
    for (const auto& tensors : optimizer_->download_state())
      for (const auto& t : tensors) out = std::copy(t.begin(), t.end(), out);
    bus_.clear();
  }

  void load_state(const Mailbox& box) {
    const float* in = seg_.exchange();
    std::vector<std::vector<std::vector<float>>> state;
    for (size_t i = 0; i < s_.layout.param_numel.size(); ++i) {
      state.emplace_back();
      for (int j = 0; j < s_.layout.state_tensors; ++j) {
        state.back().emplace_back(in, in + s_.layout.param_numel[i]);
        in += s_.layout.param_numel[i];
      }
    }
    optimizer_->upload_state(state);
    optimizer_->set_steps_taken(box.optimizer_steps);
    bus_.clear();
  }

  int rank_;
  View seg_;
  const WorkerSetup& s_;
  EventBus bus_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Mlp> model_;
  std::unique_ptr<Optimizer> optimizer_;
};

// ---------------------------------------------------------------------------------------------
// The worker processes as the parent sees them: reaped on every path. The destructor kills and
// reaps any still running (a constructor that failed halfway, an error), and never throws.
class Workers {
 public:
  Workers() = default;
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;
  ~Workers() { reap_all(milliseconds(0)); }

  void add(pid_t pid) {
    pids_.push_back(pid);
    reaped_.push_back(false);
    status_.push_back(0);
  }
  int count() const { return static_cast<int>(pids_.size()); }
  pid_t pid(int r) const { return pids_[static_cast<size_t>(r)]; }

  // True (and its wait status) once worker r has ended; reaps it.
  bool ended(int r, int* status) {
    const size_t i = static_cast<size_t>(r);
    if (!reaped_[i]) {
      int s = 0;
      const pid_t w = waitpid(pids_[i], &s, WNOHANG);
      if (w == 0 || (w < 0 && errno == EINTR)) return false;
      reaped_[i] = true;
      status_[i] = w < 0 ? 255 << 8 : s;  // reaped elsewhere (SIGCHLD ignored?): a failure
    }
    *status = status_[i];
    return true;
  }

  // Waits up to `grace` for every worker to end, then kills (SIGKILL) and reaps the rest.
  void reap_all(milliseconds grace) noexcept {
    const auto deadline = SteadyClock::now() + grace;
    int status;
    for (;;) {
      bool all = true;
      for (int r = 0; r < count(); ++r) all = ended(r, &status) && all;
      if (all || SteadyClock::now() >= deadline) break;
      std::this_thread::sleep_for(milliseconds(1));
    }
    for (size_t i = 0; i < pids_.size(); ++i)
      if (!reaped_[i]) {
        kill(pids_[i], SIGKILL);
        while (waitpid(pids_[i], &status_[i], 0) < 0 && errno == EINTR) {
        }
        reaped_[i] = true;
      }
  }

 private:
  std::vector<pid_t> pids_;
  std::vector<bool> reaped_;
  std::vector<int> status_;
};

// ---------------------------------------------------------------------------------------------
// The parent: forks the workers, hands out the shards, waits for the rounds.

class Hogwild : public Strategy {
 public:
  explicit Hogwild(StrategyContext& ctx)
      : devices_(ctx.devices),
        n_(static_cast<int>(ctx.devices.size())),
        timeout_(milliseconds(ctx.config.comm_timeout_ms)),
        setup_{ctx.config, ctx.initial_weights.spec,
               Layout::make(ctx.initial_weights.spec, static_cast<int>(ctx.devices.size()), ctx.config.batch,
                            state_tensors(ctx.config.optimizer)),
               {}, {}, getpid()},
        seg_mem_(setup_.layout.total, parse_shm_sharing(ctx.config.shm_sharing), "scalelab-hogwild"),
        seg_{seg_mem_.data(), &setup_.layout},
        issued_(static_cast<size_t>(n_), 1),
        mirrored_(static_cast<size_t>(n_)) {
    if (setup_.config.device == DeviceKind::sim) setup_.profile = load_profile(setup_.config.hw);
    // The cpu devices' clocks count from the trainer's epoch; the workers' clocks will too.
    setup_.epoch = SteadyClock::now() - std::chrono::nanoseconds(devices_.front()->clock().now_ns());

    // 1. The parameters go into shared memory (torch: model.share_memory()), with the control
    //    block; every mailbox already holds command 1: start up.
    new (&seg_.header()) Header();
    seg_.header().workers = n_;
    for (int r = 0; r < n_; ++r) {
      new (&seg_.mailbox(r)) Mailbox();
      new (&seg_.report(r)) Report();
      seg_.mailbox(r).go.store(1);
    }
    seg_.write_weights(ctx.initial_weights);

    // 2. Fork the workers (torch: mp.Process(target=train, args=(model,)).start()). Each maps the
    //    segment by the sharing strategy and runs Worker::run until told to stop.
    for (int r = 0; r < n_; ++r)
      workers_.add(seg_mem_.fork_child("hogwild-" + std::to_string(r), timeout_, [this, r](char* base, int64_t) {
        return Worker(r, View{base, &setup_.layout}, setup_).run();
      }));

    // 3. Wait until every worker has mapped the segment and built its model; then the name (if
    //    any) has served its purpose: remove it, the mappings keep the memory.
    wait_for_reports(Command::attach, -1);
    seg_mem_.unlink_name();
    for (int r = 0; r < n_; ++r) mirror_memory(r);
  }

  ~Hogwild() override {
    // Ask the workers to stop (unless they failed: then they are killed at once), reap them all;
    // the segment is unmapped after (members go in reverse order).
    if (broken_.empty())
      for (int r = 0; r < n_; ++r) issue(r, Command::stop);
    workers_.reap_all(broken_.empty() ? std::min(timeout_, milliseconds(2000)) : milliseconds(0));
    for (int r = 0; r < n_; ++r)
      for (int c = 0; c < kMemoryCategoryCount; ++c)
        devices_[static_cast<size_t>(r)]->memory().release(static_cast<MemoryCategory>(c),
                                                           mirrored_[static_cast<size_t>(r)][c]);
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    usable("step " + std::to_string(step));
    const Layout& l = setup_.layout;
    if (batch.features != l.features || batch.size > l.max_rows * n_ || batch.size < 1)
      throw Error("multiprocessing", "a batch of " + std::to_string(batch.size) + " × " +
                                         std::to_string(batch.features) + " does not fit the shards, made for ≤ " +
                                         std::to_string(l.max_rows * n_) + " × " + std::to_string(l.features) +
                                         " (--batch, --model)");
    // 1. Hand each worker its shard — rows r, r+N, r+2N, … of the global batch — through its
    //    area of the segment, and wake it. One parent thread copies them one after another.
    int64_t ready = round_end_ns_;
    for (int r = 0; r < n_; ++r) {
      const int64_t rows = batch.size > r ? (batch.size - r + n_ - 1) / n_ : 0;
      Device& d = *devices_[static_cast<size_t>(r)];
      d.set_step(step);
      const int64_t bytes = rows * (l.features * 4 + 4);
      const OpCost cost{OpClass::copy_host, 0, static_cast<double>(bytes), DType::f32};
      const Interval iv = d.clock().run(Lane::host, ready, cost, [&] {
        float* x = seg_.shard_x(r);
        int32_t* y = seg_.shard_y(r);
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t row = r + i * n_;
          std::memcpy(x + i * l.features, batch.x.data() + row * l.features, static_cast<size_t>(l.features) * 4);
          y[i] = batch.y[static_cast<size_t>(row)];
        }
      });
      Event e;
      e.lane = Lane::host;
      e.kind = "dispatch";
      e.name = "shard " + std::to_string(r) + " → worker " + std::to_string(r);
      e.phase = Phase::data;
      e.t_begin_ns = iv.begin_ns;
      e.t_end_ns = iv.end_ns;
      e.bytes = bytes;
      e.step = step;
      d.record(std::move(e));
      ready = iv.end_ns;
      Mailbox& box = seg_.mailbox(r);
      box.step = step;
      box.rows = rows;
      box.start_ns = iv.end_ns;
      issue(r, Command::train);
    }
    // 2. Wait for every worker's report. Until then they run unsynchronised, racing on the
    //    shared weights.
    wait_for_reports(Command::train, step);
    // 3. The workers' events go on the run's bus, their memory into the ledgers; the loss of the
    //    round is the mean over all rows of the batch.
    double loss_sum = 0;
    int64_t rows = 0;
    for (int r = 0; r < n_; ++r) {
      const Report& rep = seg_.report(r);
      loss_sum += rep.loss_sum;
      rows += rep.rows;
      const WireEvent* in = seg_.events(r);
      for (int64_t k = 0; k < rep.events; ++k) {
        Event e;
        e.lane = static_cast<Lane>(in[k].lane);
        e.kind = in[k].kind;
        e.name = in[k].name;
        e.phase = static_cast<Phase>(in[k].phase);
        e.t_begin_ns = in[k].t_begin_ns;
        e.t_end_ns = in[k].t_end_ns;
        e.bytes = in[k].bytes;
        e.flops = in[k].flops;
        e.step = in[k].step;
        e.micro_batch = in[k].micro_batch;
        e.bucket = in[k].bucket;
        e.layer = in[k].layer;
        e.peer = in[k].peer;
        round_end_ns_ = std::max(round_end_ns_, e.t_end_ns);
        devices_[static_cast<size_t>(r)]->record(std::move(e));
      }
      mirror_memory(r);
    }
    return loss_sum / static_cast<double>(rows);
  }

  // The shared parameters, read where they live (no worker is writing between rounds).
  HostWeights weights() override { return seg_.read_weights(setup_.spec); }

  TrainingState state() override {
    usable("saving the state");
    TrainingState s;
    s.weights = weights();
    const Layout& l = setup_.layout;
    const int k = l.state_tensors;
    s.optimizer.resize(l.param_numel.size());
    if (k > 0) {
      // Each worker's buffers in turn through the exchange area; the checkpoint keeps their mean.
      std::vector<double> sum(static_cast<size_t>(k * l.parameters), 0.0);
      for (int r = 0; r < n_; ++r) {
        issue(r, Command::save_state);
        wait_for_reports(Command::save_state, -1, r);
        const float* in = seg_.exchange();
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += in[i];
      }
      size_t at = 0;
      for (size_t i = 0; i < l.param_numel.size(); ++i)
        for (int j = 0; j < k; ++j) {
          std::vector<float> t(static_cast<size_t>(l.param_numel[i]));
          for (float& v : t) v = static_cast<float>(sum[at++] / n_);
          s.optimizer[i].push_back(std::move(t));
        }
    }
    s.optimizer_steps = seg_.report(0).optimizer_steps;
    return s;
  }

  void load_state(const TrainingState& s) override {
    usable("loading a state");
    const Layout& l = setup_.layout;
    if (s.weights.spec.sizes != setup_.spec.sizes)
      throw Error("multiprocessing", "the saved weights are for " + s.weights.spec.text + ", this run trains " +
                                         setup_.spec.text + " — resume with the same --model");
    if (s.optimizer.size() != l.param_numel.size())
      throw Error("multiprocessing", "the saved optimizer state has " + std::to_string(s.optimizer.size()) +
                                         " parameters, the model " + std::to_string(l.param_numel.size()) +
                                         " — resume with the same --model");
    float* out = seg_.exchange();
    for (size_t i = 0; i < l.param_numel.size(); ++i) {
      if (static_cast<int>(s.optimizer[i].size()) != l.state_tensors)
        throw Error("multiprocessing", "the saved optimizer state has " + std::to_string(s.optimizer[i].size()) +
                                           " tensors per parameter, " + setup_.config.optimizer.kind + " keeps " +
                                           std::to_string(l.state_tensors) +
                                           " — resume with the same --optimizer and --momentum");
      for (const auto& t : s.optimizer[i]) {
        if (static_cast<int64_t>(t.size()) != l.param_numel[i])
          throw Error("multiprocessing", "the saved state of parameter " + std::to_string(i) + " has " +
                                             std::to_string(t.size()) + " values, expected " +
                                             std::to_string(l.param_numel[i]));
        out = std::copy(t.begin(), t.end(), out);
      }
    }
    seg_.write_weights(s.weights);
    for (int r = 0; r < n_; ++r) {
      seg_.mailbox(r).optimizer_steps = s.optimizer_steps;
      issue(r, Command::load_state);
    }
    wait_for_reports(Command::load_state, -1);
  }

 private:
  static int state_tensors(const OptimizerConfig& o) {
    if (o.kind == "adam") return 2;
    return o.momentum != 0.0f ? 1 : 0;
  }

  void usable(const std::string& what) const {
    if (!broken_.empty())
      throw Error("multiprocessing", "cannot start " + what + ": the workers failed earlier — " + broken_);
  }

  // Worker r's next command: the mailbox first, then `go` (the worker reads them in that order).
  void issue(int r, Command c) noexcept {
    Mailbox& box = seg_.mailbox(r);
    box.command = c;
    box.go.store(++issued_[static_cast<size_t>(r)]);
    shared_futex_wake_all(box.go);
  }

  std::string worker_text(int r) const {
    return "worker " + std::to_string(r) + " (pid " + std::to_string(workers_.pid(r)) + ")";
  }

  // Until every worker (or just `only`) has reported the command it was given. A worker that
  // failed, died, or is still at it after the timeout ends the wait with an Error naming it.
  void wait_for_reports(Command c, int64_t step, int only = -1) {
    const std::string where = step >= 0 ? " in step " + std::to_string(step) : "";
    const auto t0 = SteadyClock::now(), deadline = t0 + timeout_;
    std::atomic<uint32_t>& reports = seg_.header().reports;
    for (;;) {
      const uint32_t seen = reports.load();
      std::vector<int> pending;
      for (int r = (only < 0 ? 0 : only); r < (only < 0 ? n_ : only + 1); ++r) {
        const Report& rep = seg_.report(r);
        if (rep.done.load() != issued_[static_cast<size_t>(r)]) {
          pending.push_back(r);
        } else if (rep.failed) {
          fail(worker_text(r) + " failed" + where + ", " + command_text(c) + ": " + rep.error);
        }
      }
      if (pending.empty()) return;
      for (int r : pending) {
        int status = 0;
        if (workers_.ended(r, &status))
          fail(worker_text(r) + " died" + where + ", " + command_text(c) + ": " + wait_status_text(status) +
               (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                    ? " — killed from outside (kill -9, or the kernel's out-of-memory killer: see dmesg)"
                    : " — its own error, if any, is above on stderr"));
      }
      const auto now = SteadyClock::now();
      if (now >= deadline) {
        std::string who;
        for (int r : pending) who += (who.empty() ? "" : ", ") + worker_text(r);
        fail(who + " did not report" + where + " (" + command_text(c) + ") within --comm-timeout " +
             std::to_string(timeout_.count()) + " ms — stopped or hung; raise --comm-timeout if merely slow");
      }
      // Sleep until a report (every worker bumps `reports`), at most 10 ms: then look for the dead.
      shared_futex_wait(reports, seen, std::min<SteadyClock::duration>(deadline - now, milliseconds(10)));
    }
  }

  [[noreturn]] void fail(const std::string& text) {
    broken_ = text;
    throw Error("multiprocessing", text);
  }

  // Worker r's ledger peaks, mirrored into device r's ledger (the summary's memory columns).
  void mirror_memory(int r) noexcept {
    const Report& rep = seg_.report(r);
    auto& mirrored = mirrored_[static_cast<size_t>(r)];
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
      const int64_t more = rep.peak[c] - mirrored[c];
      if (more <= 0) continue;
      try {
        devices_[static_cast<size_t>(r)]->memory().allocate(static_cast<MemoryCategory>(c), more,
                                                            "worker " + std::to_string(r) + " (mirrored)");
        mirrored[c] += more;
      } catch (const std::exception&) {
        // Peaks of different categories at different times may add up past the capacity: the
        // worker's own ledger, which saw the real total, did not overflow. Skip the mirror.
      }
    }
  }

  std::vector<Device*> devices_;
  int n_;
  milliseconds timeout_;
  WorkerSetup setup_;
  SharedSegment seg_mem_;   // the mapping; outlives the workers (members go in reverse order)
  View seg_;
  Workers workers_;
  std::vector<uint32_t> issued_;  // per worker: the number of its latest command
  std::vector<std::array<int64_t, kMemoryCategoryCount>> mirrored_;
  int64_t round_end_ns_ = 0;      // the latest end of any worker's op: where the next round starts
  std::string broken_;            // set by the first failure: the strategy refuses further work
};

}  // namespace

std::unique_ptr<Strategy> make_multiprocessing(StrategyContext& ctx) {
  const TrainConfig& c = ctx.config;
  const std::string n = std::to_string(c.devices);
  if (c.check_equivalence)
    throw UsageError("multiprocessing", "--check-equivalence compares weights with single's step by step, but "
                                        "Hogwild is asynchronous (the workers race on the weights), so it is held to "
                                        "test accuracy instead — drop --check-equivalence and compare the test "
                                        "accuracy with --strategy single");
  if (c.device == DeviceKind::cuda)
    throw UsageError("multiprocessing", "--device cuda: the Hogwild workers are forked processes sharing host "
                                        "memory, and CUDA does not survive a fork — use --device cpu, or --device sim "
                                        "to model GPUs");
  if (c.amp != "off")
    throw UsageError("multiprocessing", "--amp " + c.amp + ": Hogwild shares fp32 weights — drop --amp");
  if (!c.comm.empty() && c.comm != "shm")
    throw UsageError("multiprocessing", "--comm " + c.comm + ": the workers share their parameters through shared "
                                        "memory, not a process group — drop --comm (--shm-sharing picks how)");
  if (c.devices > kMaxWorkers)
    throw UsageError("multiprocessing", "--devices " + n + ": at most " + std::to_string(kMaxWorkers) +
                                        " worker processes — use fewer");
  if (c.devices > c.batch)
    throw UsageError("multiprocessing", "--devices " + n + " workers but --batch " + std::to_string(c.batch) +
                                        ": each worker trains on its share of every batch — use --batch ≥ " + n);
  parse_shm_sharing(c.shm_sharing);  // a UsageError naming --shm-sharing
  if (ctx.devices.size() != static_cast<size_t>(c.devices))
    throw Error("multiprocessing", "--devices " + n + " but " + std::to_string(ctx.devices.size()) +
                                       " devices were made — start it through train()");
  return std::make_unique<Hogwild>(ctx);
}

}  // namespace scalelab
