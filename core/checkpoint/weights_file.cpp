#include "core/checkpoint/weights_file.h"

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"

namespace scalelab {

std::string torch_parameter_name(const ModelSpec& spec, size_t p) {
  if (spec.family == ModelFamily::mlp) return std::to_string(2 * (p / 2)) + (p % 2 == 0 ? ".weight" : ".bias");
  return spec.tensors()[p].name;
}

std::vector<NpzArray> export_arrays(const Checkpoint& ck) {
  const HostWeights& w = ck.state.weights;
  std::vector<NpzArray> out;
  const std::vector<TensorSpec>& tensors = w.spec.tensors();
  for (size_t p = 0; p < tensors.size() && p < w.values.size(); ++p)
    out.push_back({torch_parameter_name(w.spec, p), tensors[p].shape, w.values[p], {}, false});
  const std::string kind = ck.header.optimizer.kind;
  const std::vector<std::string> names = kind == "adam" ? std::vector<std::string>{"exp_avg", "exp_avg_sq"}
                                                        : std::vector<std::string>{"momentum_buffer"};
  for (size_t i = 0; i < ck.state.optimizer.size(); ++i)
    for (size_t k = 0; k < ck.state.optimizer[i].size() && k < names.size(); ++k) {
      const NpzArray& param = out[i];
      out.push_back({"optimizer." + param.name + "." + names[k], param.shape, ck.state.optimizer[i][k], {}, false});
    }
  out.push_back({"optimizer.step", {}, {}, {ck.state.optimizer_steps}, true});
  return out;
}

HostWeights load_weights_npz(const std::string& path, const ModelSpec& spec) {
  std::map<std::string, NpzArray> arrays;
  // The most such a file holds: the weights and two arrays of optimizer state each (an export of an
  // Adam run), as float64, with room for the archive's headers.
  const int64_t cap = 3 * 8 * spec.parameter_count() + (int64_t{1} << 20);
  for (NpzArray& a : read_npz(path, cap, "--model " + spec.text + "'s weights and optimizer state as float64"))
    arrays[a.name] = std::move(a);
  HostWeights w;
  w.spec = spec;
  const std::string keys = spec.family == ModelFamily::mlp ? "nn.Sequential's (0.weight, 0.bias, 2.weight, …)"
                                                             : "the model's state_dict names (" + spec.tensors().front().name + ", …)";
  auto take = [&](size_t p, const std::vector<int64_t>& shape) {
    const std::string name = torch_parameter_name(spec, p);
    auto it = arrays.find(name);
    if (it == arrays.end())
      throw UsageError("init-weights", path + ": no array '" + name + "' — the keys are " + keys + " for --model " + spec.text);
    auto shape_text = [](const std::vector<int64_t>& s) {
      std::string t = "(";
      for (size_t k = 0; k < s.size(); ++k) t += (k ? ", " : "") + std::to_string(s[k]);
      return t + ")";
    };
    if (it->second.integer)
      throw UsageError("init-weights", path + ": '" + name + "' holds integers, --model " + spec.text + " needs floats " +
                                           "(float32 or float64) — save the weights as floats");
    if (it->second.shape != shape)
      throw UsageError("init-weights", path + ": '" + name + "' has shape " + shape_text(it->second.shape) + ", --model " +
                                           spec.text + " needs " + shape_text(shape) + " of floats");
    // A NaN or inf would surface steps later as a divergence blamed on --lr.
    const std::vector<float>& v = it->second.f32;
    for (size_t k = 0; k < v.size(); ++k)
      if (!std::isfinite(v[k]))
        throw UsageError("init-weights", path + ": '" + name + "' holds " + (std::isnan(v[k]) ? "nan" : "inf") +
                                             " at index " + std::to_string(k) + " (float32 holds at most 3.4e38) — "
                                             "save finite weights");
    return std::move(it->second.f32);
  };
  // An array the model has no place for means the file is another model's (784-32-10-10 is not
  // 784-32-10): refused, not dropped. What export writes besides the weights is the optimizer's
  // state of these same parameters and its step.
  std::set<std::string> known = {"optimizer.step"};
  const size_t parameters = spec.tensors().size();
  for (size_t p = 0; p < parameters; ++p) {
    known.insert(torch_parameter_name(spec, p));
    for (const char* state : {"momentum_buffer", "exp_avg", "exp_avg_sq"})
      known.insert("optimizer." + torch_parameter_name(spec, p) + "." + state);
  }
  std::string unknown;
  int unknown_count = 0;
  for (const auto& [name, array] : arrays)
    if (!known.count(name) && ++unknown_count <= 6) unknown += (unknown.empty() ? "'" : ", '") + name + "'";
  if (unknown_count > 6) unknown += " and " + std::to_string(unknown_count - 6) + " more";
  if (unknown_count > 0)
    throw UsageError("init-weights", path + ": " + (unknown_count == 1 ? "array " : "arrays ") + unknown +
                                         " that --model " + spec.text + " does not have (its parameters are " +
                                         torch_parameter_name(spec, 0) + " … " + torch_parameter_name(spec, parameters - 1) +
                                         ") — the file holds another model's weights; pass the --model they were saved from");
  for (size_t p = 0; p < parameters; ++p) w.values.push_back(take(p, spec.tensors()[p].shape));
  return w;
}

}  // namespace scalelab
