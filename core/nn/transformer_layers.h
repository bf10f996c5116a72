#pragma once
// The layers of a GPT-2-style decoder (pre-LayerNorm), each a Layer of a sequential model:
//
//   TokenEmbedding    ids {B, T} → x {B·T, C}: a token's row of tok_emb plus its position's row of pos_emb
//   TransformerBlock  x → x + proj(attention(qkv(ln1(x)))) → that + mlp.proj(gelu(mlp.fc(ln2(that))))
//   LmHead            x → head(ln_f(x)) {B·T, V}: the logits Device::softmax_xent takes, a row per token
//
// Mixed precision (set_precision f16 / bf16) as PyTorch's autocast runs a GPT: the embedding, the
// LayerNorms and the residual stream stay f32; the projections (Linear's half copies of the
// weights), attention and GELU compute in half; the residual adds a half branch into the f32
// stream. Gradients flow back the same way, cast where the two meet.
//
// Text is a row per token: a batch of B sequences of T tokens is B·T rows of the hidden size C, so
// every projection is one GEMM over all the tokens, and only attention looks across rows (within
// each sequence's T, never past the token itself). Parameters are named as PyTorch's state_dict
// names them, Linear weights out × in.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/nn/layer.h"
#include "core/nn/linear.h"

namespace scalelab {

// The layer "embed". ids {B, T}: f32 holding whole token ids in [0, vocab); T must be the context.
class TokenEmbedding : public Layer {
 public:
  TokenEmbedding(Device& device, int index, int64_t vocab, int64_t context, int64_t hidden);

  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override;
  // Keeps ids for the backward.
  Tensor forward(const Tensor& ids, int micro_batch = -1) override;
  // Writes (or adds to) the two tables' gradients. Ids have no gradient: returns an undefined tensor.
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override;
  void clear_saved() override {
    saved_ids_.clear();
    if (output_dropout_) output_dropout_->clear_saved();
  }
  std::vector<Parameter*> parameters() override { return {&tok_emb, &pos_emb}; }
  // Accepts f16 / bf16 and stays f32, as autocast leaves an embedding: a lookup, no GEMM.
  void set_precision(DType compute) override;
  // Dropout of the output (p > 0), "embed.drop": GPT-2's dropout of tok_emb + pos_emb.
  void set_output_dropout(float p, uint64_t seed);
  void set_batch_position(const BatchPosition& position) override;
  void set_training(bool on) override;

  Parameter tok_emb;  // "tok_emb.weight" {vocab, hidden}
  Parameter pos_emb;  // "pos_emb.weight" {context, hidden}

 private:
  int64_t vocab_, context_, hidden_;
  std::unique_ptr<Dropout> output_dropout_;  // none without dropout
  std::deque<Tensor> saved_ids_;
};

// A parameter of `shape` on `device`, its value uninitialised and its gradient zero.
Parameter make_parameter(Device& device, int layer, const std::string& name, std::vector<int64_t> shape);

// A LayerNorm's gamma ("….weight", ones in PyTorch's init) and beta ("….bias", zeros), {hidden} each.
struct LayerNormParameters {
  Parameter weight;
  Parameter bias;
};

class TransformerBlock : public Layer {
 public:
  // Named "block<block>" (the model's layer), parameters "blocks.<block>.…" (PyTorch's); rows of the
  // input are B·T tokens, T = context.
  TransformerBlock(Device& device, int index, int block, int64_t hidden, int64_t heads, int64_t context);

  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override;
  // Keeps, per forward: x, ln1's and ln2's mean and rstd, qkv, the attention's P {B·heads·T, T},
  // the residual stream h between the halves and the MLP's activation before and after GELU (the
  // same tensors the Linears keep as their inputs and outputs). With recompute, only x.
  Tensor forward(const Tensor& x, int micro_batch = -1) override;
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override;
  void clear_saved() override;
  // ln1.weight, ln1.bias, attn.qkv.weight {3C, C}, attn.qkv.bias, attn.proj.weight {C, C},
  // attn.proj.bias, ln2.weight, ln2.bias, mlp.fc.weight {4C, C}, mlp.fc.bias, mlp.proj.weight {C, 4C},
  // mlp.proj.bias.
  std::vector<Parameter*> parameters() override;
  // f16 / bf16: the four Linears, attention and GELU in half; see the top of this file.
  void set_precision(DType compute) override;
  void refresh_half_weights(int micro_batch = -1) override;
  void drop_half_weights() override;

  // Activation checkpointing: forward keeps only the block's input; backward first runs the
  // forward again (its own ops named "….recompute", in the backward phase), then the backward.
  // The gradients are the same bits; the activations of the block live only during its backward.
  void set_recompute(bool on) override { recompute_ = on; }
  bool recompute() const { return recompute_; }
  // Zero bubble: the four Linears leave their dW to weight_pass(); the LayerNorms' come in backward.
  void set_weight_pass(bool deferred) override;
  void weight_pass(bool accumulate, int micro_batch = -1) override;

  LayerNormParameters ln1, ln2;
  Linear qkv, proj, fc, mlp_proj;  // attn.qkv, attn.proj, mlp.fc, mlp.proj

 private:
  struct Saved {
    Tensor x, mean1, rstd1, qkv, probs, h, mean2, rstd2, f, g;
  };
  // The forward's ops; returns the output and fills `saved`. recomputing: names and phase of a rerun.
  Tensor run_forward(const Tensor& x, int micro_batch, bool recomputing, Saved& saved);
  OpTag tag(const std::string& what, Phase phase, int micro_batch, bool recomputing = false) const;
  // stream + branch in f32 (see the .cpp).
  Tensor add_residual(const Tensor& stream, const Tensor& branch, const OpTag& tag, const std::string& what);

  std::string prefix_;  // "blocks.<block>": its parameters' and ops' names (the layer is "block<block>")
  int64_t hidden_, heads_, context_;
  bool recompute_ = false;
  std::deque<Saved> saved_;
};

// The layer "head": ln_f then the untied head Linear(C → V) with bias: the logits.
class LmHead : public Layer {
 public:
  LmHead(Device& device, int index, int64_t hidden, int64_t vocab);

  std::vector<int64_t> output_shape(const std::vector<int64_t>& input) const override;
  // Keeps x and ln_f's mean and rstd (head keeps its input and output).
  Tensor forward(const Tensor& x, int micro_batch = -1) override;
  Tensor backward(const Tensor& dy, bool need_dx, bool accumulate = false, int micro_batch = -1) override;
  void clear_saved() override;
  // ln_f.weight, ln_f.bias, head.weight {V, C}, head.bias {V}.
  std::vector<Parameter*> parameters() override;
  // f16 / bf16: the head Linear in half (logits in half, as softmax_xent takes them); ln_f in f32.
  void set_precision(DType compute) override;
  void refresh_half_weights(int micro_batch = -1) override { head.refresh_half_weights(micro_batch); }
  void drop_half_weights() override { head.drop_half_weights(); }
  void set_weight_pass(bool deferred) override { head.set_weight_pass(deferred); }
  void weight_pass(bool accumulate, int micro_batch = -1) override { head.weight_pass(accumulate, micro_batch); }

  LayerNormParameters ln_f;
  Linear head;

 private:
  struct Saved {
    Tensor x, mean, rstd;
  };
  int64_t hidden_, vocab_;
  std::deque<Saved> saved_;
};

}  // namespace scalelab
