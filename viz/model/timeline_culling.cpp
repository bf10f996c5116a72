// The timeline's culling: the blocks to draw for a row and a visible time range.
#include "viz/model/timeline_culling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>

namespace scalelab::viz {

namespace {

// Turns a row's items (events, or a level's pieces) into blocks, visiting only [first, last). Each
// item gives its times, the events it holds and their time per phase. Runs of items narrower than
// a pixel merge within about a pixel column; a block covers the pixel columns its items touch
// (snapped to whole pixels, at least one), so the events and a level of detail made from them
// cover the same columns.
template <typename Item>
void merge_into_blocks(size_t first, size_t last, Item item, double t0, double t1, float x0, float width,
                       std::vector<DrawnBlock>& out) {
  const double scale = static_cast<double>(width) / (t1 - t0);
  const double left = std::floor(x0), right = static_cast<double>(x0) + width;
  double cx0 = 0, cx1 = 0;
  DrawnBlock cur;
  bool open = false, mergeable = false;
  std::array<double, kPhaseCount> phase_time{};
  auto close = [&] {
    if (!open) return;
    const double a = std::floor(cx0);
    const double b = std::min(std::max(std::ceil(cx1), a + 1), std::ceil(right));
    cur.x0 = static_cast<float>(a);
    cur.x1 = static_cast<float>(b);
    cur.phase = static_cast<Phase>(std::max_element(phase_time.begin(), phase_time.end()) - phase_time.begin());
    out.push_back(cur);
    open = false;
  };
  int64_t begin = 0, end = 0;
  uint32_t index = 0, count = 0;
  for (size_t i = first; i < last; ++i) {
    const std::array<float, kPhaseCount>* phases = nullptr;
    Phase phase = Phase::fwd;
    item(i, begin, end, index, count, phase, phases);
    // Past `first`, an item may still have ended before the view (a long one earlier let it in).
    if (static_cast<double>(end) <= t0) continue;
    const double a = std::clamp(x0 + (static_cast<double>(begin) - t0) * scale, left, right);
    const double b = std::clamp(x0 + (static_cast<double>(end) - t0) * scale, left, right);
    const bool thin = b - a < 1.0;
    // Merge within about a pixel column only: a zoomed-out row stays a texture of phase colours
    // (forward, backward, optimizer alternating) instead of one block of the commonest phase.
    if (open && thin && mergeable && a < cx1 + 1.0 && cx1 - cx0 < 1.5) {
      cx1 = std::max(cx1, b);
      cur.count += count;
    } else {
      close();
      cur = DrawnBlock{0, 0, index, count, phase};
      cx0 = a;
      cx1 = b;
      phase_time.fill(0);
      open = true;
      mergeable = thin;
    }
    if (phases)
      for (int k = 0; k < kPhaseCount; ++k) phase_time[static_cast<size_t>(k)] += (*phases)[static_cast<size_t>(k)];
    else
      phase_time[static_cast<size_t>(phase)] += static_cast<double>(std::max<int64_t>(end - begin, 1));
  }
  close();
}

size_t cull_events(const TimelineRow& row, size_t first, size_t last, double t0, double t1, float x0, float width,
                   std::vector<DrawnBlock>& out);

}  // namespace

size_t cull_row(const TimelineRow& row, double t0, double t1, float x0, float width, std::vector<DrawnBlock>& out,
                bool level_of_detail) {
  if (row.events.empty() || t1 <= t0 || width <= 0) return 0;
  const int64_t lo = static_cast<int64_t>(std::floor(t0)), hi = static_cast<int64_t>(std::ceil(t1));
  if (const CoverageLevel* level = level_of_detail ? row.level_for((t1 - t0) / width) : nullptr) {
    const auto& pieces = level->pieces;
    const size_t first = static_cast<size_t>(
        std::upper_bound(level->end_prefix_max.begin(), level->end_prefix_max.end(), lo) - level->end_prefix_max.begin());
    const size_t last = static_cast<size_t>(
        std::lower_bound(pieces.begin(), pieces.end(), hi, [](const CoveragePiece& p, int64_t t) { return p.begin_ns < t; }) -
        pieces.begin());
    if (first < last)
      merge_into_blocks(
        first, last,
        [&](size_t i, int64_t& b, int64_t& e, uint32_t& index, uint32_t& count, Phase& phase,
            const std::array<float, kPhaseCount>*& phases) {
          const CoveragePiece& p = pieces[i];
          b = p.begin_ns;
          e = p.end_ns;
          index = p.first;
          count = p.count;
          phase = static_cast<Phase>(std::max_element(p.phase_ns.begin(), p.phase_ns.end()) - p.phase_ns.begin());
          phases = &p.phase_ns;
        },
        t0, t1, x0, width, out);
    size_t visited = first < last ? last - first : 0;
    // A live row's newest events, after those the levels were built from, one by one.
    if (row.levels_events < row.events.size())
      visited += cull_events(row, std::max(row.levels_events, row.first_ending_after(lo)), row.last_beginning_before(hi), t0, t1,
                             x0, width, out);
    return visited;
  }
  return cull_events(row, row.first_ending_after(lo), row.last_beginning_before(hi), t0, t1, x0, width, out);
}

namespace {

size_t cull_events(const TimelineRow& row, size_t first, size_t last, double t0, double t1, float x0, float width,
                   std::vector<DrawnBlock>& out) {
  if (first >= last) return 0;
  merge_into_blocks(
      first, last,
      [&](size_t i, int64_t& b, int64_t& e, uint32_t& index, uint32_t& count, Phase& phase,
          const std::array<float, kPhaseCount>*&) {
        b = row.begin_ns[i];
        e = row.end_ns[i];
        index = static_cast<uint32_t>(i);
        count = 1;
        phase = row.phase[i];
      },
      t0, t1, x0, width, out);
  return last - first;
}

}  // namespace

}  // namespace scalelab::viz
