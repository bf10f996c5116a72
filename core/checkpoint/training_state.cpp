#include "core/checkpoint/training_state.h"

#include "core/error.h"

namespace scalelab {

void validate_resume(const TrainingState& s, const ModelSpec& model, const OptimizerConfig& optimizer,
                     const std::string& source) {
  const std::string where = source.empty() ? "the saved state" : source;
  if (!s.weights.spec.same_model(model))
    throw UsageError("checkpoint", where + ": the weights are for " + s.weights.spec.text + ", this run trains " +
                                       model.text + " — resume with the same --model");
  const std::vector<TensorSpec>& tensors = model.tensors();
  const size_t parameters = tensors.size();
  if (s.weights.values.size() != parameters || s.optimizer.size() != parameters)
    throw UsageError("checkpoint", where + ": holds " + std::to_string(s.optimizer.size()) +
                                       " parameters' optimizer state, " + model.text + " has " +
                                       std::to_string(parameters) + " — resume with the same --model");
  const size_t k = static_cast<size_t>(optimizer_state_tensors(optimizer));
  for (size_t p = 0; p < parameters; ++p) {
    const int64_t numel = tensors[p].numel();
    const std::vector<float>& value = s.weights.values[p];
    const std::string& name = tensors[p].name;
    if (static_cast<int64_t>(value.size()) != numel)
      throw UsageError("checkpoint", where + ": " + name + " has " + std::to_string(value.size()) + " values, " +
                                         model.text + " needs " + std::to_string(numel) + " — resume with the same --model");
    if (s.optimizer[p].size() != k)
      throw UsageError("checkpoint", where + ": " + name + " has " + std::to_string(s.optimizer[p].size()) +
                                         " optimizer state tensors, " + optimizer.kind + " keeps " + std::to_string(k) +
                                         " — resume with the same --optimizer and --momentum");
    for (const std::vector<float>& t : s.optimizer[p])
      if (static_cast<int64_t>(t.size()) != numel)
        throw UsageError("checkpoint", where + ": the optimizer state of " + name + " has " + std::to_string(t.size()) +
                                           " values, expected " + std::to_string(numel) + " — the file is not this model's");
  }
}

}  // namespace scalelab
