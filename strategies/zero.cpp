// zero: the ZeroRedundancyOptimizer (ZeRO, Rajbhandari et al. 2020) — data parallel training in
// which each rank keeps the optimizer state of only 1/N of the parameters (stage 3: 1/N of all).
//
// Data parallel training keeps N copies of everything: weights, gradients and optimizer state
// (SGD momentum: one more tensor the size of the model; Adam's m and v: two). But the optimizer
// is element-wise: no weight's update reads another weight's state. So nothing forces every rank
// to update every weight. Cut the parameters into N equal shards; rank r keeps the optimizer
// state of shard r only, updates shard r only, and then sends its updated weights to everyone.
//
//   stage 1 (--zero-stage 1, the default: what torch's ZeroRedundancyOptimizer does)
//            all-reduce (avg) the whole gradient; rank r updates shard r; all-gather the weights.
//            Optimizer state per rank: 1/N of the model.
//   stage 2 (--zero-stage 2)
//            reduce-scatter (avg) the gradient instead: rank r receives the average of shard r
//            only, which is all its optimizer reads. The gradient a rank keeps: 1/N of the model.
//   Same bytes on the wire as data parallel in both stages: an all-reduce IS a reduce-scatter
//   followed by an all-gather; ZeRO just puts the optimizer step between the two halves.
//   stage 3 (--zero-stage 3; --strategy fsdp, PyTorch's FullyShardedDataParallel)
//            the weights themselves sharded: rank r keeps shard r of the weights, of the gradient
//            and of the optimizer state, and nothing else between steps: 1/N of everything. A
//            layer's whole weights exist only while it computes: before its forward they are
//            all-gathered into a buffer, used and freed; before its backward gathered again; its
//            gradient is reduce-scattered (avg) into rank r's gradient shard and freed. The
//            optimizer steps on the shard; the next forward's gathers bring its update. The unit
//            gathered at once is a layer with parameters (FSDP's "unit"): an MLP's Linear, a
//            ConvNet's convolution, a GPT's embedding, each of its blocks, its head.
//   The price of stage 3: 1.5× the traffic of data parallel. Per step each rank sends (N−1)/N of
//   the model three times — the forward's all-gathers, the backward's, the gradient's
//   reduce-scatters — where an all-reduce is two. To hide it, each layer's gather is queued before
//   the layer ahead of it computes (prefetch: FSDP's forward_prefetch and backward_prefetch), and
//   each reduce-scatter runs during the next layer's backward; what that costs is two layers'
//   whole weights (and two whole gradients) alive at a time. With --recompute a block reruns its
//   forward from the weights gathered for its backward: no extra gather.
//
// The layout (as DeepSpeed's flat buffers): every parameter, in model order, in one buffer
// padded to a multiple of N, so the shards are equal (collectives need equal blocks):
//
//     [ fc1.weight | fc1.bias | fc2.weight | fc2.bias | … | pad ]      P parameters, padded to P'
//     [  shard 0  |  shard 1  |  …  |  shard N−1  ]                    S = P' / N each
//
// Each layer's weight and bias are views into that buffer, so the all-gather writes straight into
// the tensors forward reads. The padding is zero and stays zero: its gradient is zero, and SGD
// and Adam leave a zero weight with a zero gradient (and zero state) at zero. Stage 3 gathers a
// layer at a time, so it cuts each layer with parameters (FSDP's unit) the same way on its own;
// rank r's shard is its piece of every layer, end to end (strategies/sharded_state.h).
//
// Mixed precision (--amp): the flat buffer keeps the f32 master weights, which the optimizer
// shards; each layer computes from half copies cast from its views. With fp16, rank r unscales and
// checks only shard r's gradient — the only one its optimizer reads — so an overflow may be seen
// by one rank alone (certainly in stage 2, where no rank holds the others' shards): the ranks
// agree on it with a one-float all-reduce, and all skip together. Stage 3 gathers a unit's f32
// weights, casts them to half, and frees both after use, as PyTorch's FSDP does with autocast and
// full-precision parameters (its MixedPrecision(param_dtype=…) would gather half weights instead:
// half the bytes, not modelled here).
//
// The data: rank r takes rows r, r+N, r+2N, … of the global batch (the rule of torch's
// DistributedSampler, as ddp), so N ranks together see exactly the batch `single` sees, and the
// average of their gradients is single's gradient: the equivalence contract holds up to round-off.
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "core/comm/ranks.h"
#include "core/error.h"
#include "core/nn/optimizer.h"
#include "strategies/distributed_sampler.h"
#include "strategies/registry.h"
#include "strategies/sharded_state.h"

