#include "core/run/config.h"

#include "core/error.h"

namespace scalelab {

void TrainConfig::validate() const {
  if (devices < 1) throw UsageError("train", "--devices must be ≥ 1, got " + std::to_string(devices));
  if (batch < 1) throw UsageError("train", "--batch must be ≥ 1, got " + std::to_string(batch));
  if (steps < 0) throw UsageError("train", "--steps must be ≥ 0, got " + std::to_string(steps));
  if (steps == 0 && epochs < 1) throw UsageError("train", "--epochs must be ≥ 1 (or pass --steps), got " + std::to_string(epochs));
  if (dataset != "fashion-mnist" && dataset != "synthetic")
    throw UsageError("data", "--dataset '" + dataset + "' is unknown — use fashion-mnist or synthetic");
  if (device == DeviceKind::sim && hw.empty())
    throw UsageError("train", "--device sim needs --hw PROFILE (see `scalelab profiles`)");
  if (device != DeviceKind::sim && !hw.empty())
    throw UsageError("train", "--hw prices ops on simulated devices only — add --device sim, or drop --hw");
  if (dry_run && device != DeviceKind::sim)
    throw UsageError("train", "--dry-run runs no numerics, so it needs --device sim");
  optimizer.validate();
}

}  // namespace scalelab
