#pragma once
// The activations each layer keeps for backward, per device, read from the run's own data: the
// ledger's activation samples attributed to the forward op running when each was taken. What a
// transformer's memory is made of (every block keeps ~34·s·b·h bytes) and what --recompute saves
// (a block keeps only its input) — apart from the drawing so tests and --describe can check it.
#include <cstdint>
#include <string>
#include <vector>

#include "viz/model/dashboard_model.h"

namespace scalelab::viz {

struct LayerBytes {
  int layer = -1;        // the model's layer index (events' `layer`)
  std::string label;     // "blocks.3", "embed", "head", "conv1" …
  int64_t bytes = 0;     // net activation bytes its forward left allocated, over the step's micro-batches
  int64_t rerun = 0;     // with recompute: what its forward, rerun in backward, allocated (what it no longer keeps)
};

struct DeviceLayerMemory {
  int device = 0;
  std::vector<LayerBytes> layers;  // in layer order; only layers this device ran
  int64_t total = 0;
  bool recomputed = false;         // some layer reran its forward in backward (--recompute)
};

// For the step steps()[step_index]: each device that ran a layer's forward. A sample's change is
// the forward op's that was running when it was taken; a release at the very moment the next op
// begins is the op before's (a layer frees its temporaries as the next one starts). Forward ops
// rerun in backward (recompute) are counted apart, as `rerun`: what they allocate is freed in that
// backward.
std::vector<DeviceLayerMemory> analyze_layer_memory(const DashboardModel& model, int step_index);

// At most `max_bars` bars: consecutive layers summed into groups of equal size (the last may be
// shorter), each labelled by its first and last layer ("blocks.0 – blocks.11").
std::vector<LayerBytes> group_layers(const std::vector<LayerBytes>& layers, int max_bars);

}  // namespace scalelab::viz
