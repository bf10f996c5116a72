#pragma once
// The timeline's culling, apart from its drawing so it can be tested without a window: for one
// row and a visible time range, the rectangles to draw. Only the events that overlap the range
// are visited (two binary searches), and runs of events narrower than a pixel are merged into one
// rectangle, so a zoomed-out view of 100 000 events draws at most a few thousand.
#include <array>
#include <cstdint>
#include <vector>

#include "viz/dashboard_model.h"

namespace scalelab::viz {

struct DrawnBlock {
  float x0 = 0, x1 = 0;      // pixels
  uint32_t first = 0;        // index into the row's events of the first one merged here
  uint32_t count = 0;        // events merged (1: a single event, drawn with its label)
  Phase phase = Phase::fwd;  // the phase with the most time in the block
};

// Maps times in [t0, t1) onto pixels [x0, x0 + width) and appends the blocks of `row` to `out`.
// Returns how many events were visited (for the culling test).
size_t cull_row(const TimelineRow& row, double t0, double t1, float x0, float width, std::vector<DrawnBlock>& out);

}  // namespace scalelab::viz
