// multiprocessing: Hogwild. N worker processes train ONE model whose parameters live in ONE
// shared-memory segment; each trains on its own shard of the data and writes its SGD updates
// straight into the shared weights, without any lock (Recht et al., "Hogwild!", 2011; PyTorch's
// torch.multiprocessing example mnist_hogwild: model.share_memory(), then mp.Process per worker).
//
// The lecture's torch.multiprocessing, step by step:
//   1. The parent puts the parameters in shared memory (torch: share_memory_()), in one of torch's
//      two sharing strategies (--shm-sharing): fd_passing ("file_descriptor", an anonymous memfd
//      whose descriptor travels to each worker over a Unix socket) or named_file ("file_system",
//      /dev/shm/scalelab-<pid>-hogwild-<n>, removed as soon as every worker has opened it).
//      core/comm/shm/shm_segment.h does the sharing, core/proc the forking and reaping.
//   2. It forks N workers (torch: mp.Process). Each builds the model on its own device, in its own
//      process, with the parameters *pointing into the segment*, and its own optimizer.
//   3. Each worker trains on its shard: forward reads the weights as they are at that instant —
//      other workers may be halfway through writing them — backward makes private gradients, and
//      the optimizer writes the update straight into the shared weights. No lock, no all-reduce:
//      updates interleave, and one can even be lost when two workers write the same weight at
//      once. Hogwild's bet: small updates make that cheap, and it saves all synchronisation.
//
// HOW IT FITS THE TRAINER. The workers live as long as the strategy. Each train_step(global
// batch) is one ROUND: the parent copies shard r (rows r, r+N, r+2N, … of the batch) into worker
// r's inbox and issues it the command "train"; the workers then race on the weights, unsynchronised;
// train_step returns when all N have reported. Rounds keep --steps, each step's loss and the test
// accuracy meaningful, and every strategy sees the same batches; staleness is bounded by one round.
// Each worker has its own optimizer (momentum, Adam's m and v are private; only the weights are
// shared) and steps with --lr on the mean gradient of its B/N rows. Asynchronous, so it is held to
// test accuracy, not to single's weights — except with one worker, which is single exactly.
//
// EVENTS. Each worker records its ops on its own device and event bus; with its report it ships
// them back (core/trace/wire.h), and the parent puts them on the run's bus under device r, next to
// its own dispatch of the shard, so the trace shows N processes side by side. A worker that fails,
// dies or hangs is named by the parent (core/proc/commands.h), which then refuses further steps.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <new>

#include "core/comm/shm/shm_segment.h"
#include "core/error.h"
#include "core/nn/optimizer.h"
#include "core/proc/commands.h"
#include "core/proc/threads.h"
#include "core/trace/wire.h"
#include "strategies/registry.h"

namespace scalelab {
namespace {

enum Command : int32_t { attach, train, save_state, load_state, stop };

// The segment: commands (core/proc) | PARAMETERS | inboxes[N] | outboxes[N] | optimizer exchange.
// The parameters are the model (fc1.weight, fc1.bias, …), each on a cache line. Worker r's inbox
// (an Order, then its shard) is written by the parent; its outbox (a Result, then its round's
// records) by worker r. Nothing else is synchronised — least of all the parameters.
struct Order { int64_t step = -1, rows = 0, start_ns = 0, optimizer_steps = 0; };
struct Result { double loss_sum = 0; int64_t rows = 0, optimizer_steps = 0, record_bytes = 0; };
constexpr int64_t kHead = 64;  // an Order or a Result, before the shard or the records
static_assert(sizeof(Order) <= kHead && sizeof(Result) <= kHead);

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

struct Layout {
  int64_t features = 0, max_rows = 0, parameters = 0, state_tensors = 0;
  int64_t inbox = 0, inbox_bytes = 0, outbox = 0, outbox_bytes = 0, exchange = 0, total = 0;
  std::vector<int64_t> param_at, param_numel;

