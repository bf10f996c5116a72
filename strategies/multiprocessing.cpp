// multiprocessing: Hogwild. N worker processes train ONE model whose parameters live in ONE
// shared-memory segment; each trains on its own shard of the data and writes its SGD updates
// straight into the shared weights, without any lock (Recht et al., "Hogwild!", 2011; PyTorch's
// torch.multiprocessing example mnist_hogwild: model.share_memory(), then mp.Process per worker).
//
// The lecture's torch.multiprocessing, step by step:
//   1. The parent puts the parameters in shared memory (torch: share_memory_()), by one of torch's
//      two sharing strategies (--shm-sharing): fd_passing ("file_descriptor": an anonymous memfd
//      whose descriptor travels to each worker over a Unix socket) or named_file ("file_system":
//      /dev/shm/scalelab-<pid>-hogwild-<n>, removed as soon as every worker has opened it).
//   2. It forks N workers (torch: mp.Process). Each builds the model on its own device, in its own
//      process, with the parameters *pointing into the segment*, and its own optimizer.
//   3. Each worker trains on its shard: forward reads the weights as they are at that instant —
//      other workers may be halfway through writing them — backward makes private gradients, and
//      the optimizer writes the update straight into the shared weights. No lock, no all-reduce:
//      updates interleave, and one can even be lost when two workers write the same weight at
//      once. Hogwild's bet: small updates make that cheap, and it saves all synchronisation.
//
// Each train_step is one ROUND: worker r gets shard r (rows r, r+N, … of the batch), and the step
// returns when all N have reported — so --steps, the loss and the batches mean what they mean for
// every strategy, and staleness is bounded by one round. Each worker's optimizer (momentum, Adam's
// m and v) is its own and steps with --lr on its B/N rows. Asynchronous: held to test accuracy, not
// to single's weights — except with one worker, which is single exactly. The plumbing (forking, the
// command protocol that names a worker that failed, died or hung, shipping the workers' events into
// the parent's trace) is core/proc's; what lies where in the segment, strategies/hogwild_segment.h.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

#include "core/comm/shm/shm_segment.h"
#include "core/device/host_cores.h"
#include "core/error.h"
#include "core/nn/optimizer.h"
#include "core/proc/child_device.h"
#include "core/proc/commands.h"
#include "core/proc/message_area.h"
#include "strategies/hogwild_segment.h"
#include "strategies/registry.h"

namespace scalelab {
namespace {

// What the parent asks of a worker; what goes with it lies in the segment (strategies/hogwild_segment.h).
enum Command : int32_t { attach, train, save_state, load_state, stop };

// ---------------------------------------------------------------------------------------------
// One worker process: its device, its event bus, its model (parameters in the segment), its
// optimizer. Lives in the child only, serving the parent's commands until told to stop.
class Worker {
 public:
  Worker(int rank, hogwild::Mapping segment) : rank_(rank), segment_(segment), layout_(*segment.layout) {}

  int run() {
    return serve_commands(segment_.base, rank_, [this](int32_t command) {
      switch (command) {
        case Command::attach: start(); break;
        case Command::train: train_shard(); break;
        case Command::save_state: send_buffers(segment_.state(), optimizer_->download_state()); break;
        case Command::load_state:  // the same state, from the parent, for every worker
          optimizer_->upload_state(receive_buffers(segment_.state()));
          optimizer_->set_steps_taken(segment_.slot(rank_).order.optimizer_steps);
          break;
        default: return false;  // stop
      }
      bus_.clear();  // what a command records but ship() does not send is part of no step
      segment_.slot(rank_).result.optimizer_steps = optimizer_->steps_taken();
      return true;
    });
  }

 private:
  // Start-up: this process's device (made as the run's are), then the model on the shared weights.
  void start() {
    share_cores(layout_.workers);  // N processes computing at once
    keep_to_share_of_cores(rank_, layout_.workers);
    device_ = make_child_device(layout_.devices, rank_, bus_);
    // The model, its parameters pointing into the segment, and this worker's own optimizer.
    model_ = std::make_unique<Model>(*device_, layout_.params.read(segment_.base));
    layout_.params.share(*model_, *device_, segment_.base);
    model_->set_recompute(layout_.config.recompute);
    optimizer_ = std::make_unique<Optimizer>(layout_.config.optimizer, model_->parameters());
    bus_.clear();  // start-up is not part of any step
    ship();
  }

