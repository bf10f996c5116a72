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
// After the last backward each stage updates its own layers with its own optimizer.
//
// The two schedules for p = 4 stages and m = 8 micro-batches. Each row is the list a stage runs,
// read left to right; a column is a time slot if F and B take one slot each ("..": idle, waiting
// for a neighbour: the bubble).
//
// GPipe: all forwards, then all backwards.
//   stage 0  F0 F1 F2 F3 F4 F5 F6 F7 .. .. .. .. .. .. B0 B1 B2 B3 B4 B5 B6 B7
//   stage 1  .. F0 F1 F2 F3 F4 F5 F6 F7 .. .. .. .. B0 B1 B2 B3 B4 B5 B6 B7 ..
//   stage 2  .. .. F0 F1 F2 F3 F4 F5 F6 F7 .. .. B0 B1 B2 B3 B4 B5 B6 B7 .. ..
//   stage 3  .. .. .. F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7 .. .. ..
//
// 1F1B: p − s − 1 forwards to fill the pipe (warm-up), then one forward and one backward in turn
// (steady state), then the backwards left (cool-down).
//   stage 0  F0 F1 F2 F3 .. .. .. B0 F4 B1 F5 B2 F6 B3 F7 B4 .. B5 .. B6 .. B7
//   stage 1  .. F0 F1 F2 .. .. B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .. B6 .. B7 ..
//   stage 2  .. .. F0 F1 .. B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .. B7 .. ..
//   stage 3  .. .. .. F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .. .. ..
//
// Both leave each stage idle p − 1 slots of forward and p − 1 of backward out of m + p − 1 each:
// the bubble is (p − 1) / (m + p − 1), 3/11 here, and more micro-batches shrink it. What 1F1B
// changes is memory: a stage keeps each micro-batch's activations from its forward to its
// backward, so under GPipe stage 0 holds all m of them at once, under 1F1B at most p.
//
// Both are the same training as `single`: each micro-batch's loss gradient is scaled by 1/m, so
// the gradients summed over the micro-batches are those of the mean loss over the whole batch.
//
// With --amp every stage computes in half, and the activations and gradients sent between stages
// are half: half the bytes on every link. With fp16 the loss gradients are scaled, and at the end
// each stage unscales and checks its own layers' gradients; an overflow on one stage must stop
// every stage's step, so the stages agree on it with a one-float all-reduce.
//
// make_pipeline_with_schedule (strategies/pipeline.h) runs the same strategy with a schedule given
// from outside, every stage's list checked first: lab 07 grades a student's schedules with it.
#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "core/comm/ranks.h"
#include "core/error.h"
#include "core/nn/optimizer.h"
#include "strategies/pipeline.h"
#include "strategies/registry.h"

namespace scalelab {
namespace {

using Pass = PipelinePass;  // forward | backward (strategies/pipeline.h)
using Task = PipelineTask;  // (pass, micro-batch)

// slide: gpipe-schedule
// GPipe: F 0 … F m−1, then B 0 … B m−1, on every stage.
std::vector<Task> gpipe_schedule(int micro_batches) {
  std::vector<Task> tasks;
  for (int i = 0; i < micro_batches; ++i) tasks.push_back({Pass::forward, i});
  for (int i = 0; i < micro_batches; ++i) tasks.push_back({Pass::backward, i});
  return tasks;
// end slide
}

// slide: one-f-one-b-schedule
// 1F1B (PipeDream-Flush): stage s of p runs w = min(p − s − 1, m) forwards, then m − w pairs
// (forward w + i, backward i), then the w backwards left.
std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  const int warmup = std::min(stages - stage - 1, micro_batches);
  std::vector<Task> tasks;
  for (int i = 0; i < warmup; ++i) tasks.push_back({Pass::forward, i});
  for (int i = 0; i < micro_batches - warmup; ++i) {
    tasks.push_back({Pass::forward, warmup + i});
    tasks.push_back({Pass::backward, i});
  }
  for (int i = micro_batches - warmup; i < micro_batches; ++i) tasks.push_back({Pass::backward, i});
  return tasks;
// end slide
}

// Stage s of p holds layers [⌊s·L/p⌋, ⌊(s+1)·L/p⌋): contiguous, sizes differing by at most one.
int first_layer(int stage, int stages, int layers) { return stage * layers / stages; }

int stage_of_layer(int layer, int stages, int layers) {
  int s = 0;
  while (first_layer(s + 1, stages, layers) <= layer) ++s;
  return s;
}

// One rank's part of the model: its layers on its device, and its own optimizer.
struct Stage {
  int rank = 0;
  Device* device = nullptr;
  ProcessGroup* group = nullptr;
  int first = 0, last = 0;  // layers [first, last)
  std::vector<Linear> layers;
  std::vector<Parameter*> params;
  std::unique_ptr<Optimizer> optimizer;
  LossScaler scaler;

