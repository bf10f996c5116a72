#include "strategies/sharded_state.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace scalelab {
ShardedState::ShardedState(const ModelSpec& spec, std::vector<int64_t> rank_offset, bool flat)
    : spec_(spec), rank_offset_(std::move(rank_offset)), flat_(flat) {
  parameter_offset_.push_back(0);
  for (const TensorSpec& t : spec.tensors()) parameter_offset_.push_back(parameter_offset_.back() + t.numel());
}

ShardedState ShardedState::equal_shards(const ModelSpec& spec, int ranks) {
  if (ranks < 1) throw Error("sharded state", "equal_shards over " + std::to_string(ranks) + " ranks — give at least 1");
  ShardedState s(spec, {}, true);
  const int parameters = static_cast<int>(spec.tensors().size());
  s.units_.push_back({-1, 0, parameters, (spec.parameter_count() + ranks - 1) / ranks, 0});
  for (int r = 0; r <= ranks; ++r) s.rank_offset_.push_back(r * s.units_[0].shard);
  return s;
}

ShardedState ShardedState::equal_shards_per_layer(const ModelSpec& spec, int ranks) {
  if (ranks < 1)
    throw Error("sharded state", "equal_shards_per_layer over " + std::to_string(ranks) + " ranks — give at least 1");
  ShardedState s(spec, {}, true);
  const std::vector<TensorSpec>& tensors = spec.tensors();
  int64_t shard = 0;  // Σ S_u so far
  for (int p = 0; p < static_cast<int>(tensors.size());) {
    Unit u;
    u.layer = tensors[static_cast<size_t>(p)].layer;
    u.first = p;
    while (p < static_cast<int>(tensors.size()) && tensors[static_cast<size_t>(p)].layer == u.layer) ++p;
    u.last = p;
    const int64_t numel = s.parameter_offset_[static_cast<size_t>(u.last)] - s.parameter_offset_[static_cast<size_t>(u.first)];
    u.shard = (numel + ranks - 1) / ranks;
    u.shard_begin = shard;
    shard += u.shard;
    s.units_.push_back(u);
  }
  // As if the shards lay end to end: rank r's at r·Σ S_u.
  for (int r = 0; r <= ranks; ++r) s.rank_offset_.push_back(r * shard);
  return s;
}

int64_t ShardedState::offset_in_unit(const Unit& u, int p) const {
  return parameter_offset_[static_cast<size_t>(p)] - parameter_offset_[static_cast<size_t>(u.first)];
}

ShardedState ShardedState::by_layers(const ModelSpec& spec, const std::vector<int>& first_layer,
                                     const std::vector<int>& owner) {
  const int L = spec.layer_count();
  if (first_layer.size() < 2 || first_layer.front() != 0 || first_layer.back() != L ||
      !std::is_sorted(first_layer.begin(), first_layer.end()))
    throw Error("sharded state", "by_layers needs each rank's first layer, from 0 up, then the layer count " +
                                     std::to_string(L) + "; got " + std::to_string(first_layer.size()) + " entries");
  if (!owner.empty() && owner.size() + 1 != first_layer.size())
    throw Error("sharded state", "by_layers got " + std::to_string(owner.size()) + " owners for " +
                                     std::to_string(first_layer.size() - 1) + " ranges — give one per range");
  ShardedState s(spec, {}, false);
  s.owner_ = owner;
  for (size_t k = owner.size(); k + 1 < first_layer.size(); ++k) s.owner_.push_back(static_cast<int>(k));
  // A rank's part starts at the first parameter of its first layer (or of a later one: a pooling
  // layer holds none).
  const std::vector<TensorSpec>& tensors = spec.tensors();
  for (int l : first_layer) {
    size_t p = 0;
    while (p < tensors.size() && tensors[p].layer < l) ++p;
    s.rank_offset_.push_back(s.parameter_offset_[p]);
  }
  return s;
}

int ShardedState::parameter_at(int64_t offset) const {
  const auto after = std::upper_bound(parameter_offset_.begin(), parameter_offset_.end(), offset);
  return static_cast<int>(after - parameter_offset_.begin()) - 1;
}

std::vector<int> ShardedState::parameters_of(int rank) const {
  std::vector<int> mine;
  for (size_t k = 0; k < owner_.size(); ++k)
    if (owner_[k] == rank)
      for (int p = parameter_at(rank_offset_[k]); p < parameter_at(rank_offset_[k + 1]); ++p) mine.push_back(p);
  return mine;
}

int ShardedState::owner_of(int parameter) const {
  size_t k = 0;
  while (rank_offset_[k + 1] <= parameter_offset_[static_cast<size_t>(parameter)]) ++k;
  return owner_[k];
}

