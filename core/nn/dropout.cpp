#include "core/nn/dropout.h"

#include "core/error.h"

namespace scalelab {

// ---- Dropout --------------------------------------------------------------------------------

Dropout::Dropout(Device& device, int index, std::string name, float p, uint64_t seed, int64_t rows_per_sample)
    : Layer(device, index, std::move(name)), p_(p), seed_(seed), rows_per_sample_(rows_per_sample) {
  if (!(p >= 0.0f && p <= 1.0f))
    throw Error("nn", name_ + ": p = " + std::to_string(p) + " is not a probability — use 0 ≤ p ≤ 1 (0: no dropout)");
  if (rows_per_sample < 1)
    throw Error("nn", name_ + ": " + std::to_string(rows_per_sample) + " rows per sample — a sample has at least one row");
}

void Dropout::set_batch_position(const BatchPosition& position) {
  if (position.first_sample < 0 || position.sample_stride < 1)
    throw Error("nn", name_ + ": first sample " + std::to_string(position.first_sample) + ", stride " +
                          std::to_string(position.sample_stride) +
                          " — samples of the global batch count from 0, with a stride of at least 1");
  position_ = position;
  next_row_ = 0;
}

std::vector<int64_t> Dropout::output_shape(const std::vector<int64_t>& input) const {
  if (input.size() != 2)
    throw Error("nn", name_ + " expects {rows, cols}, got " + shape_text(input) + " — activations are 2-D");
  return input;
}

Tensor Dropout::forward(const Tensor& x, int micro_batch) {
  output_shape(x.shape());
  DropoutMask mask;
  mask.p = training_ ? p_ : 0.0f;
  mask.seed = seed_;
  mask.step = position_.step;
  mask.first_row = next_row_;
  mask.sample_offset = position_.first_sample;
  mask.sample_stride = position_.sample_stride;
  mask.rows_per_sample = rows_per_sample_;
  if (x.rows() % rows_per_sample_ != 0)
    throw Error("nn", name_ + ": " + std::to_string(x.rows()) + " rows are not whole samples of " +
                          std::to_string(rows_per_sample_) + " rows — a forward takes whole samples");
  next_row_ += x.rows();  // the next forward's rows follow these
  saved_.push_back({mask, x.shape()});
  if (mask.p == 0.0f) return x;  // nothing dropped: the identity, no op
  const OpTag tag{name_ + ".fwd", Phase::fwd, index_, micro_batch};
  Tensor y = device_->empty(x.shape(), x.dtype(), MemoryCategory::activations, name_ + ".out");
  device_->dropout(tag, x, y, mask);
  return y;
}

Tensor Dropout::backward(const Tensor& dy, bool need_dx, bool, int micro_batch) {
  if (saved_.empty()) throw Error("nn", name_ + ": backward without a forward — run forward first");
  const Saved saved = saved_.front();
  saved_.pop_front();
  if (!need_dx) return Tensor();
  if (dy.shape() != saved.shape)
    throw Error("nn", name_ + ": backward expects dy " + shape_text(saved.shape) + ", the shape of its forward's output, got " +
                          dy.shape_string());
  const DropoutMask& mask = saved.mask;
  if (mask.p == 0.0f) return dy;
  // The forward's mask, hashed again from the same positions: dx = dy ⊙ mask / (1 − p), in place.
  device_->dropout({name_ + ".bwd", Phase::bwd, index_, micro_batch}, dy, dy, mask);
  return dy;
}

}  // namespace scalelab
