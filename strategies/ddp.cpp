// ddp: DistributedDataParallel. One rank per device, each a separate worker (a thread, a process,
// or an MPI rank on another machine) with its own replica of the model and its OWN optimizer.
//
// At the start, rank 0's weights are broadcast to every rank (DDP's constructor). Then each step:
// every rank trains on its shard of the global batch (DistributedSampler), and only gradients
// travel: they are averaged across ranks by all-reduce, in buckets, while backward is still
// running. Every rank then takes the same optimizer step from the same averaged gradients, so the
// replicas stay equal without ever broadcasting weights again.
//
// With --amp the replica computes in half (from half copies of its f32 weights) while the
// gradients DDP all-reduces stay the f32 master gradients; with fp16 the loss gradient is scaled,
// and after the all-reduce every rank unscales, checks for overflow and steps — or all skip.
//
// This file is the step of ONE rank; RankSet runs it on every rank at once. The bucketing and the
// asynchronous all-reduces are in ddp_common (shared with ddp-mp); the sampler is in
// distributed_sampler.h.
#include "core/error.h"
#include "strategies/ddp_common.h"
#include "strategies/distributed_sampler.h"
#include "strategies/registry.h"

namespace scalelab {
namespace {

class Ddp : public Strategy {
 public:
  explicit Ddp(StrategyContext& ctx)
      : config_(ctx.config),
        replicas_(ctx, "ddp", [](const std::vector<Device*>& rank_devices, int layers) {
          return std::vector<Device*>(static_cast<size_t>(layers), rank_devices.front());  // the whole model
        }) {}

  double train_step(const HostBatch& batch, int64_t step) override {
    const NoSyncWindow window = no_sync_window(config_.no_sync, step);
    return replicas_.run([&](DdpReplica& r) { return rank_step(r, batch, step, window); });
  }

  HostWeights weights() override { return replicas_.weights(); }
  TrainingState state() override { return replicas_.state(); }
  void load_state(const TrainingState& s) override { replicas_.load_state(s); }
  AmpReport amp_report() const override { return replicas_.amp_report(); }

 private:
  static double rank_step(DdpReplica& r, const HostBatch& batch, int64_t step, const NoSyncWindow& window) {
    Device& device = *r.devices.front();
    device.set_step(step);
    // 1. This rank's shard of the global batch, as DistributedSampler hands it out: rows r, r+N,
    //    r+2N, … The N shards are disjoint and together are the batch `single` trains on.
    take_shard(batch, r.rank, r.world_size, r.shard);
    // 2. The shard goes from host memory to this rank's device.
    Tensor x = device.empty({r.shard.size, r.shard.features}, DType::f32, MemoryCategory::activations, "batch.x");
    Tensor y = device.empty({r.shard.size * r.shard.labels_per_sample}, DType::i32, MemoryCategory::activations, "batch.y");
    device.upload({"batch.x", Phase::data}, x, r.shard.x.data());
    device.upload({"batch.y", Phase::data}, y, r.shard.y.data());
    // 3. Forward through every layer of the local replica (--amp: cast the weights to half first);
    //    no communication.
    r.model->refresh_half_weights();
    r.model->set_batch_position({step, r.rank, r.world_size});  // --dropout: samples r, r+N, …
    Tensor logits = r.model->forward(x);
    // 4. The loss: the mean over this rank's B/N rows. With --no-sync K its gradient is scaled by
    //    1/K, so K accumulated backwards add up to the mean over K batches; with fp16, also by the
    //    loss scale S.
    Tensor dlogits = device.empty(logits.shape(), logits.dtype(), MemoryCategory::activations, "dlogits");
    const double loss =
        device.softmax_xent({"loss", Phase::fwd}, logits, y, dlogits, window.grad_scale * r.scaler->scale());
    // slide: ddp-backward
    // 5. Backward, last layer first. Each layer writes its bias and weight gradients; when they
    //    complete a bucket, the reducer all-reduces that bucket in the background while the
    //    earlier layers' backward continues (PyTorch: autograd hooks firing the Reducer).
    //    Inside a no_sync window the gradients only accumulate locally: no communication at all.
    const LayerList& layers = r.model->layers();
    Tensor grad = dlogits;
    for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
      grad = layers[l].backward(grad, /*need_dx=*/l > 0, window.accumulate);
      if (window.sync) {
        // The layer's gradients are ready, last first (a Linear: bias, then weight).
        const std::vector<Parameter*> ready = layers[l].parameters();
        for (auto p = ready.rbegin(); p != ready.rend(); ++p) r.reducer->mark_ready(**p);
      }
    }
    // 6. On a synchronising step: wait for every bucket and copy the averaged gradients back. Then
    //    unscale, check for overflow, step or skip: this rank's own optimizer steps unless (fp16)
    //    a gradient overflowed on any rank. Every rank computes the same update, or skips it.
    if (window.sync) {
      r.reducer->finish();
      const bool overflow = r.scaler->unscale_and_check(r.model->parameters());
      if (!overflow) r.optimizer->step();
      r.scaler->update(overflow);
    // end slide
    }
    return loss;
  }

  const TrainConfig& config_;
  DdpReplicas replicas_;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp(StrategyContext& ctx) { return std::make_unique<Ddp>(ctx); }

}  // namespace scalelab
