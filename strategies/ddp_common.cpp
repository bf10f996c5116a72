#include "strategies/ddp_common.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "strategies/ddp_buckets.h"
#include "strategies/distributed_sampler.h"

namespace scalelab {

// ---------------------------------------------------------------------------------------------
// GradientReducer

GradientReducer::GradientReducer(std::vector<Parameter*> params, ProcessGroup& group, int64_t bucket_cap_bytes,
                                 int64_t first_bucket_cap_bytes)
    : params_(std::move(params)), group_(group) {
  const int n = static_cast<int>(params_.size());
  // 1. Runs of parameters on one device, in model order (one run for ddp, two for ddp-mp).
  std::vector<std::pair<int, int>> runs;  // [first, last)
  for (int i = 0; i < n; ++i) {
    if (runs.empty() || params_[i]->value.device() != params_[runs.back().first]->value.device())
      runs.emplace_back(i, i);
    runs.back().second = i + 1;
  }
  // 2. Bucket each run, the last run first: backward reaches the last layers first.
  for (auto run = runs.rbegin(); run != runs.rend(); ++run) {
    std::vector<int64_t> bytes;
    for (int i = run->first; i < run->second; ++i) bytes.push_back(params_[i]->grad.nbytes());
    for (std::vector<int> bucket : compute_bucket_assignment_by_size(bytes, bucket_cap_bytes, first_bucket_cap_bytes)) {
      for (int& i : bucket) i += run->first;
      bucket_params_.push_back(std::move(bucket));
    }
  }
  // 3. One flat buffer per bucket, allocated once and reused every step, as PyTorch does; and
  //    each parameter's locator, so that backward's mark_ready finds its bucket at once.
  ready_.assign(static_cast<size_t>(n), false);
  for (size_t k = 0; k < bucket_params_.size(); ++k) {
    Bucket b;
    b.params = bucket_params_[k];
    int64_t elems = 0;
    for (int i : b.params) {
      locators_[params_[i]] = {i, static_cast<int>(k), static_cast<int>(b.offsets.size())};
      b.offsets.push_back(elems);
      elems += params_[i]->grad.numel();
    }
    Device& device = *params_[b.params.front()]->grad.device();
    b.flat = device.zeros({elems}, DType::f32, MemoryCategory::comm_buffers, "bucket " + std::to_string(k));
    b.pending = static_cast<int>(b.params.size());
    buckets_.push_back(std::move(b));
  }
}

const GradientReducer::Locator& GradientReducer::locate(const Parameter& p) const {
  const auto it = locators_.find(&p);
  if (it == locators_.end()) throw Error("ddp", p.name + " is not one of the reducer's parameters");
  return it->second;
}

// slide: ddp-bucket-ready
void GradientReducer::mark_ready(const Parameter& p) {
  const Locator& at = locate(p);
  if (ready_[static_cast<size_t>(at.param)])
    throw Error("ddp", "the gradient of " + p.name + " was marked ready twice in one backward — "
                       "call finish() before the next backward");
  ready_[static_cast<size_t>(at.param)] = true;
  --buckets_[static_cast<size_t>(at.bucket)].pending;
  // Launch in bucket order only: every rank must issue the same all-reduces in the same order.
  while (next_launch_ < static_cast<int>(buckets_.size()) &&
         buckets_[static_cast<size_t>(next_launch_)].pending == 0)
    launch(next_launch_++);
// end slide
}

void GradientReducer::launch(int k) {
  Bucket& b = buckets_[static_cast<size_t>(k)];
  Device& device = *b.flat.device();
  const std::string name = "bucket " + std::to_string(k);
  // 1. Copy the bucket's gradients into its flat buffer: one all-reduce for all of them.
  for (size_t j = 0; j < b.params.size(); ++j) {
    const Parameter& p = *params_[static_cast<size_t>(b.params[j])];
    device.copy({name + " ← " + p.name + ".grad", Phase::comm, p.layer, -1, k}, p.grad,
                b.flat.view(b.offsets[j], p.grad.shape()));
  }
  // 2. All-reduce it on the communication thread (a CUDA stream in PyTorch); backward goes on.
  //    The average: each rank's gradient is the mean over its B/N rows, so their mean is the
  //    mean over the whole global batch — what `single` computes.
  b.work = group_.all_reduce_async(b.flat, ReduceOp::avg, {.name = name, .bucket = k});
}

void GradientReducer::finish() {
  if (next_launch_ != static_cast<int>(buckets_.size())) {
    std::string missing;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) missing += (missing.empty() ? "" : ", ") + params_[i]->name;
    throw Error("ddp", "bucket " + std::to_string(next_launch_) + " never became ready: no gradient was marked for " +
                           missing + " — backward must mark every parameter's gradient ready before finish()");
  }
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    // 3. Wait for the all-reduce, then copy the averaged gradients back where the optimizer reads them.
    b.work->wait();
    b.work.reset();
    Device& device = *b.flat.device();
    const std::string name = "bucket " + std::to_string(k);
    for (size_t j = 0; j < b.params.size(); ++j) {
      const Parameter& p = *params_[static_cast<size_t>(b.params[j])];
      device.copy({name + " → " + p.name + ".grad", Phase::comm, p.layer, -1, static_cast<int>(k)},
                  b.flat.view(b.offsets[j], p.grad.shape()), p.grad);
    }
    b.pending = static_cast<int>(b.params.size());
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
}

