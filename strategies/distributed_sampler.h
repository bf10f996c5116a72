#pragma once
// Which rows of the global batch a DDP rank trains on — what PyTorch's DistributedSampler gives it.
//
// DistributedSampler(shuffle=True) draws one permutation of the dataset per epoch (from seed +
// epoch: call set_epoch, or every epoch repeats the first one's order), and rank r of N keeps the
// positions r, r+N, r+2N, … of it. With a per-rank batch of b = B/N, rank r's batch at step s is
// its positions [s·b, (s+1)·b), i.e. permutation positions sB + jN + r for j = 0 … b−1.
//
// Our Loader draws the same kind of per-epoch permutation and hands out the global batch of step s
// as positions [sB, (s+1)B). So rank r's rows of that global batch are simply j·N + r: the ranks'
// shards are disjoint, together they are exactly the global batch, and they reshuffle every epoch
// with the Loader's permutation. That is why every DDP rank can take the global batch and keep its
// own rows: the N ranks together train on the same samples as `single` does in that step.
#include <cstdint>
#include <cstring>
#include <string>

#include "core/data/dataset.h"
#include "core/error.h"

namespace scalelab {

// Throws UsageError(strategy, …) when `ranks` cannot share a batch of `batch` rows evenly (each
// takes batch / ranks rows). The strategies check it before training.
inline void check_batch_shares(int64_t batch, int ranks, const std::string& strategy) {
  if (ranks >= 1 && batch % ranks == 0) return;
  const int64_t up = ranks >= 1 ? (batch / ranks + 1) * ranks : batch;
  throw UsageError(strategy, "--batch " + std::to_string(batch) + " cannot be shared evenly by " +
                                 std::to_string(ranks) + " ranks (each takes batch / ranks rows, as DistributedSampler "
                                 "does) — use a multiple of the number of ranks (" + std::to_string(ranks) +
                                 "), e.g. --batch " + std::to_string(up));
}

// slide: distributed-sampler
// Row j of rank `rank`'s shard is row j·world + rank of the global batch.
inline int64_t shard_row(int64_t j, int rank, int world) { return j * world + rank; }
// end slide

// Copies rank `rank`'s shard of `global` (batch.size / world rows) into `shard`. The strategies
// refuse a --batch the ranks cannot share before training (check_batch_shares, a UsageError), so
// one that reaches here is a bug, not a bad option: an internal Error.
inline void take_shard(const HostBatch& global, int rank, int world, HostBatch& shard) {
  if (world < 1 || rank < 0 || rank >= world || global.size % world != 0)
    throw Error("sampler", "internal: a batch of " + std::to_string(global.size) + " rows cannot be shared evenly by " +
                               std::to_string(world) + " ranks (rank " + std::to_string(rank) +
                               ") — the strategy should have refused this --batch before training; please report it");
  const int64_t rows = global.size / world, f = global.features, per = global.labels_per_sample;
  shard.size = rows;
  shard.features = f;
  shard.labels_per_sample = per;
  shard.x.resize(static_cast<size_t>(rows * f));
  shard.y.resize(static_cast<size_t>(rows * per));
  for (int64_t j = 0; j < rows; ++j) {
    const int64_t src = shard_row(j, rank, world);
    std::memcpy(shard.x.data() + j * f, global.x.data() + src * f, static_cast<size_t>(f) * sizeof(float));
    std::memcpy(shard.y.data() + j * per, global.y.data() + src * per, static_cast<size_t>(per) * sizeof(int32_t));
  }
}

}  // namespace scalelab