  Stage(int stage, Device& dev, ProcessGroup& pg, int stages, const HostWeights& init, const TrainConfig& config)
      : rank(stage), device(&dev), group(&pg), scaler(make_loss_scaler(config)) {
    const ModelSpec& spec = init.spec;
    const int L = spec.layer_count();
    first = first_layer(rank, stages, L);
    last = first_layer(rank + 1, stages, L);
    layers.reserve(static_cast<size_t>(last - first));  // the optimizer keeps pointers into it
    for (int l = first; l < last; ++l) {
      Linear& layer = layers.emplace_back(dev, l, spec.sizes[l], spec.sizes[l + 1],
                                          l + 1 < L ? Activation::relu : Activation::none);
      dev.upload({layer.weight.name, Phase::data, l}, layer.weight.value, init.weight_data(l));
      dev.upload({layer.bias.name, Phase::data, l}, layer.bias.value, init.bias_data(l));
      layer.set_precision(config.amp_dtype());
      params.push_back(&layer.weight);
      params.push_back(&layer.bias);
    }
    optimizer = std::make_unique<Optimizer>(config.optimizer, params);
    scaler.agree_over(pg, dev);
  }
};

// The schedule --schedule names.
PipelineSchedule schedule_of(const TrainConfig& config) {
  if (config.schedule == Schedule::one_f_one_b) return one_f_one_b_schedule;
  return [](int, int, int micro_batches) { return gpipe_schedule(micro_batches); };
}

class Pipeline : public Strategy {
 public:
  Pipeline(StrategyContext& ctx, PipelineSchedule schedule)
      : config_(ctx.config), ranks_(*ctx.ranks), spec_(ctx.initial_weights.spec), schedule_(std::move(schedule)) {
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
      y = dev.empty({batch.size}, DType::i32, MemoryCategory::activations, "batch.y");
      dev.upload({"batch.y", Phase::data}, y, batch.y.data());
    }

    // 2. Run the schedule. A micro-batch's input is received when its forward needs it, or
    //    earlier (see the backward below); the last stage's loss gradients wait for their backward.
    const std::vector<Task> tasks = schedule_(p, s, m);
    for (Linear& layer : st.layers) layer.refresh_half_weights();  // --amp: this step's half weights
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
          h = dev.empty({rows, batch.features}, DType::f32, MemoryCategory::activations, "batch.x " + mb);
          dev.upload({"batch.x " + mb, Phase::data, -1, i}, h, batch.x.data() + i * rows * batch.features);
        } else {
          if (!inputs[i].defined()) inputs[i] = receive_activations(st, i, rows);
          h = inputs[i];
          inputs[i] = Tensor();  // the layer keeps it for backward
        }
        for (Linear& layer : st.layers) h = layer.forward(h, i);
        if (last) {
          // The loss of micro-batch i (its mean over the rows) and its gradient, scaled by 1/m
          // (and by the loss scale with fp16).
          dlogits[i] = dev.empty(h.shape(), h.dtype(), MemoryCategory::activations, "dlogits " + mb);
          loss_sum += dev.softmax_xent({"loss", Phase::fwd, -1, i}, h, y.rows_slice(i * rows, rows), dlogits[i],
                                       st.scaler.scale() / static_cast<float>(m));
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
          g = dev.empty({rows, spec_.sizes[st.last]}, activation_dtype(), MemoryCategory::activations,
                        "gradient " + mb);
          pg.recv(g, s + 1, {.name = "gradient " + mb, .micro_batch = i});
        }
        // Backward through this stage's layers, last to first. The first backward of the step
        // writes the weight gradients, the others add to them.
        const bool accumulate = backwards_done++ > 0;
        for (int l = st.last - 1; l >= st.first; --l) {
          const bool need_dx = !(first && l == st.first);  // nobody needs the gradient of the batch
          g = st.layers[l - st.first].backward(g, need_dx, accumulate, i);
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

    // 3. Unscale, check for overflow, step or skip. Every stage updates its own layers, with the
    //    gradients of the whole batch — unless (fp16) a gradient overflowed on any stage: each
    //    stage checks its own, the all-reduced flag tells all of them, and all skip together.
    const bool overflow = st.scaler.unscale_and_check(st.params);
    if (!overflow) st.optimizer->step();
    st.scaler.update(overflow);

    // 4. The loss, the mean over the micro-batches, goes from the last stage to every rank.
    Tensor loss = dev.empty({1}, DType::f32, MemoryCategory::comm_buffers, "loss");
    float value = static_cast<float>(loss_sum / m);
    if (last) dev.upload({"loss", Phase::data}, loss, &value);
    pg.broadcast(loss, p - 1, {.name = "loss"});
    value = std::numeric_limits<float>::quiet_NaN();  // stays NaN in a dry run: no numerics
    dev.download({"loss", Phase::data}, &value, loss);
    return value;
  }

