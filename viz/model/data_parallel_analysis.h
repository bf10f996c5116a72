#pragma once
// DataParallel's copies (one controller, device 0): scatter the batch, replicate the model, gather
// the outputs, scatter the output gradients, reduce the gradients — as phases of a step, each a set
// of device-to-device transfers. Apart from the drawing so tests and --describe can count them.
#include <cstdint>
#include <string>
#include <vector>

#include "viz/model/dashboard_model.h"

namespace scalelab::viz {

struct DpTransfer {
  int from = 0, to = 0;   // devices
  int64_t bytes = 0;
  size_t copies = 0;      // events merged into this (from, to) pair
};

struct DpPhase {
  std::string label;              // "scatter batch.x", "replicate model", "reduce grads" ...
  Interval span{0, 0};
  int64_t bytes = 0;
  std::vector<DpTransfer> transfers;  // one per (from, to) pair
};

struct DpStep {
  int step_index = -1;
  std::vector<DpPhase> phases;    // in time order
};

// True for a DataParallel copy between devices: its role is scatter, replicate, gather or reduce.
bool is_dp_copy(const Event& e);
bool has_data_parallel(const DashboardModel& model);
size_t count_dp_copies(const DashboardModel& model);
DpStep analyze_dp_step(const DashboardModel& model, int step_index);

}  // namespace scalelab::viz
