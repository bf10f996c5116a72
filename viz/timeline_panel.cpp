// Timeline: a row per device and lane, every op a block coloured by its phase. Wheel zooms around
// the mouse, dragging pans, a click moves the cursor; hovering a block tells what the op was.
// Idle gaps (no lane of the device busy) are hatched and labelled with their share of the step,
// so the idle share the metrics report is something one can point at.
#include "viz/model/timeline_culling.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>

#include "viz/model/format.h"
#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

namespace {

class TimelinePanel : public Panel {
 public:
  const char* title() const override { return "Timeline"; }
  bool applies(const DashboardModel& model) const override { return !model.events().empty(); }
  bool full_width() const override { return true; }

  void draw(const DashboardModel& model, ViewState& view) override {
    draw_toolbar(model, view);
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    if (model.rows().empty() || avail.x < 50 || avail.y < 30) return;

    const float font = ImGui::GetFontSize();
    const float axis_h = 2 * font + 6;  // time ticks, then step numbers
    make_bands(model, view, avail.y - axis_h - 4);
    size_t n_rows = 0;
    for (const Band& b : bands_) n_rows += b.rows.size();
    if (n_rows == 0) {
      ImGui::TextDisabled("no rows of the devices and lanes asked for");
      return;
    }
    // Rows as tall as their text needs at least (a lane's name fits in its row), at most 1.6 lines.
    const float row_h = std::clamp((avail.y - axis_h - 4) / static_cast<float>(n_rows), std::min(13.0f, font + 2), std::max(24.0f, 1.6f * font));
    const float canvas_h = axis_h + row_h * static_cast<float>(n_rows) + 2;
    ImGui::BeginChild("timeline_canvas", avail, false, ImGuiWindowFlags_NoScrollWithMouse);
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    // Room for a band's label ("sim:0", "idle 5.0%") beside the lane names ("compute").
    const float label_w = std::min(std::max(190.0f, ImGui::CalcTextSize("idle 10.0%  compute").x + 16), avail.x * 0.25f);
    const float width = ImGui::GetContentRegionAvail().x;
    const float plot_x0 = origin.x + label_w, plot_w = std::max(width - label_w, 10.0f);
    ImGui::InvisibleButton("timeline_input", ImVec2(width, canvas_h));
    // A click on a group's label opens it (its devices' rows), on an opened device's label closes
    // its group; asked before handle_input, which forgets whether the press was a drag.
    const ImVec2 mouse = ImGui::GetIO().MousePos;
    const bool label_click = ImGui::IsItemDeactivated() && !dragged_ && mouse.x < plot_x0;
    handle_input(model, view, plot_x0, plot_w);

    ImDrawList* dl = ImGui::GetWindowDrawList();
    const double t0 = view.view_begin_ns, t1 = view.view_end_ns;
    const double scale = plot_w / (t1 - t0);
    auto x_of = [&](double t) { return static_cast<float>(plot_x0 + (t - t0) * scale); };
    const float rows_y0 = origin.y + axis_h;
    const float rows_y1 = rows_y0 + row_h * static_cast<float>(n_rows);

    draw_axis(model, dl, origin, axis_h, plot_x0, plot_w, t0, t1, canvas_h);

    const bool hovering = ImGui::IsItemHovered();
    std::optional<DrawnBlock> hovered_block;
    const TimelineRow* hovered_row = nullptr;
    const ImVec4 clip = dl->GetClipRectMax().y > 0 ? ImVec4(dl->GetClipRectMin().x, dl->GetClipRectMin().y,
                                                              dl->GetClipRectMax().x, dl->GetClipRectMax().y)
                                                    : ImVec4(0, 0, 1e9f, 1e9f);
    size_t k = 0;  // rows drawn so far
    for (const Band& band : bands_) {
      const float gy0 = rows_y0 + row_h * static_cast<float>(k), gy1 = gy0 + row_h * static_cast<float>(band.rows.size());
      k += band.rows.size();
      if (label_click && mouse.y >= gy0 && mouse.y < gy1 && band.group >= 0) {
        if (band.device < 0) opened_.insert(band.group);
        else opened_.erase(band.group);
      }
      if (gy1 < clip.y || gy0 > clip.w) continue;  // scrolled out of view: nothing to draw

      // Band label: the device (or group) and its idle share from the metrics pass.
      dl->AddLine(ImVec2(origin.x, gy0), ImVec2(plot_x0 + plot_w, gy0), IM_COL32(255, 255, 255, band.device < 0 ? 110 : 50));
      dl->AddText(ImVec2(origin.x + 4, gy0 + 2), IM_COL32(235, 235, 240, 255), band.label.c_str());
      if (!band.detail.empty() && gy1 - gy0 > 2 * ImGui::GetFontSize())
        dl->AddText(ImVec2(origin.x + 4, gy0 + 2 + ImGui::GetFontSize()), IM_COL32(170, 170, 180, 255), band.detail.c_str());
      if (band.device >= 0)
        draw_idle_gaps(model, dl, band.device, t0, t1, x_of, ImVec2(plot_x0, gy0), ImVec2(plot_x0 + plot_w, gy1));

      for (size_t j = 0; j < band.rows.size(); ++j) {
        const TimelineRow& row = *band.rows[j];
        const size_t index = k - band.rows.size() + j;
        const float y0 = gy0 + row_h * static_cast<float>(j), y1 = y0 + row_h - 2;
        if (index % 2 == 0) dl->AddRectFilled(ImVec2(plot_x0, y0), ImVec2(plot_x0 + plot_w, y0 + row_h), kRowBackground);
        const char* lane = lane_name(row.lane);
        dl->AddText(ImVec2(plot_x0 - ImGui::CalcTextSize(lane).x - 6, y0 + (row_h - ImGui::GetFontSize()) * 0.5f),
                    IM_COL32(190, 190, 200, 255), lane);

        blocks_.clear();
        cull_row(row, t0, t1, plot_x0, plot_w, blocks_);
        // Touching blocks of one colour drawn without a gap go out as one rectangle: a zoomed-out
        // row of one phase is a single quad, not one per pixel column (the vertices are most of a
        // frame's cost under a software rasterizer).
        float run_x0 = 0, run_x1 = -1;
        ImU32 run_col = 0;
        auto flush = [&] {
          if (run_x1 > run_x0) dl->AddRectFilled(ImVec2(run_x0, y0 + 1), ImVec2(run_x1, y1), run_col);
          run_x1 = -1;
        };
        for (const DrawnBlock& b : blocks_) {
          const ImU32 col = b.count > 1 ? faded(phase_color(b.phase), 0.75f) : phase_color(b.phase);
          // A pixel of gap after a single op wider than 3 px, so back-to-back ops of one phase stay
          // countable.
          const bool gap = b.count == 1 && b.x1 - b.x0 > 3;
          const float x1 = gap ? b.x1 - 1 : b.x1;
          if (col == run_col && b.x0 <= run_x1 && run_x1 > run_x0) {
            run_x1 = std::max(run_x1, x1);
          } else {
            flush();
            run_x0 = b.x0;
            run_x1 = x1;
            run_col = col;
          }
          if (gap) flush();
          if (b.count == 1 && b.x1 - b.x0 > 36) {
            // The op's name where it fits whole: a name cut short reads as another word.
            const Event& e = model.events()[row.events[b.first]];
            const char* name = e.name.empty() ? e.kind.c_str() : e.name.c_str();
            if (ImGui::CalcTextSize(name).x + 6 <= b.x1 - b.x0) draw_label_in(dl, ImVec2(b.x0, y0 + 1), ImVec2(b.x1, y1), name);
          }
        }
        flush();
        if (hovering && mouse.y >= y0 && mouse.y < y0 + row_h) {
          // Blocks are in x order: the last one starting left of the mouse is the candidate.
          auto it = std::upper_bound(blocks_.begin(), blocks_.end(), mouse.x,
                                     [](float x, const DrawnBlock& b) { return x < b.x0; });
          if (it != blocks_.begin() && mouse.x <= std::prev(it)->x1 + 0.5f) {
            hovered_block = *std::prev(it);
            hovered_row = &row;
          }
        }
      }
    }

    // The cursor: the time every other panel shows.
    if (view.cursor_ns >= t0 && view.cursor_ns <= t1) draw_cursor(dl, x_of(static_cast<double>(view.cursor_ns)), origin.y, rows_y1);

    if (hovered_block && hovered_row) draw_tooltip(model, *hovered_row, *hovered_block);
    ImGui::EndChild();
  }