  // The whole model on every rank: each layer's tensors are broadcast from the stage that holds it.
  HostWeights weights() override {
    const int L = spec_.layer_count();
    HostWeights w;
    w.spec = spec_;
    w.weight.resize(static_cast<size_t>(L));
    w.bias.resize(static_cast<size_t>(L));
    ranks_.run([&](int rank) {
      Stage& st = stage(rank);
      for (int l = 0; l < L; ++l) {
        const int owner = stage_of_layer(l, ranks_.world_size(), L);
        const Linear* mine = owner == rank ? &st.layers[l - st.first] : nullptr;
        const std::string fc = "fc" + std::to_string(l + 1);
        Tensor W = from_owner(st, owner, mine ? mine->weight.value : Tensor(), {spec_.sizes[l + 1], spec_.sizes[l]}, fc + ".weight");
        Tensor b = from_owner(st, owner, mine ? mine->bias.value : Tensor(), {spec_.sizes[l + 1]}, fc + ".bias");
        if (rank == reporter()) {
          w.weight[l] = download(st, W, l);
          w.bias[l] = download(st, b, l);
        }
      }
    });
    return w;
  }

  TrainingState state() override {
    const int L = spec_.layer_count();
    TrainingState s;
    s.weights = weights();
    s.optimizer_steps = stages_.front()->optimizer->steps_taken();  // every stage steps together
    s.loss_scale = stages_.front()->scaler.state_scale();          // and scales alike
    s.scaler_good_steps = stages_.front()->scaler.good_steps();
    s.optimizer.resize(static_cast<size_t>(2 * L));
    ranks_.run([&](int rank) {
      Stage& st = stage(rank);
      const int k = st.optimizer->state_tensors_per_parameter();
      const std::vector<Tensor> mine = st.optimizer->state();  // per local parameter, k tensors
      for (int l = 0; l < L; ++l) {
        const int owner = stage_of_layer(l, ranks_.world_size(), L);
        for (int j = 0; j < 2; ++j) {  // weight, bias
          const std::vector<int64_t> shape =
              j == 0 ? std::vector<int64_t>{spec_.sizes[l + 1], spec_.sizes[l]} : std::vector<int64_t>{spec_.sizes[l + 1]};
          for (int t = 0; t < k; ++t) {
            const size_t local = static_cast<size_t>((2 * (l - st.first) + j) * k + t);
            Tensor own = owner == rank ? mine[local] : Tensor();
            Tensor v = from_owner(st, owner, own, shape, "fc" + std::to_string(l + 1) + (j ? ".bias" : ".weight") + ".state");
            if (rank == reporter()) s.optimizer[static_cast<size_t>(2 * l + j)].push_back(download(st, v, l));
          }
        }
      }
    });
    return s;
  }

  // The state fits the model (the checkpointer's validate_resume): each stage takes its layers'.
  void load_state(const TrainingState& s) override {
    for (auto& st : stages_) {
      for (Linear& layer : st->layers) {
        st->device->upload({layer.weight.name, Phase::data, layer.index()}, layer.weight.value,
                           s.weights.weight[layer.index()].data());
        st->device->upload({layer.bias.name, Phase::data, layer.index()}, layer.bias.value,
                           s.weights.bias[layer.index()].data());
      }
      st->optimizer->set_steps_taken(s.optimizer_steps);
      // This stage's parameters are entries [2·first, 2·last) of the model's.
      st->optimizer->upload_state({s.optimizer.begin() + 2 * st->first, s.optimizer.begin() + 2 * st->last});
      st->scaler.load_state(s.loss_scale, s.scaler_good_steps);
    }
  }

  AmpReport amp_report() const override { return stages_.front()->scaler.report(); }

 private:
  // What travels between stages: activations and their gradients, f32 or the --amp dtype.
  DType activation_dtype() const { return config_.amp_dtype(); }

