// Memory: per device, what is live at the cursor, stacked by category (params, grads, optimizer
// state, activations, communication buffers, workspace), with the run's peak marked. Scrubbing the
// cursor through a step shows activations pile up in forward and drain in backward; comparing
// devices shows what ZeRO shards and what DDP replicates.
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "viz/model/format.h"
#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

namespace {

class MemoryPanel : public Panel {
 public:
  const char* title() const override { return "Memory"; }
  bool applies(const DashboardModel& model) const override { return !model.memory().empty(); }

  void draw(const DashboardModel& model, ViewState& view) override {
    const auto& per_device = model.run_metrics().per_device;
    int64_t max_peak = 1, max_capacity = 0;
    for (const DeviceMetrics& d : per_device) max_peak = std::max(max_peak, d.peak_total);
    for (const DeviceInfo& d : model.devices()) max_capacity = std::max(max_capacity, d.capacity_bytes);

    // Against capacity when it is known and the run uses a visible part of it; a 9 MiB model on an
    // 80 GiB A100 would be an invisible sliver, so then the axis is the peak and the text says so.
    if (model.version() != seen_version_) {
      seen_version_ = model.version();
      against_capacity_ = max_capacity > 0 && static_cast<double>(max_peak) >= 0.02 * static_cast<double>(max_capacity);
    }
    // An axis given (--memory-max): the same scale as another picture beside this one.
    const bool fixed_axis = view.memory_axis_bytes > 0;
    const double peak_axis = fixed_axis ? static_cast<double>(view.memory_axis_bytes) : static_cast<double>(max_peak) * 1.1;
    if (fixed_axis) against_capacity_ = false;
    for (int c = 0; c < kMemoryCategoryCount; ++c)
      legend_item(memory_color(static_cast<MemoryCategory>(c)), memory_category_name(static_cast<MemoryCategory>(c)));
    legend_item(kCursorColor, "run peak");
    ImGui::NewLine();
    if (max_capacity > 0 && !view.picture && !fixed_axis) {
      ImGui::Checkbox("axis = capacity", &against_capacity_);
      ImGui::SameLine();
    }
    const std::string axis_text = against_capacity_ ? "bars to scale with the whole device"
                                                    : "axis 0 – " + format_bytes(peak_axis);
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    if (view.picture)
      flow_text({axis_text, "bars " + cursor_in_words(model, view)});
    else
      flow_text({axis_text, "at the cursor, " + format_duration(static_cast<double>(view.cursor_ns - model.t_begin_ns())) + " into the run"});
    ImGui::PopStyleColor();

    const int n = model.device_count();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float line = ImGui::GetTextLineHeightWithSpacing();
    const float avail_h = ImGui::GetContentRegionAvail().y;
    // Each device: a line of text and its bar; all devices fit without scrolling when they can.
    const float bar_h = std::clamp(avail_h / static_cast<float>(std::max(n, 1)) - line - 12, 6.0f, 26.0f);
    for (int d = 0; d < n; ++d) {
      const auto live = model.memory_at(d, view.cursor_ns);
      int64_t total = 0;
      for (int64_t v : live) total += v;
      const int64_t peak = d < static_cast<int>(per_device.size()) ? per_device[static_cast<size_t>(d)].peak_total : 0;
      const int64_t capacity = model.devices()[static_cast<size_t>(d)].capacity_bytes;
      const double axis = against_capacity_ && capacity > 0 ? static_cast<double>(capacity) : peak_axis;

      const DeviceInfo& dev = model.devices()[static_cast<size_t>(d)];
      // Flowed: in a narrow cell of the grid the capacity moves to a line of its own.
      std::vector<std::string> text{(view.picture ? dev.label : dev.name) + ":  " + format_bytes(static_cast<double>(total)) + " now",
                                    "peak " + format_bytes(static_cast<double>(peak))};
      if (view.picture) {
        // A slide's figure: the bytes, not the share of an 80 GiB device nobody can read off it.
      } else if (capacity > 0) {
        char pct[48];
        std::snprintf(pct, sizeof pct, "%.2g%% of %s", 100.0 * static_cast<double>(peak) / static_cast<double>(capacity),
                      format_bytes(static_cast<double>(capacity)).c_str());
        text.emplace_back(pct);
      } else {
        text.emplace_back("capacity unknown");
      }
      flow_text(text);

      const ImVec2 a = ImGui::GetCursorScreenPos();
      const float w = ImGui::GetContentRegionAvail().x - 4;
      ImGui::InvisibleButton(("mem_bar" + std::to_string(d)).c_str(), ImVec2(w, bar_h));
      dl->AddRectFilled(a, ImVec2(a.x + w, a.y + bar_h), IM_COL32(255, 255, 255, 18), 3.0f);
      float x = a.x;
      for (int c = 0; c < kMemoryCategoryCount; ++c) {
        const float seg = static_cast<float>(static_cast<double>(live[static_cast<size_t>(c)]) / axis * w);
        if (seg <= 0) continue;
        dl->AddRectFilled(ImVec2(x, a.y), ImVec2(std::min(x + seg, a.x + w), a.y + bar_h),
                          memory_color(static_cast<MemoryCategory>(c)));
        x += seg;
      }
      const float px = a.x + static_cast<float>(static_cast<double>(peak) / axis * w);
      if (px <= a.x + w + 1) {
        dl->AddLine(ImVec2(px, a.y - 2), ImVec2(px, a.y + bar_h + 2), kCursorColor, 2.0f);
      }
      dl->AddRect(a, ImVec2(a.x + w, a.y + bar_h), IM_COL32(255, 255, 255, 60), 3.0f);
      if (ImGui::IsItemHovered()) {
        ImGui::BeginTooltip();
        ImGui::Text("%s at the cursor", model.devices()[static_cast<size_t>(d)].name.c_str());
        for (int c = 0; c < kMemoryCategoryCount; ++c) {
          const int64_t pk = d < static_cast<int>(per_device.size()) ? per_device[static_cast<size_t>(d)].peak_bytes[static_cast<size_t>(c)] : 0;
          ImGui::Text("  %-13s %10s   (peak %s)", memory_category_name(static_cast<MemoryCategory>(c)),
                      format_bytes(static_cast<double>(live[static_cast<size_t>(c)])).c_str(), format_bytes(static_cast<double>(pk)).c_str());
        }
        ImGui::EndTooltip();
      }
      ImGui::Dummy(ImVec2(1, 2));
    }
  }

 private:
  bool against_capacity_ = false;
  uint64_t seen_version_ = 0;
};

}  // namespace

std::unique_ptr<Panel> make_memory_panel() { return std::make_unique<MemoryPanel>(); }

}  // namespace scalelab::viz
