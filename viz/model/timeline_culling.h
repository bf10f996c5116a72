#pragma once
// The timeline's culling, apart from its drawing so it can be tested without a window: for one
// row and a visible time range, the rectangles to draw. Only what overlaps the range is visited
// (two binary searches), runs of events narrower than a pixel are merged into one rectangle, and a
// zoomed-out view reads the row's level of detail (TimelineRow::levels) rather than its events, so
// a frame costs what is on screen, not what is in the run.
#include <array>
#include <cstdint>
#include <vector>

#include "viz/model/dashboard_model.h"

namespace scalelab::viz {

struct DrawnBlock {
  float x0 = 0, x1 = 0;      // pixels
  uint32_t first = 0;        // index into the row's events of the first one merged here
  uint32_t count = 0;        // events merged (1: a single event, drawn with its label)
  Phase phase = Phase::fwd;  // the phase with the most time in the block
};

// Maps times in [t0, t1) onto pixels [x0, x0 + width) and appends the blocks of `row` to `out`,
// snapped to whole pixel columns. With `level_of_detail`, a view wider than the row's finest level
// reads the coarsest level finer than a pixel instead of the events: the same columns covered, a
// few pieces per pixel visited however many events there are. Returns how many events (or pieces)
// were visited.
size_t cull_row(const TimelineRow& row, double t0, double t1, float x0, float width, std::vector<DrawnBlock>& out,
                bool level_of_detail = true);

}  // namespace scalelab::viz