  // One round: this worker's shard, forward, backward, and the update into the shared weights.
  void train_shard() {
    const hogwild::RoundOrder& order = segment_.slot(rank_).order;
    hogwild::RoundResult& result = segment_.slot(rank_).result;
    device_->set_step(order.step);
    result.loss_sum = 0;
    result.rows = order.rows;
    if (order.rows > 0) {
      // 1. The shard from the segment to this worker's device (on sim: once the parent has
      //    handed it over, at start_ns).
      Tensor x = device_->empty({order.rows, layout_.features}, DType::f32, MemoryCategory::activations, "shard.x");
      Tensor y = device_->empty({order.rows * layout_.labels}, DType::i32, MemoryCategory::activations, "shard.y");
      x.set_ready_ns(order.start_ns);
      y.set_ready_ns(order.start_ns);
      device_->upload({"shard.x", Phase::data}, x, segment_.shard_x(rank_));
      device_->upload({"shard.y", Phase::data}, y, segment_.shard_y(rank_));
      // slide: hogwild-round
      // 2. Forward: reads the shared weights as they are right now — other workers may be
      //    writing them at this very moment.
      model_->set_batch_position({order.step, rank_, layout_.workers});  // --dropout: rows r, r+N, …
      Tensor logits = model_->forward(x);
      Tensor dlogits = device_->empty(logits.shape(), DType::f32, MemoryCategory::activations, "dlogits");
      const double loss = device_->softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);
      // 3. Backward: this worker's gradients, in its own private memory.
      model_->backward(dlogits);
      // 4. The update goes straight into the shared weights: no lock, no averaging with the other
      //    workers' gradients (Hogwild accepts the rare lost update).
      optimizer_->step();
      // end slide
      result.loss_sum = loss * static_cast<double>(order.rows);
    }
    ship();
  }

  // This round's events and the ledger's peaks, to the parent through the outbox.
  void ship() { send_records(segment_.outbox(rank_), {bus_.events(), {}, {}, {device_record(*device_)}, {}}); }

  int rank_;
  hogwild::Mapping segment_;  // this process's mapping of the segment
  const hogwild::Layout& layout_;
  EventBus bus_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
};

// ---------------------------------------------------------------------------------------------
// The parent: forks the workers, hands out the shards, waits for the rounds.
class Hogwild : public Strategy {
 public:
  explicit Hogwild(StrategyContext& ctx)
      : n_(static_cast<int>(ctx.devices.size())),
        layout_(ctx),
        memory_(layout_.segment.bytes(), ctx.config.shm_sharing, "scalelab-hogwild"),
        segment_{memory_.data(), &layout_},
        commands_(memory_.data(), n_, workers_, {"multiprocessing", std::chrono::milliseconds(ctx.config.comm_timeout_ms)}) {
    // Each worker's round slot in the segment, and the parent's mirror of its device's records.
    for (int r = 0; r < n_; ++r) {
      new (&segment_.slot(r)) hogwild::RoundSlot();
      mirrors_.emplace_back(*ctx.devices[static_cast<size_t>(r)], "worker " + std::to_string(r));
    }
    // slide: hogwild-fork
    // 1. The parameters go into shared memory (torch: model.share_memory()).
    layout_.params.write(segment_.base, ctx.initial_weights);
    // 2. Fork the workers (torch: mp.Process(...).start()). Each maps the segment and serves
    //    commands until told to stop.
    const std::chrono::milliseconds timeout(layout_.config.comm_timeout_ms);
    for (int r = 0; r < n_; ++r)
      memory_.fork_child(workers_, "hogwild-" + std::to_string(r), timeout, [this, r](char* base, int64_t) {
        return Worker(r, hogwild::Mapping{base, &layout_}).run();
      });
    // end slide
    share_cores(1);  // forking left OpenBLAS on one thread in this process: every core again
    // 3. Once every worker has mapped the segment and built its model, the name (if any) has
    //    served its purpose: the mappings keep the memory.
    commands_.issue_all(Command::attach);
    commands_.wait("at start-up (mapping the segment, building the model)");
    memory_.unlink_name();
    for (int r = 0; r < n_; ++r) collect(r);
  }

  // Stops the workers; then the segment is unmapped (members go in reverse order).
  ~Hogwild() override { commands_.stop_all(Command::stop); }

