#pragma once
// `scalelab scale`: one strategy dry-run on simulated clusters of growing size (or, for a
// pipeline, with a growing number of micro-batches), one row per point: step time, samples/s,
// scaling efficiency, communication, memory per device by category and whether it fits.
#include <cstdint>
#include <string>
#include <vector>

namespace scalelab {

struct ScaleOptions {
  std::string strategy = "ddp";
  std::string hw = "h100-ib-16x8";
  std::string model = "mlp:784-4096-4096-4096-10";
  std::string devices = "8..128";  // a list, "8,16,32", or doubling ranges, "8..4096"
  std::string micro_batches;       // as devices; more than one value: the sweep is over m at one device count
  bool weak = true;                // weak: --batch per device (the global batch grows); strong: global
  int64_t batch = 32;
  int64_t steps = 3;               // per point; the last step is the one reported
  std::string optimizer = "sgd";
  int zero_stage = 1;              // zero: the stage
  std::string schedule = "gpipe";  // pipeline
  int virtual_stages = 1;          // pipeline, --schedule interleaved: chunks per device
  std::string amp = "off";
  std::string json_path;           // the rows as JSON
  std::string plot_path;           // an SVG: efficiency (or bubble) and memory per device against the sweep
};

int run_scale(const ScaleOptions& options);

// "8,16,…" and doubling ranges "8..4096" (8, 16, 32, …, 4096) as numbers; throws UsageError
// naming `option` for anything else.
std::vector<int> parse_sweep(const std::string& text, const std::string& option);

}  // namespace scalelab
