#pragma once
// Lab 09 — dynamic loss scaling across ranks, and a checkpoint every rank can resume from. You
// write the functions declared under "Task" below, in amp_checkpoint.cpp; the rest is given. The
// grader builds your amp_checkpoint.cpp into harness.cpp and runs the checks of checks.json
// (`scalelab grade 09-amp-checkpoint`). The library's own versions: core/nn/loss_scaler.cpp
// (GradScaler) and core/checkpoint/checkpoint.cpp with run/checkpointer.cpp.
//
// The harness trains a replica of an MLP on each rank (threads of one process, one cpu device
// each), each rank on its DistributedSampler rows of the global batch, with plain SGD:
//
//     every step: forward; softmax_xent with grad_scale = state.scale (the loss scaled by S);
//                 backward; all-reduce (avg) every gradient;
//                 [the harness may now make ONE rank's gradient overflow: as a pipeline stage or a
//                  ZeRO shard, each rank checks only gradients the others do not see]
//                 if (unscale_and_update(grads, group, device, flag, state, options)) sgd on every parameter
//
// and saves with save_checkpoint at some step, then resumes from it with load_checkpoint.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/tensor.h"
#include "labs/common/harness.h"

namespace lab09 {

using scalelab::Device;
using scalelab::HostWeights;
using scalelab::ProcessGroup;
using scalelab::Tensor;

// ---- Task 1: the dynamic loss scaler (GradScaler's unscale_, step and update) ----------------

struct ScalerOptions {
  float growth_factor = 2.0f;     // S *= 2 after growth_interval good steps in a row
  float backoff_factor = 0.5f;    // S *= 0.5 on an overflow
  int64_t growth_interval = 2000;
};

struct ScalerState {
  float scale = 65536.0f;     // S: the loss gradient was multiplied by it
  int64_t good_steps = 0;     // good steps in a row since S last changed
  int64_t skipped_steps = 0;  // steps skipped for an overflow, in this run
};

// Called on every rank after the gradients are all-reduced, where the optimizer would step.
// `grads`: this rank's f32 gradients, each S times too large. `flag`: one f32 on `device`, for the
// all-reduce of the overflow flag.
//  1. unscale: every gradient *= 1/S                                   device.scale(tag, 1/S, g)
//  2. check:   any inf or nan in THIS rank's gradients?                 device.has_non_finite(tag, g)
//              then agree: every rank must take the same decision, even when only one rank saw
//              the overflow — all-reduce (max) the flag over the group:
//                device.upload(tag, flag, &f); group.all_reduce(flag, ReduceOp::max); device.download(tag, &f, flag)
//  3. update:  overflow — S *= backoff, good_steps = 0, ++skipped_steps, return false (skip the step);
//              otherwise ++good_steps, and when it reaches growth_interval: S *= growth, good_steps = 0;
//              return true (take the step).
// A tag is {"name", scalelab::Phase::optim}.
bool unscale_and_update(const std::vector<Tensor>& grads, ProcessGroup& group, Device& device, const Tensor& flag,
                        ScalerState& state, const ScalerOptions& options);

// ---- Given: the checkpoint's contents and its bytes ------------------------------------------

struct TrainState {
  int64_t step = 0;  // steps completed: the resumed run starts with step `step`
  HostWeights weights;
  ScalerState scaler;
};

std::string encode_state(const TrainState& state);             // given (harness.cpp)
TrainState decode_state(const std::string& bytes);             // given; throws on a short or bad file
// Writes `bytes` to `path` (creating or replacing it) and closes it. Slow, as a large file on a
// shared file system is: the harness may make it take a while.
void write_file(const std::string& path, const std::string& bytes);  // given
// The whole file; throws std::runtime_error if it cannot be opened.
std::string read_file(const std::string& path);                      // given
// std::rename(from, to) (<cstdio>) replaces `to` at once: a reader sees the old file or the new one.

// ---- Task 2: the checkpoint of a data-parallel run --------------------------------------------

// Called by EVERY rank with the same state (the replicas are equal). Rank 0 alone writes it: to
// `path + ".tmp"` first, then renames it to `path` (a run killed while saving leaves the previous
// checkpoint whole). Then every rank waits at a barrier (group.barrier()), so that no rank goes on
// — and reads `path` — before the new file is in place.
void save_checkpoint(const std::string& path, const TrainState& state, ProcessGroup& group);

// Called by every rank: the state in the file at `path` (every rank gets the same one).
TrainState load_checkpoint(const std::string& path);

}  // namespace lab09
