// pipeline: the layers split into contiguous stages, one stage per rank (each with one device),
// and the batch cut into micro-batches (PyTorch's Pipe calls them chunks) that flow through the
// stages one behind another: while stage 1 works on micro-batch 0, stage 0 already works on
// micro-batch 1. Model parallel with the idle devices put to work.
//
// A stage runs its schedule: an explicit list of tasks, each (forward | backward, micro-batch).
//   F i  forward of micro-batch i: receive its activations from the stage before (stage 0 takes
//        rows of the batch), run this stage's layers, send the output to the stage after (the
//        last stage computes the loss instead)
//   B i  backward of micro-batch i: receive the gradient of its output from the stage after (the
//        last stage has it from the loss), run this stage's layers backward, send the gradient of
//        its input to the stage before. The weight gradients add up over the micro-batches.
//   W i  (--schedule zero-bubble) the weights' gradients of micro-batch i, which B i then leaves
//        out: B sends what the stage before waits for sooner, and W fills a slot that would idle.
// After the last backward each stage updates its own layers with its own optimizer. Which order
// the tasks run in — GPipe's or 1F1B's, drawn for 4 stages and 8 micro-batches, and the bubble
// each leaves — is the schedule's lesson, in strategies/pipeline_schedule.cpp.
//
// --schedule interleaved --virtual-stages V: the layers are cut into p·V virtual stages and stage
// s holds virtual stages s, s + p, … as its V chunks; a task is (pass, micro-batch, chunk), and
// the output of stage p − 1's chunk v goes round to stage 0's chunk v + 1. Which task receives and
// sends what, in which order, is the stage's program (strategies/pipeline_schedule.h).
//
// Whatever the schedule, it is the same training as `single`: each micro-batch's loss gradient is
// scaled by 1/m, so the gradients summed over the micro-batches are those of the mean loss over the
// whole batch.
//
// With --amp every stage computes in half, and the activations and gradients sent between stages
// are half: half the bytes on every link. With fp16 the loss gradients are scaled, and at the end
// each stage unscales and checks its own layers' gradients; an overflow on one stage must stop
// every stage's step, so the stages agree on it with a one-float all-reduce.
//
// make_pipeline_with_schedule (strategies/pipeline.h) runs the same strategy with a schedule given
// from outside, every stage's list checked first (check_pipeline_schedule): lab 07 grades a
// student's schedules with it.
#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "core/comm/ranks.h"
#include "core/error.h"
#include "core/nn/optimizer.h"
#include "strategies/pipeline.h"
#include "strategies/pipeline_schedule.h"
#include "strategies/registry.h"
#include "strategies/sharded_state.h"

namespace scalelab {
namespace {

using Pass = PipelinePass;  // forward | backward (strategies/pipeline_schedule.h)
using Task = PipelineTask;  // (pass, micro-batch, chunk)
using Op = PipelineOp;      // receive | compute | send, of a task

// slide: pipeline-stages
// Stage s of p holds layers [⌊s·L/p⌋, ⌊(s+1)·L/p⌋): contiguous, sizes differing by at most one.
int first_layer(int stage, int stages, int layers) { return stage * layers / stages; }
// end slide
// Interleaved: the same cut into p·V virtual stages, stage s holding virtual stages s, s + p, …

// Each virtual stage's first layer, then the layer count: who holds which layers
// (strategies/sharded_state.h).
std::vector<int> stage_boundaries(int stages, int layers) {
  std::vector<int> first;
  for (int s = 0; s <= stages; ++s) first.push_back(first_layer(s, stages, layers));
  return first;
}

// The rank holding each of the p·V virtual stages: s mod p.
std::vector<int> stage_owners(int stages, int chunks) {
  std::vector<int> owner;
  for (int v = 0; v < stages * chunks; ++v) owner.push_back(v % stages);
  return owner;
}

// A chunk of a stage: layers [first, last), virtual stage chunk·p + s.
struct Chunk {
  int first = 0, last = 0;
  std::vector<std::unique_ptr<Layer>> layers;
};

// One rank's part of the model: its chunks' layers on its device, and its own optimizer.
struct Stage {
  int rank = 0;
  Device* device = nullptr;
  ProcessGroup* group = nullptr;
  std::vector<Chunk> chunks;  // one, or V interleaved
  std::vector<Parameter*> params;
  std::unique_ptr<Optimizer> optimizer;
  LossScaler scaler;