  Layout(const ModelSpec& spec, int workers, int64_t batch, const OptimizerConfig& optimizer) {
    features = spec.inputs();
    max_rows = (batch + workers - 1) / workers;
    state_tensors = optimizer_state_tensors(optimizer);
    int64_t at = command_block_bytes(workers);
    auto take = [&](int64_t bytes, int64_t align) {
      at = round_up(at, align) + bytes;
      return at - bytes;
    };
    for (int layer = 0; layer < spec.layer_count(); ++layer)
      for (int64_t numel : {spec.sizes[layer + 1] * spec.sizes[layer], spec.sizes[layer + 1]}) {
        param_at.push_back(take(numel * 4, 64));
        param_numel.push_back(numel);
        parameters += numel;
      }
    inbox_bytes = round_up(kHead + max_rows * (features * 4 + 4), 4096);
    inbox = take(workers * inbox_bytes, 4096);
    // A round's records: 2 uploads, ≤ 2 ops per layer forward, the loss, ≤ 3 per layer backward,
    // an update per parameter — 7L + 3 events of ~100 bytes — and the ledger. Room for more.
    outbox_bytes = round_up(kHead + (8 * spec.layer_count() + 16) * 256 + 4096, 4096);
    outbox = take(workers * outbox_bytes, 4096);
    exchange = take(std::max<int64_t>(1, state_tensors * parameters) * 4, 4096);
    total = round_up(at, 4096);
  }
};

// One process's view of the segment (each maps it at its own address).
struct View {
  char* base;
  const Layout* l;

  float* param(size_t i) const { return reinterpret_cast<float*>(base + l->param_at[i]); }
  char* inbox(int r) const { return base + l->inbox + r * l->inbox_bytes; }
  Order& order(int r) const { return *reinterpret_cast<Order*>(inbox(r)); }
  float* shard_x(int r) const { return reinterpret_cast<float*>(inbox(r) + kHead); }
  int32_t* shard_y(int r) const { return reinterpret_cast<int32_t*>(shard_x(r) + l->max_rows * l->features); }
  char* outbox(int r) const { return base + l->outbox + r * l->outbox_bytes; }
  Result& result(int r) const { return *reinterpret_cast<Result*>(outbox(r)); }
  uint8_t* records(int r) const { return reinterpret_cast<uint8_t*>(outbox(r) + kHead); }
  float* exchange() const { return reinterpret_cast<float*>(base + l->exchange); }

  HostWeights read_weights(const ModelSpec& spec) const {
    HostWeights w;
    w.spec = spec;
    for (size_t i = 0; i < l->param_at.size(); i += 2) {
      w.weight.emplace_back(param(i), param(i) + l->param_numel[i]);
      w.bias.emplace_back(param(i + 1), param(i + 1) + l->param_numel[i + 1]);
    }
    return w;
  }
  void write_weights(const HostWeights& w) const {
    for (size_t i = 0; i < l->param_at.size(); i += 2) {
      std::copy(w.weight[i / 2].begin(), w.weight[i / 2].end(), param(i));
      std::copy(w.bias[i / 2].begin(), w.bias[i / 2].end(), param(i + 1));
    }
  }
};

// What a worker needs to know, handed to it by fork (the parent's memory as it was).
struct Setup {
  TrainConfig config;
  ModelSpec spec;
  Layout layout;
  DeviceOptions devices;  // the run's, one device each
  int workers;
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

// ---------------------------------------------------------------------------------------------
// One worker process: its device, its event bus, its model (parameters in the segment), its
// optimizer. Lives in the child only, serving the parent's commands until told to stop.
class Worker {
 public:
  Worker(int rank, View seg, const Setup& s) : r_(rank), seg_(seg), s_(s) {}

  int run() {
    return serve_commands(seg_.base, r_, [this](int32_t command) {
      switch (command) {
        case Command::attach: start(); break;
        case Command::train: train_shard(); break;
        case Command::save_state: save(); break;
        case Command::load_state: load(); break;
        default: return false;  // stop
      }
      seg_.result(r_).optimizer_steps = optimizer_->steps_taken();
      return true;
    });
  }

 private:
  // Start-up: this process's device (made as the run's are), then the model on the shared weights.
  void start() {
    share_cores(s_.workers);  // N processes computing at once
    DeviceOptions o = s_.devices;
    o.first_index = r_;
    o.count = 1;
    o.bus = &bus_;
    device_ = std::move(make_devices(o).front());
    // The model, its parameters pointing into the segment (the private copies the constructor
    // made are freed), and this worker's own optimizer over them.
    model_ = std::make_unique<Mlp>(*device_, seg_.read_weights(s_.spec));
    size_t i = 0;
    for (Parameter* p : model_->parameters()) p->value = shared_tensor(*device_, seg_.param(i++), p->value.shape());
    device_->memory().allocate(MemoryCategory::params, s_.layout.parameters * 4, "shared parameters (mapped)");
    optimizer_ = std::make_unique<Optimizer>(s_.config.optimizer, model_->parameters());
    bus_.clear();  // start-up is not part of any step
    ship();
  }

