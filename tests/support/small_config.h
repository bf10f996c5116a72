#pragma once
// The small run most tests start from and then adjust: synthetic data, a few steps of 32, the
// strategy on `devices` of `kind` (sim: the a100-nvlink-8 profile). The model is the one every
// equivalence test trains — see kEquivalenceModel — so tests of different strategies compare
// like with like.
#include <string>

#include "strategies/train_config.h"

namespace scalelab::test {

// 32 features, 8 classes, three hidden layers of different widths (a transpose mistake shows).
// Round-off stays round-off only where no gradient sits at a kink: with the default 8192 training
// samples none does; with 512, one fc1.weight gradient cancels to 1.8e-9, below Adam's eps, and
// Adam's first update turns its round-off into a 4e-5 relative weight difference for any
// data-parallel strategy.
inline constexpr const char* kEquivalenceModel = "mlp:32-24-16-12-8";

inline TrainConfig small_config(const std::string& strategy, int devices, DeviceKind kind = DeviceKind::cpu,
                                const std::string& optimizer = "sgd") {
  TrainConfig c;
  c.strategy = strategy;
  c.devices = devices;
  c.device = kind;
  if (kind == DeviceKind::sim) c.hw = "a100-nvlink-8";
  c.model = kEquivalenceModel;
  c.dataset = "synthetic";
  c.synthetic_test = 128;
  c.batch = 32;
  c.steps = 5;
  c.optimizer.kind = optimizer;
  if (optimizer == "adam") c.optimizer.lr = 0.01f;
  if (strategy == "zero") c.zero_stage = 1;
  return c;
}

}  // namespace scalelab::test
