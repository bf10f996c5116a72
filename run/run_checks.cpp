// What a run checks of its config besides its options (run/train.h): where it will write, the host
// memory it needs, and after each step that the loss is finite.
#include <climits>
#include <cmath>
#include <cstdio>

#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/file_check.h"
#include "core/nn/model.h"
#include "core/proc/host_memory.h"
#include "run/train.h"

namespace scalelab {

namespace {

std::vector<PathUse> train_paths(const TrainConfig& c) {
  return {{"--checkpoint", c.checkpoint_path, true},
          {"--trace", c.trace_path, true},
          {"--json", c.json_path, true},
          {"--dump-batches", c.dump_batches_path, true},
          {"--resume", c.resume_path, false},
          {"--init-weights", c.init_weights_path, false},
          {"--hw", c.hw.empty() ? "" : profile_file(c.hw), false}};
}

}  // namespace

void check_output_paths(const TrainConfig& c, const std::vector<PathUse>& more) {
  const std::pair<const std::string*, const char*> outputs[] = {
      {&c.checkpoint_path, "checkpoint"}, {&c.trace_path, "trace"}, {&c.json_path, "train"},
      {&c.dump_batches_path, "dump-batches"}};
  for (const auto& [path, component] : outputs)
    if (!path->empty()) check_output_path(*path, component);
  std::vector<PathUse> paths = train_paths(c);
  paths.insert(paths.end(), more.begin(), more.end());
  // Continuing a run into the file it resumed from is what a long run on a cluster does.
  check_distinct_paths(paths, "train", {{"--resume", "--checkpoint"}});
}

int64_t host_bytes_needed(const TrainConfig& c) {
  const ModelSpec spec = ModelSpec::parse(c.model);
  // In doubles: sizes of nine digits multiply past int64.
  double floats = 0;
  const double samples = c.dataset == "synthetic" ? static_cast<double>(c.synthetic_train + c.synthetic_test) : 70000.0;
  floats += samples * static_cast<double>(spec.inputs());
  if (c.device != DeviceKind::cuda && !c.dry_run) {
    const double params = static_cast<double>(spec.parameter_count());
    floats += params * (2 + optimizer_state_tensors(c.optimizer));  // weights, gradients, optimizer state
    // What forward keeps per sample: the activations between layers, and inside a GPT's blocks
    // the attention's probabilities (heads × T²) and about a dozen T × C tensors.
    double width = 0;
    for (int l = 0; l <= spec.layer_count(); ++l) {
      const std::vector<int64_t> shape = spec.activation_shape(l, 1);
      width += static_cast<double>(shape[0]) * static_cast<double>(shape[1]);
    }
    if (spec.family == ModelFamily::gpt) {
      const double T = static_cast<double>(spec.gpt.context), C = static_cast<double>(spec.gpt.hidden);
      width += static_cast<double>(spec.gpt.layers) * (12.0 * T * C + static_cast<double>(spec.gpt.heads) * T * T);
    }
    floats += 2.0 * static_cast<double>(c.batch) * width;  // activations and their gradients
  }
  const double bytes = 4 * floats;
  return bytes > 9.0e18 ? INT64_MAX : static_cast<int64_t>(bytes);
}

void check_host_memory(const TrainConfig& c, bool suggest_dry_run) {
  const HostMemory memory = host_memory();
  if (memory.bytes <= 0) return;  // unknown: nothing to compare with
  const double host = memory.bytes;
  const double need = static_cast<double>(host_bytes_needed(c));
  if (need <= host) return;
  char buf[320];
  std::snprintf(buf, sizeof buf, "needs at least %.3g GB of host memory (the data, then the model's weights, gradients, "
                "optimizer state and activations of --batch %lld), this host has %.3g GB%s",
                need / 1e9, static_cast<long long>(c.batch), host / 1e9, memory.cgroup_limited ? " (its cgroup's limit)" : "");
  throw UsageError("memory", "--model " + c.model + " " + buf + " — use a smaller --model or --batch" +
                                 (c.dry_run || !suggest_dry_run ? std::string() : ", or plan it without numerics: --device sim --hw PROFILE --dry-run"));
}

void check_divergence(const TrainConfig& c, int64_t step, double loss) {
  if (std::isfinite(loss) || c.allow_divergence) return;
  const OptimizerConfig& o = c.optimizer;
  char momentum[64] = "";
  if (o.kind == "sgd") std::snprintf(momentum, sizeof momentum, " or the momentum (--momentum %g)", static_cast<double>(o.momentum));
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "step %lld: the loss is %s — training diverged; the likely cause is the learning rate (--lr %g), "
                "the weight decay (--weight-decay %g)%s — lower --lr (%s's default is %g), or pass --allow-divergence "
                "to keep going",
                static_cast<long long>(step), std::isnan(loss) ? "nan" : "infinite", static_cast<double>(o.lr),
                static_cast<double>(o.weight_decay), momentum, o.kind.c_str(), o.kind == "adam" ? 0.001 : 0.03);
  throw Error("train", buf);
}

}  // namespace scalelab
