#include "core/nn/transformer_layers.h"

#include "core/error.h"

namespace scalelab {

Parameter make_parameter(Device& device, int layer, const std::string& name, std::vector<int64_t> shape) {
  Parameter p;
  p.name = name;
  p.layer = layer;
  p.value = device.empty(shape, DType::f32, MemoryCategory::params, name);
  p.grad = device.zeros(shape, DType::f32, MemoryCategory::grads, name + ".grad");
  return p;
}

namespace {

LayerNormParameters make_layer_norm(Device& device, int layer, const std::string& name, int64_t hidden) {
  return {make_parameter(device, layer, name + ".weight", {hidden}),
          make_parameter(device, layer, name + ".bias", {hidden})};
}

// The checks of a block's and the head's input: {rows, hidden}.
void check_hidden(const std::string& layer, const std::vector<int64_t>& input, int64_t hidden) {
  if (input.size() != 2 || input[1] != hidden)
    throw Error("nn", layer + " expects {B·T, " + std::to_string(hidden) + "} (a row per token), got " +
                          shape_text(input) + " — feed it the output of the token embedding or of a block");
}

// f32, f16 or bf16, or an error naming the layer.
void check_precision(const std::string& layer, DType compute) {
  if (compute != DType::f32 && compute != DType::f16 && compute != DType::bf16)
    throw Error("nn", layer + " cannot compute in " + dtype_name(compute) +
                          " — use f32, or f16 / bf16 for mixed precision");
}

// t in dtype d: t itself, or a cast copy (where half and f32 parts of a mixed-precision layer meet).
Tensor as_dtype(Device& device, const Tensor& t, DType d, const OpTag& tag, const std::string& what) {
  if (t.dtype() == d) return t;
  Tensor out = device.empty(t.shape(), d, MemoryCategory::activations, what + "." + dtype_name(d));
  device.cast(tag, t, out);
  return out;
}

// "blocks.3": what block 3's parameters and ops are named by, as in PyTorch's state_dict.
std::string block_prefix(int block) { return "blocks." + std::to_string(block); }

}  // namespace

// ---- TokenEmbedding -----------------------------------------------------------------------

TokenEmbedding::TokenEmbedding(Device& device, int index, int64_t vocab, int64_t context, int64_t hidden)
    : Layer(device, index, "embed"), vocab_(vocab), context_(context), hidden_(hidden) {
  if (vocab < 1 || context < 1 || hidden < 1)
    throw Error("nn", "embed needs a vocabulary, context and hidden size of at least 1, got " +
                          std::to_string(vocab) + ", " + std::to_string(context) + ", " + std::to_string(hidden));
  tok_emb = make_parameter(device, index, "tok_emb.weight", {vocab, hidden});
  pos_emb = make_parameter(device, index, "pos_emb.weight", {context, hidden});
}

std::vector<int64_t> TokenEmbedding::output_shape(const std::vector<int64_t>& input) const {
  if (input.size() != 2 || input[1] != context_)
    throw Error("nn", "embed expects token ids {B, " + std::to_string(context_) + "} (a row per sequence of the "
                      "context's length), got " + shape_text(input) + " — cut the text into sequences of " +
                      std::to_string(context_) + " tokens");
  return {input[0] * context_, hidden_};
}

void TokenEmbedding::set_precision(DType compute) {
  check_precision(name_, compute);
  compute_ = compute;
}

void TokenEmbedding::set_output_dropout(float p, uint64_t seed) {
  output_dropout_ = p > 0.0f ? std::make_unique<Dropout>(*device_, index_, "embed.drop", p, seed, context_) : nullptr;
}

void TokenEmbedding::set_batch_position(const BatchPosition& position) {
  if (output_dropout_) output_dropout_->set_batch_position(position);
}

void TokenEmbedding::set_training(bool on) {
  if (output_dropout_) output_dropout_->set_training(on);
}

Tensor TokenEmbedding::forward(const Tensor& ids, int micro_batch) {
  const std::vector<int64_t> out_shape = output_shape(ids.shape());
  Tensor out = device_->empty(out_shape, DType::f32, MemoryCategory::activations, "embed.out");
  device_->embedding({"embed.fwd", Phase::fwd, index_, micro_batch}, ids, tok_emb.value, pos_emb.value, out);
  saved_ids_.push_back(ids);
  return output_dropout_ ? output_dropout_->forward(out, micro_batch) : out;
}

Tensor TokenEmbedding::backward(const Tensor& output_grad, bool, bool accumulate, int micro_batch) {
  if (saved_ids_.empty()) throw Error("nn", "embed: backward without a forward");
  const Tensor ids = saved_ids_.front();  // the oldest: micro-batches run their backwards in order
  saved_ids_.pop_front();
  const Tensor dy = output_dropout_ ? output_dropout_->backward(output_grad, true, false, micro_batch) : output_grad;
  device_->embedding_backward({"embed.bwd", Phase::bwd, index_, micro_batch}, dy, ids, tok_emb.grad, pos_emb.grad,
                              accumulate);
  return Tensor();
}

// ---- TransformerBlock ---------------------------------------------------------------------

TransformerBlock::TransformerBlock(Device& device, int index, int block, int64_t hidden, int64_t heads, int64_t context)
    : Layer(device, index, "block" + std::to_string(block)),
      ln1(make_layer_norm(device, index, block_prefix(block) + ".ln1", hidden)),
      ln2(make_layer_norm(device, index, block_prefix(block) + ".ln2", hidden)),
      qkv(device, index, block_prefix(block) + ".attn.qkv", hidden, 3 * hidden, Activation::none),
      proj(device, index, block_prefix(block) + ".attn.proj", hidden, hidden, Activation::none),
      fc(device, index, block_prefix(block) + ".mlp.fc", hidden, 4 * hidden, Activation::none),
      mlp_proj(device, index, block_prefix(block) + ".mlp.proj", 4 * hidden, hidden, Activation::none),
      prefix_(block_prefix(block)),
      hidden_(hidden),
      heads_(heads),
      context_(context) {
  if (heads < 1 || hidden % heads != 0)
    throw Error("nn", name_ + ": hidden size " + std::to_string(hidden) + " does not split into " +
                          std::to_string(heads) + " heads — make the hidden size a multiple of the heads");
  if (context < 1) throw Error("nn", name_ + ": context must be at least 1, got " + std::to_string(context));
}

std::vector<Parameter*> TransformerBlock::parameters() {
  return {&ln1.weight, &ln1.bias, &qkv.weight, &qkv.bias, &proj.weight, &proj.bias,
          &ln2.weight, &ln2.bias, &fc.weight,  &fc.bias,  &mlp_proj.weight, &mlp_proj.bias};
}

void TransformerBlock::set_precision(DType compute) {
  check_precision(name_, compute);
  compute_ = compute;
  for (Linear* l : {&qkv, &proj, &fc, &mlp_proj}) l->set_precision(compute);
}

void TransformerBlock::refresh_half_weights(int micro_batch) {
  for (Linear* l : {&qkv, &proj, &fc, &mlp_proj}) l->refresh_half_weights(micro_batch);
}

void TransformerBlock::drop_half_weights() {
  for (Linear* l : {&qkv, &proj, &fc, &mlp_proj}) l->drop_half_weights();
}

void TransformerBlock::set_weight_pass(bool deferred) {
  for (Linear* l : {&qkv, &proj, &fc, &mlp_proj}) l->set_weight_pass(deferred);
}

void TransformerBlock::weight_pass(bool accumulate, int micro_batch) {
  for (Linear* l : {&mlp_proj, &fc, &proj, &qkv}) l->weight_pass(accumulate, micro_batch);  // backward's order
}

std::vector<int64_t> TransformerBlock::output_shape(const std::vector<int64_t>& input) const {
  check_hidden(name_, input, hidden_);
  if (input[0] % context_ != 0)
    throw Error("nn", name_ + " expects whole sequences: " + std::to_string(input[0]) + " rows is not a multiple of " +
                          "the context " + std::to_string(context_) + " — split batches by sequence, never inside one");
  return input;
}

OpTag TransformerBlock::tag(const std::string& what, Phase phase, int micro_batch, bool recomputing) const {
  // A rerun of the forward belongs to the backward pass: that is when it runs, and what it costs.
  if (recomputing) return {prefix_ + "." + what + ".recompute", Phase::bwd, index_, micro_batch};
  return {prefix_ + "." + what + (phase == Phase::fwd ? ".fwd" : ".bwd"), phase, index_, micro_batch};
}

// The residual stream stays f32. An f32 branch (no AMP) takes the stream in place: its Linear has
// no activation, so its backward never reads that output. A half branch is added into a new f32
// copy of the stream.
Tensor TransformerBlock::add_residual(const Tensor& stream, const Tensor& branch, const OpTag& tag,
                                      const std::string& what) {
  if (branch.dtype() == DType::f32) {
    device_->axpy(tag, 1.0f, stream, branch);
    return branch;
  }
  Tensor sum = device_->empty(stream.shape(), DType::f32, MemoryCategory::activations, prefix_ + "." + what);
  device_->copy(tag, stream, sum);
  device_->axpy(tag, 1.0f, branch, sum);  // f32 += half
  return sum;
}

Tensor TransformerBlock::run_forward(const Tensor& x, int micro_batch, bool recomputing, Saved& s) {
  const int64_t rows = x.rows(), C = hidden_, T = context_;
  auto act = [&](std::vector<int64_t> shape, const std::string& what, DType dtype = DType::f32) {
    return device_->empty(std::move(shape), dtype, MemoryCategory::activations, prefix_ + "." + what);
  };
  s.x = x;
  // Attention half: h = x + proj(attention(qkv(ln1(x)))).
  Tensor a = act({rows, C}, "ln1.out");
  s.mean1 = act({rows}, "ln1.mean");
  s.rstd1 = act({rows}, "ln1.rstd");
  device_->layer_norm(tag("ln1", Phase::fwd, micro_batch, recomputing), x, ln1.weight.value, ln1.bias.value, a,
                      s.mean1, s.rstd1);
  s.qkv = qkv.forward(a, micro_batch);  // {rows, 3C}: q | k | v
  s.probs = act({rows * heads_, T}, "attn.probs", compute_);  // {B·heads·T, T}
  Tensor att = act({rows, C}, "attn.out", compute_);
  device_->attention(tag("attn", Phase::fwd, micro_batch, recomputing), s.qkv, heads_, s.probs, att);
  s.h = add_residual(x, proj.forward(att, micro_batch), tag("attn.residual", Phase::fwd, micro_batch, recomputing),
                     "attn.residual");
  // MLP half: out = h + mlp.proj(gelu(mlp.fc(ln2(h)))).
  Tensor b = act({rows, C}, "ln2.out");
  s.mean2 = act({rows}, "ln2.mean");
  s.rstd2 = act({rows}, "ln2.rstd");
  device_->layer_norm(tag("ln2", Phase::fwd, micro_batch, recomputing), s.h, ln2.weight.value, ln2.bias.value, b,
                      s.mean2, s.rstd2);
  s.f = fc.forward(b, micro_batch);  // {rows, 4C}
  s.g = act({rows, 4 * C}, "mlp.gelu", compute_);
  device_->gelu(tag("mlp.gelu", Phase::fwd, micro_batch, recomputing), s.f, s.g);
  return add_residual(s.h, mlp_proj.forward(s.g, micro_batch),
                      tag("mlp.residual", Phase::fwd, micro_batch, recomputing), "mlp.residual");
}

Tensor TransformerBlock::forward(const Tensor& x, int micro_batch) {
  output_shape(x.shape());
  if (x.dtype() != DType::f32)
    throw Error("nn", name_ + " takes its input in f32 (the residual stream stays f32 under mixed precision), got " +
                          x.shape_string() + " — feed it the embedding's or a block's output");
  Saved s;
  Tensor out = run_forward(x, micro_batch, false, s);
  if (recompute_) {
    // Keep the input alone: what the Linears and `s` hold is freed here, and made again in backward.
    for (Linear* l : {&qkv, &proj, &fc, &mlp_proj}) l->forget_last_forward();
    s = Saved{x, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  }
  saved_.push_back(std::move(s));
  return out;
}

Tensor TransformerBlock::backward(const Tensor& dy, bool need_dx, bool accumulate, int micro_batch) {
  if (saved_.empty()) throw Error("nn", name_ + ": backward without a forward");
  Saved s = std::move(saved_.front());  // the oldest: micro-batches run their backwards in order
  saved_.pop_front();
  if (!s.qkv.defined()) {  // the forward kept x alone (recompute)
    const Tensor x = s.x;
    run_forward(x, micro_batch, true, s);  // the Linears keep their inputs again, for their backwards
  }
  const int64_t rows = dy.rows(), C = hidden_;
  auto grad = [&](std::vector<int64_t> shape, const std::string& what, DType dtype = DType::f32) {
    return device_->empty(std::move(shape), dtype, MemoryCategory::activations, prefix_ + "." + what);
  };
  // In f32 the Linears get the stream's gradients as they are; under AMP half casts of them, and
  // their input gradients come back in half, cast to f32 for the LayerNorms.
  const DType c = compute_;
  // MLP half. mlp.proj has no activation, so its backward leaves its dy as it is: dy is still the
  // residual's gradient below.
  Tensor dg = mlp_proj.backward(as_dtype(*device_, dy, c, tag("mlp.proj.dy", Phase::bwd, micro_batch), prefix_ + ".mlp.dy"),
                                true, accumulate, micro_batch);
  device_->gelu_backward(tag("mlp.gelu", Phase::bwd, micro_batch), dg, s.f, s.g, dg);  // in place
  const OpTag ln2_tag = tag("ln2", Phase::bwd, micro_batch);
  Tensor db = as_dtype(*device_, fc.backward(dg, true, accumulate, micro_batch), DType::f32, ln2_tag, prefix_ + ".ln2.dy");
  Tensor dh = grad({rows, C}, "ln2.dx");
  device_->layer_norm_backward(ln2_tag, db, s.h, ln2.weight.value, s.mean2, s.rstd2, dh, ln2.weight.grad,
                               ln2.bias.grad, accumulate);
  device_->axpy(tag("mlp.residual", Phase::bwd, micro_batch), 1.0f, dy, dh);  // h fed both the MLP and the output
  // Attention half, the same way: dh is the residual's gradient.
  Tensor datt = proj.backward(as_dtype(*device_, dh, c, tag("attn.proj.dy", Phase::bwd, micro_batch), prefix_ + ".attn.dy"),
                              true, accumulate, micro_batch);
  Tensor dqkv = grad({rows, 3 * C}, "attn.dqkv", c);
  {
    // dP, then dS in its place: workspace for the op's length, as large as P.
    Tensor dscores = device_->empty(s.probs.shape(), c, MemoryCategory::workspace, prefix_ + ".attn.dscores");
    device_->attention_backward(tag("attn", Phase::bwd, micro_batch), datt, s.qkv, s.probs, heads_, dscores, dqkv);
  }
  const OpTag ln1_tag = tag("ln1", Phase::bwd, micro_batch);
  Tensor da = as_dtype(*device_, qkv.backward(dqkv, true, accumulate, micro_batch), DType::f32, ln1_tag, prefix_ + ".ln1.dy");
  Tensor dx = grad({rows, C}, "ln1.dx");
  device_->layer_norm_backward(ln1_tag, da, s.x, ln1.weight.value, s.mean1, s.rstd1, dx, ln1.weight.grad,
                               ln1.bias.grad, accumulate);
  device_->axpy(tag("attn.residual", Phase::bwd, micro_batch), 1.0f, dh, dx);
  return need_dx ? dx : Tensor();
}

void TransformerBlock::clear_saved() {
  saved_.clear();
  for (Linear* l : {&qkv, &proj, &fc, &mlp_proj}) l->clear_saved();
}

// ---- LmHead -------------------------------------------------------------------------------

LmHead::LmHead(Device& device, int index, int64_t hidden, int64_t vocab)
    : Layer(device, index, "head"),
      ln_f(make_layer_norm(device, index, "ln_f", hidden)),
      head(device, index, "head", hidden, vocab, Activation::none),
      hidden_(hidden),
      vocab_(vocab) {}

std::vector<Parameter*> LmHead::parameters() { return {&ln_f.weight, &ln_f.bias, &head.weight, &head.bias}; }

void LmHead::set_precision(DType compute) {
  check_precision(name_, compute);
  compute_ = compute;
  head.set_precision(compute);
}

std::vector<int64_t> LmHead::output_shape(const std::vector<int64_t>& input) const {
  check_hidden(name_, input, hidden_);
  return {input[0], vocab_};
}

Tensor LmHead::forward(const Tensor& x, int micro_batch) {
  output_shape(x.shape());
  const int64_t rows = x.rows();
  Saved s{x, device_->empty({rows}, DType::f32, MemoryCategory::activations, "ln_f.mean"),
          device_->empty({rows}, DType::f32, MemoryCategory::activations, "ln_f.rstd")};
  Tensor a = device_->empty({rows, hidden_}, DType::f32, MemoryCategory::activations, "ln_f.out");
  device_->layer_norm({"ln_f.fwd", Phase::fwd, index_, micro_batch}, x, ln_f.weight.value, ln_f.bias.value, a, s.mean,
                      s.rstd);
  saved_.push_back(std::move(s));
  return head.forward(a, micro_batch);
}

Tensor LmHead::backward(const Tensor& dy, bool need_dx, bool accumulate, int micro_batch) {
  if (saved_.empty()) throw Error("nn", "head: backward without a forward");
  Saved s = std::move(saved_.front());
  saved_.pop_front();
  const OpTag tag{"ln_f.bwd", Phase::bwd, index_, micro_batch};
  Tensor da = as_dtype(*device_, head.backward(dy, true, accumulate, micro_batch), DType::f32, tag, "ln_f.dy");
  Tensor dx = device_->empty(s.x.shape(), DType::f32, MemoryCategory::activations, "ln_f.dx");
  device_->layer_norm_backward(tag, da, s.x, ln_f.weight.value, s.mean,
                               s.rstd, dx, ln_f.weight.grad, ln_f.bias.grad, accumulate);
  return need_dx ? dx : Tensor();
}

void LmHead::clear_saved() {
  saved_.clear();
  head.clear_saved();
}

}  // namespace scalelab
