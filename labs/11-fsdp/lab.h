#pragma once
// Lab 11 — ZeRO-3 / FSDP: the weights sharded too, each layer gathered, used and freed. You write
// the functions declared under "Task" below, in fsdp.cpp; the rest is given. The grader builds
// your fsdp.cpp into harness.cpp and runs the checks of checks.json (`scalelab grade 11-fsdp`).
//
// The harness runs N ranks (threads of one process, one cpu device each), each on its
// DistributedSampler rows of the global batch, as strategies/zero.cpp's stage 3 does, with YOUR
// Fsdp in place of the library's:
//
//     Fsdp fsdp(model, group, adam);                    // once: the model keeps no weights of its own
//     every step: logits = fsdp.forward(x);  loss;  fsdp.backward(dlogits);  fsdp.step();
#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/tensor.h"
#include "labs/common/harness.h"

namespace lab11 {

using scalelab::AdamOptions;
using scalelab::Device;
using scalelab::Layer;
using scalelab::Model;
using scalelab::Parameter;
using scalelab::ProcessGroup;
using scalelab::Tensor;

// ---- Task 1: the shard arithmetic, per layer ------------------------------------------------------

// FSDP gathers one layer at a time (a layer with parameters: FSDP's "unit"), so each unit is cut on
// its own: its P_u parameters laid flat (weight then bias, the layer's parameters() order), padded
// with zeros to the smallest multiple of the world size N, cut into N equal pieces of
// size = ⌈P_u/N⌉. Rank r owns [r · size, (r + 1) · size) of each unit, and keeps its pieces of all
// the units end to end in ONE buffer, its shard: unit u's piece starts at shard_offset, the sum of
// the sizes of the units before it.
//
// Example: units of P_u = 10 and 4, N = 4 → unit 0 padded 12, size 3; unit 1 padded 4, size 1;
// rank 3 owns [9, 12) of unit 0 (shard_offset 0) and [3, 4) of unit 1 (shard_offset 3): 4 floats.
struct Piece {
  int64_t params = 0;        // P_u
  int64_t padded = 0;        // size · N ≥ P_u
  int64_t size = 0;          // ⌈P_u/N⌉
  int64_t begin = 0;         // rank · size, in the unit's padded flat layout
  int64_t end = 0;           // begin + size
  int64_t shard_offset = 0;  // where the piece lies in the rank's shard
};
// One Piece per unit, in order, for `rank` of `world`.
std::vector<Piece> pieces_of(const std::vector<int64_t>& unit_params, int world, int rank);

// ---- Given: the units, the shard, the views -------------------------------------------------------

// The layers with parameters (the units), in model order. A ReLU has none: it is no unit.
inline std::vector<Layer*> units_of(Model& model) {
  std::vector<Layer*> units;
  for (Layer& layer : model.layers())
    if (!layer.parameters().empty()) units.push_back(&layer);
  return units;
}

// A unit's P_u: the floats of all its parameters.
inline int64_t unit_params(Layer& unit) {
  int64_t n = 0;
  for (Parameter* p : unit.parameters()) n += p->value.numel();
  return n;
}

// Builds this rank's shard (MemoryCategory::params, "fsdp.shard") from the model's weights: for
// every unit, its piece [begin, end) of the unit's padded flat layout, at shard_offset (padding 0).
// Then drops the model's own tensors: from here on a layer has weights only while you seat them.
inline Tensor make_shard(Model& model, const std::vector<Piece>& pieces) {
  const std::vector<Layer*> units = units_of(model);
  Device& device = *units.at(0)->parameters().at(0)->value.device();
  const int64_t floats = pieces.empty() ? 0 : pieces.back().shard_offset + pieces.back().size;
  std::vector<float> host(static_cast<size_t>(floats), 0.0f);
  for (size_t u = 0; u < units.size() && u < pieces.size(); ++u) {
    std::vector<float> flat(static_cast<size_t>(pieces[u].padded), 0.0f);  // the unit, padded
    size_t at = 0;
    for (Parameter* p : units[u]->parameters()) {
      std::vector<float> values(static_cast<size_t>(p->value.numel()));
      device.download({"fsdp.init", scalelab::Phase::data}, values.data(), p->value);
      for (float v : values)
        if (at < flat.size()) flat[at++] = v;
    }
    for (int64_t i = 0; i < pieces[u].size; ++i)
      if (pieces[u].begin + i < pieces[u].padded && pieces[u].shard_offset + i < floats)
        host[static_cast<size_t>(pieces[u].shard_offset + i)] = flat[static_cast<size_t>(pieces[u].begin + i)];
  }
  for (Parameter* p : model.parameters()) p->value = p->grad = Tensor();  // the model's own, freed
  Tensor shard = device.empty({floats}, scalelab::DType::f32, scalelab::MemoryCategory::params, "fsdp.shard");
  device.upload({"fsdp.shard", scalelab::Phase::data}, shard, host.data());
  return shard;
}

// The unit's parameters become views of `whole` (its padded flat weights, gathered): forward and
// backward then read them. Its shapes are the model's (`shapes`, in the unit's parameters() order).
inline void seat_weights(Layer& unit, const Tensor& whole, const std::vector<std::vector<int64_t>>& shapes) {
  int64_t offset = 0;
  std::vector<Parameter*> params = unit.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    params[i]->value = whole.view(offset, shapes.at(i));
    offset += params[i]->value.numel();
  }
}

