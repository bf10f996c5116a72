#pragma once
// One colour per phase and per memory category, used by every panel, so a backward pass is the
// same orange in the timeline, the pipeline grid and the buckets panel.
#include <imgui.h>

#include <string>
#include <vector>

#include "core/trace/events.h"

namespace scalelab::viz {

ImU32 phase_color(Phase phase);
ImU32 memory_color(MemoryCategory category);
// One colour per process sub-group, in the Layout panel and the Topology panel's table alike:
// tp green, pp violet, dp sky blue; grey for any other.
ImU32 group_color(const std::string& group);
// A colour at reduced alpha: what has not happened yet at the cursor is drawn faded.
ImU32 faded(ImU32 color, float alpha = 0.25f);
// A colour moved `share` (0 … 1) of the way to white: an interleaved pipeline's later chunks.
ImU32 lighter(ImU32 color, float share);

constexpr ImU32 kIdleColor = IM_COL32(150, 150, 160, 70);     // idle gaps / bubbles
constexpr ImU32 kIdleHatch = IM_COL32(200, 200, 210, 90);
constexpr ImU32 kCursorColor = IM_COL32(255, 214, 10, 255);    // the time cursor, everywhere
constexpr ImU32 kGridColor = IM_COL32(255, 255, 255, 28);
constexpr ImU32 kAxisText = IM_COL32(200, 200, 205, 255);
constexpr ImU32 kRowBackground = IM_COL32(255, 255, 255, 8);
constexpr ImU32 kLabelOnBlock = IM_COL32(15, 15, 20, 255);     // dark text on the light block colours
constexpr ImU32 kModelledText = IM_COL32(255, 200, 90, 255);   // the Run bar: times from the cost model
constexpr ImU32 kMeasuredText = IM_COL32(140, 230, 140, 255);  // … times from a clock

// Idle space drawn as diagonal hatching inside [a, b] (clipped to the rectangle).
void draw_hatched(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 fill = kIdleColor, ImU32 hatch = kIdleHatch);
// Text centred in [a, b] when it fits, clipped otherwise.
void draw_label_in(ImDrawList* dl, ImVec2 a, ImVec2 b, const char* text, ImU32 color = kLabelOnBlock);
// A colour swatch and its label on the current line (for legends).
void legend_item(ImU32 color, const char* label);
// The legend of phases (fwd, bwd, optim, comm, data; wgrad after bwd where a zero-bubble
// pipeline ran its weight gradients as tasks of their own).
void phase_legend(bool weight_gradients = false);
// Pieces of text joined by " · ", a piece moved whole to the next line where it would not fit
// (ImGui's wrapping breaks at a '.', "25.0" into "25." and "0").
void flow_text(const std::vector<std::string>& pieces);
// A vertical line at x from y0 to y1: the cursor.
void draw_cursor(ImDrawList* dl, float x, float y0, float y1);
// A time axis over [x0, x0 + w] for a span of len_ns from 0: grid lines from y_top to y_axis, and
// under them the ticks' labels, each whole or not at all.
void draw_time_axis(ImDrawList* dl, float x0, float w, double len_ns, float y_top, float y_axis);
// Nice tick spacing (1, 2, 5 × 10^k) giving about `target` ticks over `range`.
double nice_step(double range, int target);

}  // namespace scalelab::viz

namespace scalelab::viz {

// The dashboard's look: dark theme, rounded windows, and a readable font (DejaVu Sans when the
// system has it, with the arrows and symbols the labels use; ImGui's built-in font otherwise).
// Call after ImGui::CreateContext and before the first frame.
void apply_theme(float font_px);

}  // namespace scalelab::viz
