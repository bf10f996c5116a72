#include "core/nn/shared_weights.h"

#include <algorithm>
#include <memory>

#include "core/error.h"

namespace scalelab {

SharedWeights::SharedWeights(const ModelSpec& spec, SegmentLayout& layout) : spec_(spec) {
  for (const TensorSpec& t : spec.tensors()) {
    at_.push_back(layout.place(t.numel() * 4));
    numel_.push_back(t.numel());
  }
}

HostWeights SharedWeights::read(const char* base) const {
  HostWeights w{spec_, {}};
  for (size_t i = 0; i < at_.size(); ++i) {
    const float* p = reinterpret_cast<const float*>(base + at_[i]);
    w.values.emplace_back(p, p + numel_[i]);
  }
  return w;
}

void SharedWeights::write(char* base, const HostWeights& weights) const {
  if (!weights.has_values()) return;  // a dry run's weights, shapes only: the segment stays zero
  for (size_t i = 0; i < at_.size(); ++i) {
    const std::vector<float>& v = weights.values[i];
    if (static_cast<int64_t>(v.size()) != numel_[i])
      throw Error("proc", "internal: weights of " + weights.spec.text + " written where " + spec_.text +
                              "'s are shared; please report it");
    std::copy(v.begin(), v.end(), reinterpret_cast<float*>(base + at_[i]));
  }
}

void SharedWeights::share(Model& model, Device& device, char* base) const {
  const std::vector<Parameter*> params = model.parameters();
  if (params.size() != at_.size())
    throw Error("proc", "internal: a model of " + std::to_string(params.size()) + " parameters shares the " +
                            std::to_string(at_.size()) + " of " + spec_.text + "; please report it");
  int64_t bytes = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    // No ledger and no free_data: nothing is counted or freed when the tensor goes.
    auto storage = std::make_shared<Storage>();
    storage->device = &device;
    storage->category = MemoryCategory::params;
    storage->data = base + at_[i];
    storage->bytes = numel_[i] * 4;
    params[i]->value = Tensor(std::move(storage), params[i]->value.shape(), DType::f32);
    bytes += numel_[i] * 4;
  }
  device.memory().allocate(MemoryCategory::params, bytes, "shared parameters (mapped)");
  // A host calibration prices what the host's cache holds: these bytes once for the whole run.
  if (HostTrafficMeter* meter = device.host_meter()) meter->mark_shared_with_run(static_cast<double>(bytes));
}

}  // namespace scalelab