std::vector<std::vector<float>> ShardedState::gather(ProcessGroup& group, Device& device, const std::vector<Tensor>& mine,
                                                     bool keep, const std::string& what) const {
  const int rank = group.rank();
  const int parameters = static_cast<int>(parameter_offset_.size()) - 1;
  std::vector<std::vector<float>> whole;
  if (flat_) {
    // Per unit one all-gather: rank r's piece lands at r·S_u of the unit's padded flat buffer on
    // every rank (one unit, the whole model, for equal_shards).
    if (mine.size() != 1 || mine[0].numel() != size(rank))
      throw Error("sharded state", "rank " + std::to_string(rank) + " gives " + std::to_string(mine.size()) +
                                       " tensors to gather; equal shards take one of " + std::to_string(size(rank)) +
                                       " floats, its flat shard");
    if (keep) whole.resize(static_cast<size_t>(parameters));
    for (const Unit& u : units_) {
      const std::string name = "gather " + what + (u.layer < 0 ? "" : " " + spec_.layer_name(u.layer));
      Tensor all = device.empty({u.shard * group.size()}, DType::f32, MemoryCategory::comm_buffers, name);
      group.all_gather(mine[0].view(u.shard_begin, {u.shard}), all, {.name = name});
      if (!keep) continue;
      const std::vector<float> flat = device.download_f32({name, Phase::data}, all);
      if (flat.empty()) continue;  // a dry run: shapes only
      for (int p = u.first; p < u.last; ++p)
        whole[static_cast<size_t>(p)].assign(flat.begin() + offset_in_unit(u, p), flat.begin() + offset_in_unit(u, p + 1));
    }
    return whole;
  }
  // Parameter by parameter, each broadcast from the rank that holds it.
  const size_t count = parameters_of(rank).size();
  if (mine.size() != count)
    throw Error("sharded state", "rank " + std::to_string(rank) + " gives " + std::to_string(mine.size()) +
                                     " tensors to gather but holds " + std::to_string(count) + " parameters");
  if (keep) whole.resize(static_cast<size_t>(parameters));
  size_t next_mine = 0;
  for (int p = 0; p < parameters; ++p) {
    const int64_t numel = parameter_offset_[static_cast<size_t>(p) + 1] - parameter_offset_[static_cast<size_t>(p)];
    const int owner = owner_of(p);
    const std::string& parameter = spec_.tensors()[static_cast<size_t>(p)].name;
    const std::string name = what + " " + parameter;
    Tensor t = owner == rank ? mine[next_mine++]
                             : device.empty({numel}, DType::f32, MemoryCategory::comm_buffers, name);
    if (t.numel() != numel)
      throw Error("sharded state", "rank " + std::to_string(rank) + "'s " + parameter + " has " +
                                       std::to_string(t.numel()) + " floats, the model's " + std::to_string(numel));
    group.broadcast(t, owner, {.name = name});
    if (keep) whole[static_cast<size_t>(p)] = device.download_f32({name, Phase::data, spec_.tensors()[static_cast<size_t>(p)].layer}, t);
  }
  return whole;
}

HostWeights ShardedState::gather_weights(ProcessGroup& group, Device& device, const std::vector<Parameter*>& mine,
                                         bool keep) const {
  std::vector<Tensor> values;
  for (const Parameter* p : mine) values.push_back(p->value);
  std::vector<std::vector<float>> whole = gather(group, device, values, keep, "weights");
  HostWeights w;
  w.spec = spec_;
  if (!keep) return w;
  w.values = std::move(whole);
  if (!w.values.empty() && w.values.front().empty()) w.values.clear();  // a dry run's: shapes only
  return w;
}

OptimizerState ShardedState::gather_optimizer_state(ProcessGroup& group, Device& device, Optimizer& optimizer,
                                                    bool keep) const {
  const int k = optimizer.state_tensors_per_parameter();
  const std::vector<Tensor> local = optimizer.state();  // per local parameter, its k tensors
  OptimizerState whole(parameter_offset_.size() - 1);
  for (int t = 0; t < k; ++t) {
    std::vector<Tensor> mine;  // state tensor t of each local parameter
    for (size_t i = static_cast<size_t>(t); i < local.size(); i += static_cast<size_t>(k)) mine.push_back(local[i]);
    std::vector<std::vector<float>> one = gather(group, device, mine, keep, "state");
    for (size_t p = 0; p < one.size(); ++p) whole[p].push_back(std::move(one[p]));
  }
  return keep ? whole : OptimizerState{};
}

OptimizerState ShardedState::part_of(const OptimizerState& whole, int rank) const {
  if (!flat_) {
    OptimizerState part;
    for (int p : parameters_of(rank)) part.push_back(whole[static_cast<size_t>(p)]);
    return part;
  }
  // The shard of each state tensor (as the optimizer keeps it: one parameter).
  const size_t k = whole.empty() ? 0 : whole.front().size();
  OptimizerState shard(1);
  for (size_t j = 0; j < k; ++j) {
    std::vector<std::vector<float>> one;
    for (const std::vector<std::vector<float>>& p : whole) one.push_back(p[j]);
    shard[0].push_back(shard_of(one, rank));
  }
  return shard;
}

std::vector<float> ShardedState::shard_of(const std::vector<std::vector<float>>& whole, int rank) const {
  if (!flat_) throw Error("sharded state", "shard_of cuts equal shards; by_layers parts are whole parameters — use part_of");
  std::vector<float> shard(static_cast<size_t>(size(rank)), 0.0f);  // the padding stays zero
  if (whole.empty()) return shard;                                    // a dry run's weights: shapes only
  // Per unit, elements [r·S_u, (r+1)·S_u) of its parameters laid flat, at S_u's place in the shard.
  for (const Unit& u : units_) {
    const int64_t begin = rank * u.shard, end = begin + u.shard;
    for (int p = u.first; p < u.last; ++p) {
      const int64_t from = std::max(offset_in_unit(u, p), begin), to = std::min(offset_in_unit(u, p + 1), end);
      const std::vector<float>& v = whole[static_cast<size_t>(p)];
      if (from >= to || v.empty()) continue;  // nothing of p here, or a dry run's state: shapes only
      std::copy(v.begin() + (from - offset_in_unit(u, p)), v.begin() + (to - offset_in_unit(u, p)),
                shard.begin() + (u.shard_begin + from - begin));
    }
  }
  return shard;
}

}  // namespace scalelab