 private:
  std::vector<DrawnBlock> blocks_;  // reused every row and frame: no allocation while drawing
  bool dragged_ = false;
  uint64_t legend_version_ = ~uint64_t{0};  // the model version has_wgrad_ was found for
  bool has_wgrad_ = false;                  // a zero-bubble pipeline's W ops are in the trace

  // What the timeline shows top to bottom: a device and its rows, or (with more devices than
  // rows fit) a group of a node's devices and its merged rows, opened on a click.
  struct Band {
    std::string label, detail;  // "sim:3" / "idle 4.2%", or "node 2 ▸" / "devices 16–23"
    int device = -1;            // -1: a group band
    int group = -1;             // the device's group, or the group; -1 when devices are not grouped
    std::vector<const TimelineRow*> rows;
  };
  std::vector<Band> bands_;
  std::set<int> opened_;  // groups shown device by device

  void make_bands(const DashboardModel& model, const ViewState& view, float height) {
    bands_.clear();
    const auto& rows = model.rows();
    auto lane_shown = [&](Lane l) {
      return view.only_lanes.empty() || std::find(view.only_lanes.begin(), view.only_lanes.end(), l) != view.only_lanes.end();
    };
    auto device_shown = [&](int d) {
      return view.only_devices.empty() || std::find(view.only_devices.begin(), view.only_devices.end(), d) != view.only_devices.end();
    };
    auto device_band = [&](size_t r, size_t r_end, int group) {
      if (!device_shown(rows[r].device)) return;
      Band b;
      b.device = rows[r].device;
      b.group = group;
      b.label = b.device < model.device_count() ? model.devices()[static_cast<size_t>(b.device)].label : "device " + std::to_string(b.device);
      if (group >= 0) b.label += "  ▾";
      if (b.device < static_cast<int>(model.run_metrics().per_device.size())) {
        char idle[48];
        std::snprintf(idle, sizeof idle, "idle %.1f%%", model.run_metrics().per_device[static_cast<size_t>(b.device)].idle_pct);
        b.detail = idle;
      }
      for (size_t k = r; k < r_end; ++k)
        if (lane_shown(rows[k].lane)) b.rows.push_back(&rows[k]);
      if (!b.rows.empty()) bands_.push_back(std::move(b));
    };
    // Devices grouped only when their rows would not fit at the smallest row height (never when
    // the devices shown are chosen).
    const int per = model.group_size();
    const bool group = per > 0 && view.only_devices.empty() && static_cast<float>(rows.size()) * 13.0f > height;
    size_t r = 0, g = 0;
    const auto& group_rows = model.group_rows();
    while (r < rows.size()) {
      const int device = rows[r].device;
      const int gi = group ? device / per : -1;
      if (gi >= 0 && !opened_.count(gi)) {
        // The group's merged rows, then skip its devices.
        Band b;
        b.group = gi;
        b.label = "node " + std::to_string(gi) + "  ▸";
        b.detail = "devices " + std::to_string(gi * per) + "–" + std::to_string(std::min(gi * per + per, model.device_count()) - 1);
        while (g < group_rows.size() && group_rows[g].device < gi) ++g;
        for (; g < group_rows.size() && group_rows[g].device == gi; ++g)
          if (lane_shown(group_rows[g].lane)) b.rows.push_back(&group_rows[g]);
        if (!b.rows.empty()) bands_.push_back(std::move(b));
        while (r < rows.size() && rows[r].device / per == gi) ++r;
        continue;
      }
      size_t r_end = r;
      while (r_end < rows.size() && rows[r_end].device == device) ++r_end;
      device_band(r, r_end, gi);
      r = r_end;
    }
  }

