// Pipeline: stages × time for the cursor's step, forward (F) and backward (B) blocks numbered by
// micro-batch, the idle cells between them hatched as bubbles. Interleaved, a block also names its
// chunk (F3·1: micro-batch 3 through the stage's chunk 1), and later chunks are drawn lighter.
// Next to it the run's bubble share (simulated or measured, as the trace's clock is) and the
// textbook's (p − 1)/(V·m + p − 1), so a student sees the formula come true — or not, when
// communication or uneven stages add to it.
#include "viz/model/pipeline_analysis.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "viz/model/format.h"
#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

namespace {

class PipelinePanel : public Panel {
 public:
  const char* title() const override { return "Pipeline"; }
  bool applies(const DashboardModel& model) const override { return has_pipeline(model); }

  void draw(const DashboardModel& model, ViewState& view) override {
    if (model.version() != seen_version_) {
      seen_version_ = model.version();
      analysis_ = analyze_pipeline(model);
    }
    const PipelineAnalysis& a = analysis_;
    const int si = shown_step_index(model, view);
    const PipelineStep* ps = a.step(si);
    if (!ps && !a.steps.empty()) ps = &a.steps.front();
    if (!ps) {
      ImGui::TextUnformatted("no step ran micro-batches");
      return;
    }
    const int p = a.stages, m = a.micro_batches, V = a.chunks;
    // Flowed: in the dashboard's grid the panel may be a third of the window wide.
    const std::string schedule = V > 1 ? "interleaved 1F1B, V = " + std::to_string(V) + " chunks a stage"
                                 : m == 1 ? "model parallel (a pipeline of one micro-batch)"
                                 : ps->zero_bubble ? "zero-bubble schedule (ZB-H1)"
                                 : ps->one_f_one_b ? "1F1B schedule" : "GPipe schedule";
    flow_text({schedule, "p = " + std::to_string(p) + " stages", "m = " + std::to_string(m) + " micro-batch" + (m == 1 ? "" : "es"),
               "step " + std::to_string(model.steps()[static_cast<size_t>(ps->step_index)].step)});
    // The share and the formula on one line where they fit.
    char share[128], formula[96];
    std::snprintf(share, sizeof share, "bubble share, %s: %.1f%% this step, %.1f%% whole run",
                  model.info().simulated ? "simulated" : "measured", 100 * ps->bubble_fraction, 100 * a.whole_run);
    if (ps->zero_bubble)
      std::snprintf(formula, sizeof formula, "textbook, F = B = W: (p−1)/(3m+p−1) = %d/%d = %.1f%%", p - 1, 3 * m + p - 1,
                    100 * a.zero_bubble_theory);
    else if (V > 1)
      std::snprintf(formula, sizeof formula, "textbook (p−1)/(V·m+p−1) = %d/%d = %.1f%%", p - 1, V * m + p - 1, 100 * a.theory);
    else
      std::snprintf(formula, sizeof formula, "textbook (p−1)/(m+p−1) = %d/%d = %.1f%%", p - 1, m + p - 1, 100 * a.theory);
    flow_text({share, formula});
    legend_item(phase_color(Phase::fwd), V > 1 ? "F3·1 = forward of micro-batch 3, chunk 1" : "F = forward");
    legend_item(phase_color(Phase::bwd), ps->zero_bubble ? "B = backward to the input" : "B = backward");
    if (ps->zero_bubble) legend_item(phase_color(Phase::wgrad), "W = weight gradients");
    legend_item(phase_color(Phase::optim), "optimizer");
    legend_item(kIdleColor, "bubble (idle)");
    ImGui::NewLine();

    const ImVec2 avail = ImGui::GetContentRegionAvail();
    if (avail.x < 80 || avail.y < 30) return;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("pipeline_grid", avail);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float label_w = ImGui::CalcTextSize("stage 0 · dev 00").x + 8, axis_h = ImGui::GetFontSize() + 4;
    const float x0 = origin.x + label_w, w = avail.x - label_w - 8;
    const int rows = static_cast<int>(a.stage_devices.size());  // a row per device (3D: several a stage)
    const float row_h = std::clamp((avail.y - axis_h) / static_cast<float>(std::max(rows, 1)), 12.0f, 2.2f * ImGui::GetFontSize());
    const double t0 = static_cast<double>(ps->begin_ns), len = static_cast<double>(std::max<int64_t>(ps->end_ns - ps->begin_ns, 1));
    auto x_of = [&](int64_t t) { return x0 + static_cast<float>((static_cast<double>(t) - t0) / len) * w; };
    auto faded_if_future = [&](ImU32 c, int64_t begin) { return begin > view.cursor_ns ? faded(c, 0.22f) : c; };

    for (int s = 0; s < rows; ++s) {
      const float y = origin.y + row_h * static_cast<float>(s);
      char label[64];
      std::snprintf(label, sizeof label, "stage %d · dev %d", a.row_stage[static_cast<size_t>(s)],
                    a.stage_devices[static_cast<size_t>(s)]);
      dl->AddText(ImVec2(origin.x + 2, y + (row_h - ImGui::GetFontSize()) * 0.5f), IM_COL32(220, 220, 228, 255), label);
      dl->AddRectFilled(ImVec2(x0, y), ImVec2(x0 + w, y + row_h - 3), kRowBackground);
    }
    for (const PipelineBubble& b : ps->bubbles) {
      const float y = origin.y + row_h * static_cast<float>(b.stage);
      draw_hatched(dl, ImVec2(x_of(b.begin_ns), y + 2), ImVec2(x_of(b.end_ns), y + row_h - 5));
    }
    for (const auto& [s, iv] : ps->other_compute) {
      const float y = origin.y + row_h * static_cast<float>(s);
      dl->AddRectFilled(ImVec2(x_of(iv.first), y + 2), ImVec2(std::max(x_of(iv.second), x_of(iv.first) + 1), y + row_h - 5),
                        faded_if_future(phase_color(Phase::optim), iv.first));
    }
    for (const PipelineBlock& b : ps->blocks) {
      const float y = origin.y + row_h * static_cast<float>(b.stage);
      const ImVec2 a0(x_of(b.begin_ns), y + 2), a1(std::max(x_of(b.end_ns), x_of(b.begin_ns) + 1), y + row_h - 5);
      // A later chunk lighter: the colour goes a share of the way to white.
      const ImU32 colour = V > 1 ? lighter(phase_color(b.phase), 0.45f * static_cast<float>(b.chunk) / static_cast<float>(V - 1))
                                 : phase_color(b.phase);
      dl->AddRectFilled(a0, a1, faded_if_future(colour, b.begin_ns), 2.0f);
      dl->AddRect(a0, a1, IM_COL32(20, 20, 25, 160), 2.0f);
      char t[24];
      const char letter = b.phase == Phase::fwd ? 'F' : b.phase == Phase::wgrad ? 'W' : 'B';
      if (V > 1)
        std::snprintf(t, sizeof t, "%c%d·%d", letter, b.micro_batch, b.chunk);
      else
        std::snprintf(t, sizeof t, "%c%d", letter, b.micro_batch);
      if (a1.x - a0.x >= ImGui::CalcTextSize(t).x + 2) draw_label_in(dl, a0, a1, t);
    }
    // Time axis: from the step's first compute.
    const float axis_y = origin.y + row_h * static_cast<float>(rows);
    draw_time_axis(dl, x0, w, len, origin.y, axis_y);
    if (view.cursor_ns >= ps->begin_ns && view.cursor_ns <= ps->end_ns)
      draw_cursor(dl, x_of(view.cursor_ns), origin.y, axis_y);
  }

 private:
  PipelineAnalysis analysis_;
  uint64_t seen_version_ = 0;
};

}  // namespace

std::unique_ptr<Panel> make_pipeline_panel() { return std::make_unique<PipelinePanel>(); }

}  // namespace scalelab::viz
