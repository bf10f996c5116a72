#include "core/nn/loss_scaler.h"

#include <cmath>

#include "core/error.h"

namespace scalelab {

LossScaler::LossScaler(DType compute, LossScalerOptions options)
    : enabled_(compute == DType::f16), options_(options) {
  if (!enabled_) return;
  const LossScalerOptions& o = options_;
  if (!(o.init_scale > 0) || !std::isfinite(static_cast<float>(o.init_scale)))
    throw UsageError("amp", "the initial loss scale must be a positive finite float, got " +
                                std::to_string(o.init_scale) + " — use a power of two such as 65536 (2^16)");
  if (!(o.growth_factor > 1) || !(o.backoff_factor > 0 && o.backoff_factor < 1) || o.growth_interval < 1)
    throw UsageError("amp", "the loss scaler needs growth factor > 1, backoff factor in (0, 1) and growth interval "
                            "≥ 1 — GradScaler's defaults are 2, 0.5 and 2000");
  scale_ = static_cast<float>(o.init_scale);
}

void LossScaler::agree_over(ProcessGroup& group, Device& device) {
  group_ = &group;
  flag_device_ = &device;
  if (enabled_) found_inf_ = device.zeros({1}, DType::f32, MemoryCategory::comm_buffers, "amp.found_inf");
}

bool LossScaler::unscale_and_check(const std::vector<Parameter*>& params) {
  if (!enabled_) return false;
  // 1. Unscale: 1/S is a power of two while S is, so this is exact — the gradients are those an
  //    unscaled backward would have given, less what fp16 lost on the way.
  // 2. Check: inf stays inf and nan stays nan through the division.
  const float inverse = 1.0f / scale_;
  bool found = false;
  for (Parameter* p : params) {
    Device& d = *p->grad.device();
    d.scale({"amp.unscale " + p->name + ".grad", Phase::optim, p->layer}, inverse, p->grad);
    if (d.has_non_finite({"amp.check " + p->name + ".grad", Phase::optim, p->layer}, p->grad)) found = true;
  }
  if (group_) {
    // Every rank takes the same decision: one float, all-reduced with max. After DDP's and ZeRO
    // stage 1's all-reduce every rank holds the same gradients and would agree anyway; pipeline
    // stages and ZeRO stage 2's shards each hold other gradients, and would not.
    float flag = found ? 1.0f : 0.0f;
    flag_device_->upload({"amp.found_inf", Phase::optim}, found_inf_, &flag);
    group_->all_reduce(found_inf_, ReduceOp::max, {.name = "amp.found_inf"});
    flag_device_->download({"amp.found_inf", Phase::optim}, &flag, found_inf_);
    found = flag != 0.0f;  // a dry run moves no data: the local flag, false, stays
  }
  return found;
}

void LossScaler::update(bool found_inf) {
  if (!enabled_) return;
  if (found_inf) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);
    good_steps_ = 0;
    ++skipped_steps_;
    return;
  }
  if (++good_steps_ == options_.growth_interval) {
    const float grown = static_cast<float>(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;  // as GradScaler: never grow into inf
    good_steps_ = 0;
  }
}

void LossScaler::load_state(double loss_scale, int64_t good_steps) {
  if (!enabled_ || loss_scale <= 0) return;
  scale_ = static_cast<float>(loss_scale);
  good_steps_ = good_steps;
}

}  // namespace scalelab