  void draw_toolbar(const DashboardModel& model, ViewState& view) {
    if (model.version() != legend_version_) {  // W blocks (zero bubble) get their swatch
      legend_version_ = model.version();
      has_wgrad_ = std::any_of(model.events().begin(), model.events().end(), [](const Event& e) { return e.phase == Phase::wgrad; });
    }
    phase_legend(has_wgrad_);
    if (view.picture) return;  // a figure: the legend, not the controls
    ImGui::SameLine();
    ImGui::TextDisabled("wheel: zoom · drag: pan · click: move cursor");
    ImGui::SameLine(0, 20);
    if (ImGui::SmallButton("Fit run")) {
      view.follow_live = false;
      view.view_begin_ns = static_cast<double>(model.t_begin_ns());
      view.view_end_ns = static_cast<double>(model.t_end_ns());
    }
    ImGui::SameLine();
    if (ImGui::SmallButton("Fit step")) {
      const auto [b, e] = step_or_run_span(model, shown_step_index(model, view));
      const double pad = 0.04 * static_cast<double>(e - b);
      view.view_begin_ns = static_cast<double>(b) - pad;
      view.view_end_ns = static_cast<double>(e) + pad;
    }
    ImGui::SameLine();
    ImGui::Text("showing %s", format_duration(view.view_end_ns - view.view_begin_ns).c_str());
  }