// The unit's gradients become views of `whole` (P'_u floats, same layout): backward writes into it.
inline void seat_grads(Layer& unit, const Tensor& whole, const std::vector<std::vector<int64_t>>& shapes) {
  int64_t offset = 0;
  std::vector<Parameter*> params = unit.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    params[i]->grad = whole.view(offset, shapes.at(i));
    offset += params[i]->grad.numel();
  }
}

// The unit forgets its views: once you also drop your own handle, the buffer is freed (the ledger
// counts a buffer until its last view is gone).
inline void drop_views(Layer& unit) {
  for (Parameter* p : unit.parameters()) p->value = p->grad = Tensor();
}

// The shapes of each unit's parameters (read them before make_shard drops the tensors).
inline std::vector<std::vector<std::vector<int64_t>>> unit_shapes(Model& model) {
  std::vector<std::vector<std::vector<int64_t>>> shapes;
  for (Layer* unit : units_of(model)) {
    shapes.emplace_back();
    for (Parameter* p : unit->parameters()) shapes.back().push_back(p->value.shape());
  }
  return shapes;
}

// What you call (see core/device/device.h, core/comm/process_group.h, core/nn/layer.h):
//   device.empty({n}, DType::f32, MemoryCategory::params, "name")  — a gathered unit's weights
//   device.zeros({n}, DType::f32, MemoryCategory::comm_buffers | grads | optimizer, "name")
//   t.view(offset, {n})                             group.rank(), group.size()
//   group.all_gather(piece_S, whole_P')             group.reduce_scatter(whole_P', piece_S, ReduceOp::avg)
//   h = layer.forward(h)                            g = layer.backward(g, /*need_dx=*/not the first layer)
//   device.adam({"fsdp.adam", Phase::optim}, w, g, m, v, adam_options, t)   — t = 1, 2, 3, …
// A Tensor is a handle: assigning Tensor() to the last handle of a buffer frees it.

// ---- Task 2: one rank's step under ZeRO-3 ---------------------------------------------------------

class Fsdp {
 public:
  // The layout (pieces_of over the units' P_u, for this rank), the shard (make_shard), this rank's
  // gradient shard (MemoryCategory::grads) and Adam's m and v (MemoryCategory::optimizer): the
  // shard's size each. Between steps a rank holds its shard and nothing else of the weights.
  Fsdp(Model& model, ProcessGroup& group, const AdamOptions& adam);

  // Layer by layer: before a unit computes, all-gather its weights into a buffer of P'_u floats
  // (params), seat them, compute, free the buffer. A layer without parameters just computes.
  Tensor forward(const Tensor& x);

  // Last layer first: before a unit's backward, gather its weights again and give it a gradient
  // buffer of P'_u floats (comm_buffers, padding zero); backward; reduce-scatter (AVERAGE) the
  // buffer into this rank's piece of the gradient shard; free both before the next layer.
  void backward(const Tensor& dlogits);

  // Adam on the shard alone (t = 1, 2, …). The next forward's gathers bring the update.
  void step();

  // For the harness: the layout and the shard of weights.
  const std::vector<Piece>& pieces() const { return pieces_; }
  const Tensor& shard() const { return shard_; }

 private:
  Model& model_;
  ProcessGroup& group_;
  AdamOptions adam_;
  std::vector<Layer*> units_;
  std::vector<std::vector<std::vector<int64_t>>> shapes_;  // per unit, its parameters' shapes
  std::vector<Piece> pieces_;
  int64_t t_ = 0;     // Adam's step count
  Tensor shard_;      // this rank's pieces of every unit's weights
  Tensor shard_grad_; // … of the averaged gradient
  Tensor m_, v_;      // Adam's state for the shard
};

}  // namespace lab11
