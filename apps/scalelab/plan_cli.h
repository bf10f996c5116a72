#pragma once
// `scalelab plan`: every way to run a GPT on a cluster — D × T × P, micro-batch, recompute, ZeRO
// stage — priced by the cost model (run/plan.h), the fastest that fit first; `--published`:
// BLOOM-176B's and OPT-175B's runs, predicted next to the published throughput.
#include <cstdint>
#include <string>

namespace scalelab {

struct PlanOptions {
  std::string model = "gpt:70-14336-112-2048-250880";  // BLOOM-176B
  std::string hw = "a100-80gb-opa-48x8";
  int devices = 384;
  int64_t batch = 2048;        // global, sequences
  std::string amp = "bf16";
  std::string tp, pp;          // lists ("1,2,4"); empty: every value that fits
  std::string micro_batch;     // a list; empty: 1, 2, 4, 8
  std::string zero;            // a list of stages (0, 1, 3); empty: 1, 3
  std::string virtual_stages;  // interleaved 1F1B's chunks per GPU, a list; empty: 1
  double kernel_efficiency = 1.0;  // PlanWorkload::kernel_efficiency
  int top = 15;                // rows shown (0: all)
  bool published = false;
  std::string json_path;
};

int run_plan(const PlanOptions& options);

}  // namespace scalelab