namespace scalelab {
namespace {

// Stage 3: a rank's shard of the weights, held alone (there is no flat buffer of the whole).
Tensor shard_alone(Device& device, int64_t size) {
  return device.empty({size}, DType::f32, MemoryCategory::params, "zero.shard_params");
}

class Zero : public Strategy {
 public:
  explicit Zero(StrategyContext& ctx)
      : ranks_(*ctx.ranks),
        world_(ctx.ranks->world_size()),
        stage_(ctx.config.zero_stage == 0 ? 1 : ctx.config.zero_stage),
        spec_(ctx.initial_weights.spec),
        // Who holds what (strategies/sharded_state.h): rank r the optimizer state of elements
        // [r·S, (r+1)·S) of the parameters laid flat, padded to the smallest multiple of N that
        // holds them all; the weights every rank whole. Stage 3: of each layer's, on its own.
        ownership_(stage_ == 3 ? ShardedState::equal_shards_per_layer(spec_, world_)
                               : ShardedState::equal_shards(spec_, world_)) {
    params_ = ownership_.parameter_count();
    shard_ = ownership_.size(0);
    padded_ = ownership_.padded_size();
    for (int r : ranks_.local_ranks()) local_ranks_.push_back(std::make_unique<RankState>(ctx, r, *this));
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    ranks_.run([&](int rank) { local(rank).loss = rank_step(local(rank), batch, step); });
    return local_ranks_.front()->loss;  // the same on every rank: the all-reduced mean
  }

  // Every rank holds all the weights after the all-gather: read the first local one. Stage 3:
  // no rank does; the shards are gathered, every rank taking part, the first of each process
  // keeping them.
  HostWeights weights() override {
    if (stage_ < 3) return local_ranks_.front()->model.download();
    HostWeights w;
    ranks_.run([&](int rank) {
      RankState& R = local(rank);
      const bool keep = &R == local_ranks_.front().get();
      HostWeights whole = ownership_.gather_weights(R.group, R.device, {&R.shard}, keep);
      if (keep) w = std::move(whole);
    });
    return w;
  }

  // The whole optimizer state, as single would keep it: the shards of each state tensor
  // all-gathered and cut back into the model's parameters. Every rank takes part; the first rank
  // of each process keeps the result, so every process returns the whole state.
  TrainingState state() override {
    TrainingState s;
    s.weights = weights();
    ranks_.run([&](int rank) {
      RankState& R = local(rank);
      const bool keep = &R == local_ranks_.front().get();
      OptimizerState whole = ownership_.gather_optimizer_state(R.group, R.device, *R.optimizer, keep);
      if (keep) s.optimizer = std::move(whole);
    });
    s.optimizer_steps = local_ranks_.front()->optimizer->steps_taken();
    s.loss_scale = local_ranks_.front()->scaler.state_scale();  // every rank's scaler decides alike
    s.scaler_good_steps = local_ranks_.front()->scaler.good_steps();
    return s;
  }

  // Every process has read the whole state (and the checkpointer's validate_resume has checked it
  // fits): each rank uploads all the weights (stage 3: its shard of them), its shard of the
  // optimizer state and the step count (Adam's bias correction). Cutting out a shard needs no
  // communication.
  void load_state(const TrainingState& s) override {
    ranks_.run([&](int rank) {
      RankState& R = local(rank);
      if (stage_ < 3) R.model.upload(s.weights);
      else R.upload_shard(ownership_, s.weights);
      R.optimizer->upload_state(ownership_.part_of(s.optimizer, rank));
      R.optimizer->set_steps_taken(s.optimizer_steps);
      R.scaler.load_state(s.loss_scale, s.scaler_good_steps);
    });
  }