  // One round: this worker's shard, forward, backward, and the update into the shared weights.
  void train_shard() {
    const Order& order = seg_.order(r_);
    Result& result = seg_.result(r_);
    device_->set_step(order.step);
    result.loss_sum = 0;
    result.rows = order.rows;
    if (order.rows > 0) {
      // 1. The shard from the segment to this worker's device (on sim: once the parent has
      //    handed it over, at start_ns).
      Tensor x = device_->empty({order.rows, s_.layout.features}, DType::f32, MemoryCategory::activations, "shard.x");
      Tensor y = device_->empty({order.rows}, DType::i32, MemoryCategory::activations, "shard.y");
      x.set_ready_ns(order.start_ns);
      y.set_ready_ns(order.start_ns);
      device_->upload({"shard.x", Phase::data}, x, seg_.shard_x(r_));
      device_->upload({"shard.y", Phase::data}, y, seg_.shard_y(r_));
      // 2. Forward: reads the shared weights as they are right now — other workers may be
      //    writing them at this very moment.
      Tensor logits = model_->forward(x);
      Tensor dlogits = device_->empty(logits.shape(), DType::f32, MemoryCategory::activations, "dlogits");
      const double loss = device_->softmax_xent({"loss", Phase::fwd}, logits, y, dlogits);
      // 3. Backward: this worker's gradients, in its own private memory.
      model_->backward(dlogits);
      // 4. The update goes straight into the shared weights: no lock, no averaging with the other
      //    workers' gradients (Hogwild accepts the rare lost update).
      optimizer_->step();
      result.loss_sum = loss * static_cast<double>(order.rows);
    }
    ship();
  }

  // This round's events and the ledger's peaks, to the parent through the outbox.
  void ship() {
    Records records;
    records.events = bus_.events();
    bus_.clear();
    const MemoryLedger& m = device_->memory();
    DeviceRecord d;
    d.index = device_->index();
    d.capacity = m.capacity();
    d.peak_total = m.peak_total();
    for (int c = 0; c < kMemoryCategoryCount; ++c) d.peak[c] = m.peak(static_cast<MemoryCategory>(c));
    records.devices.push_back(d);
    const std::vector<uint8_t> bytes = encode_records(records);
    const int64_t room = s_.layout.outbox_bytes - kHead;
    if (static_cast<int64_t>(bytes.size()) > room)
      throw Error("multiprocessing", "worker " + std::to_string(r_) + ": this round's " +
                                         std::to_string(records.events.size()) + " events take " +
                                         std::to_string(bytes.size()) + " bytes, its outbox holds " +
                                         std::to_string(room) + " — a bug: Layout sizes the outbox too small");
    std::memcpy(seg_.records(r_), bytes.data(), bytes.size());
    seg_.result(r_).record_bytes = static_cast<int64_t>(bytes.size());
  }

  // The optimizer's buffers to the exchange area (the parent asks one worker at a time), and back.
  void save() {
    float* out = seg_.exchange();
    for (const auto& tensors : optimizer_->download_state())
      for (const auto& t : tensors) out = std::copy(t.begin(), t.end(), out);
    bus_.clear();
  }
  void load() {
    const float* in = seg_.exchange();
    std::vector<std::vector<std::vector<float>>> state(s_.layout.param_numel.size());
    for (size_t i = 0; i < state.size(); ++i)
      for (int j = 0; j < s_.layout.state_tensors; ++j, in += s_.layout.param_numel[i])
        state[i].emplace_back(in, in + s_.layout.param_numel[i]);
    optimizer_->upload_state(state);
    optimizer_->set_steps_taken(seg_.order(r_).optimizer_steps);
    bus_.clear();
  }

