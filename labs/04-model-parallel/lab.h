#pragma once
// Lab 04 — model parallel, then the batch pipelined in splits (PyTorch's tutorial
// ModelParallelResNet50, then PipelineParallelResNet50 and its split-size experiment). You write
// the functions declared under "Task" below, in mp.cpp, and answer one question in answers.json;
// the rest is given. The grader builds your mp.cpp into harness.cpp and runs the checks of
// checks.json (`scalelab grade 04-model-parallel`).
//
// The harness owns p devices (cpu, or sim devices of a hardware profile) and ONE model whose layers
// it has placed on them with the library's rule (strategies/model_parallel.cpp): layer l of L on
// devices[⌊l·p / L⌋]. Every step it calls
//
//     devices[k]->set_step(step) for every k;   double loss = model_parallel_step(c, batch);
//                                           or  double loss = pipelined_step(c, batch, split_size);
//
// from one host thread (the controller, as one Python process drives both GPUs in the tutorial),
// and after the last step reads the weights, the trace and the simulated clock.
#include <cstdint>
#include <vector>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/nn/optimizer.h"
#include "core/tensor.h"
#include "labs/common/harness.h"

namespace lab04 {

using scalelab::Device;
using scalelab::HostBatch;
using scalelab::Layer;
using scalelab::LayerList;
using scalelab::Model;
using scalelab::Optimizer;
using scalelab::Tensor;

// What the controller owns.
struct Controller {
  std::vector<Device*> devices;    // p devices: devices[0] gets the batch, devices[p − 1] the labels and the loss
  Model* model = nullptr;            // model->layers()[l] lives on its device: layers()[l].device()
  Optimizer* optimizer = nullptr;  // steps every parameter on the device that holds it
};

// What you call (core/device/device.h, core/tensor.h, core/nn/model.h):
//   dev.empty({rows, cols}, DType::f32 | DType::i32, MemoryCategory::activations, "name")
//   dev.upload({"batch.x", Phase::data}, t, host_pointer)          host → device
//   dst_dev.copy({"activations to fc3", Phase::fwd, layer}, src, dst)
//       a copy between devices (`y.to(gpu1)`): the event is on the device that RECEIVES (dst's), a
//       copy_p2p on its copy lane; it starts when src is ready, and dst is ready when it ends
//   t.rows_slice(first, count)     a view of rows [first, first + count)
//   layer.forward(h, micro_batch) / layer.backward(g, need_dx, accumulate, micro_batch)
//       each layer keeps the inputs of its forwards in a queue, and each backward takes the
//       OLDEST: run the chunks' backwards in the order of their forwards. `accumulate` adds the
//       weight gradients to those already there instead of overwriting them. micro_batch tags the
//       events with the chunk (−1: none)
//   last.softmax_xent({"loss", Phase::fwd}, logits, labels, dlogits, grad_scale)
//       → the mean loss over logits' rows; writes grad_scale · d(mean loss)/d(logits) into dlogits
//   c.optimizer->step()
//
// On sim, each device has a compute lane and a copy lane, each runs one op at a time in the order
// issued, and an op starts when its lane is free and its inputs are ready: kernel launches are
// asynchronous, and only an upload waits for the host (until the host has read the last loss). So
// device 0 can compute chunk i + 1 while device 1 computes chunk i — if you issue the work so that
// it can.

// ---- Task 1: where the layers go ------------------------------------------------------------------

// The device of each of `layers` layers over `devices` devices (layers ≥ devices ≥ 1): contiguous
// groups in order (device 0 takes the first layers, device p − 1 the last), every device at least
// one layer, the groups' sizes differing by at most one. Returns one device index per layer.
// Example: 5 layers on 2 devices → {0, 0, 0, 1, 1} (or {0, 0, 1, 1, 1}).
std::vector<int> layer_devices(int layers, int devices);

// ---- Task 2: one model-parallel step ------------------------------------------------------------

// One training step of the whole batch, as the lecture's Net with sub_net1 on gpu0, sub_net2 on gpu1:
//   1. upload the batch x to devices[0] and the labels y to devices[p − 1] (where the loss is)
//   2. forward, layer by layer: where layer l is on another device than its input, copy the
//      activations to layer l's device first
//   3. the loss and its gradient w.r.t. the logits, on devices[p − 1]
//   4. backward, last layer first: where layer l − 1 is on another device, copy the gradient back
//      to it (no gradient is needed for the batch itself: need_dx false on the first layer)
//   5. c.optimizer->step()
// Returns the loss. After 5 steps the weights must be `single`'s within 1e-5.
double model_parallel_step(Controller& c, const HostBatch& batch);

// ---- Task 3: the same step, pipelined --------------------------------------------------------------

// The same step with the batch's rows cut into chunks of `split_size` rows (torch.split: the last
// chunk has the rows left, maybe fewer; split_size ≥ batch.size is one chunk — the step above).
// Upload x and y once, as above; run every chunk's forward (chunk i through all the layers, chunk
// i + 1 behind it), the loss, then every chunk's backward in the order of the forwards, the weight
// gradients of the chunks ADDED up; one optimizer step. The copies at a device boundary go chunk
// by chunk (the same bytes in all as the step above). The result must be the unsplit step's: the
// gradient of the whole batch's mean loss (mind a last chunk with fewer rows), and the returned
// loss the batch's mean. After 5 steps the weights must be `single`'s within 1e-5.
double pipelined_step(Controller& c, const HostBatch& batch, int64_t split_size);

// ---- The question (answers.json) ----------------------------------------------------------------

// "best_split": on 2 simulated A100s (a100-nvlink-8), mlp:256-2048-2048-2048-2048-2048-2048-2048-10,
// a batch of 2048, the split size of the grid 8, 16, …, 2048 that minimises the simulated step time
// of YOUR pipelined_step (README.md, "The experiment"). Graded within one grid point of what your
// step measures.

}  // namespace lab04