  Tensor receive_activations(Stage& st, int micro_batch, int64_t rows) {
    const std::string name = "activations mb " + std::to_string(micro_batch);
    Tensor h = st.device->empty({rows, spec_.sizes[st.first]}, activation_dtype(), MemoryCategory::activations, name);
    st.group->recv(h, st.rank - 1, {.name = name, .micro_batch = micro_batch});
    return h;
  }

  // `own` on the owner's rank; a copy of it everywhere else.
  Tensor from_owner(Stage& st, int owner, const Tensor& own, const std::vector<int64_t>& shape, const std::string& name) {
    Tensor t = st.rank == owner ? own : st.device->empty(shape, DType::f32, MemoryCategory::comm_buffers, name);
    st.group->broadcast(t, owner, {.name = "broadcast " + name});
    return t;
  }

  std::vector<float> download(Stage& st, const Tensor& t, int layer) {
    return st.device->download_f32({"weights", Phase::data, layer}, t);
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
  std::vector<std::unique_ptr<Stage>> stages_;  // this process's stages: all of them with --launch threads
};

}  // namespace

void check_pipeline_schedule(const std::vector<PipelineTask>& tasks, int stages, int stage, int micro_batches) {
  const std::string where = "the schedule of stage " + std::to_string(stage) + " (" + std::to_string(stages) +
                            " stages, " + std::to_string(micro_batches) + " micro-batches)";
  std::vector<int> forwards(static_cast<size_t>(micro_batches)), backwards(static_cast<size_t>(micro_batches));
  std::vector<int> forward_order;  // the micro-batches in the order of their forwards
  size_t backwards_run = 0;
  for (size_t k = 0; k < tasks.size(); ++k) {
    const int i = tasks[k].micro_batch;
    const bool forward = tasks[k].pass == PipelinePass::forward;
    const std::string task = std::string(forward ? "F" : "B") + " " + std::to_string(i);
    if (tasks[k].pass != PipelinePass::forward && tasks[k].pass != PipelinePass::backward)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " is neither a forward nor a backward");
    if (i < 0 || i >= micro_batches)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " is " + task +
                                  ", but the micro-batches are 0 … " + std::to_string(micro_batches - 1));
    int& seen = forward ? forwards[static_cast<size_t>(i)] : backwards[static_cast<size_t>(i)];
    if (seen++ > 0) throw Error("pipeline", where + ": task " + std::to_string(k) + " runs " + task + " a second time");
    if (!forward && forwards[static_cast<size_t>(i)] == 0)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " runs B " + std::to_string(i) +
                                  " before F " + std::to_string(i) + " — a backward needs its forward's activations");
    if (forward) {
      forward_order.push_back(i);
    } else if (forward_order[backwards_run++] != i) {
      // Each layer keeps the inputs of its forwards in a queue and its backward takes the oldest
      // (Linear::backward), so the backwards must come in the order of the forwards.
      throw Error("pipeline", where + ": task " + std::to_string(k) + " runs B " + std::to_string(i) + " where B " +
                                  std::to_string(forward_order[backwards_run - 1]) +
                                  " is due — the backwards run in the order of the forwards (each layer keeps its "
                                  "inputs in a queue, oldest first)");
    }
  }
  for (int i = 0; i < micro_batches; ++i)
    if (forwards[static_cast<size_t>(i)] == 0 || backwards[static_cast<size_t>(i)] == 0)
      throw Error("pipeline", where + " never runs " + (forwards[static_cast<size_t>(i)] == 0 ? "F " : "B ") +
                                  std::to_string(i) + " — every micro-batch needs its forward and its backward");
}

std::unique_ptr<Strategy> make_pipeline(StrategyContext& ctx) { return make_pipeline_with_schedule(ctx, {}); }

std::unique_ptr<Strategy> make_pipeline_with_schedule(StrategyContext& ctx, PipelineSchedule schedule) {
  if (!ctx.ranks) throw Error("pipeline", "needs ranks (devices_per_rank = 1 in the registry)");
  const int p = ctx.ranks->world_size();
  const int m = ctx.config.micro_batches;
  const int64_t batch = ctx.config.batch;
  const ModelSpec& spec = ctx.initial_weights.spec;
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
  if (!schedule) return std::make_unique<Pipeline>(ctx, schedule_of(ctx.config));
  for (int s = 0; s < p; ++s) check_pipeline_schedule(schedule(p, s, m), p, s, m);
  return std::make_unique<Pipeline>(ctx, std::move(schedule));
}

}  // namespace scalelab
