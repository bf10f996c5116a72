#include "core/nn/layer.h"

#include "core/error.h"

namespace scalelab {

void Layer::set_precision(DType compute) {
  if (compute != DType::f32)
    throw Error("nn", name_ + " cannot compute in " + dtype_name(compute) +
                          " — mixed precision (--amp) is not written for this kind of layer; run it in f32");
  compute_ = compute;
}

void Layer::set_half_copies(DType compute) {
  if (compute != DType::f32 && compute != DType::f16 && compute != DType::bf16)
    throw Error("nn", name_ + " cannot compute in " + dtype_name(compute) + " — use f32, or f16 / bf16 for mixed precision");
  compute_ = compute;
  half_copies_cast_ = false;
  half_copies_.clear();
  if (compute == DType::f32) return;
  const std::string half = std::string(".") + dtype_name(compute);
  for (Parameter* p : parameters())
    half_copies_.push_back(p->value.defined() ? device_->empty(p->value.shape(), compute, MemoryCategory::workspace, p->name + half)
                                              : Tensor());
}

void Layer::refresh_half_copies(int micro_batch) {
  if (compute_ == DType::f32) return;
  const std::string to = std::string(" → ") + dtype_name(compute_);
  const std::vector<Parameter*> params = parameters();
  const std::string half = std::string(".") + dtype_name(compute_);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!half_copies_[i].defined())
      half_copies_[i] = device_->empty(params[i]->value.shape(), compute_, MemoryCategory::workspace, params[i]->name + half);
    device_->cast({params[i]->name + to, Phase::fwd, index_, micro_batch}, params[i]->value, half_copies_[i]);
  }
  half_copies_cast_ = true;
}

void Layer::drop_half_copies() {
  for (Tensor& copy : half_copies_) copy = Tensor();
  half_copies_cast_ = false;
}

void Layer::check_half_copies_cast() const {
  if (compute_ != DType::f32 && !half_copies_cast_)
    throw Error("nn", name_ + " computes in " + dtype_name(compute_) +
                          " but its half weights were never cast — call refresh_half_weights() at the start of every step");
}

void Layer::to_master_grad(const Tensor& half, Parameter& p, bool accumulate, int micro_batch, Phase phase) {
  const OpTag tag{p.name + ".grad → f32", phase, index_, micro_batch};
  if (accumulate) device_->axpy(tag, 1.0f, half, p.grad);  // .grad += f32(half gradient)
  else device_->cast(tag, half, p.grad);                  // .grad  = f32(half gradient)
}

}  // namespace scalelab