// ---------------------------------------------------------------------------------------------
// no_sync

NoSyncWindow no_sync_window(int k, int64_t step) {
  NoSyncWindow w;
  const int64_t in_window = step % k;  // 0 … K−1
  w.accumulate = in_window != 0;
  w.sync = in_window == k - 1;
  w.grad_scale = 1.0f / static_cast<float>(k);
  return w;
}

// ---------------------------------------------------------------------------------------------
// DdpReplicas

namespace {

int64_t mb_to_bytes(double mb) {  // PyTorch's bucket_cap_mb counts MiB
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(mb * 1024.0 * 1024.0)));
}

}  // namespace

DdpReplicas::DdpReplicas(StrategyContext& ctx, const std::string& strategy, const PlaceLayers& place_layers)
    : ranks_(*ctx.ranks) {
  check_ddp_config(ctx, strategy);
  const TrainConfig& config = ctx.config;
  const int world = ranks_.world_size();
  replicas_.resize(static_cast<size_t>(world));
  ranks_.run([&](int rank) {
    auto r = std::make_unique<DdpReplica>();
    r->rank = rank;
    r->world_size = world;
    r->group = &ranks_.group(rank);
    r->devices = ranks_.devices(rank);
    // 1. Each rank builds its own replica. Separate processes that do not share a seed would start
    //    from different weights: we draw rank r's from seed + r to show it.
    //    (A dry run's initial weights are shapes only; so are every rank's.)
    const uint64_t seed = config.seed + static_cast<uint64_t>(rank);
    const HostWeights own = rank == 0 ? ctx.initial_weights
                                      : init_weights(ctx.initial_weights.spec, seed, ctx.initial_weights.has_values());
    // slide: ddp-replica-setup
    r->model = std::make_unique<Model>(place_layers(r->devices, own.spec.layer_count()), own);
    // 2. DDP's constructor broadcasts rank 0's parameters, so every replica starts equal. This is
    //    the only broadcast of weights: afterwards every rank applies the same averaged gradients
    //    with its own optimizer, and the replicas stay equal by construction.
    for (Parameter* p : r->model->parameters())
      r->group->broadcast(p->value, 0, {.name = "broadcast " + p->name});
    r->optimizer = std::make_unique<Optimizer>(config.optimizer, r->model->parameters());
    r->reducer = std::make_unique<GradientReducer>(r->model->parameters(), *r->group,
                                                   mb_to_bytes(config.bucket_mb),
                                                   mb_to_bytes(config.first_bucket_mb));
    // end slide
    // slide: ddp-amp-setup
    // 3. Mixed precision (--amp): the layers compute in half; with fp16 each rank has a loss
    //    scaler, and the ranks agree on every overflow through their group. (After the gradient
    //    all-reduce every rank holds the same gradients and would agree anyway: one tiny
    //    collective per step makes sure.)
    r->model->set_precision(config.amp_dtype());
    r->model->set_recompute(config.recompute);
    r->scaler = std::make_unique<LossScaler>(make_loss_scaler(config));
    r->scaler->agree_over(*r->group, *r->devices.front());
    // end slide
    if (ranks_.ranks_elsewhere())  // ranks in other processes: see run()
      r->loss_buffer = r->devices.front()->zeros({1}, DType::f32, MemoryCategory::comm_buffers, "loss");
    replicas_[static_cast<size_t>(rank)] = std::move(r);
  });
}