  AmpReport amp_report() const override { return local_ranks_.front()->scaler.report(); }

 private:
  // What one rank holds. Not movable: the optimizer keeps a pointer to `shard`.
  struct RankState {
    RankState(StrategyContext& ctx, int rank_index, const Zero& z)
        : rank(rank_index),
          device(ctx.ranks->device(rank_index)),
          group(ctx.ranks->group(rank_index)),
          model(device, ctx.initial_weights),
          scaler(make_loss_scaler(ctx.config)) {
      const std::string r = std::to_string(rank);
      // 1. Drop the Model's own tensors (one weight and one gradient per parameter) and seat every
      //    parameter in one flat, padded buffer instead. Stage 3 keeps its shard of that buffer
      //    alone; the layers' weights stay empty but while they compute (gather_unit).
      for (Parameter* p : model.parameters()) {
        shapes.push_back(p->value.shape());
        p->value = p->grad = Tensor();
      }
      if (z.stage_ < 3) {
        flat_params = device.zeros({z.padded_}, DType::f32, MemoryCategory::params, "zero.flat_params");
        std::vector<Parameter*> params = model.parameters();
        int64_t offset = 0;
        for (size_t i = 0; i < params.size(); ++i) {
          params[i]->value = flat_params.view(offset, shapes[i]);
          offset += params[i]->value.numel();
        }
        model.upload(ctx.initial_weights);
      }
      // 2. Gradients. Stage 1: one flat buffer like the weights, all-reduced whole, kept whole.
      //    Stages 2 and 3: only this rank's shard is kept; backward writes into a buffer that lives
      //    for the reduce-scatter alone (see rank_step).
      if (z.stage_ == 1) {
        flat_grads = device.zeros({z.padded_}, DType::f32, MemoryCategory::grads, "zero.flat_grads");
        seat_grads(flat_grads);
      }
      // 3. The optimizer sees one parameter, this rank's shard (stage 3: the shard alone; the others
      //    view the flat buffer): so its state is S values a tensor, not P.
      // slide: zero-shard-optimizer
      shard.name = "zero.shard" + r;
      shard.value = z.stage_ < 3 ? flat_params.view(rank * z.shard_, {z.shard_}) : shard_alone(device, z.shard_);
      shard.grad = z.stage_ == 1
                       ? flat_grads.view(rank * z.shard_, {z.shard_})
                       : device.zeros({z.shard_}, DType::f32, MemoryCategory::grads, "zero.shard_grad");
      optimizer = std::make_unique<Optimizer>(ctx.config.optimizer, std::vector<Parameter*>{&shard});
      // end slide
      if (z.stage_ == 3) upload_shard(z.ownership_, ctx.initial_weights);  // the weights: this shard alone
      loss_mean = device.zeros({1}, DType::f32, MemoryCategory::workspace, "zero.loss");
      // 4. Mixed precision: the layers compute from half copies of their views of the flat f32
      //    buffer; the ranks agree on the fp16 scaler's every decision.
      model.set_precision(ctx.config.amp_dtype());
      model.set_recompute(ctx.config.recompute);
      scaler.agree_over(group, device);
      // The Model's per-parameter gradients existed only for a moment while it was built: forget
      // that moment, so the ledger's peaks show what training with ZeRO holds.
      device.memory().reset_peaks();
    }

    // Every parameter's gradient becomes a view of `flat`, in the same layout as the weights.
    void seat_grads(const Tensor& flat) {
      int64_t offset = 0;
      for (Parameter* p : model.parameters()) {
        p->grad = flat.view(offset, p->value.shape());
        offset += p->value.numel();
      }
    }

