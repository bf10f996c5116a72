#pragma once
// Lab 03 — DataParallel: one controller drives every device (torch.nn.DataParallel). You write
// the functions declared under "Task" below, in dp.cpp; the rest is given. The grader builds your
// dp.cpp into harness.cpp and runs the checks of checks.json (`scalelab grade 03-data-parallel`).
//
// The harness owns N devices (cpu, or sim devices of a hardware profile) and an MLP replica on each;
// replicas[0] on devices[0] is THE model, the one the optimizer updates. Every step it calls
//
//     devices[i]->set_step(step) for every i;   double loss = data_parallel_step(controller, batch);
//
// from one host thread (the controller), and after the last step reads replicas[0]'s weights, the
// devices' memory ledgers and the trace, as strategies/data_parallel.cpp is read.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/tensor.h"
#include "labs/common/harness.h"

namespace lab03 {

using scalelab::Device;
using scalelab::HostBatch;
using scalelab::LayerList;
using scalelab::Model;
using scalelab::Optimizer;
using scalelab::Parameter;
using scalelab::Tensor;

// What the controller owns. The batch size is a multiple of devices.size() (each device takes
// batch.size / N rows: device i rows [i·R, (i+1)·R)).
struct Controller {
  std::vector<Device*> devices;  // devices[0] holds the model, the labels, the loss
  std::vector<Model*> replicas;    // replicas[i] lives on devices[i]; replicas[0] is the model
  Optimizer* optimizer = nullptr;  // steps replicas[0]'s parameters (their .grad)
};

// ---- Given ----------------------------------------------------------------------------------------

// Runs work(i) for i = 0…n−1, each on its own host thread (torch.nn.parallel.parallel_apply), and
// joins them; an exception is rethrown, prefixed "rank i:" (the replica). Use it for the replicas' forward and
// backward only: every MOVE (a copy between devices) is issued by the controller thread, in the
// order below.
inline void parallel_apply(int n, const std::function<void(int i)>& work) { lab::run_ranks(n, work); }

// What you call (core/device/device.h, core/tensor.h, core/nn/model.h):
//   dev.empty({rows, cols}, DType::f32 | DType::i32, MemoryCategory::activations | comm_buffers, "name")
//       activations for the batch, its rows, the outputs and their gradient; comm_buffers for the
//       reduce's buffers only (the `memory_held` check reads the ledger by category)
//   dev.upload({"batch.x", Phase::data}, t, host_pointer)          host → device
//   dst_dev.copy({.name = "…", .phase = Phase::comm, .role = Role::scatter}, src, dst)
//       a move between devices: the event is on the device that RECEIVES (dst's), with the role
//       scatter | replicate | gather | reduce — the checks read these roles from the trace
//   t.rows_slice(first, count)     a view of rows [first, first + count)
//   replica.layers()[l].forward(h) / .backward(g, need_dx)   (or replica.forward(x) / .backward(dlogits))
//   dev0.softmax_xent({"loss", Phase::fwd}, logits, labels, dlogits)   → the mean loss; writes dlogits
//   dev0.axpy(tag, 1.0f, x, y)     y += x
//   optimizer->step()

// ---- Task 1: one DataParallel step ------------------------------------------------------------------

// One training step of the whole batch, the moves in the lecture's order (the `moves` check reads
// them from the trace, by role):
//   1. scatter     the batch to device 0 (upload x and y), then each device i ≥ 1 copies its rows of x
//   2. replicate   each device i ≥ 1 copies every parameter's value from replicas[0] (EVERY step)
//   3. forward     each replica on its rows (parallel_apply)
//   4. gather      the outputs onto device 0, in batch order, into one [batch, classes] tensor;
//                  the loss and its gradient w.r.t. the outputs there, on the whole batch
//   5. scatter     each device i ≥ 1 copies its rows of that gradient
//   6. backward    each replica on its rows (parallel_apply): its own parameters' .grad
//   7. reduce      device 0 copies each replica's gradients (into comm_buffers, one parameter's
//                  buffer at a time, freed before the next) and adds them to its own: the SUM over
//                  the slices is the gradient of the whole batch's mean loss
//   8. step        the optimizer on device 0
// Returns the loss. After 5 steps replicas[0]'s weights must be `single`'s within 1e-5.
double data_parallel_step(Controller& c, const HostBatch& batch);

// ---- Task 2: the numeric question ---------------------------------------------------------------------

// Device 0 holds more than the others. For mlp:784-512-256-10, batch 512, 4 cpu devices, SGD with
// momentum 0.9, trained 2 steps with YOUR data_parallel_step: over the ledger's categories (params,
// grads, optimizer, activations, comm_buffers, workspace), the sum of (device 0's peak in that
// category − device 1's peak in it), in bytes. Return the number you computed (README.md, "The
// numeric question"); it is graded exactly against what the ledgers measure.
int64_t device0_extra_peak_bytes();

}  // namespace lab03
