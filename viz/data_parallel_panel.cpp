// Data parallel: the controller's copies in the cursor's step, phase by phase — the batch scattered
// from device 0, the model replicated to every device, the outputs gathered back, the output
// gradients scattered, the gradients reduced onto device 0. One column per device; each phase a
// row of arrows with the bytes moved. The phase running at the cursor is highlighted: all that
// traffic through device 0 every step is why DistributedDataParallel exists.
#include "viz/model/data_parallel_analysis.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "viz/model/format.h"
#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

namespace {

void arrow(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 c, float thickness) {
  dl->AddLine(a, b, c, thickness);
  const float dir = b.x >= a.x ? 1.0f : -1.0f, s = 3.0f + thickness * 1.5f;
  dl->AddTriangleFilled(b, ImVec2(b.x - dir * s * 1.6f, b.y - s), ImVec2(b.x - dir * s * 1.6f, b.y + s), c);
}

class DataParallelPanel : public Panel {
 public:
  const char* title() const override { return "Data parallel"; }
  bool applies(const DashboardModel& model) const override { return has_data_parallel(model); }

  void draw(const DashboardModel& model, ViewState& view) override {
    const int si = shown_step_index(model, view);
    if (si != cached_step_ || model.version() != seen_version_) {
      step_ = analyze_dp_step(model, si);
      cached_step_ = si;
      seen_version_ = model.version();
    }
    int64_t total = 0;
    for (const DpPhase& p : step_.phases) total += p.bytes;
    ImGui::TextWrapped("step %lld: %zu phases, %s copied through the controller (device 0)",
                si >= 0 ? static_cast<long long>(model.steps()[static_cast<size_t>(si)].step) : -1LL, step_.phases.size(),
                format_bytes(static_cast<double>(total)).c_str());
    if (!view.picture) ImGui::TextDisabled("highlighted: the phase at the cursor · faded: not yet run");

    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const int n = model.device_count();
    if (avail.x < 120 || avail.y < 40 || n <= 0) return;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("dp_canvas", avail);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float label_w = std::min(250.0f, avail.x * 0.34f), head_h = ImGui::GetFontSize() + 8;
    const float cols_x0 = origin.x + label_w, cols_w = avail.x - label_w - 10;
    auto col_x = [&](int d) { return cols_x0 + cols_w * (static_cast<float>(d) + 0.5f) / static_cast<float>(n); };

    // Device columns.
    for (int d = 0; d < n; ++d) {
      char t[32];
      std::snprintf(t, sizeof t, d == 0 ? "GPU %d (ctl)" : "GPU %d", d);
      const ImVec2 ts = ImGui::CalcTextSize(t);
      const float x = col_x(d);
      dl->AddRectFilled(ImVec2(x - ts.x * 0.5f - 6, origin.y), ImVec2(x + ts.x * 0.5f + 6, origin.y + head_h - 2),
                        IM_COL32(70, 80, 100, 255), 4.0f);
      dl->AddText(ImVec2(x - ts.x * 0.5f, origin.y + 3), IM_COL32(240, 240, 245, 255), t);
      dl->AddLine(ImVec2(x, origin.y + head_h), ImVec2(x, origin.y + avail.y), IM_COL32(255, 255, 255, 30), 1.0f);
    }
    if (step_.phases.empty()) return;

    // One row per phase: its name and size on the left; over the device columns, one line from
    // the controller to the farthest device with an arrowhead at every receiver, and the bytes each
    // device sent or received above its column.
    const float row_h = std::clamp((avail.y - head_h) / static_cast<float>(step_.phases.size()), 18.0f,
                                   2 * ImGui::GetFontSize() + 14);
    const bool two_lines = row_h >= 2 * ImGui::GetFontSize() + 4;
    float y = origin.y + head_h + 2;
    for (size_t k = 0; k < step_.phases.size(); ++k) {
      const DpPhase& p = step_.phases[k];
      const bool now = view.cursor_ns >= p.span.first && view.cursor_ns <= p.span.second;
      const bool future = p.span.first > view.cursor_ns;
      if (now) dl->AddRectFilled(ImVec2(origin.x, y - 1), ImVec2(origin.x + avail.x, y + row_h - 3), IM_COL32(255, 214, 10, 40), 3.0f);
      const ImU32 text = future ? IM_COL32(140, 140, 148, 255) : IM_COL32(235, 235, 240, 255);
      char label[128];
      std::snprintf(label, sizeof label, "%zu  %s", k + 1, p.label.c_str());
      dl->AddText(ImVec2(origin.x + 2, y), text, label);
      std::snprintf(label, sizeof label, "%s in %s", format_bytes(static_cast<double>(p.bytes)).c_str(),
                    format_duration(static_cast<double>(p.span.second - p.span.first)).c_str());
      if (two_lines) dl->AddText(ImVec2(origin.x + 18, y + ImGui::GetFontSize() + 2), IM_COL32(165, 165, 175, 255), label);

      const ImU32 c = future ? faded(phase_color(Phase::comm), 0.3f) : phase_color(Phase::comm);
      const float line_y = y + row_h - 9;
      // Bytes per device column: what it received (arrow into it) or sent (arrow out of it).
      std::vector<int64_t> at_column(static_cast<size_t>(n), 0);
      int lo = n, hi = -1;
      for (const DpTransfer& t : p.transfers) {
        if (t.from == t.to || t.from < 0 || t.to < 0 || t.from >= n || t.to >= n) continue;
        lo = std::min({lo, t.from, t.to});
        hi = std::max({hi, t.from, t.to});
        at_column[static_cast<size_t>(t.to == 0 ? t.from : t.to)] += t.bytes;
      }
      if (hi < 0) {
        y += row_h;
        continue;
      }
      dl->AddLine(ImVec2(col_x(lo), line_y), ImVec2(col_x(hi), line_y), c, 2.0f);
      for (const DpTransfer& t : p.transfers) {
        if (t.from == t.to || t.from < 0 || t.to < 0 || t.from >= n || t.to >= n) continue;
        arrow(dl, ImVec2(col_x(t.from), line_y), ImVec2(col_x(t.to), line_y), c, 2.0f);
      }
      for (int d = 0; d < n; ++d) {
        if (at_column[static_cast<size_t>(d)] == 0) continue;
        const std::string b = format_bytes(static_cast<double>(at_column[static_cast<size_t>(d)]));
        const ImVec2 ts = ImGui::CalcTextSize(b.c_str());
        dl->AddText(ImVec2(col_x(d) - ts.x * 0.5f, line_y - ts.y - 5), text, b.c_str());
      }
      y += row_h;
    }
  }

 private:
  DpStep step_;
  int cached_step_ = -2;
  uint64_t seen_version_ = 0;
};

}  // namespace

std::unique_ptr<Panel> make_data_parallel_panel() { return std::make_unique<DataParallelPanel>(); }

}  // namespace scalelab::viz