    // Stage 3: this rank's shard of whole weights (the initial ones, or a checkpoint's).
    // (Shapes only, in a dry run: nothing to cut.)
    void upload_shard(const ShardedState& ownership, const HostWeights& w) {
      const std::vector<float> mine = w.has_values() ? ownership.shard_of(w.values, rank) : std::vector<float>{};
      device.upload({"zero.shard_params", Phase::data}, shard.value, w.has_values() ? mine.data() : nullptr);
    }

    int rank;
    Device& device;
    ProcessGroup& group;
    Model model;
    std::vector<std::vector<int64_t>> shapes;  // every parameter's, in model order
    Tensor flat_params, flat_grads;
    Parameter shard;
    std::unique_ptr<Optimizer> optimizer;
    LossScaler scaler;
    Tensor loss_mean;
    HostBatch rows;
    double loss = 0;
  };

  RankState& local(int rank) {
    for (auto& R : local_ranks_)
      if (R->rank == rank) return *R;
    throw Error("zero", "rank " + std::to_string(rank) + " does not run in this process");
  }

  // One step on one rank. Every rank issues the same collectives in the same order.
  double rank_step(RankState& R, const HostBatch& batch, int64_t step) {
    Device& d = R.device;
    d.set_step(step);
    // 1. This rank's rows of the global batch (r, r+N, …: strategies/distributed_sampler.h) go to
    //    its device.
    take_shard(batch, R.rank, world_, R.rows);
    Tensor x = d.empty({R.rows.size, R.rows.features}, DType::f32, MemoryCategory::activations, "batch.x");
    Tensor y = d.empty({R.rows.size * R.rows.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
    d.upload({"batch.x", Phase::data}, x, R.rows.x.data());
    d.upload({"batch.y", Phase::data}, y, R.rows.y.data());

    // 2. Forward and loss on those B/N rows: the mean over them, and its gradient (with fp16, times
    //    the loss scale). The average of the N ranks' gradients is then the gradient of the mean
    //    over the whole batch. (--amp: the layers cast their weights to half first.) Stage 3
    //    gathers each layer's weights for its forward and frees them after (and casts each
    //    layer's to half right after its gather).
    if (stage_ < 3) R.model.refresh_half_weights();
    R.model.set_batch_position({step, R.rank, world_});  // --dropout: samples r, r+N, …
    Tensor logits = stage_ == 3 ? sharded_forward(R, x) : R.model.forward(x);
    Tensor dlogits = d.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
    const double loss = d.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits, R.scaler.scale());

    // 3. Backward, last layer to first: each layer writes its gradients into its place in a flat
    //    buffer. Stage 2's buffer exists only until the reduce-scatter has read it: it is the
    //    collective's send buffer (DeepSpeed's "reduce bucket"), not a gradient anyone keeps.
    //    Stage 3 has such a buffer per layer, reduce-scattered as soon as the layer's backward ends.
    Tensor bucket = R.flat_grads;
    if (stage_ == 2) {
      bucket = d.empty({padded_}, DType::f32, MemoryCategory::comm_buffers, "zero.grad_bucket");
      if (padded_ > params_) d.fill({"zero.pad", Phase::bwd}, bucket.view(params_, {padded_ - params_}), 0.0f);
      R.seat_grads(bucket);
    }
    if (stage_ == 3) sharded_backward(R, dlogits);
    else R.model.backward(dlogits);

    // slide: zero-stage2-step
    // 4. Average the gradients over the ranks: one flat bucket (bucket 0), after backward.
    const CommTag grads{.name = "zero.grads", .bucket = 0};
    if (stage_ == 1) {
      // every rank: the whole averaged gradient
      R.group.all_reduce(R.flat_grads, ReduceOp::avg, grads);
    } else if (stage_ == 2) {
      // rank r: shard r's average only
      R.group.reduce_scatter(bucket, R.shard.grad, ReduceOp::avg, grads);
      for (Parameter* p : R.model.parameters()) p->grad = Tensor();  // the bucket is freed here
      bucket = Tensor();
    }

    // 5. Unscale, check for overflow, step or skip: rank r unscales and checks shard r's gradient
    //    (fp16), the ranks agree, and unless a shard overflowed rank r's optimizer updates shard r
    //    of the weights, with the state of shard r.
    const bool overflow = R.scaler.unscale_and_check({&R.shard});
    if (!overflow) R.optimizer->step();
    R.scaler.update(overflow);

    // 6. All-gather the updated shards, in place: every rank has every weight again. (It runs
    //    after a skipped step too: every rank issues the same collectives, whatever happened.)
    //    Stage 3 keeps its shard: the next step's forward gathers the weights layer by layer.
    if (stage_ < 3) R.group.all_gather(R.shard.value, R.flat_params, {.name = "zero.params"});
    // end slide

    // 7. The loss of the whole batch: the average of the ranks' means over equal shares of it.
    //    (A dry run computes nothing: the download leaves the NaN.)
    float mine = static_cast<float>(loss), mean = std::numeric_limits<float>::quiet_NaN();
    d.upload({"loss", Phase::data}, R.loss_mean, &mine);
    R.group.all_reduce(R.loss_mean, ReduceOp::avg, {.name = "zero.loss"});
    d.download({"loss", Phase::data}, &mean, R.loss_mean);
    return mean;
  }

  // Stage 3. A unit (a layer with parameters) whole — its weights or its gradient — in a buffer of
  // its own while in use, and the collective that fills or empties it.
  struct UnitBuffer {
    int unit = -1;  // none
    Tensor whole;   // the unit's padded flat size: N × its piece
    std::shared_ptr<Work> work;
  };

  // slide: zero3-forward
  // Forward layer by layer. Before a layer with parameters computes, its weights are gathered;
  // the next unit's gather is queued before this one computes, so it crosses the wire meanwhile
  // (prefetch); after the forward the whole weights are freed.
  Tensor sharded_forward(RankState& R, const Tensor& x) {
    const int units = static_cast<int>(ownership_.units().size());
    UnitBuffer next = gather_unit(R, 0);
    Tensor h = x;
    for (Layer& layer : R.model.layers()) {
      UnitBuffer weights;
      if (next.unit >= 0 && unit_layer(next.unit) == layer.index()) {
        weights = std::move(next);
        next = weights.unit + 1 < units ? gather_unit(R, weights.unit + 1) : UnitBuffer{};
        seat_weights(R, weights);
      }
      h = layer.forward(h);
      if (weights.unit >= 0) free_unit(R, weights);
    }
    return h;
  }
  // end slide

  // Backward, last layer first: the weights gathered again (the next unit's gather queued ahead),
  // the layer's gradient written into a buffer of its own and reduce-scattered (avg) into this
  // rank's piece of the gradient shard while the layer below computes; then both freed.
  void sharded_backward(RankState& R, const Tensor& dlogits) {
    // slide: zero3-backward
    UnitBuffer next = gather_unit(R, static_cast<int>(ownership_.units().size()) - 1), reducing;
    Tensor grad = dlogits;
    const LayerList& layers = R.model.layers();
    for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
      UnitBuffer weights, grads;
      if (next.unit >= 0 && unit_layer(next.unit) == l) {
        weights = std::move(next);
        next = weights.unit > 0 ? gather_unit(R, weights.unit - 1) : UnitBuffer{};
        seat_weights(R, weights);
        grads = gradient_buffer(R, weights.unit);
      }
      grad = layers[static_cast<size_t>(l)].backward(grad, /*need_dx=*/l > 0);
      if (weights.unit < 0) continue;
      free_unit(R, weights);  // its gradient buffer lives on until its reduce-scatter is done
      free_unit(R, reducing);  // the unit above's reduce-scatter: done, its buffer freed
      const ShardedState::Unit& unit = ownership_.units()[static_cast<size_t>(grads.unit)];
      const Tensor mine = R.shard.grad.view(unit.shard_begin, {unit.shard});  // this rank's piece
      grads.work = R.group.reduce_scatter_async(grads.whole, mine, ReduceOp::avg,
                                                {.name = spec_.layer_name(l) + ".grads"});
      reducing = std::move(grads);
    }
    free_unit(R, reducing);
    // end slide
  }

