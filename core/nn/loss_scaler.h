#pragma once
// The dynamic loss scaler of fp16 mixed precision: PyTorch's torch.cuda.amp.GradScaler, written out.
//
// fp16 has 5 exponent bits: values below 2^-24 flush to zero. Many activation gradients are that
// small, so backward in fp16 would lose them. The scaler multiplies the loss gradient by a large
// factor S before backward (scaler.scale(loss).backward()), so every gradient that flows back is S
// times larger and stays representable; afterwards the f32 master gradients are divided by S
// again. If S was too large, some gradient overflowed to inf (or made a nan): that step is skipped
// and S halved. After `growth_interval` good steps in a row S is doubled, to find the largest S
// that does not overflow. Each step, where the optimizer would step:
//
//   1. unscale   every f32 master gradient *= 1/S                  (scaler.unscale_(optimizer))
//   2. check     any inf or nan among them? With ranks that each checked only their own gradients
//                (pipeline stages, ZeRO shards) the flag is all-reduced (max): all decide alike
//   3. step      the optimizer steps only if nothing overflowed       (scaler.step(optimizer))
//   4. update    overflow: S *= 0.5 and the step is counted as skipped; otherwise one more good
//                step, and S *= 2 after 2000 of them in a row          (scaler.update())
//
// bf16 has f32's 8 exponent bits, so nothing underflows that f32 would keep: no scaler (S = 1, no
// step is ever skipped), as in PyTorch, where GradScaler is for fp16 only. In f32 and bf16 this
// class does nothing and emits no events.
#include <cstdint>
#include <vector>

#include "core/comm/process_group.h"
#include "core/nn/model.h"

namespace scalelab {

// GradScaler's defaults.
struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// What a run reports about its scaler: the scale now and the steps it skipped.
struct AmpReport {
  double loss_scale = 1.0;
  int64_t skipped_steps = 0;
};

class LossScaler {
 public:
  // Enabled for f16 only; f32 and bf16 make a scaler that does nothing. Throws UsageError("amp",
  // …) for a scale or factor that cannot work.
  explicit LossScaler(DType compute = DType::f32, LossScalerOptions options = {});

  bool enabled() const { return enabled_; }
  // The factor the loss gradient is multiplied by (softmax_xent's grad_scale): S, or 1 when disabled.
  float scale() const { return enabled_ ? scale_ : 1.0f; }

  // Ranks that check only their own gradients take the decision together: the overflow flag is
  // all-reduced (max) over `group`, one float per step, through a buffer on `device`.
  void agree_over(ProcessGroup& group, Device& device);

  // 1 and 2: divides every parameter's .grad by S (on its device) and looks for inf or nan in
  // them — on every rank of the group, when there is one. True: overflow, skip the step.
  // Disabled: false, and nothing runs.
  bool unscale_and_check(const std::vector<Parameter*>& params);
  // 4: after the step was taken (found_inf false) or skipped (true).
  void update(bool found_inf);

  int64_t good_steps() const { return good_steps_; }        // in a row, since the last change of S
  int64_t skipped_steps() const { return skipped_steps_; }  // in this run
  AmpReport report() const { return {scale(), skipped_steps_}; }

  // For checkpoints (TrainingState's loss_scale and scaler_good_steps): 0 when disabled.
  double state_scale() const { return enabled_ ? scale_ : 0.0; }
  // Continues from a saved scale (ignored when 0: a checkpoint without a scaler) and count.
  void load_state(double loss_scale, int64_t good_steps);

 private:
  bool enabled_ = false;
  LossScalerOptions options_;
  float scale_ = 1.0f;  // a float, as GradScaler's _scale tensor
  int64_t good_steps_ = 0;
  int64_t skipped_steps_ = 0;
  ProcessGroup* group_ = nullptr;
  Device* flag_device_ = nullptr;
  Tensor found_inf_;  // one float on flag_device_, for the all-reduce
};

}  // namespace scalelab
