#pragma once
// What ddp and ddp-mp share: the gradient reducer (buckets all-reduced while backward goes on),
// the replicas (one per rank: model, its own optimizer, its reducer), the no_sync schedule, and
// the checks of a DDP configuration. Each strategy's file keeps the step of one rank, which is
// where the two differ (one device per replica, or two).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/comm/process_group.h"
#include "core/comm/ranks.h"
#include "core/nn/optimizer.h"
#include "strategies/strategy.h"

namespace scalelab {

// PyTorch's Reducer, written out. Parameters are grouped into buckets (compute_bucket_assignment_
// by_size, in reverse order); each bucket has a flat buffer on its parameters' device. Backward
// tells the reducer when a gradient is written (PyTorch: an autograd hook per parameter); when the
// last gradient of a bucket is in, the bucket is copied into its buffer and all-reduced (average)
// asynchronously, so communication overlaps the rest of backward. Buckets are launched in order, so
// every rank issues the same all-reduces in the same order.
class GradientReducer {
 public:
  // A bucket never mixes devices (ddp-mp's replica spans two): the parameters are cut into runs on
  // one device, and each run is bucketed on its own, starting with the small first bucket, as
  // PyTorch does per device.
  GradientReducer(std::vector<Parameter*> params, ProcessGroup& group, int64_t bucket_cap_bytes,
                  int64_t first_bucket_cap_bytes);

  // The parameter indices (model order) of each bucket, in launch order.
  const std::vector<std::vector<int>>& buckets() const { return bucket_params_; }

  // Where a parameter's gradient goes (c10d: VariableLocator): its bucket, and its place in that
  // bucket's list (buckets()[bucket][position] is the parameter's index).
  struct Locator {
    int param = -1;     // index in model order
    int bucket = -1;
    int position = -1;
  };
  // Throws Error("ddp", …) for a parameter the reducer was not given.
  const Locator& locate(const Parameter& p) const;

  // Backward has written p's gradient. Launches every bucket that is now complete (in order).
  // O(1): the locator is looked up, not searched for, as c10d's autograd hook finds its variable.
  void mark_ready(const Parameter& p);
  // Before the optimizer step: waits for every bucket's all-reduce and copies the averaged
  // gradients back into the parameters' .grad. Ready for the next backward afterwards.
  void finish();

 private:
  struct Bucket {
    std::vector<int> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in the flat buffer
    Tensor flat;                   // comm_buffers on the parameters' device
    int pending = 0;               // gradients not yet written in this backward
    std::shared_ptr<Work> work;
  };
  void launch(int k);

  std::vector<Parameter*> params_;
  ProcessGroup& group_;
  std::vector<std::vector<int>> bucket_params_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const Parameter*, Locator> locators_;  // computed once, with the buckets
  std::vector<bool> ready_;  // per parameter, in this backward
  int next_launch_ = 0;
};

// --no-sync K: gradient accumulation (PyTorch: K−1 backwards inside `with model.no_sync():`, then
// one outside). Each batch's loss gradient is scaled by 1/K, so the step uses the mean gradient
// over the K batches: the same as `single` with --no-sync K.
struct NoSyncWindow {
  bool accumulate = false;  // add to the gradients already there (all but the window's first step)
  bool sync = true;         // the window's last step: all-reduce, then step the optimizer
  float grad_scale = 1.0f;  // 1/K
};
NoSyncWindow no_sync_window(int k, int64_t step);

// One DDP replica: a rank's model (on its one or two devices), its own optimizer, its reducer,
// its loss scaler (--amp fp16; it does nothing otherwise).
struct DdpReplica {
  int rank = 0;
  int world_size = 1;
  ProcessGroup* group = nullptr;
  std::vector<Device*> devices;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<GradientReducer> reducer;
  std::unique_ptr<LossScaler> scaler;
  HostBatch shard;  // this rank's rows of the global batch (reused every step)
  Tensor loss_buffer;  // one float, for the all-reduce of the loss (procs and mpi launches only)
};

// The replicas of the ranks that run in this process (all of them with --launch threads, one with
// procs or mpi), and what is the same for ddp and ddp-mp around the step of one rank.
class DdpReplicas {
 public:
  // Where each layer of a rank's replica lives, given that rank's devices.
  using PlaceLayers = std::function<std::vector<Device*>(const std::vector<Device*>& rank_devices, int layers)>;

  // Builds every local replica and broadcasts rank 0's weights to all (DDP's constructor).
  DdpReplicas(StrategyContext& ctx, const std::string& strategy, const PlaceLayers& place_layers);

  // Runs `rank_step` on every local rank at once and returns the global mean loss (each
  // rank's loss is the mean over its equal share of the batch: the mean of those is the batch's).
  // With every rank in this process (--launch threads) the losses are averaged on the host; with
  // procs or mpi, by a one-float all-reduce tagged "loss" at the end of the step.
  double run(const std::function<double(DdpReplica&)>& rank_step);

  // The replicas are equal after every step: any local one tells the weights.
  HostWeights weights();
  TrainingState state();
  void load_state(const TrainingState& s);
  // Every rank's scaler takes the same decisions: any local one tells.
  AmpReport amp_report() const;

 private:
  RankSet& ranks_;
  std::vector<std::unique_ptr<DdpReplica>> replicas_;  // by rank; null for ranks in other processes
  DdpReplica& first_local();
};

// Throws UsageError(strategy, …) for a configuration DDP cannot run: no ranks, a batch that the
// ranks cannot share evenly, a --no-sync window longer than the run.
void check_ddp_config(const StrategyContext& ctx, const std::string& strategy);

}  // namespace scalelab