  void handle_input(const DashboardModel& model, ViewState& view, float plot_x0, float plot_w) {
    ImGuiIO& io = ImGui::GetIO();
    const double span = view.view_end_ns - view.view_begin_ns;
    const double ns_per_px = span / plot_w;
    if (ImGui::IsItemHovered() && io.MouseWheel != 0) {
      // Zoom about the time under the mouse, so what one points at stays put.
      const double t_mouse = view.view_begin_ns + (io.MousePos.x - plot_x0) * ns_per_px;
      const double factor = std::pow(0.8, static_cast<double>(io.MouseWheel));
      const double run = static_cast<double>(model.t_end_ns() - model.t_begin_ns());
      const double new_span = std::clamp(span * factor, 50.0, run * 1.5 + 1000);
      view.follow_live = false;
      const double frac = (t_mouse - view.view_begin_ns) / span;
      view.view_begin_ns = t_mouse - frac * new_span;
      view.view_end_ns = view.view_begin_ns + new_span;
    }
    if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 3.0f)) {
      dragged_ = true;
      view.follow_live = false;
      const double shift = -static_cast<double>(io.MouseDelta.x) * ns_per_px;
      view.view_begin_ns += shift;
      view.view_end_ns += shift;
    }
    if (ImGui::IsItemDeactivated()) {
      if (!dragged_ && io.MousePos.x >= plot_x0) {
        const double t = view.view_begin_ns + (io.MousePos.x - plot_x0) * ns_per_px;
        view.cursor_ns = std::clamp(static_cast<int64_t>(t), model.t_begin_ns(), model.t_end_ns());
        view.playing = false;
        view.follow_live = false;
      }
      dragged_ = false;
    }
  }

  void draw_axis(const DashboardModel& model, ImDrawList* dl, ImVec2 origin, float axis_h, float plot_x0, float plot_w,
                 double t0, double t1, float canvas_h) {
    const double scale = plot_w / (t1 - t0);
    const double base = static_cast<double>(model.t_begin_ns());
    // Ticks far enough apart for labels like "3.05 ms" at any font size.
    const double step = nice_step(t1 - t0, std::max(2, static_cast<int>(plot_w / std::max(110.0f, 7.5f * ImGui::GetFontSize()))));
    const double first = std::ceil((t0 - base) / step) * step + base;
    dl->PushClipRect(ImVec2(plot_x0, origin.y), ImVec2(plot_x0 + plot_w, origin.y + canvas_h), true);
    // Step boundaries first, faint, with the step number where there is room.
    const auto& steps = model.steps();
    auto it = std::lower_bound(steps.begin(), steps.end(), t0,
                               [](const StepSpan& s, double t) { return static_cast<double>(s.end_ns) < t; });
    float last_label_x = -1e9f;
    for (; it != steps.end() && static_cast<double>(it->begin_ns) <= t1;) {
      const float x = static_cast<float>(plot_x0 + (static_cast<double>(it->begin_ns) - t0) * scale);
      dl->AddLine(ImVec2(x, origin.y + ImGui::GetFontSize() + 2), ImVec2(x, origin.y + canvas_h), IM_COL32(150, 200, 255, 70));
      // Thousands of steps in view: one line per 3 px, the next step found by binary search.
      const double next_t = t0 + (static_cast<double>(x) + 3 - plot_x0) / scale;
      auto next = std::next(it);
      if (next != steps.end() && static_cast<double>(next->begin_ns) < next_t)
        next = std::lower_bound(next, steps.end(), next_t,
                                [](const StepSpan& s, double t) { return static_cast<double>(s.begin_ns) < t; });
      if (x - last_label_x > 70) {
        char label[32];
        std::snprintf(label, sizeof label, "step %lld", static_cast<long long>(it->step));
        dl->AddText(ImVec2(x + 3, origin.y + ImGui::GetFontSize() + 1), IM_COL32(150, 200, 255, 220), label);
        last_label_x = x;
      }
      it = next;
    }
    for (double t = first; t <= t1; t += step) {
      const float x = static_cast<float>(plot_x0 + (t - t0) * scale);
      dl->AddLine(ImVec2(x, origin.y + axis_h - 4), ImVec2(x, origin.y + canvas_h), kGridColor);
      const std::string label = format_tick(t - base, step);
      if (x + 3 + ImGui::CalcTextSize(label.c_str()).x <= plot_x0 + plot_w)  // whole, or not at all
        dl->AddText(ImVec2(x + 3, origin.y - 1), kAxisText, label.c_str());
    }
    dl->PopClipRect();
    (void)axis_h;
  }

  template <typename XOf>
  void draw_idle_gaps(const DashboardModel& model, ImDrawList* dl, int device, double t0, double t1, XOf x_of, ImVec2 a, ImVec2 b) {
    // Gaps under 1.5 px are not drawn: read only the list of those at least about that long.
    const auto& gaps = model.idle_gaps_at_least(device, 1.5 * (t1 - t0) / static_cast<double>(std::max(b.x - a.x, 1.0f)));
    auto it = std::lower_bound(gaps.begin(), gaps.end(), t0,
                               [](const Interval& g, double t) { return static_cast<double>(g.second) < t; });
    for (; it != gaps.end() && static_cast<double>(it->first) < t1; ++it) {
      const float x0 = std::max(a.x, x_of(static_cast<double>(it->first)));
      const float x1 = std::min(b.x, x_of(static_cast<double>(it->second)));
      if (x1 - x0 < 1.5f) continue;
      draw_hatched(dl, ImVec2(x0, a.y + 1), ImVec2(x1, b.y - 1));
      if (x1 - x0 > 30) {
        // Its share of the step it falls in ("this wait is a fifth of the step"), shortened to
        // what fits.
        const int si = model.step_index_at(it->first);
        const auto [sb, se] = step_or_run_span(model, si);
        const double len = static_cast<double>(it->second - it->first);
        const double share = 100.0 * len / static_cast<double>(std::max<int64_t>(se - sb, 1));
        char full[96], mid[64], brief[32];
        std::snprintf(full, sizeof full, "idle %s · %.0f%% of step", format_duration(len).c_str(), share);
        std::snprintf(mid, sizeof mid, "idle %.0f%% of step", share);
        std::snprintf(brief, sizeof brief, "%.0f%%", share);
        for (const char* label : {full, mid, brief})
          if (ImGui::CalcTextSize(label).x + 8 <= x1 - x0) {
            draw_label_in(dl, ImVec2(x0, a.y + 1), ImVec2(x1, std::min(b.y, a.y + ImGui::GetFontSize() + 6)), label,
                          IM_COL32(230, 230, 235, 255));
            break;
          }
      }
    }
  }

  void draw_tooltip(const DashboardModel& model, const TimelineRow& row, const DrawnBlock& b) {
    ImGui::BeginTooltip();
    if (b.count > 1) {
      const Event& first = model.events()[row.events[b.first]];
      const Event& last = model.events()[row.events[b.first + b.count - 1]];
      ImGui::Text("%u ops merged (each narrower than a pixel) — zoom in to see them", b.count);
      ImGui::Text("from %s (%s) to %s (%s)", first.name.c_str(), first.kind.c_str(), last.name.c_str(), last.kind.c_str());
      ImGui::Text("mostly %s", phase_name(b.phase));
    } else {
      const Event& e = model.events()[row.events[b.first]];
      const double dur = static_cast<double>(e.t_end_ns - e.t_begin_ns);
      ImGui::TextColored(ImColor(phase_color(e.phase)).Value, "%s", e.name.empty() ? e.kind.c_str() : e.name.c_str());
      ImGui::Separator();
      if (ImGui::BeginTable("op", 2)) {
        auto line = [](const char* key, const std::string& value) {
          ImGui::TableNextRow();
          ImGui::TableNextColumn();
          ImGui::TextDisabled("%s", key);
          ImGui::TableNextColumn();
          ImGui::TextUnformatted(value.c_str());
        };
        line("op", e.kind + " (" + phase_name(e.phase) + ", " + lane_name(e.lane) + " lane)");
        line("duration", format_duration(dur) + "   at " + format_duration(static_cast<double>(e.t_begin_ns - model.t_begin_ns())));
        if (e.bytes > 0)
          line("bytes", format_bytes(static_cast<double>(e.bytes)) +
                            (dur > 0 ? "   " + format_rate(static_cast<double>(e.bytes) / (dur * 1e-9), "B") : ""));
        if (e.flops > 0) line("FLOPs", format_flops(e.flops) + (dur > 0 ? "   " + format_rate(e.flops / (dur * 1e-9), "FLOP") : ""));
        if (e.step >= 0) line("step", std::to_string(e.step));
        if (e.micro_batch >= 0) line("micro-batch", std::to_string(e.micro_batch));
        if (e.layer >= 0) line("layer", std::to_string(e.layer));
        if (e.bucket >= 0) line("bucket", std::to_string(e.bucket));
        if (e.peer >= 0) line("peer", "device " + std::to_string(e.peer));
        if (e.role != Role::none) line("role", role_name(e.role));
        ImGui::EndTable();
      }
    }
    ImGui::EndTooltip();
  }
};

}  // namespace

std::unique_ptr<Panel> make_timeline_panel() { return std::make_unique<TimelinePanel>(); }

}  // namespace scalelab::viz
