// Memory: per device, what is live at the cursor, stacked by category (params, grads, optimizer
// state, activations, communication buffers, workspace), with the run's peak marked. Scrubbing the
// cursor through a step shows activations pile up in forward and drain in backward; comparing
// devices shows what ZeRO shards and what DDP replicates. Below, for a ConvNet or a GPT, the
// activations each layer keeps for backward (a transformer's blocks, each alike; with --recompute
// only their inputs).
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "viz/model/format.h"
#include "viz/model/layer_memory_analysis.h"
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
    const int si = shown_step_index(model, view);
    if (model.version() != layers_version_ || si != layers_step_) {
      layers_version_ = model.version();
      layers_step_ = si;
      layers_ = analyze_layer_memory(model, si);
    }
    // A ConvNet's and a transformer's layers differ in what they keep (a conv's feature maps, a
    // block's 34·s·b·h bytes): shown. An MLP's are its hidden sizes, already in the spec.
    bool by_layer = false;
    for (const DeviceLayerMemory& d : layers_)
      for (const LayerBytes& l : d.layers) by_layer = by_layer || l.label.rfind("blocks.", 0) == 0 || l.label.rfind("conv", 0) == 0;
    // The per-layer picture takes the lower part of the panel when there is one.
    const float avail_h = ImGui::GetContentRegionAvail().y * (by_layer ? 0.45f : 1.0f);
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
    if (by_layer) draw_layers(model, si, line);
  }

 private:
  // One strip per device (the first few of many): a bar per layer, or per group of layers when
  // they are more than the width can show, to one scale for all devices.
  void draw_layers(const DashboardModel& model, int si, float line) {
    ImGui::Separator();
    const int64_t step = model.steps()[static_cast<size_t>(si)].step;
    ImGui::Text("Activations kept for backward, by layer (step %lld)", static_cast<long long>(step));
    bool recomputed = false;
    for (const DeviceLayerMemory& d : layers_) recomputed = recomputed || d.recomputed;
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    if (recomputed)
      flow_text({"--recompute: each block keeps its input only (filled)", "the outline: what its forward, rerun in backward, allocates"});
    else
      flow_text({"what each layer's forward leaves for its backward", "summed over the step's micro-batches"});
    ImGui::PopStyleColor();
    constexpr size_t kMaxStrips = 4;
    const size_t strips = std::min(layers_.size(), kMaxStrips);
    const float w = ImGui::GetContentRegionAvail().x - 4;
    const int max_bars = std::max(1, static_cast<int>(w / 7));
    std::vector<std::vector<LayerBytes>> bars;
    int64_t top = 1;
    for (size_t i = 0; i < strips; ++i) {
      bars.push_back(group_layers(layers_[i].layers, max_bars));
      for (const LayerBytes& b : bars.back()) top = std::max({top, b.bytes, b.rerun});
    }
    const float strip_h = std::clamp(ImGui::GetContentRegionAvail().y / static_cast<float>(std::max<size_t>(strips, 1)) - 2 * line - 8, 16.0f, 90.0f);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    for (size_t i = 0; i < strips; ++i) {
      const DeviceLayerMemory& dm = layers_[i];
      const DeviceInfo& dev = model.devices()[static_cast<size_t>(dm.device)];
      const std::vector<LayerBytes>& b = bars[i];
      int64_t biggest = 0;
      std::string biggest_label;
      for (const LayerBytes& l : dm.layers)
        if (l.bytes > biggest) biggest = l.bytes, biggest_label = l.label;
      std::vector<std::string> text{dev.label + ":  " + format_bytes(static_cast<double>(dm.total)) + " in " +
                                        std::to_string(dm.layers.size()) + " layers",
                                    "most: " + biggest_label + " " + format_bytes(static_cast<double>(biggest))};
      int64_t rerun = 0;
      for (const LayerBytes& l : dm.layers) rerun += l.rerun;
      if (rerun > 0) text.push_back("rerun in backward: " + format_bytes(static_cast<double>(rerun)));
      if (b.size() < dm.layers.size())
        text.push_back("bars of " + std::to_string((dm.layers.size() + b.size() - 1) / b.size()) + " layers");
      flow_text(text);
      const ImVec2 a = ImGui::GetCursorScreenPos();
      ImGui::InvisibleButton(("layer_bars" + std::to_string(i)).c_str(), ImVec2(w, strip_h));
      dl->AddRectFilled(a, ImVec2(a.x + w, a.y + strip_h), IM_COL32(255, 255, 255, 12), 3.0f);
      // A few layers get bars of a readable width, not a third of the screen each.
      const float slot = std::min(w / static_cast<float>(b.size()), 12 * ImGui::GetFontSize());
      const float gap = slot > 6 ? std::min(4.0f, slot * 0.2f) : 0.0f;
      int hovered = -1;
      const float mx = ImGui::GetIO().MousePos.x;
      for (size_t k = 0; k < b.size(); ++k) {
        const float x0 = a.x + slot * static_cast<float>(k), x1 = x0 + slot - gap;
        const float hgt = static_cast<float>(static_cast<double>(std::max<int64_t>(b[k].bytes, 0)) / static_cast<double>(top)) * strip_h;
        dl->AddRectFilled(ImVec2(x0, a.y + strip_h - hgt), ImVec2(x1, a.y + strip_h), memory_color(MemoryCategory::activations));
        if (b[k].rerun > 0) {  // recompute: the outline is what the layer's rerun allocates, kept no longer
          const float rh = static_cast<float>(static_cast<double>(b[k].rerun) / static_cast<double>(top)) * strip_h;
          dl->AddRect(ImVec2(x0, a.y + strip_h - rh), ImVec2(x1, a.y + strip_h), memory_color(MemoryCategory::activations), 0.0f, 0, 1.5f);
        }
        // Its bytes on it where they fit: pictures side by side compare by the numbers.
        const std::string value = format_bytes(static_cast<double>(b[k].bytes));
        const ImVec2 vs = ImGui::CalcTextSize(value.c_str());
        if (vs.x + 4 <= slot - gap)
          dl->AddText(ImVec2(x0 + 2, std::min(a.y + strip_h - hgt + 2, a.y + strip_h - vs.y - 1)), ImGui::GetColorU32(ImGuiCol_Text),
                      value.c_str());
        if (ImGui::IsItemHovered() && mx >= x0 && mx < x0 + slot) hovered = static_cast<int>(k);
      }
      // Names under the bars where they fit; else the first and the last.
      const float label_w = ImGui::CalcTextSize("blocks.00").x;
      ImVec2 under(a.x, a.y + strip_h + 2);
      if (slot >= label_w) {
        for (size_t k = 0; k < b.size(); ++k)
          dl->AddText(ImVec2(a.x + slot * static_cast<float>(k), under.y), ImGui::GetColorU32(ImGuiCol_TextDisabled), b[k].label.c_str());
      } else {
        dl->AddText(under, ImGui::GetColorU32(ImGuiCol_TextDisabled), b.front().label.c_str());
        const float lw = ImGui::CalcTextSize(b.back().label.c_str()).x;
        dl->AddText(ImVec2(a.x + slot * static_cast<float>(b.size()) - lw, under.y), ImGui::GetColorU32(ImGuiCol_TextDisabled), b.back().label.c_str());
      }
      ImGui::Dummy(ImVec2(1, line));
      if (hovered >= 0) {
        ImGui::BeginTooltip();
        const LayerBytes& l = b[static_cast<size_t>(hovered)];
        ImGui::Text("%s: %s kept for backward", l.label.c_str(), format_bytes(static_cast<double>(l.bytes)).c_str());
        if (l.rerun > 0) ImGui::Text("rerun in backward (recompute): %s", format_bytes(static_cast<double>(l.rerun)).c_str());
        ImGui::EndTooltip();
      }
    }
    if (layers_.size() > strips) ImGui::TextDisabled("… and %zu devices more", layers_.size() - strips);
  }

  std::vector<DeviceLayerMemory> layers_;
  uint64_t layers_version_ = 0;
  int layers_step_ = -2;

  bool against_capacity_ = false;
  uint64_t seen_version_ = 0;
};

}  // namespace

std::unique_ptr<Panel> make_memory_panel() { return std::make_unique<MemoryPanel>(); }

}  // namespace scalelab::viz
