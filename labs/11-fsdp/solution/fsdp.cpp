// Lab 11 — the reference solution.
#include "lab.h"

namespace lab11 {

using scalelab::DType;
using scalelab::MemoryCategory;
using scalelab::Phase;
using scalelab::ReduceOp;

std::vector<Piece> pieces_of(const std::vector<int64_t>& unit_params, int world, int rank) {
  std::vector<Piece> pieces;
  int64_t offset = 0;
  for (int64_t p : unit_params) {
    Piece s;
    s.params = p;
    s.size = (p + world - 1) / world;  // ⌈P_u/N⌉
    s.padded = s.size * world;
    s.begin = rank * s.size;
    s.end = s.begin + s.size;
    s.shard_offset = offset;
    offset += s.size;
    pieces.push_back(s);
  }
  return pieces;
}

Fsdp::Fsdp(Model& model, ProcessGroup& group, const AdamOptions& adam) : model_(model), group_(group), adam_(adam) {
  units_ = units_of(model_);
  shapes_ = unit_shapes(model_);
  std::vector<int64_t> sizes;
  for (Layer* unit : units_) sizes.push_back(unit_params(*unit));
  pieces_ = pieces_of(sizes, group_.size(), group_.rank());
  shard_ = make_shard(model_, pieces_);
  Device& d = *shard_.device();
  const int64_t floats = shard_.numel();
  shard_grad_ = d.zeros({floats}, DType::f32, MemoryCategory::grads, "fsdp.shard_grad");
  m_ = d.zeros({floats}, DType::f32, MemoryCategory::optimizer, "fsdp.exp_avg");
  v_ = d.zeros({floats}, DType::f32, MemoryCategory::optimizer, "fsdp.exp_avg_sq");
}

Tensor Fsdp::forward(const Tensor& x) {
  Device& d = *shard_.device();
  Tensor h = x;
  size_t u = 0;
  for (Layer& layer : model_.layers()) {
    if (u >= units_.size() || units_[u] != &layer) {  // no parameters: nothing to gather
      h = layer.forward(h);
      continue;
    }
    const Piece& p = pieces_[u];
    Tensor whole = d.empty({p.padded}, DType::f32, MemoryCategory::params, "fsdp.gather");
    group_.all_gather(shard_.view(p.shard_offset, {p.size}), whole, {.name = "fsdp.fwd_gather"});
    seat_weights(layer, whole, shapes_[u]);
    h = layer.forward(h);
    drop_views(layer);
    whole = Tensor();  // freed: the next unit's weights take its place
    ++u;
  }
  return h;
}

void Fsdp::backward(const Tensor& dlogits) {
  Device& d = *shard_.device();
  Tensor g = dlogits;
  const scalelab::LayerList& layers = model_.layers();
  int u = static_cast<int>(units_.size()) - 1;
  for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
    Layer& layer = layers[static_cast<size_t>(l)];
    if (u < 0 || units_[static_cast<size_t>(u)] != &layer) {
      g = layer.backward(g, /*need_dx=*/l > 0);
      continue;
    }
    const Piece& p = pieces_[static_cast<size_t>(u)];
    Tensor whole = d.empty({p.padded}, DType::f32, MemoryCategory::params, "fsdp.gather");
    group_.all_gather(shard_.view(p.shard_offset, {p.size}), whole, {.name = "fsdp.bwd_gather"});
    Tensor grads = d.zeros({p.padded}, DType::f32, MemoryCategory::comm_buffers, "fsdp.grads");
    seat_weights(layer, whole, shapes_[static_cast<size_t>(u)]);
    seat_grads(layer, grads, shapes_[static_cast<size_t>(u)]);
    g = layer.backward(g, /*need_dx=*/l > 0);
    group_.reduce_scatter(grads, shard_grad_.view(p.shard_offset, {p.size}), ReduceOp::avg, {.name = "fsdp.grads"});
    drop_views(layer);
    whole = grads = Tensor();  // both freed before the layer below
    --u;
  }
}

void Fsdp::step() {
  ++t_;
  shard_.device()->adam({"fsdp.adam", Phase::optim}, shard_, shard_grad_, m_, v_, adam_, t_);
}

}  // namespace lab11
