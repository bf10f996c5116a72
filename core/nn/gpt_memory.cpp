#include "core/nn/gpt_memory.h"

#include <algorithm>

#include "core/error.h"

namespace scalelab {

GptMemory gpt_memory_closed_form(const ModelSpec& spec, const std::string& strategy, int zero_stage, int world,
                                 int64_t samples, int optimizer_states, bool recompute) {
  if (spec.family != ModelFamily::gpt)
    throw Error("scale", spec.text + ": the memory closed form is a GPT's — give --model gpt:L-C-H-T-V");
  if (strategy != "ddp" && strategy != "zero")
    throw Error("scale", strategy + ": the memory closed form covers ddp and zero — use one of them");
  if (world < 1 || samples < 1) throw Error("scale", "the memory closed form needs a device and a sample at least");
  const int64_t P = spec.parameter_count(), N = world;
  const int64_t s = spec.gpt.context, b = samples, h = spec.gpt.hidden, a = spec.gpt.heads, V = spec.gpt.vocab;
  GptMemory m;
  if (strategy == "ddp") {
    m.params = 4 * P;
    m.grads = 4 * P;
    m.optimizer = 4 * optimizer_states * P;
    m.comm_buffers = 4 * P;  // the buckets: every gradient once
  } else if (zero_stage == 3) {
    // Per layer (embedding, blocks, head) its piece S_u; two neighbours at once, whole.
    int64_t shard = 0, pair = 0, before = 0;
    for (int l = 0; l < spec.layer_count(); ++l) {
      const int64_t piece = (spec.layer_parameter_count(l) + N - 1) / N;
      shard += piece;
      if (l > 0) pair = std::max(pair, N * (before + piece));
      before = piece;
    }
    m.params = 4 * shard + 4 * pair;
    m.grads = 4 * shard;
    m.optimizer = 4 * optimizer_states * shard;
    m.comm_buffers = 4 * pair;
  } else {
    const int64_t padded = (P + N - 1) / N * N, shard = padded / N;
    m.params = 4 * padded;
    m.grads = zero_stage == 2 ? 4 * shard : 4 * padded;
    m.optimizer = 4 * optimizer_states * shard;
    m.comm_buffers = zero_stage == 2 ? 4 * padded : 0;  // stage 2's reduce-scatter bucket
  }
  const int64_t sb = s * b;
  m.block_activations = 4 * (16 * sb * h + a * s * sb + 4 * sb);
  m.korthikanti_block_bytes = 34.0 * static_cast<double>(sb * h) + 5.0 * static_cast<double>(a * s * sb);
  const int64_t blocks = recompute ? spec.gpt.layers * 4 * sb * h + m.block_activations
                                   : spec.gpt.layers * m.block_activations;
  // The peak comes in the last block's backward: besides what the blocks saved, the logits and
  // their gradient (2·s·b·V), the batch (T token ids in f32 and T labels in i32 per sample), and
  // the gradients that backward holds at once, 10·s·b·h (the stream's, mlp.fc's 4h wide, q|k|v's…).
  const int64_t head = 4 * 10 * sb * h + 2 * 4 * sb * V + 4 * sb + 4 * sb;
  m.activations = blocks + head;
  m.workspace = 4 * a * s * sb;
  return m;
}

}  // namespace scalelab
