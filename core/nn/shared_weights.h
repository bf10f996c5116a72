#pragma once
// A model's weights in a segment of shared memory (torch: model.share_memory()): where each
// parameter's floats go, reading and writing them as HostWeights, and pointing a model's
// parameters at them — so every process that maps the segment computes on the same weights, and
// an update one of them makes is there for all the others at once.
#include <cstdint>
#include <vector>

#include "core/nn/model.h"
#include "core/proc/layout.h"

namespace scalelab {

class SharedWeights {
 public:
  // Places the parameters in `layout`, in the model's order (fc1.weight, fc1.bias, fc2.weight, …),
  // each on cache lines of its own.
  SharedWeights(const ModelSpec& spec, SegmentLayout& layout);

  // `base` is this process's address of the segment.
  HostWeights read(const char* base) const;
  void write(char* base, const HostWeights& weights) const;  // weights of this spec
  // Points the parameters of `model` (on `device`) at their floats in the segment: the model then
  // reads and writes the shared weights themselves, and the private copies it was built with are
  // freed. The segment owns the bytes; the device's ledger counts them as params, once.
  void share(Model& model, Device& device, char* base) const;

  const ModelSpec& spec() const { return spec_; }
  const std::vector<int64_t>& numel() const { return numel_; }  // per parameter

 private:
  ModelSpec spec_;
  std::vector<int64_t> at_, numel_;  // per parameter: its offset in the segment, its floats
};

}  // namespace scalelab
