// `scalelab plan`: the configurations of a 3D run priced by the cost model (run/plan.h), and the
// published runs next to what it predicts for them.
#include "apps/scalelab/plan_cli.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/scalelab/scale.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "run/plan.h"

namespace scalelab {
namespace {

using nlohmann::json;

json row_json(const PlanRow& r) {
  const PlanConfig& c = r.config;
  json j = {{"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}, {"micro_batch", c.micro_batch}, {"recompute", c.recompute},
            {"zero_stage", c.zero_stage}, {"virtual_stages", c.virtual_stages}};
  if (!r.invalid.empty()) {
    j["invalid"] = r.invalid;
    return j;
  }
  j["micro_batches"] = r.micro_batches;
  j["step_s"] = r.step_s;
  j["tflops_per_gpu"] = r.tflops_per_gpu;
  j["mfu"] = r.mfu;
  j["seconds"] = {{"compute", r.compute_s}, {"tp", r.tp_comm_s}, {"pp", r.pp_comm_s},
                  {"bubble", r.bubble_s},  {"dp", r.dp_comm_s}, {"optimizer", r.optimizer_s}};
  j["memory_bytes"] = {{"weights", r.memory.weights}, {"grads", r.memory.grads}, {"optimizer", r.memory.optimizer},
                       {"activations", r.memory.activations}, {"total", r.memory.total()}};
  j["fits"] = r.fits;
  return j;
}

std::vector<int> parse_list(const std::string& text, const std::string& option) {
  return text.empty() ? std::vector<int>{} : parse_sweep(text, option);
}

int run_published(const PlanOptions& o) {
  const std::vector<PublishedRun>& runs = published_runs();
  std::vector<double> fitted;
  for (const PublishedRun& run : runs) fitted.push_back(fit_kernel_efficiency(run));
  std::printf("Published runs and what plan predicts for them, TFLOP/s per GPU as their authors count (Megatron's\n"
              "formula, with recompute: 24·4·B·s·L·h²·(1 + s/6h + V/16Lh) a step):\n"
              "  as priced  the kernels at the profile's speed (kernel efficiency 1)\n"
              "  held out   the kernel efficiency fitted on the OTHER run(s), carried to this one\n\n");
  std::printf("%-11s %-20s %5s %-18s %9s %7s %9s %7s %9s %8s\n", "run", "profile", "GPUs", "D×T×P, mb, ZeRO", "as priced",
              "ratio", "held out", "ratio", "published", "GiB/GPU");
  json rows = json::array();
  for (size_t i = 0; i < runs.size(); ++i) {
    const PublishedRun& run = runs[i];
    const HardwareProfile profile = load_profile(run.profile);
    const PlanRow raw = price_plan(run.work, run.config, profile);
    if (!raw.invalid.empty()) throw Error("plan", run.name + "'s configuration cannot run: " + raw.invalid);
    double others = 0;
    for (size_t k = 0; k < runs.size(); ++k)
      if (k != i) others += fitted[k] / static_cast<double>(runs.size() - 1);
    PlanWorkload held = run.work;
    held.kernel_efficiency = runs.size() > 1 ? others : 1.0;
    const PlanRow r = price_plan(held, run.config, profile);
    const PlanConfig& c = run.config;
    const std::string how = std::to_string(c.dp) + "×" + std::to_string(c.tp) + "×" + std::to_string(c.pp) + ", " +
                            std::to_string(c.micro_batch) + ", " + std::to_string(c.zero_stage);
    std::printf("%-11s %-20s %5d %-18s %9.1f %7.2f %9.1f %7.2f %9.0f %8.1f\n", run.name.c_str(), run.profile.c_str(),
                run.devices, how.c_str(), raw.tflops_per_gpu, raw.tflops_per_gpu / run.published_tflops, r.tflops_per_gpu,
                r.tflops_per_gpu / run.published_tflops, run.published_tflops, r.memory.total() / (1024.0 * 1024 * 1024));
    json j = row_json(r);
    j["name"] = run.name;
    j["model"] = run.model;
    j["profile"] = run.profile;
    j["published_tflops"] = run.published_tflops;
    j["as_priced_tflops"] = raw.tflops_per_gpu;
    j["kernel_efficiency_fitted_here"] = fitted[i];
    j["kernel_efficiency_held_out"] = held.kernel_efficiency;
    j["source"] = run.source;
    rows.push_back(j);
  }
  std::printf("\nKernel efficiency fitted on each alone:");
  for (size_t i = 0; i < runs.size(); ++i) std::printf(" %s %.3f", runs[i].name.c_str(), fitted[i]);
  std::printf(" — the share of the profile's kernel speed the run reached.\nSources and assumptions: docs/planning.md.\n");
  if (!o.json_path.empty()) {
    write_file_atomically(o.json_path, rows.dump(2) + "\n", "plan");
    std::printf("  json  %s\n", o.json_path.c_str());
  }
  return 0;
}

}  // namespace

int run_plan(const PlanOptions& o) {
  if (!o.json_path.empty()) check_output_path(o.json_path, "plan");
  if (o.published) return run_published(o);
  if (o.devices < 1) throw UsageError("plan", "--devices " + std::to_string(o.devices) + ": give the cluster's GPUs (≥ 1)");
  if (o.batch < 1) throw UsageError("plan", "--batch " + std::to_string(o.batch) + ": give the global batch in sequences (≥ 1)");
  PlanWorkload w;
  w.model = ModelSpec::parse(o.model);
  if (w.model.family != ModelFamily::gpt) throw UsageError("plan", "--model " + o.model + " is not a GPT — plan prices gpt:L-C-H-T-V");
  w.global_batch = o.batch;
  w.kernel_efficiency = o.kernel_efficiency;
  if (o.amp == "bf16") w.compute = DType::bf16, w.grad_bytes = 4;
  else if (o.amp == "fp16") w.compute = DType::f16, w.grad_bytes = 2;
  else throw UsageError("plan", "--amp " + o.amp + ": plan prices 16-bit training — bf16 (gradients in f32) or fp16 (in fp16)");
  const HardwareProfile profile = load_profile(o.hw);

  PlanSweep sweep;
  sweep.tp = parse_list(o.tp, "--tp");
  sweep.pp = parse_list(o.pp, "--pp");
  if (!o.micro_batch.empty()) {
    sweep.micro_batches.clear();
    for (int v : parse_sweep(o.micro_batch, "--micro-batch")) sweep.micro_batches.push_back(v);
  }
  if (!o.zero.empty()) {
    sweep.zero_stages.clear();
    std::stringstream list(o.zero);
    for (std::string item; std::getline(list, item, ',');) {
      if (item != "0" && item != "1" && item != "3")
        throw UsageError("plan", "--zero-stage " + o.zero + ": '" + item + "' — plan prices stages 0, 1 and 3 (e.g. 0,1,3)");
      sweep.zero_stages.push_back(std::stoi(item));
    }
  }

  if (!o.virtual_stages.empty()) sweep.virtual_stages = parse_sweep(o.virtual_stages, "--virtual-stages");
  const std::vector<PlanRow> rows = plan_sweep(w, o.devices, profile, sweep);
  if (rows.empty())
    throw UsageError("plan", "no configuration of " + std::to_string(o.devices) + " GPUs runs " + o.model + " with --batch " +
                                 std::to_string(o.batch) + " (T must divide the heads and a node's GPUs, D·micro-batch the batch) — "
                                 "change --devices, --batch or the lists");
  const size_t fitting = static_cast<size_t>(std::count_if(rows.begin(), rows.end(), [](const PlanRow& r) { return r.fits; }));
  std::printf("%s on %d × %s (%s), global batch %lld, %s: %zu configurations, %zu fit in %.0f GiB\n", o.model.c_str(),
              o.devices, profile.device_model.c_str(), profile.name.c_str(), static_cast<long long>(o.batch), o.amp.c_str(),
              rows.size(), fitting, static_cast<double>(profile.mem_capacity_bytes) / (1024.0 * 1024 * 1024));
  std::printf("(TFLOP/s: Megatron's count per GPU; MFU: 6·P·tokens of the %s peak; bubble, TP, PP, DP: shares of the step;\n"
              " kernels at %.2f of the profile's speed — `plan --published` shows what published runs reached)\n\n",
              o.amp.c_str(), o.kernel_efficiency);
  const size_t shown = o.top > 0 ? std::min(rows.size(), static_cast<size_t>(o.top)) : rows.size();
  std::printf("%s", plan_table(std::vector<PlanRow>(rows.begin(), rows.begin() + static_cast<long>(shown))).c_str());
  if (shown < rows.size()) std::printf("… %zu more (--top 0 lists them all)\n", rows.size() - shown);
  if (fitting == 0) std::printf("\nNone fits: more GPUs, a smaller micro-batch, recompute, or ZeRO-3.\n");
  if (!o.json_path.empty()) {
    json j = json::array();
    for (const PlanRow& r : rows) j.push_back(row_json(r));
    write_file_atomically(o.json_path, j.dump(2) + "\n", "plan");
    std::printf("  json  %s\n", o.json_path.c_str());
  }
  return 0;
}

}  // namespace scalelab
