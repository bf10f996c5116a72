#include "core/nn/optimizer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace scalelab {

void OptimizerConfig::validate() const {
  if (kind != "sgd" && kind != "adam")
    throw UsageError("optim", "--optimizer '" + kind + "' is unknown — use sgd or adam");
  // Written so NaN fails each test (every comparison with NaN is false) and inf is named.
  auto text = [](float v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
    return std::string(buf);
  };
  if (!(lr > 0) || !std::isfinite(lr))
    throw UsageError("optim", "--lr must be a finite number > 0, got " + text(lr) + " — e.g. --lr 0.03 (sgd) or 0.001 (adam)");
  if (!(momentum >= 0 && momentum < 1))
    throw UsageError("optim", "--momentum must be in [0, 1), got " + text(momentum) + " — e.g. --momentum 0.9, or 0 for none");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay))
    throw UsageError("optim", "--weight-decay must be a finite number ≥ 0, got " + text(weight_decay) + " — e.g. --weight-decay 1e-4");
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps > 0) || !std::isfinite(eps))
    throw UsageError("optim", "--adam-betas must each be in [0, 1) and --adam-eps a finite number > 0, got " + text(beta1) +
                                  "," + text(beta2) + " and " + text(eps) + " — PyTorch's defaults are 0.9,0.999 and 1e-8");
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

namespace {

// The number the user wrote, as a double: --adam-betas 0.9,0.999 is held as the floats 0.9f and
// 0.999f, but PyTorch holds the Python floats 0.9 and 0.999, and Adam's 1 − β2 magnifies the
// difference (1 − 0.999f is 1.3e-5 off 0.001). The shortest decimal that gives back the float is
// what was written (for up to 7 significant digits), read again as a double.
double as_written(float value) {
  char text[32];
  const auto written = std::to_chars(text, text + sizeof text, value);
  double out = value;
  std::from_chars(text, written.ptr, out);
  return out;
}

}  // namespace

void Optimizer::step() {
  ++t_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    Device& d = *p.value.device();
    OpTag tag{p.name + ".step", Phase::optim, p.layer};
    if (config_.kind == "adam") {
      AdamOptions o{as_written(config_.lr), as_written(config_.beta1), as_written(config_.beta2), as_written(config_.eps),
                    config_.weight_decay};
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

int optimizer_state_tensors(const OptimizerConfig& o) {
  if (o.kind == "adam") return 2;
  return o.momentum != 0.0f ? 1 : 0;
}

int Optimizer::state_tensors_per_parameter() const { return optimizer_state_tensors(config_); }

std::vector<std::vector<std::vector<float>>> Optimizer::download_state() {
  const int k = state_tensors_per_parameter();
  std::vector<Tensor> flat = state();
  std::vector<std::vector<std::vector<float>>> out(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    for (int j = 0; j < k; ++j) {
      const Tensor& t = flat[i * static_cast<size_t>(k) + static_cast<size_t>(j)];
      std::vector<float> v(static_cast<size_t>(t.numel()));
      t.device()->download({params_[i]->name + ".state", Phase::data, params_[i]->layer}, v.data(), t);
      out[i].push_back(std::move(v));
    }
  return out;
}

void Optimizer::upload_state(const std::vector<std::vector<std::vector<float>>>& state) {
  // A state from a checkpoint was checked against the model and optimizer when it was loaded
  // (validate_resume); a mismatch here is a caller's bug, not a user's mistake.
  const int k = state_tensors_per_parameter();
  auto fits = [&](size_t i, size_t j, int64_t numel) {
    return state[i].size() == static_cast<size_t>(k) && static_cast<int64_t>(state[i][j].size()) == numel;
  };
  if (state.size() != params_.size())
    throw Error("optim", "internal: a state of " + std::to_string(state.size()) + " parameters for an optimizer of " +
                             std::to_string(params_.size()) + " — validate_resume should have refused it; please report it");
  std::vector<Tensor> flat = this->state();
  for (size_t i = 0; i < params_.size(); ++i) {
    for (int j = 0; j < k; ++j) {
      const Tensor& t = flat[i * static_cast<size_t>(k) + static_cast<size_t>(j)];
      if (!fits(i, static_cast<size_t>(j), t.numel()))
        throw Error("optim", "internal: the state given for " + params_[i]->name + " does not fit it — "
                             "validate_resume should have refused it; please report it");
      t.device()->upload({params_[i]->name + ".state", Phase::data, params_[i]->layer}, t, state[i][j].data());
    }
  }
}

}  // namespace scalelab
