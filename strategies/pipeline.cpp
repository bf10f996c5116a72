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
// After the last backward each stage updates its own layers with its own optimizer. Which order
// the tasks run in — GPipe's or 1F1B's, drawn for 4 stages and 8 micro-batches, and the bubble
// each leaves — is the schedule's lesson, in strategies/pipeline_schedule.cpp.
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
using Task = PipelineTask;  // (pass, micro-batch)

// slide: pipeline-stages
// Stage s of p holds layers [⌊s·L/p⌋, ⌊(s+1)·L/p⌋): contiguous, sizes differing by at most one.
int first_layer(int stage, int stages, int layers) { return stage * layers / stages; }
// end slide

// Each stage's first layer, then the layer count: who holds which layers (strategies/sharded_state.h).
std::vector<int> stage_boundaries(int stages, int layers) {
  std::vector<int> first;
  for (int s = 0; s <= stages; ++s) first.push_back(first_layer(s, stages, layers));
  return first;
}

// One rank's part of the model: its layers on its device, and its own optimizer.
struct Stage {
  int rank = 0;
  Device* device = nullptr;
  ProcessGroup* group = nullptr;
  int first = 0, last = 0;  // layers [first, last)
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<Parameter*> params;
  std::unique_ptr<Optimizer> optimizer;
  LossScaler scaler;

  Stage(int stage, Device& dev, ProcessGroup& pg, int stages, const HostWeights& init, const TrainConfig& config)
      : rank(stage), device(&dev), group(&pg), scaler(make_loss_scaler(config)) {
    const ModelSpec& spec = init.spec;
    const int L = spec.layer_count();
    first = first_layer(rank, stages, L);
    last = first_layer(rank + 1, stages, L);
    for (int l = first; l < last; ++l) {
      Layer& layer = *layers.emplace_back(make_layer(spec, l, dev));
      upload_layer(layer, init);
      layer.set_precision(config.amp_dtype());
      layer.set_recompute(config.recompute);
      for (Parameter* q : layer.parameters()) params.push_back(q);
    }
    optimizer = std::make_unique<Optimizer>(config.optimizer, params);
    scaler.agree_over(pg, dev);
  }
};

// The schedule --schedule names.
PipelineSchedule schedule_of(const TrainConfig& config) {
  return config.schedule == Schedule::one_f_one_b ? one_f_one_b_schedule : gpipe_schedule;
}

class Pipeline : public Strategy {
 public:
  Pipeline(StrategyContext& ctx, PipelineSchedule schedule)
      : config_(ctx.config),
        ranks_(*ctx.ranks),
        spec_(ctx.initial_weights.spec),
        schedule_(std::move(schedule)),
        ownership_(ShardedState::by_layers(spec_, stage_boundaries(ranks_.world_size(), spec_.layer_count()))) {
    for (int rank : ranks_.local_ranks())
      stages_.push_back(std::make_unique<Stage>(rank, ranks_.device(rank), ranks_.group(rank), ranks_.world_size(),
                                                ctx.initial_weights, ctx.config));
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    std::vector<double> losses(stages_.size());
    ranks_.run([&](int rank) { losses[local_index(rank)] = rank_step(stage(rank), batch, step); });
    return losses.front();  // the same on every rank
  }