  double train_step(const HostBatch& batch, int64_t step) override {
    commands_.check_usable("step " + std::to_string(step));
    const int64_t f = layout_.features, per = layout_.labels;
    if (batch.features != f || batch.size > layout_.max_rows * n_ || batch.size < 1)
      throw Error("multiprocessing", "a batch of " + std::to_string(batch.size) + " × " + std::to_string(batch.features) +
                                         " does not fit the shards, made for ≤ " + std::to_string(layout_.max_rows * n_) +
                                         " × " + std::to_string(f) + " (--batch, --model)");
    // 1. Hand each worker its shard — rows r, r+N, r+2N, … of the global batch — in its slot of
    //    the segment, and wake it. One parent thread copies them one after another.
    int64_t ready = round_end_ns_;
    for (int r = 0; r < n_; ++r) {
      const int64_t rows = batch.size > r ? (batch.size - r + n_ - 1) / n_ : 0, bytes = rows * (f + per) * 4;
      const std::string what = "shard " + std::to_string(r) + " → worker " + std::to_string(r);
      ready = mirrors_[static_cast<size_t>(r)].dispatch(step, ready, bytes, what, [&] {
        for (int64_t i = 0, row = r; i < rows; ++i, row += n_) {
          std::memcpy(segment_.shard_x(r) + i * f, batch.x.data() + row * f, static_cast<size_t>(f) * 4);
          std::memcpy(segment_.shard_y(r) + i * per, batch.y.data() + row * per, static_cast<size_t>(per) * 4);
        }
      });
      segment_.slot(r).order = hogwild::RoundOrder{step, rows, ready, 0};
      commands_.issue(r, Command::train);
    }
    // 2. Wait for every worker's report. Until then they run unsynchronised, racing on the weights.
    commands_.wait("in step " + std::to_string(step) + " (training its shard)");
    // 3. The loss of the round is the mean over all rows of the batch.
    double loss_sum = 0;
    int64_t rows = 0;
    for (int r = 0; r < n_; ++r) {
      loss_sum += segment_.slot(r).result.loss_sum;
      rows += segment_.slot(r).result.rows;
      collect(r);
    }
    return loss_sum / static_cast<double>(rows);
  }

  // The shared parameters, read where they live (no worker is writing between rounds).
  HostWeights weights() override { return layout_.params.read(segment_.base); }

  // The shared weights, and the mean over the workers of their optimizer buffers (a checkpoint
  // holds one state per parameter); load_state() gives every worker that mean.
  TrainingState state() override {
    commands_.check_usable("saving the state");
    TrainingState s;
    s.weights = weights();
    s.optimizer = mean_from_workers(commands_, Command::save_state, segment_.state(), "saving its optimizer state");
    s.optimizer_steps = segment_.slot(0).result.optimizer_steps;
    return s;
  }

  void load_state(const TrainingState& s) override {
    commands_.check_usable("loading a state");
    validate_resume(s, layout_.params.spec(), layout_.config.optimizer, "the state given to multiprocessing");
    layout_.params.write(segment_.base, s.weights);
    for (int r = 0; r < n_; ++r) segment_.slot(r).order.optimizer_steps = s.optimizer_steps;
    give_to_workers(commands_, Command::load_state, segment_.state(), s.optimizer, "loading the optimizer state");
  }

 private:
  // Worker r's records onto device r: its events on the run's bus, its ledger's peaks in device r's
  // ledger (its "params" are the shared mapping: every device shows them, RAM holds them once).
  void collect(int r) {
    round_end_ns_ = std::max(round_end_ns_, mirrors_[static_cast<size_t>(r)].take(receive_records(segment_.outbox(r))));
  }

  int n_;
  hogwild::Layout layout_;
  SharedSegment memory_;      // the segment: outlives the workers (members go in reverse order)
  hogwild::Mapping segment_;  // the parent's mapping of it
  Children workers_;   // worker r is child r; killed and reaped on every path
  Commander commands_;
  std::vector<DeviceMirror> mirrors_;  // device r stands for worker r
  int64_t round_end_ns_ = 0;           // the latest end of any worker's op: where the next round starts
};

}  // namespace

// What it refuses besides (CUDA, --amp, --comm, --check-equivalence) is in its registry entry.
std::unique_ptr<Strategy> make_multiprocessing(StrategyContext& ctx) {
  const TrainConfig& c = ctx.config;
  const std::string n = std::to_string(c.devices);
  if (c.devices > c.batch)
    throw UsageError("multiprocessing", "--devices " + n + " workers but --batch " + std::to_string(c.batch) +
                                        ": each worker trains on its share of every batch — use --batch ≥ " + n);
  if (ctx.devices.size() != static_cast<size_t>(c.devices))
    throw Error("multiprocessing", "--devices " + n + " but " + std::to_string(ctx.devices.size()) +
                                       " devices were made — start it through train()");
  return std::make_unique<Hogwild>(ctx);
}

}  // namespace scalelab