  int r_;
  View seg_;
  const Setup& s_;
  EventBus bus_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Mlp> model_;
  std::unique_ptr<Optimizer> optimizer_;
};

// ---------------------------------------------------------------------------------------------
// The parent: forks the workers, hands out the shards, waits for the rounds.
class Hogwild : public Strategy {
 public:
  explicit Hogwild(StrategyContext& ctx)
      : devices_(ctx.devices),
        n_(static_cast<int>(ctx.devices.size())),
        s_{ctx.config, ctx.initial_weights.spec, Layout(ctx.initial_weights.spec, n_, ctx.config.batch, ctx.config.optimizer),
           ctx.device_options, n_},
        mem_(s_.layout.total, parse_shm_sharing(ctx.config.shm_sharing), "scalelab-hogwild"),
        seg_{mem_.data(), &s_.layout},
        commands_(mem_.data(), n_, workers_,
                  {"multiprocessing", std::chrono::milliseconds(ctx.config.comm_timeout_ms)}),
        mirrored_(static_cast<size_t>(n_)) {
    // Measured clocks: the workers' count from the epoch of this run's, so their events land on
    // the trainer's time axis (a modelled clock ignores it).
    if (!s_.devices.epoch)
      s_.devices.epoch = std::chrono::steady_clock::now() - std::chrono::nanoseconds(devices_.front()->clock().now_ns());
    // 1. The parameters go into shared memory (torch: model.share_memory()).
    seg_.write_weights(ctx.initial_weights);
    for (int r = 0; r < n_; ++r) new (&seg_.order(r)) Order(), new (&seg_.result(r)) Result();
    // 2. Fork the workers (torch: mp.Process(target=train, args=(model,)).start()). Each maps the
    //    segment by the sharing strategy and serves commands until told to stop.
    for (int r = 0; r < n_; ++r)
      mem_.fork_child(workers_, "hogwild-" + std::to_string(r), std::chrono::milliseconds(s_.config.comm_timeout_ms),
                      [this, r](char* base, int64_t) { return Worker(r, View{base, &s_.layout}, s_).run(); });
    // 3. Once every worker has mapped the segment and built its model, the name (if any) has
    //    served its purpose: the mappings keep the memory.
    commands_.issue_all(Command::attach);
    commands_.wait("at start-up (mapping the segment, building the model)");
    mem_.unlink_name();
    for (int r = 0; r < n_; ++r) collect(r);
  }

  ~Hogwild() override {
    commands_.stop_all(Command::stop);  // then the segment is unmapped (members go in reverse order)
    for (int r = 0; r < n_; ++r)
      for (int c = 0; c < kMemoryCategoryCount; ++c)
        devices_[static_cast<size_t>(r)]->memory().release(static_cast<MemoryCategory>(c), mirrored_[static_cast<size_t>(r)][c]);
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    commands_.check_usable("step " + std::to_string(step));
    const Layout& l = s_.layout;
    if (batch.features != l.features || batch.size > l.max_rows * n_ || batch.size < 1)
      throw Error("multiprocessing", "a batch of " + std::to_string(batch.size) + " × " + std::to_string(batch.features) +
                                         " does not fit the shards, made for ≤ " + std::to_string(l.max_rows * n_) +
                                         " × " + std::to_string(l.features) + " (--batch, --model)");
    // 1. Hand each worker its shard — rows r, r+N, r+2N, … of the global batch — through its
    //    inbox, and wake it. One parent thread copies them one after another.
    int64_t ready = round_end_ns_;
    for (int r = 0; r < n_; ++r) {
      const int64_t rows = batch.size > r ? (batch.size - r + n_ - 1) / n_ : 0, bytes = rows * (l.features * 4 + 4);
      Device& d = *devices_[static_cast<size_t>(r)];
      d.set_step(step);
      const Interval iv = d.clock().run(Lane::host, ready, {OpClass::copy_host, 0, static_cast<double>(bytes), DType::f32}, [&] {
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t row = r + i * n_;
          std::memcpy(seg_.shard_x(r) + i * l.features, batch.x.data() + row * l.features, static_cast<size_t>(l.features) * 4);
          seg_.shard_y(r)[i] = batch.y[static_cast<size_t>(row)];
        }
      });
      d.record({.lane = Lane::host, .kind = "dispatch", .name = "shard " + std::to_string(r) + " → worker " + std::to_string(r),
                .phase = Phase::data, .t_begin_ns = iv.begin_ns, .t_end_ns = iv.end_ns, .bytes = bytes});
      ready = iv.end_ns;
      seg_.order(r) = Order{step, rows, iv.end_ns, 0};
      commands_.issue(r, Command::train);
    }
    // 2. Wait for every worker's report. Until then they run unsynchronised, racing on the weights.
    commands_.wait("in step " + std::to_string(step) + " (training its shard)");
    // 3. The loss of the round is the mean over all rows of the batch.
    double loss_sum = 0;
    int64_t rows = 0;
    for (int r = 0; r < n_; ++r) {
      loss_sum += seg_.result(r).loss_sum;
      rows += seg_.result(r).rows;
      collect(r);
    }
    return loss_sum / static_cast<double>(rows);
  }

