#pragma once
// Dropout, with a mask that depends on where a sample sits in the global batch, so that every
// strategy drops the same elements as single-device training.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/nn/layer.h"

namespace scalelab {

// Zeroes each element with probability p and scales the rest by 1 / (1 − p), as nn.Dropout in
// training. The mask is a hash of (seed, step, global row, column) — not a random stream — so a
// sample gets the same mask whichever device, replica or micro-batch computes it, and every
// strategy matches single-device training. Backward recomputes the mask from the hash rather than
// keeping it: nothing is saved but the position (no activation memory), and the numbers are the same.
//
// Used as a layer of its own, or held by a layer that drops its input or output (Linear,
// TokenEmbedding): the model's layers stay the ones strategies cut into stages.
class Dropout : public Layer {
 public:
  // `rows_per_sample`: a GPT's activations have T rows (tokens) per sample, an image's one.
  Dropout(Device& device, int index, std::string name, float p, uint64_t seed, int64_t rows_per_sample = 1);

  // The step, and where this replica's samples sit in its global batch. Each forward moves on by
  // its rows, so a stage that runs a step's micro-batches in order needs one call per step.
  void set_batch_position(const BatchPosition& position) override;
  // Off (evaluation): the identity, as model.eval(). On by default.
  void set_training(bool training) override { training_ = training; }
  float p() const { return p_; }

  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override;
  // p = 0 or not training: returns x itself, with no op.
  Tensor forward(const Tensor& x, int micro_batch = -1) override;
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override;
  void clear_saved() override { saved_.clear(); }

 private:
  float p_;
  uint64_t seed_;
  int64_t rows_per_sample_;
  bool training_ = true;
  BatchPosition position_;
  int64_t next_row_ = 0;  // the replica's row number of the next forward's first row
  struct Saved {
    DropoutMask mask;  // where the forward's rows sat: a position, not a tensor
    std::vector<int64_t> shape;
  };
  std::deque<Saved> saved_;
};

}  // namespace scalelab
