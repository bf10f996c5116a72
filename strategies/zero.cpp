// zero: the ZeroRedundancyOptimizer (ZeRO, Rajbhandari et al. 2020) — data parallel training in
// which each rank keeps the optimizer state of only 1/N of the parameters.
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
//
// The layout (as DeepSpeed's flat buffers): every parameter, in model order, in one buffer
// padded to a multiple of N, so the shards are equal (collectives need equal blocks):
//
//     [ fc1.weight | fc1.bias | fc2.weight | fc2.bias | … | pad ]      P parameters, padded to P'
//     [  shard 0  |  shard 1  |  …  |  shard N−1  ]                    S = P' / N each
//
// Each layer's weight and bias are views into that buffer, so the all-gather writes straight into
// the tensors forward reads. The padding is zero and stays zero: its gradient is zero, and SGD
// and Adam leave a zero weight with a zero gradient (and zero state) at zero.
//
// Mixed precision (--amp): the flat buffer keeps the f32 master weights, which the optimizer
// shards; each layer computes from half copies cast from its views. With fp16, rank r unscales and
// checks only shard r's gradient — the only one its optimizer reads — so an overflow may be seen
// by one rank alone (certainly in stage 2, where no rank holds the others' shards): the ranks
// agree on it with a one-float all-reduce, and all skip together.
//
// The data: rank r takes rows r, r+N, r+2N, … of the global batch (the rule of torch's
// DistributedSampler, as ddp), so N ranks together see exactly the batch `single` sees, and the
// average of their gradients is single's gradient: the equivalence contract holds up to round-off.
#include <limits>
#include <utility>

#include "core/comm/ranks.h"
#include "core/error.h"
#include "core/nn/optimizer.h"
#include "strategies/distributed_sampler.h"
#include "strategies/registry.h"
#include "strategies/sharded_state.h"

namespace scalelab {
namespace {

class Zero : public Strategy {
 public:
  explicit Zero(StrategyContext& ctx)
      : ranks_(*ctx.ranks),
        world_(ctx.ranks->world_size()),
        stage_(ctx.config.zero_stage == 0 ? 1 : ctx.config.zero_stage),
        spec_(ctx.initial_weights.spec),
        // Who holds what (strategies/sharded_state.h): rank r the optimizer state of elements
        // [r·S, (r+1)·S) of the parameters laid flat, padded to the smallest multiple of N that
        // holds them all; the weights every rank whole.
        ownership_(ShardedState::equal_shards(spec_, world_)) {
    params_ = ownership_.parameter_count();
    shard_ = ownership_.size(0);
    padded_ = ownership_.padded_size();
    for (int r : ranks_.local_ranks()) local_ranks_.push_back(std::make_unique<RankState>(ctx, r, *this));
  }

  double train_step(const HostBatch& batch, int64_t step) override {
    ranks_.run([&](int rank) { local(rank).loss = rank_step(local(rank), batch, step); });
    return local_ranks_.front()->loss;  // the same on every rank: the all-reduced mean
  }

  // Every rank holds all the weights after the all-gather: read the first local one.
  HostWeights weights() override { return local_ranks_.front()->model.download(); }

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
  // fits): each rank uploads all the weights, its shard of the optimizer state and the step count
  // (Adam's bias correction). Cutting out a shard needs no communication.
  void load_state(const TrainingState& s) override {
    ranks_.run([&](int rank) {
      RankState& R = local(rank);
      R.model.upload(s.weights);
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
      //    parameter in one flat, padded buffer instead.
      std::vector<std::vector<int64_t>> shapes;
      for (Parameter* p : model.parameters()) {
        shapes.push_back(p->value.shape());
        p->value = p->grad = Tensor();
      }
      flat_params = device.zeros({z.padded_}, DType::f32, MemoryCategory::params, "zero.flat_params");
      std::vector<Parameter*> params = model.parameters();
      int64_t offset = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        params[i]->value = flat_params.view(offset, shapes[i]);
        offset += params[i]->value.numel();
      }
      model.upload(ctx.initial_weights);
      // 2. Gradients. Stage 1: one flat buffer like the weights, all-reduced whole, kept whole.
      //    Stage 2: only this rank's shard is kept; backward writes into a buffer that lives for
      //    the reduce-scatter alone (see rank_step).
      if (z.stage_ == 1) {
        flat_grads = device.zeros({z.padded_}, DType::f32, MemoryCategory::grads, "zero.flat_grads");
        seat_grads(flat_grads);
      }
      // slide: zero-shard-optimizer
      // 3. The optimizer sees one parameter: this rank's shard of the weights and its gradient.
      //    So its state (momentum, or Adam's m and v) is S values per tensor, not P.
      shard.name = "zero.shard" + r;
      shard.value = flat_params.view(rank * z.shard_, {z.shard_});
      shard.grad = z.stage_ == 1
                       ? flat_grads.view(rank * z.shard_, {z.shard_})
                       : device.zeros({z.shard_}, DType::f32, MemoryCategory::grads, "zero.shard_grad");
      optimizer = std::make_unique<Optimizer>(ctx.config.optimizer, std::vector<Parameter*>{&shard});
      // end slide
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

    int rank;
    Device& device;
    ProcessGroup& group;
    Model model;
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
    //    over the whole batch. (--amp: the layers cast their weights to half first.)
    R.model.refresh_half_weights();
    R.model.set_batch_position({step, R.rank, world_});  // --dropout: samples r, r+N, …
    Tensor logits = R.model.forward(x);
    Tensor dlogits = d.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
    const double loss = d.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits, R.scaler.scale());

    // 3. Backward, last layer to first: each layer writes its gradients into its place in a flat
    //    buffer. Stage 2's buffer exists only until the reduce-scatter has read it: it is the
    //    collective's send buffer (DeepSpeed's "reduce bucket"), not a gradient anyone keeps.
    Tensor bucket = R.flat_grads;
    if (stage_ == 2) {
      bucket = d.empty({padded_}, DType::f32, MemoryCategory::comm_buffers, "zero.grad_bucket");
      if (padded_ > params_) d.fill({"zero.pad", Phase::bwd}, bucket.view(params_, {padded_ - params_}), 0.0f);
      R.seat_grads(bucket);
    }
    R.model.backward(dlogits);

    // slide: zero-stage2-step
    // 4. Average the gradients over the ranks: one flat bucket (bucket 0), after backward.
    const CommTag grads{.name = "zero.grads", .bucket = 0};
    if (stage_ == 1) {
      // every rank: the whole averaged gradient
      R.group.all_reduce(R.flat_grads, ReduceOp::avg, grads);
    } else {
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
    R.group.all_gather(R.shard.value, R.flat_params, {.name = "zero.params"});
    // end slide

    // 7. The loss of the whole batch: the average of the ranks' means over equal shares of it.
    //    (A dry run computes nothing: the download leaves the NaN.)
    float mine = static_cast<float>(loss), mean = std::numeric_limits<float>::quiet_NaN();
    d.upload({"loss", Phase::data}, R.loss_mean, &mine);
    R.group.all_reduce(R.loss_mean, ReduceOp::avg, {.name = "zero.loss"});
    d.download({"loss", Phase::data}, &mean, R.loss_mean);
    return mean;
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