  Stage(int stage, Device& dev, ProcessGroup& pg, int stages, int chunk_count, const HostWeights& init,
        const TrainConfig& config)
      : rank(stage), device(&dev), group(&pg), scaler(make_loss_scaler(config)) {
    const ModelSpec& spec = init.spec;
    const int L = spec.layer_count();
    for (int c = 0; c < chunk_count; ++c) {
      Chunk& chunk = chunks.emplace_back();
      const int virtual_stage = c * stages + rank;
      chunk.first = first_layer(virtual_stage, stages * chunk_count, L);
      chunk.last = first_layer(virtual_stage + 1, stages * chunk_count, L);
      for (int l = chunk.first; l < chunk.last; ++l) {
        Layer& layer = *chunk.layers.emplace_back(make_layer(spec, l, dev));
        upload_layer(layer, init);
        layer.set_precision(config.amp_dtype());
        layer.set_recompute(config.recompute);
        for (Parameter* q : layer.parameters()) params.push_back(q);
      }
    }
    optimizer = std::make_unique<Optimizer>(config.optimizer, params);
    scaler.agree_over(pg, dev);
  }
};

// The schedule --schedule names.
PipelineSchedule schedule_of(const TrainConfig& config) {
  if (config.schedule == Schedule::interleaved) {
    const int chunks = config.virtual_stages;
    return [chunks](int p, int s, int m) { return interleaved_schedule(p, chunks, s, m); };
  }
  if (config.schedule == Schedule::zero_bubble) return zero_bubble_schedule;
  return config.schedule == Schedule::one_f_one_b ? one_f_one_b_schedule : gpipe_schedule;
}

// Every stage's program. One chunk: each stage's from its own list (stage_program). Interleaved:
// the lists checked, the programs made from all of them together, timed (timed_programs), and
// checked to run without waiting in a circle.
std::vector<PipelineProgram> programs_of(const PipelineSchedule& schedule, int p, int m, int chunks) {
  std::vector<std::vector<Task>> tasks;
  for (int s = 0; s < p; ++s) tasks.push_back(schedule(p, s, m));
  if (chunks == 1) {
    std::vector<PipelineProgram> programs;
    for (int s = 0; s < p; ++s) programs.push_back(stage_program(tasks[static_cast<size_t>(s)], p, s));
    return programs;
  }
  for (int s = 0; s < p; ++s) check_pipeline_schedule(tasks[static_cast<size_t>(s)], p, s, m, chunks);
  std::vector<PipelineProgram> programs = timed_programs(tasks, chunks);
  check_pipeline_programs(programs, chunks);
  return programs;
}

class Pipeline : public Strategy {
 public:
  Pipeline(StrategyContext& ctx, PipelineSchedule schedule, int chunks)
      : config_(ctx.config),
        ranks_(*ctx.ranks),
        spec_(ctx.initial_weights.spec),
        chunks_(chunks),
        links_{ranks_.world_size(), chunks},
        programs_(programs_of(schedule, ranks_.world_size(), config_.micro_batches, chunks)),
        ownership_(ShardedState::by_layers(spec_, stage_boundaries(ranks_.world_size() * chunks, spec_.layer_count()),
                                           stage_owners(ranks_.world_size(), chunks))) {
    for (int rank : ranks_.local_ranks()) {
      Stage& st = *stages_.emplace_back(std::make_unique<Stage>(rank, ranks_.device(rank), ranks_.group(rank),
                                                                ranks_.world_size(), chunks, ctx.initial_weights, ctx.config));
      // A schedule with W tasks (zero bubble): the layers' backwards leave their weights' GEMMs to W.
      const PipelineProgram& program = programs_[static_cast<size_t>(rank)];
      const bool split = std::any_of(program.begin(), program.end(), [](const Op& op) { return op.task.pass == Pass::weight; });
      for (Chunk& chunk : st.chunks)
        for (auto& layer : chunk.layers) layer->set_weight_pass(split);
    }
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    std::vector<double> losses(stages_.size());
    ranks_.run([&](int rank) { losses[local_index(rank)] = rank_step(stage(rank), batch, step); });
    return losses.front();  // the same on every rank
  }

