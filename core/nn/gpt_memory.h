#pragma once
// The memory per device of a GPT under ddp or zero, in closed form: what the ledger of a run
// should show, written down from what our layers hold (core/nn/transformer_layers.cpp), in f32
// without mixed precision. `scalelab scale` prints it next to the ledger's figure.
//
// Per parameter: weights 4 bytes and gradients 4 (zero: the weights padded to a multiple of N;
// stage 2 keeps a 1/N shard of the gradients, and a whole flat bucket for the reduce-scatter),
// optimizer state 4 bytes per state tensor (SGD momentum 1, Adam 2: 8 bytes; zero: 1/N of it);
// ddp's buckets hold a copy of every gradient. Stage 3 pads each layer on its own (embedding,
// each block, head: P_u to N·⌈P_u/N⌉) and keeps 1/N of all three, S = Σ ⌈P_u/N⌉ per rank; and,
// while two neighbouring layers are in use at once (one computing, the next one's gather
// prefetched; one's gradient reduce-scattered while the next computes its own), their whole
// weights and their whole gradients (the reduce-scatter's buckets): W2 = max N·(S_u + S_u+1).
//
// Activations (values, each 4 bytes) with s = context, b = samples per device, h = hidden, a =
// heads. A block keeps for its backward its input, ln1's and ln2's outputs, q|k|v (3), the
// attention output, the residual h, mlp.fc's output (4) and the GELU's (4): 16·s·b·h, the attention
// probabilities a·s²·b, and a mean and rstd per token per LayerNorm: 4·s·b. In bytes: 64·s·b·h +
// 4·a·s²·b + 16·s·b. Korthikanti et al. 2022 count 34·s·b·h + 5·a·s²·b bytes: 16-bit values
// (2 bytes: 32·s·b·h + 2·a·s²·b) plus a byte per dropout mask (2·s·b·h + a·s²·b) and the softmax
// output kept twice; our blocks have no dropout and keep f32 (4 bytes) unless --amp.
// With --recompute a block keeps its input alone (s·b·h), and one block's full set lives again
// while its backward runs. The peak comes in the last block's backward: every block's values, the
// logits and their gradient (2·s·b·V), the batch, and 10·s·b·h of gradients in flight.
#include <cstdint>
#include <string>

#include "core/nn/model.h"

namespace scalelab {

struct GptMemory {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0;
  int64_t workspace = 0;  // the attention backward's scratch: a·s²·b values
  int64_t block_activations = 0;       // bytes one block keeps for its backward (ours)
  double korthikanti_block_bytes = 0;  // 34·s·b·h + 5·a·s²·b (16-bit, with dropout)
  int64_t total() const { return params + grads + optimizer + activations + comm_buffers + workspace; }
};

// spec must be a GPT; strategy "ddp" or "zero" (stage 1, 2 or 3); world ≥ 1 devices, each with
// `samples` sequences of the batch; optimizer_states as optimizer_state_tensors(). Throws
// Error("scale") for anything else.
GptMemory gpt_memory_closed_form(const ModelSpec& spec, const std::string& strategy, int zero_stage, int world,
                                 int64_t samples, int optimizer_states, bool recompute);

}  // namespace scalelab
