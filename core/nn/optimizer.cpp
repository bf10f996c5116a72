#include "core/nn/optimizer.h"

#include "core/error.h"

namespace scalelab {

void OptimizerConfig::validate() const {
  if (kind != "sgd" && kind != "adam")
    throw UsageError("optim", "--optimizer '" + kind + "' is unknown — use sgd or adam");
  if (!(lr > 0)) throw UsageError("optim", "--lr must be > 0, got " + std::to_string(lr));
  if (momentum < 0 || momentum >= 1) throw UsageError("optim", "--momentum must be in [0, 1), got " + std::to_string(momentum));
  if (weight_decay < 0) throw UsageError("optim", "--weight-decay must be ≥ 0, got " + std::to_string(weight_decay));
}

Optimizer::Optimizer(const OptimizerConfig& config, std::vector<Parameter*> params)
    : config_(config), params_(std::move(params)) {
  config_.validate();
  for (Parameter* p : params_) {
    Device& d = *p->value.device();
    if (config_.kind == "adam") {
      m_.push_back(d.zeros(p->value.shape(), DType::f32, MemoryCategory::optimizer, p->name + ".exp_avg"));
      v_.push_back(d.zeros(p->value.shape(), DType::f32, MemoryCategory::optimizer, p->name + ".exp_avg_sq"));
    } else if (config_.momentum != 0.0f) {
      momentum_.push_back(d.zeros(p->value.shape(), DType::f32, MemoryCategory::optimizer, p->name + ".momentum"));
    }
  }
}

void Optimizer::step() {
  ++t_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    Device& d = *p.value.device();
    OpTag tag{p.name + ".step", Phase::optim, p.layer};
    if (config_.kind == "adam") {
      AdamOptions o{config_.lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay};
      d.adam(tag, p.value, p.grad, m_[i], v_[i], o, t_);
    } else {
      SgdOptions o{config_.lr, config_.momentum, config_.weight_decay};
      d.sgd(tag, p.value, p.grad, momentum_.empty() ? Tensor() : momentum_[i], o);
    }
  }
}

std::vector<Tensor> Optimizer::state() {
  std::vector<Tensor> s;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!m_.empty()) {
      s.push_back(m_[i]);
      s.push_back(v_[i]);
    } else if (!momentum_.empty()) {
      s.push_back(momentum_[i]);
    }
  }
  return s;
}

}  // namespace scalelab