  // One training step of one rank: stage s.
  double rank_step(Stage& st, const HostBatch& batch, int64_t step) {
    Device& dev = *st.device;
    ProcessGroup& pg = *st.group;
    const int p = ranks_.world_size(), s = st.rank, m = config_.micro_batches;
    const bool first = s == 0, last = s == p - 1;
    const int64_t rows = batch.size / m;  // rows per micro-batch (checked in make_pipeline)
    dev.set_step(step);

    // 1. The last stage holds the labels, where the loss is computed.
    Tensor y;
    if (last) {
      y = dev.empty({batch.size * batch.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
      dev.upload({"batch.y", Phase::data}, y, batch.y.data());
    }

    // 2. Run the schedule. A micro-batch's input is received when its forward needs it, or
    //    earlier (see the backward below); the last stage's loss gradients wait for their backward.
    const std::vector<Task> tasks = schedule_(p, s, m);
    for (auto& layer : st.layers) {
      layer->refresh_half_weights();            // --amp: this step's half weights
      layer->set_batch_position({step, 0, 1});  // --dropout: micro-batches 0, 1, … in order
    }
    std::vector<Tensor> inputs(static_cast<size_t>(m)), dlogits(static_cast<size_t>(m));
    double loss_sum = 0;
    int backwards_done = 0;
    for (size_t k = 0; k < tasks.size(); ++k) {
      const int i = tasks[k].micro_batch;
      const std::string mb = "mb " + std::to_string(i);
      if (tasks[k].pass == Pass::forward) {
        // F i. Stage 0 copies micro-batch i's rows from the host, one micro-batch at a time; the
        //      others receive the previous stage's output.
        Tensor h;
        if (first) {
          h = dev.empty(spec_.activation_shape(0, rows), DType::f32, MemoryCategory::activations, "batch.x " + mb);
          dev.upload({"batch.x " + mb, Phase::data, -1, i}, h, batch.x.data() + i * rows * batch.features);
        } else {
          if (!inputs[i].defined()) inputs[i] = receive_activations(st, i, rows);
          h = inputs[i];
          inputs[i] = Tensor();  // the layer keeps it for backward
        }
        for (auto& layer : st.layers) h = layer->forward(h, i);
        if (last) {
          const int64_t labels = rows * batch.labels_per_sample;  // a GPT's rows hold T labels each
          // slide: pipeline-micro-batch-loss
          // The loss of micro-batch i (its mean over the rows) and its gradient, scaled by 1/m
          // (and by the loss scale with fp16).
          dlogits[i] = dev.empty(h.shape(), h.dtype(), MemoryCategory::activations, "dlogits " + mb);
          loss_sum += dev.softmax_xent({"loss", Phase::fwd, -1, i}, h, y.rows_slice(i * labels, labels),
                                       dlogits[i], st.scaler.scale() / static_cast<float>(m));
          // end slide
        } else {
          pg.send(h, s + 1, {.name = "activations " + mb, .micro_batch = i});
        }
      } else {
        // B i. The gradient of micro-batch i's output: from the loss, or from the stage after.
        Tensor g;
        if (last) {
          g = dlogits[i];
          dlogits[i] = Tensor();
        } else {
          g = dev.empty(spec_.activation_shape(st.last, rows), activation_dtype(st.last), MemoryCategory::activations,
                        "gradient " + mb);
          pg.recv(g, s + 1, {.name = "gradient " + mb, .micro_batch = i});
        }
        // Backward through this stage's layers, last to first. The first backward of the step
        // writes the weight gradients, the others add to them.
        const bool accumulate = backwards_done++ > 0;
        for (int l = st.last - 1; l >= st.first; --l) {
          const bool need_dx = !(first && l == st.first);  // nobody needs the gradient of the batch
          g = st.layers[l - st.first]->backward(g, need_dx, accumulate, i);
        }
        if (!first) {
          // Sends wait until the peer receives. If the next task is a forward, its input is
          // received before this gradient is sent: the stage before sends that input and then
          // waits for this gradient, so on each link both sides see activations, then gradient
          // (otherwise each would wait for the other in 1F1B's steady state).
          if (k + 1 < tasks.size() && tasks[k + 1].pass == Pass::forward) {
            const int next = tasks[k + 1].micro_batch;
            inputs[next] = receive_activations(st, next, rows);
          }
          pg.send(g, s - 1, {.name = "gradient " + mb, .micro_batch = i});
        }
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
    pg.broadcast(loss, p - 1, {.name = "loss"});
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
      for (auto& layer : st->layers) upload_layer(*layer, s.weights);
      st->optimizer->set_steps_taken(s.optimizer_steps);
      st->optimizer->upload_state(ownership_.part_of(s.optimizer, st->rank));
      st->scaler.load_state(s.loss_scale, s.scaler_good_steps);
    }
  }

  AmpReport amp_report() const override { return stages_.front()->scaler.report(); }

 private:
  // What travels between stages: activations and their gradients, f32 or the --amp dtype.
  DType activation_dtype(int boundary) const { return spec_.activation_dtype(boundary, config_.amp_dtype()); }

  Tensor receive_activations(Stage& st, int micro_batch, int64_t rows) {
    const std::string name = "activations mb " + std::to_string(micro_batch);
    Tensor h = st.device->empty(spec_.activation_shape(st.first, rows), activation_dtype(st.first), MemoryCategory::activations, name);
    st.group->recv(h, st.rank - 1, {.name = name, .micro_batch = micro_batch});
    return h;
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
  PipelineSchedule schedule_;  // (stages, stage, micro-batches) → the stage's tasks
  ShardedState ownership_;     // stage s holds its layers' parameters and optimizer state
  std::vector<std::unique_ptr<Stage>> stages_;  // this process's stages: all of them with --launch threads
};

}  // namespace

std::unique_ptr<Strategy> make_pipeline(StrategyContext& ctx) { return make_pipeline_with_schedule(ctx, {}); }

void check_pipeline_shape(int p, int m, int64_t batch, const ModelSpec& spec) {
  if (p > spec.layer_count())
    throw UsageError("pipeline", "--devices " + std::to_string(p) + " makes " + std::to_string(p) +
                                     " stages, but --model " + spec.text + " has only " +
                                     std::to_string(spec.layer_count()) +
                                     " layers and every stage needs at least one — use --devices ≤ " +
                                     std::to_string(spec.layer_count()) + ", or a model with more layers");
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
  check_pipeline_shape(p, m, ctx.config.batch, ctx.initial_weights.spec);
  if (!schedule) return std::make_unique<Pipeline>(ctx, schedule_of(ctx.config));
  for (int s = 0; s < p; ++s) check_pipeline_schedule(schedule(p, s, m), p, s, m);
  return std::make_unique<Pipeline>(ctx, std::move(schedule));
}

}  // namespace scalelab
