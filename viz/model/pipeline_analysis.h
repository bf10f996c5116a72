#pragma once
// The pipeline's analysis, apart from its drawing (tests and --describe use it): per training
// step, each stage's forward and backward blocks by micro-batch (and chunk, interleaved), and its
// bubbles — the idle gaps on a stage's compute lane between the step's first and last compute.
#include <cstdint>
#include <vector>

#include "viz/model/dashboard_model.h"

namespace scalelab::viz {

struct PipelineBlock {
  int stage = 0;
  int micro_batch = 0;
  int chunk = 0;             // the stage's chunk of layers (interleaved: 0 … V − 1)
  Phase phase = Phase::fwd;  // fwd, bwd, or wgrad (a zero-bubble schedule's W)
  int64_t begin_ns = 0, end_ns = 0;
};

struct PipelineBubble {
  int stage = 0;
  int64_t begin_ns = 0, end_ns = 0;
};

struct PipelineStep {
  int step_index = 0;                 // into DashboardModel::steps()
  int64_t begin_ns = 0, end_ns = 0;   // first compute to last compute of the step on any stage
  std::vector<PipelineBlock> blocks;
  std::vector<PipelineBubble> bubbles;
  std::vector<std::pair<int, Interval>> other_compute;  // stage, optimizer steps etc. (busy, not a block)
  double bubble_fraction = 0;         // compute_metrics over this step's events
  bool one_f_one_b = false;           // a backward ran before the stage's last forward
  bool zero_bubble = false;           // the backwards' weight gradients ran as blocks of their own (W)
};

struct PipelineAnalysis {
  std::vector<int> stage_devices;     // stage → device, by the layers each holds
  // Each row's pipeline stage, and how many there are: devices holding the same first layer are
  // one stage (a 3D run's tensor shards and data-parallel replicas); else one device a stage.
  std::vector<int> row_stage;
  int stages = 0;
  int micro_batches = 0;              // m
  int chunks = 1;                     // V: runs of contiguous layers a stage holds (interleaved: > 1)
  std::vector<PipelineStep> steps;    // steps that ran micro-batches
  size_t bubble_count = 0;            // over all steps
  int64_t min_bubble_ns = 0;          // shorter gaps are scheduling noise, not bubbles
  double whole_run = 0;               // RunMetrics::bubble_fraction of the whole run
  double theory = 0;                  // (p − 1) / (V·m + p − 1)
  double zero_bubble_theory = 0;      // ZB-H1 with F, B and W alike: (p − 1) / (3m + p − 1)
  // The analysed step for a model step index, or nullptr.
  const PipelineStep* step(int step_index) const;
};

// True when compute events carry micro-batches (a pipeline schedule ran).
bool has_pipeline(const DashboardModel& model);
PipelineAnalysis analyze_pipeline(const DashboardModel& model);

}  // namespace scalelab::viz