  // The shared parameters, read where they live (no worker is writing between rounds).
  HostWeights weights() override { return seg_.read_weights(s_.spec); }

  // The weights and the mean over the workers of their optimizer buffers (a checkpoint holds one
  // buffer per parameter); load_state() gives every worker that mean.
  TrainingState state() override {
    commands_.check_usable("saving the state");
    const Layout& l = s_.layout;
    TrainingState s;
    s.weights = weights();
    s.optimizer.resize(l.param_numel.size());
    std::vector<double> sum(static_cast<size_t>(l.state_tensors * l.parameters), 0.0);
    for (int r = 0; r < n_ && !sum.empty(); ++r) {
      commands_.issue(r, Command::save_state);
      commands_.wait("saving its optimizer state", r);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += seg_.exchange()[i];
    }
    auto at = sum.begin();
    for (size_t i = 0; i < l.param_numel.size(); ++i)
      for (int j = 0; j < l.state_tensors; ++j) {
        std::vector<float> t(static_cast<size_t>(l.param_numel[i]));
        for (float& v : t) v = static_cast<float>(*at++ / n_);
        s.optimizer[i].push_back(std::move(t));
      }
    s.optimizer_steps = seg_.result(0).optimizer_steps;
    return s;
  }

  void load_state(const TrainingState& s) override {
    commands_.check_usable("loading a state");
    validate_resume(s, s_.spec, s_.config.optimizer, "the state given to multiprocessing");
    float* out = seg_.exchange();
    for (const auto& tensors : s.optimizer)
      for (const auto& t : tensors) out = std::copy(t.begin(), t.end(), out);
    seg_.write_weights(s.weights);
    for (int r = 0; r < n_; ++r) seg_.order(r).optimizer_steps = s.optimizer_steps;
    commands_.issue_all(Command::load_state);
    commands_.wait("loading the optimizer state");
  }

 private:
  // Worker r's records: its events onto device r (the run's bus), its ledger's peaks mirrored into
  // device r's ledger (the summary's memory columns; its "params" are the shared mapping, so every
  // device shows them while RAM holds them once).
  void collect(int r) {
    Device& d = *devices_[static_cast<size_t>(r)];
    Records records = decode_records(seg_.records(r), static_cast<size_t>(seg_.result(r).record_bytes));
    for (Event& e : records.events) {
      round_end_ns_ = std::max(round_end_ns_, e.t_end_ns);
      d.record(std::move(e));
    }
    auto& mirrored = mirrored_[static_cast<size_t>(r)];
    for (const DeviceRecord& w : records.devices)
      for (int c = 0; c < kMemoryCategoryCount; ++c) {
        const int64_t more = w.peak[c] - mirrored[c];
        if (more <= 0) continue;
        try {
          d.memory().allocate(static_cast<MemoryCategory>(c), more, "worker " + std::to_string(r) + " (mirrored)");
          mirrored[c] += more;
        } catch (const std::exception&) {
          // Peaks of different categories at different times may add up past the capacity: the
          // worker's own ledger, which saw the real total, did not overflow. Skip the mirror.
        }
      }
  }

  std::vector<Device*> devices_;
  int n_;
  Setup s_;
  SharedSegment mem_;  // the mapping: outlives the workers (members go in reverse order)
  View seg_;
  Children workers_;   // worker r is child r; killed and reaped on every path
  Commander commands_;
  std::vector<std::array<int64_t, kMemoryCategoryCount>> mirrored_;
  int64_t round_end_ns_ = 0;  // the latest end of any worker's op: where the next round starts
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
