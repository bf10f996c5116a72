#pragma once
// Who holds which part of a model's training state, and the checkpoint's whole state made from
// those parts and cut back into them. A checkpoint keeps the state whole, in the model's order
// (core/checkpoint/training_state.h), so a run resumes under any strategy and number of ranks; a strategy
// that splits the state over its ranks describes the split here, in a line, and ShardedState
// gathers the parts for a save and hands each rank its part on resume — what llm.c's shard
// offsets and PyTorch's distributed-checkpoint planners do.
//
// The model's parameters laid end to end (fc1.weight, fc1.bias, fc2.weight, …) are one flat
// vector of P floats; each rank holds one contiguous range of it. For 3 layers on 3 ranks:
//
//     [ fc1.weight | fc1.bias | fc2.weight | fc2.bias | fc3.weight | fc3.bias | pad ]
//     equal_shards (zero):      [  rank 0    |   rank 1    |   rank 2    ]  S = ⌈P/N⌉ each
//     by_layers (pipeline):     [ stage 0 (fc1)  | stage 1 (fc2)  | stage 2 (fc3)  ]
//
// equal_shards_per_layer (zero stage 3, FSDP's units) cuts each layer with parameters on its own,
// padded to a multiple of N, so that one layer's weights can be all-gathered alone; rank r's shard
// is its piece of every layer, end to end:
//
//     [ fc1.weight | fc1.bias | pad ][ fc2.weight | fc2.bias | pad ][ fc3 … ]
//     [  r0  |  r1  |  r2  ][ r0 | r1 | r2 ][ … ]       rank 1's shard: [ fc1 r1 | fc2 r1 | fc3 r1 ]
//
// How a rank keeps its range decides how a save moves it: equal_shards keep it as one flat tensor
// of S floats (ZeRO's shard), so one all-gather of equal blocks brings every rank the whole;
// by_layers keep each parameter in a tensor of its own, each broadcast from the stage that owns it.
#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"

namespace scalelab {

// An optimizer's state on the host: per parameter, its state tensors (none, momentum, or m and v).
using OptimizerState = std::vector<std::vector<std::vector<float>>>;

class ShardedState {
 public:
  // Rank r of `ranks` holds elements [r·S, (r+1)·S) of the parameters, padded with zeros to N·S,
  // S = ⌈P / N⌉ (collectives need equal blocks), as one flat tensor of S floats.
  static ShardedState equal_shards(const ModelSpec& spec, int ranks);
  // Rank r holds, of each layer with parameters (a unit) laid flat and padded to a multiple of N
  // on its own, elements [r·S_u, (r+1)·S_u), S_u = ⌈P_u / N⌉; its shard is those pieces in layer
  // order, one flat tensor of Σ S_u floats.
  static ShardedState equal_shards_per_layer(const ModelSpec& spec, int ranks);
  // Rank r holds the parameters of layers [first_layer[r], first_layer[r + 1]), each in a tensor of
  // its own; `first_layer` has one entry per rank and the layer count last. With `owner` (one entry
  // per range), range k belongs to rank owner[k] instead: an interleaved pipeline's device holds
  // several ranges, its parameters being theirs in the model's order.
  static ShardedState by_layers(const ModelSpec& spec, const std::vector<int>& first_layer,
                                const std::vector<int>& owner = {});

  int64_t parameter_count() const { return parameter_offset_.back(); }  // P
  int64_t padded_size() const { return rank_offset_.back(); }           // P rounded up to the ranks' blocks
  // Where rank r's part starts (per layer: as if the ranks' shards lay end to end), and its size.
  int64_t begin(int rank) const { return rank_offset_.at(static_cast<size_t>(rank)); }
  int64_t size(int rank) const { return begin(rank + 1) - begin(rank); }

  // Equal shards are cut unit by unit: the whole model is one unit, or each layer with parameters
  // one (equal_shards_per_layer). A unit's parameters are [first, last) of the spec's tensors, its
  // N pieces of `shard` floats each; it starts at `shard_begin` of every rank's shard.
  struct Unit {
    int layer = -1;  // -1: the whole model
    int first = 0, last = 0;
    int64_t shard = 0, shard_begin = 0;
  };
  const std::vector<Unit>& units() const { return units_; }
  // A unit's parameters in its padded flat buffer: parameter p starts at offset_in_unit(u, p).
  int64_t offset_in_unit(const Unit& u, int p) const;

  // For a save, called by every rank (the same collectives on each): the whole of one tensor of
  // the state (the weights, or one optimizer state tensor) from every rank's part of it, `mine`:
  // equal_shards its flat shard, by_layers one tensor per parameter it holds, in order. Returns the
  // whole per parameter of the model where `keep` (one rank per process is enough), else nothing.
  // `what` names the transfers in the trace ("state", "weights").
  std::vector<std::vector<float>> gather(ProcessGroup& group, Device& device, const std::vector<Tensor>& mine,
                                         bool keep, const std::string& what) const;
  // The whole weights, and the whole optimizer state, gathered so from every rank's parameters
  // (`mine`: by_layers only) and `optimizer`.
  HostWeights gather_weights(ProcessGroup& group, Device& device, const std::vector<Parameter*>& mine, bool keep) const;
  OptimizerState gather_optimizer_state(ProcessGroup& group, Device& device, Optimizer& optimizer, bool keep) const;

  // On resume: `rank`'s part of a whole optimizer state (one that fits the model: validate_resume),
  // as that rank's optimizer keeps it — equal_shards one parameter, the shard (its padding zero);
  // by_layers its parameters.
  OptimizerState part_of(const OptimizerState& whole, int rank) const;
  // Equal shards: `rank`'s shard of one tensor of the state given whole, per parameter (the
  // weights, or one optimizer state tensor); zeros where it is shapes only (a dry run).
  std::vector<float> shard_of(const std::vector<std::vector<float>>& whole, int rank) const;

 private:
  ShardedState(const ModelSpec& spec, std::vector<int64_t> rank_offset, bool flat);
  int parameter_at(int64_t offset) const;  // the parameter whose elements include flat `offset`
  std::vector<int> parameters_of(int rank) const;  // by_layers: the rank's parameters, in order
  int owner_of(int parameter) const;               // by_layers: the rank holding it

  ModelSpec spec_;
  std::vector<int64_t> parameter_offset_;  // per parameter its first element in the flat vector; P last
  std::vector<int64_t> rank_offset_;       // per rank (by_layers: per range) its first element; the padded size last
  std::vector<int> owner_;                 // by_layers: the rank of each range
  std::vector<Unit> units_;                // equal shards: the units, in model order
  bool flat_;                              // equal_shards: each rank's range is one flat tensor
};

}  // namespace scalelab
