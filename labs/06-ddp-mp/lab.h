#pragma once
// Lab 06 — DDP whose replica spans two devices (DDP with model parallel). You write the functions
// declared under "Task" below, in ddp_mp.cpp; the rest is given. The grader builds your ddp_mp.cpp
// into harness.cpp and runs the checks of checks.json (`scalelab grade 06-ddp-mp`).
//
// The harness plays N ranks (threads of one process) over 2N devices (cpu, or simulated A100s). It
// asks YOUR device map which two devices each rank owns and where each layer of its replica lives,
// builds the replica there (every rank from the same weights, as DDP's broadcast leaves them), makes
// the buckets with YOUR make_buckets once, and then every step calls, on every rank at once,
//
//     first->set_step(step); second->set_step(step);   double loss = rank_step(replica, shard);
//
// where `shard` is the rank's rows of the global batch (DistributedSampler: rows r, r + N, …). After
// the last step it reads the replicas' weights, every device's memory ledger and the trace, as
// strategies/ddp_mp.cpp is read.
#include <memory>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/tensor.h"
#include "labs/common/harness.h"

namespace lab06 {

using scalelab::Device;
using scalelab::HostBatch;
using scalelab::Model;
using scalelab::Optimizer;
using scalelab::Parameter;
using scalelab::ProcessGroup;
using scalelab::Tensor;
using scalelab::Work;

// ---- Task 1: the device map ------------------------------------------------------------------

// The two devices of rank `rank` (indices among all 2N devices of the run). Each process owns a
// pair, as the lecture's `gpus = {0: [0, 1], 1: [2, 3]}[machine_rank]`: rank r has 2r and 2r + 1.
struct RankDevices {
  int first = -1;   // the replica's first layers, the batch's features
  int second = -1;  // the replica's last layers, the labels, the loss
};
RankDevices rank_devices(int rank);

// Which of its rank's two devices layer `layer` (0-based) of an MLP of `layers` layers (≥ 2) lives
// on: 0 (the first) or 1 (the second). Contiguous halves, the first device taking the extra layer
// when `layers` is odd: layers [0, ⌈L/2⌉) on the first, [⌈L/2⌉, L) on the second — the split of
// strategies/ddp_mp.cpp.
int layer_side(int layer, int layers);

// ---- Given: a bucket and what you do with it ----------------------------------------------------

// One bucket: its parameters' gradients share a flat f32 buffer, all-reduced as one tensor. A
// collective runs on the device of the tensor it is given: the flat buffer's.
struct Bucket {
  std::vector<int> params;       // parameter indices (model order: fc1.weight, fc1.bias, fc2.weight, …)
  std::vector<int64_t> offsets;  // element offset of each parameter's gradient in `flat`
  Tensor flat;                   // the bucket's buffer (comm_buffers), on the device of params[0]
  std::shared_ptr<Work> work;    // the all-reduce in flight (null when none)
};

// Bucket number `k` for the parameters `indices` of `params`: its flat buffer, on the device of
// the FIRST of them, allocated once and reused every step.
inline Bucket make_bucket(const std::vector<Parameter*>& params, const std::vector<int>& indices, int k) {
  Bucket b;
  b.params = indices;
  int64_t elems = 0;
  for (int i : indices) {
    b.offsets.push_back(elems);
    elems += params.at(static_cast<size_t>(i))->grad.numel();
  }
  Device& device = *params.at(static_cast<size_t>(indices.at(0)))->grad.device();
  b.flat = device.zeros({elems}, scalelab::DType::f32, scalelab::MemoryCategory::comm_buffers,
                        "bucket " + std::to_string(k));
  return b;
}

// Copies the bucket's gradients (params[i]->grad) into its flat buffer; the buffer's device issues
// each copy (one from another device is a move between devices, `copy_p2p` in the trace).
inline void pack(const std::vector<Parameter*>& params, const Bucket& b, int k) {
  Device& device = *b.flat.device();
  for (size_t j = 0; j < b.params.size(); ++j) {
    const Parameter& p = *params.at(static_cast<size_t>(b.params[j]));
    device.copy({"bucket " + std::to_string(k) + " ← " + p.name + ".grad", scalelab::Phase::comm, p.layer, -1, k},
                p.grad, b.flat.view(b.offsets[j], p.grad.shape()));
  }
}

// Starts the SUM all-reduce of the bucket's flat buffer over `group`, on the buffer's device, and
// returns at once; call wait() on the result later. (Every rank must issue its all-reduces in the
// same order: the k-th of one rank pairs with the k-th of every other.)
inline std::shared_ptr<Work> all_reduce_async(ProcessGroup& group, const Bucket& b, int k) {
  return group.all_reduce_async(b.flat, scalelab::ReduceOp::sum, {.name = "bucket " + std::to_string(k), .bucket = k});
}

// flat *= alpha, on the bucket's device.
inline void scale(const Bucket& b, float alpha, int k) {
  b.flat.device()->scale({"bucket " + std::to_string(k) + " average", scalelab::Phase::comm, -1, -1, k}, alpha, b.flat);
}

// Copies the bucket's flat buffer back into its parameters' gradients; each gradient's device
// issues its copy.
inline void unpack(const std::vector<Parameter*>& params, const Bucket& b, int k) {
  for (size_t j = 0; j < b.params.size(); ++j) {
    const Parameter& p = *params.at(static_cast<size_t>(b.params[j]));
    p.grad.device()->copy({"bucket " + std::to_string(k) + " → " + p.name + ".grad", scalelab::Phase::comm, p.layer, -1, k},
                          b.flat.view(b.offsets[j], p.grad.shape()), p.grad);
  }
}

// ---- Task 2: the buckets ------------------------------------------------------------------------

// The buckets of one replica, made once (make_bucket). A bucket never mixes devices: one bucket per
// device, holding exactly the gradients that live there, so each device all-reduces its own
// gradients where they are. In launch order: the SECOND device's bucket first (backward writes its
// gradients first), then the first device's. `params` is the replica's parameters in model order.
std::vector<Bucket> make_buckets(const std::vector<Parameter*>& params);

// ---- Task 3: one rank's step ----------------------------------------------------------------------

struct Replica {
  int rank = 0;
  int world_size = 1;
  ProcessGroup* group = nullptr;  // this rank's group (a collective runs on its tensor's device)
  Device* first = nullptr;        // devices[rank_devices(rank).first]
  Device* second = nullptr;       // devices[rank_devices(rank).second]
  Model* model = nullptr;           // layer l on first or second, as layer_side(l, L) says
  Optimizer* optimizer = nullptr;  // steps every parameter where it lives (SGD with momentum, or Adam)
  std::vector<Bucket> buckets;    // make_buckets(model->parameters())
};

// What you call (core/device/device.h, core/nn/model.h):
//   dev.empty({rows, cols}, DType::f32 | DType::i32, MemoryCategory::activations, "name")
//   dev.upload({"batch.x", Phase::data}, t, host_pointer)          host → dev
//   dst_dev.copy({"name", Phase::fwd | Phase::bwd, layer}, src, dst)
//       src on any device, dst on dst_dev: a move between devices is issued by the RECEIVER
//   model->forward_range(first, last, x) / model->backward_range(first, last, dy, need_dx)
//       layers [first, last), each on its own device: the input must be on that device already
//   dev.softmax_xent({"loss", Phase::fwd}, logits, labels, dlogits)   → the mean loss; writes dlogits
//   optimizer->step()
//
// One training step of this rank on its shard (shard.size rows):
//   1. the features to the first device, the labels to the second (upload)
//   2. forward: the first device's layers; their output copied to the second device (the one move
//      between the two devices in forward); the second device's layers → the logits
//   3. the loss over this rank's rows and its gradient, on the second device
//   4. backward: the second device's layers — then launch its bucket (pack, all_reduce_async: it
//      runs on the second device while the first computes); the gradient w.r.t. their input copied
//      back to the first device (the one move in backward); the first device's layers (the first
//      layer needs no dx) — then launch its bucket
//   5. the gradients averaged over the ranks: wait for each bucket's all-reduce, divide by the world
//      size (each rank's gradient is the mean over its B/N rows: the mean of those is the global
//      batch's), unpack. Nothing else travels between ranks: no activations, no weights.
//   6. the optimizer step
// Returns the loss (this rank's mean). After 5 steps every replica must hold `single`'s weights
// within 1e-5, every replica the same bit for bit.
double rank_step(Replica& r, const HostBatch& shard);

}  // namespace lab06