double DdpReplicas::run(const std::function<double(DdpReplica&)>& rank_step) {
  const int world = ranks_.world_size();
  const bool every_rank_here = !ranks_.ranks_elsewhere();
  std::vector<double> losses(static_cast<size_t>(world), 0.0);
  ranks_.run([&](int rank) {
    DdpReplica& r = *replicas_[static_cast<size_t>(rank)];
    double loss = rank_step(r);
    if (!every_rank_here) {
      // Ranks in other processes: average the loss with a one-float all-reduce.
      Device& device = *r.devices.front();
      // Read, like loss.item(), at the end of the step: the upload waits for the step's last op.
      float value = static_cast<float>(loss);
      r.loss_buffer.set_ready_ns(std::max(r.loss_buffer.ready_ns(), device.clock().now_ns()));
      device.upload({"loss", Phase::data}, r.loss_buffer, &value);
      r.group->all_reduce(r.loss_buffer, ReduceOp::avg, {.name = "loss"});
      device.download({"loss", Phase::data}, &value, r.loss_buffer);
      loss = value;
    }
    losses[static_cast<size_t>(rank)] = loss;
  });
  if (!every_rank_here) return losses[static_cast<size_t>(ranks_.local_ranks().front())];
  // Every rank in this process: average on the host, in rank order (a dry run of alike ranks: the
  // ranks that ran).
  double sum = 0;
  for (int rank : ranks_.local_ranks()) sum += losses[static_cast<size_t>(rank)];
  return sum / static_cast<double>(ranks_.local_ranks().size());
}

DdpReplica& DdpReplicas::first_local() { return *replicas_[static_cast<size_t>(ranks_.local_ranks().front())]; }

HostWeights DdpReplicas::weights() { return first_local().model->download(); }

TrainingState DdpReplicas::state() {
  DdpReplica& r = first_local();
  TrainingState s;
  s.weights = r.model->download();
  s.optimizer_steps = r.optimizer->steps_taken();
  s.optimizer = r.optimizer->download_state();
  s.loss_scale = r.scaler->state_scale();
  s.scaler_good_steps = r.scaler->good_steps();
  return s;
}

void DdpReplicas::load_state(const TrainingState& s) {
  for (int rank : ranks_.local_ranks()) {
    DdpReplica& r = *replicas_[static_cast<size_t>(rank)];
    r.model->upload(s.weights);
    r.optimizer->set_steps_taken(s.optimizer_steps);
    r.optimizer->upload_state(s.optimizer);
    r.scaler->load_state(s.loss_scale, s.scaler_good_steps);
  }
}

AmpReport DdpReplicas::amp_report() const {
  return replicas_[static_cast<size_t>(ranks_.local_ranks().front())]->scaler->report();
}

// ---------------------------------------------------------------------------------------------
// Checks

void check_ddp_config(const StrategyContext& ctx, const std::string& strategy) {
  const TrainConfig& c = ctx.config;
  if (!ctx.ranks)
    throw Error(strategy, "no ranks were set up — " + strategy + " must be registered with devices_per_rank ≥ 1");
  check_batch_shares(c.batch, ctx.ranks->world_size(), strategy);
  if (c.steps > 0 && c.steps < c.no_sync)
    throw UsageError(strategy, "--no-sync " + std::to_string(c.no_sync) + " steps the optimizer once every " +
                                   std::to_string(c.no_sync) + " batches, but --steps is " + std::to_string(c.steps) +
                                   ", so the weights would never change — use --steps ≥ " +
                                   std::to_string(c.no_sync) + " or a smaller --no-sync");
}

}  // namespace scalelab
