#pragma once
// Weights and optimizer state as PyTorch names them, in numpy's .npz: what `scalelab export` writes
// from a checkpoint and `--init-weights` reads. An MLP is PyTorch's
// nn.Sequential(Linear, ReLU, Linear, ReLU, …, Linear), so layer l's parameters are
// "{2l}.weight" (out × in) and "{2l}.bias"; the ConvNet's and a GPT's are their state_dict names
// (conv1.weight, blocks.0.attn.qkv.weight, …: ModelSpec::tensors). Optimizer state follows
// torch.optim's state names: "optimizer.<name>.momentum_buffer" (SGD with momentum), ".exp_avg"
// and ".exp_avg_sq" (Adam), and "optimizer.step".
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/io/npz.h"
#include "core/nn/model.h"

namespace scalelab {

// Parameter p of the model as PyTorch names it: an MLP's "0.weight", "0.bias", "2.weight", … (for
// fc1.weight, fc1.bias, fc2.weight …); the other families' state_dict names.
std::string torch_parameter_name(const ModelSpec& spec, size_t p);

std::vector<NpzArray> export_arrays(const Checkpoint& checkpoint);

// The weights of `spec` from an .npz with those names (as written by export, or by
// `np.savez(F, **{k: v.numpy() for k, v in model.state_dict().items()})`). Throws
// UsageError("init-weights", …) naming the missing key or the shape that differs from --model.
HostWeights load_weights_npz(const std::string& path, const ModelSpec& spec);

}  // namespace scalelab