  // One training step of one rank: stage s.
  double rank_step(Stage& st, const HostBatch& batch, int64_t step) {
    Device& dev = *st.device;
    const int p = ranks_.world_size(), s = st.rank, m = config_.micro_batches;
    const bool last = s == p - 1;  // holds the last layers, where the loss is computed
    const int64_t rows = batch.size / m;  // rows per micro-batch (checked in make_pipeline)
    dev.set_step(step);

    // 1. The last stage holds the labels, where the loss is computed.
    Tensor y;
    if (last) {
      y = dev.empty({batch.size * batch.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
      dev.upload({"batch.y", Phase::data}, y, batch.y.data());
    }

    // 2. Run the program: the schedule's tasks, each input received and each output sent where
    //    the program says (strategies/pipeline_schedule.h). What a task received, or computed and
    //    has not sent yet, waits in these, by pass and chunk · m + micro-batch.
    for (Chunk& chunk : st.chunks)
      for (auto& layer : chunk.layers) {
        layer->refresh_half_weights();            // --amp: this step's half weights
        layer->set_batch_position({step, 0, 1});  // --dropout: micro-batches 0, 1, … in order
      }
    const size_t slots = static_cast<size_t>(chunks_ * m);
    std::vector<Tensor> inputs[2] = {std::vector<Tensor>(slots), std::vector<Tensor>(slots)};
    std::vector<Tensor> outputs[2] = {std::vector<Tensor>(slots), std::vector<Tensor>(slots)};
    std::vector<Tensor> dlogits(static_cast<size_t>(m));
    std::vector<int> backwards_done(static_cast<size_t>(chunks_)), weights_done(static_cast<size_t>(chunks_));
    double loss_sum = 0;
    for (const Op& op : programs_[static_cast<size_t>(s)]) {
      const Task& t = op.task;
      const int i = t.micro_batch;
      const size_t pass = static_cast<size_t>(t.pass), slot = static_cast<size_t>(t.chunk * m + i);
      Chunk& chunk = st.chunks[static_cast<size_t>(t.chunk)];
      const int v = links_.virtual_stage(s, t);  // which of the p·V virtual stages (V = 1: v = s)
      const bool first_layers = v == 0, last_layers = v == p * chunks_ - 1;  // the model's first / last
      const std::string mb = "mb " + std::to_string(i);
      if (op.kind == Op::receive) {
        inputs[pass][slot] = receive(st, t, rows);
      } else if (op.kind == Op::send) {
        send(st, t, outputs[pass][slot]);
        outputs[pass][slot] = Tensor();
      } else if (t.pass == Pass::weight) {
        // slide: zero-bubble-weight-pass
        // W i. The weights' gradients of micro-batch i, from what B i kept: no stage waits for
        //      them, so the schedule runs them where the stage would otherwise idle.
        const bool accumulate = weights_done[static_cast<size_t>(t.chunk)]++ > 0;
        for (int l = chunk.last - 1; l >= chunk.first; --l)
          chunk.layers[static_cast<size_t>(l - chunk.first)]->weight_pass(accumulate, i);
        // end slide
      } else if (t.pass == Pass::forward) {
        // F i. Stage 0 copies micro-batch i's rows from the host, one micro-batch at a time; the
        //      others take what they received from the stage before.
        Tensor h;
        if (first_layers) {
          h = dev.empty(spec_.activation_shape(0, rows), DType::f32, MemoryCategory::activations, "batch.x " + mb);
          dev.upload({"batch.x " + mb, Phase::data, -1, i}, h, batch.x.data() + i * rows * batch.features);
        } else {
          h = inputs[pass][slot];
          inputs[pass][slot] = Tensor();  // the layer keeps it for backward
        }
        for (auto& layer : chunk.layers) h = layer->forward(h, i);
        if (last_layers) {
          const int64_t labels = rows * batch.labels_per_sample;  // a GPT's rows hold T labels each
          // slide: pipeline-micro-batch-loss
          // The loss of micro-batch i (its mean over the rows) and its gradient, scaled by 1/m
          // (and by the loss scale with fp16).
          dlogits[i] = dev.empty(h.shape(), h.dtype(), MemoryCategory::activations, "dlogits " + mb);
          loss_sum += dev.softmax_xent({"loss", Phase::fwd, -1, i}, h, y.rows_slice(i * labels, labels),
                                       dlogits[i], st.scaler.scale() / static_cast<float>(m));
          // end slide
        } else {
          outputs[pass][slot] = h;
        }
      } else {
        // B i. The gradient of micro-batch i's output: from the loss, or from the stage after.
        Tensor g;
        if (last_layers) {
          g = dlogits[i];
          dlogits[i] = Tensor();
        } else {
          g = inputs[pass][slot];
          inputs[pass][slot] = Tensor();
        }
        // Backward through the chunk's layers, last to first. A chunk's first backward of the step
        // writes its weight gradients, the others add to them.
        const bool accumulate = backwards_done[static_cast<size_t>(t.chunk)]++ > 0;
        for (int l = chunk.last - 1; l >= chunk.first; --l) {
          const bool need_dx = !(first_layers && l == chunk.first);  // nobody needs the gradient of the batch
          g = chunk.layers[static_cast<size_t>(l - chunk.first)]->backward(g, need_dx, accumulate, i);
        }
        if (!first_layers) outputs[pass][slot] = g;
      }
    }

    // slide: amp-step-or-skip
    // 3. Unscale, check for overflow, step or skip. Every stage updates its own layers, with the
    //    gradients of the whole batch — unless (fp16) a gradient overflowed on any stage: each
    //    stage checks its own, the all-reduced flag tells all of them, and all skip together.
    const bool overflow = st.scaler.unscale_and_check(st.params);
    if (!overflow) st.optimizer->step();
    st.scaler.update(overflow);
    // end slide

    // 4. The loss, the mean over the micro-batches, goes from the last stage to every rank.
    Tensor loss = dev.empty({1}, DType::f32, MemoryCategory::comm_buffers, "loss");
    float value = static_cast<float>(loss_sum / m);
    if (last) dev.upload({"loss", Phase::data}, loss, &value);
    st.group->broadcast(loss, p - 1, {.name = "loss"});
    value = std::numeric_limits<float>::quiet_NaN();  // stays NaN in a dry run: no numerics
    dev.download({"loss", Phase::data}, &value, loss);
    return value;
  }

  // The whole model and its optimizer state, gathered from the stages that hold them: each
  // parameter is broadcast from its stage (strategies/sharded_state.h).
  HostWeights weights() override {
    HostWeights w;
    ranks_.run([&](int rank) {
      Stage& st = stage(rank);
      HostWeights mine = ownership_.gather_weights(*st.group, *st.device, st.params, rank == reporter());
      if (rank == reporter()) w = std::move(mine);
    });
    return w;
  }

  TrainingState state() override {
    TrainingState s;
    s.weights = weights();
    ranks_.run([&](int rank) {
      Stage& st = stage(rank);
      OptimizerState whole = ownership_.gather_optimizer_state(*st.group, *st.device, *st.optimizer, rank == reporter());
      if (rank == reporter()) s.optimizer = std::move(whole);
    });
    s.optimizer_steps = stages_.front()->optimizer->steps_taken();  // every stage steps together
    s.loss_scale = stages_.front()->scaler.state_scale();          // and scales alike
    s.scaler_good_steps = stages_.front()->scaler.good_steps();
    return s;
  }

  // The state fits the model (the checkpointer's validate_resume): each stage takes its layers'.
  void load_state(const TrainingState& s) override {
    for (auto& st : stages_) {
      for (Chunk& chunk : st->chunks)
        for (auto& layer : chunk.layers) upload_layer(*layer, s.weights);
      st->optimizer->set_steps_taken(s.optimizer_steps);
      st->optimizer->upload_state(ownership_.part_of(s.optimizer, st->rank));
      st->scaler.load_state(s.loss_scale, s.scaler_good_steps);
    }
  }

  AmpReport amp_report() const override { return stages_.front()->scaler.report(); }

 private:
  // What travels between stages: activations and their gradients, f32 or the --amp dtype.
  DType activation_dtype(int boundary) const { return spec_.activation_dtype(boundary, config_.amp_dtype()); }

  // What travels for task t of stage s: the activations into an F's chunk, or the gradient of a
  // B's chunk's output; interleaved, named by the chunk they go to.
  std::string message_name(int stage, const Task& t, bool incoming) const {
    std::string name = std::string(t.pass == Pass::forward ? "activations" : "gradient") + " mb " + std::to_string(t.micro_batch);
    if (chunks_ == 1) return name;
    const int to = links_.virtual_stage(stage, t) + (incoming ? 0 : t.pass == Pass::forward ? 1 : -1);
    return name + " chunk " + std::to_string(to / links_.stages);
  }

  // The input of task t: its chunk's first layer's input (F), or its last layer's output's
  // gradient (B), from the stage before or after.
  Tensor receive(Stage& st, const Task& t, int64_t rows) {
    const Chunk& chunk = st.chunks[static_cast<size_t>(t.chunk)];
    const int boundary = t.pass == Pass::forward ? chunk.first : chunk.last;
    const std::string name = message_name(st.rank, t, true);
    Tensor h = st.device->empty(spec_.activation_shape(boundary, rows), activation_dtype(boundary),
                                MemoryCategory::activations, name);
    st.group->recv(h, links_.peer_of_input(st.rank, t), {.name = name, .micro_batch = t.micro_batch});
    return h;
  }

  // The output of task t to the stage after (F) or before (B). Sends wait until the peer
  // receives, so a stage's order of sends and receives matters. In 1F1B's steady state a stage
  // follows a backward with a forward, and the stage before sends that forward's input, then waits
  // for the backward's gradient: the stage receives the input before it sends the gradient
  // (otherwise each would wait for the other). Zero bubble puts Ws between the two: they run
  // first, while the stage before computes that input. Interleaved, stage p − 1 also sends round to stage
  // 0, and no rule of one stage alone avoids a circle of waits: the programs are ordered from all
  // the stages' lists together (strategies/pipeline_schedule.h).
  void send(Stage& st, const Task& t, const Tensor& out) {
    st.group->send(out, links_.peer_of_output(st.rank, t), {.name = message_name(st.rank, t, false), .micro_batch = t.micro_batch});
  }

  // The rank that fills in what weights() and state() return (with --launch threads every rank
  // has everything; one of them writes it down).
  int reporter() const { return ranks_.local_ranks().front(); }

  size_t local_index(int rank) const {
    for (size_t i = 0; i < stages_.size(); ++i)
      if (stages_[i]->rank == rank) return i;
    throw Error("pipeline", "rank " + std::to_string(rank) + " has no stage in this process");
  }
  Stage& stage(int rank) { return *stages_[local_index(rank)]; }

  const TrainConfig& config_;
  const RankSet& ranks_;
  ModelSpec spec_;
  int chunks_;                 // per stage: 1, or V interleaved
  PipelineLinks links_;        // which stage each task's data come from and go to
  std::vector<PipelineProgram> programs_;  // per stage: its receives, tasks and sends in order
  ShardedState ownership_;     // stage s holds its chunks' parameters and optimizer state
  std::vector<std::unique_ptr<Stage>> stages_;  // this process's stages: all of them with --launch threads
};

}  // namespace

std::unique_ptr<Strategy> make_pipeline(StrategyContext& ctx) { return make_pipeline_with_schedule(ctx, {}); }

void check_pipeline_shape(int p, int m, int64_t batch, const ModelSpec& spec, int virtual_stages) {
  const int virtual_count = p * virtual_stages, L = spec.layer_count();
  if (virtual_stages == 1 && p > L)
    throw UsageError("pipeline", "--devices " + std::to_string(p) + " makes " + std::to_string(p) +
                                     " stages, but --model " + spec.text + " has only " + std::to_string(L) +
                                     " layers and every stage needs at least one — use --devices ≤ " +
                                     std::to_string(L) + ", or a model with more layers");
  if (virtual_stages > 1 && virtual_count > L)
    throw UsageError("pipeline", "--devices " + std::to_string(p) + " × --virtual-stages " + std::to_string(virtual_stages) +
                                     " makes " + std::to_string(virtual_count) + " virtual stages, but --model " + spec.text +
                                     " has only " + std::to_string(L) +
                                     " layers and every virtual stage needs at least one — " +
                                     (L / p >= 2 ? "use --virtual-stages ≤ " + std::to_string(L / p) + ", or "
                                                 : "use --schedule 1f1b, or ") +
                                     "a model with at least " + std::to_string(virtual_count) + " layers");
  if (virtual_stages > 1 && p < 2)
    throw UsageError("pipeline", "--schedule interleaved shrinks the bubble between devices, and --devices 1 has none — "
                                 "use --devices 2 or more, or --schedule 1f1b");
  if (virtual_stages > 1 && m % p != 0)
    throw UsageError("pipeline", "--micro-batches " + std::to_string(m) + ": the interleaved schedule takes the micro-batches " +
                                     std::to_string(p) + " at a time (one per device) through each chunk, so it needs a "
                                     "multiple of --devices " + std::to_string(p) + " — use --micro-batches " +
                                     (m < p ? std::to_string(p) : std::to_string(m / p * p) + " or " + std::to_string(m / p * p + p)));
  if (batch % m != 0)
    throw UsageError("pipeline", "--batch " + std::to_string(batch) + " cannot be cut into --micro-batches " +
                                     std::to_string(m) + " equal micro-batches — use a --batch that is a multiple of " +
                                     std::to_string(m) + " (e.g. " + std::to_string(std::max<int64_t>(m, batch / m * m)) +
                                     "), or a number of micro-batches that divides " + std::to_string(batch));
}

std::unique_ptr<Strategy> make_pipeline_with_schedule(StrategyContext& ctx, PipelineSchedule schedule) {
  if (!ctx.ranks) throw Error("pipeline", "needs ranks (devices_per_rank = 1 in the registry)");
  const int p = ctx.ranks->world_size();
  const int m = ctx.config.micro_batches;
  if (!schedule) {
    const int chunks = ctx.config.schedule == Schedule::interleaved ? ctx.config.virtual_stages : 1;
    check_pipeline_shape(p, m, ctx.config.batch, ctx.initial_weights.spec, chunks);
    return std::make_unique<Pipeline>(ctx, schedule_of(ctx.config), chunks);
  }
  check_pipeline_shape(p, m, ctx.config.batch, ctx.initial_weights.spec);
  for (int s = 0; s < p; ++s) check_pipeline_schedule(schedule(p, s, m), p, s, m);
  return std::make_unique<Pipeline>(ctx, std::move(schedule), 1);
}

}  // namespace scalelab