  int unit_layer(int u) const { return ownership_.units()[static_cast<size_t>(u)].layer; }

  // Queues the all-gather of unit u's weights: every rank's piece into a buffer of the whole.
  UnitBuffer gather_unit(RankState& R, int u) {
    const ShardedState::Unit& unit = ownership_.units()[static_cast<size_t>(u)];
    const std::string name = spec_.layer_name(unit.layer) + ".gather";
    UnitBuffer b{u, R.device.empty({unit.shard * world_}, DType::f32, MemoryCategory::params, name), nullptr};
    b.work = R.group.all_gather_async(R.shard.value.view(unit.shard_begin, {unit.shard}), b.whole, {.name = name});
    return b;
  }

  // Waits for a unit's gather; its layer's parameters become views of the buffer, as in stage 1.
  // (--amp: then cast to the half copies the layer computes from.)
  void seat_weights(RankState& R, const UnitBuffer& b) {
    b.work->wait();
    const ShardedState::Unit& unit = ownership_.units()[static_cast<size_t>(b.unit)];
    Layer& layer = R.model.layers()[static_cast<size_t>(unit.layer)];
    const std::vector<Parameter*> params = layer.parameters();
    for (int p = unit.first; p < unit.last; ++p)
      params[static_cast<size_t>(p - unit.first)]->value =
          b.whole.view(ownership_.offset_in_unit(unit, p), R.shapes[static_cast<size_t>(p)]);
    layer.refresh_half_weights();
  }

  // The layer of unit u forgets its views of the whole weights and gradient, and its half copies.
  void drop_views(RankState& R, int u) {
    Layer& layer = R.model.layers()[static_cast<size_t>(unit_layer(u))];
    for (Parameter* p : layer.parameters()) p->value = p->grad = Tensor();
    layer.drop_half_weights();
  }

  // Waits for a unit's collective, then frees its buffer (the layer's views first).
  void free_unit(RankState& R, UnitBuffer& b) {
    if (b.unit < 0) return;
    b.work->wait();
    drop_views(R, b.unit);
    b = UnitBuffer{};
  }

  // A unit's whole gradient: a buffer whose padding is zero, the layer's gradients views of it.
  UnitBuffer gradient_buffer(RankState& R, int u) {
    const ShardedState::Unit& unit = ownership_.units()[static_cast<size_t>(u)];
    const std::string name = spec_.layer_name(unit.layer) + ".grads";
    UnitBuffer b{u, R.device.empty({unit.shard * world_}, DType::f32, MemoryCategory::comm_buffers, name), nullptr};
    const int64_t used = ownership_.offset_in_unit(unit, unit.last);
    if (b.whole.numel() > used) R.device.fill({name + ".pad", Phase::bwd}, b.whole.view(used, {b.whole.numel() - used}), 0.0f);
    const std::vector<Parameter*> params = R.model.layers()[static_cast<size_t>(unit.layer)].parameters();
    for (int p = unit.first; p < unit.last; ++p)
      params[static_cast<size_t>(p - unit.first)]->grad =
          b.whole.view(ownership_.offset_in_unit(unit, p), R.shapes[static_cast<size_t>(p)]);
    return b;
  }


  const RankSet& ranks_;
  const int world_;
  const int stage_;
  const ModelSpec spec_;
  const ShardedState ownership_;
  int64_t params_ = 0, shard_ = 0, padded_ = 0;
  std::vector<std::unique_ptr<RankState>> local_ranks_;
};

}  // namespace

std::unique_ptr<Strategy> make_zero(StrategyContext& ctx) {
  if (!ctx.ranks) throw Error("zero", "zero runs one rank per device, but no ranks were started");
  check_batch_shares(ctx.config.batch, ctx.ranks->world_size(), "zero");
  return std::make_unique<Zero>(ctx);
}

}  // namespace scalelab
