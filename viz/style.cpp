#include "viz/style.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "viz/model/format.h"

namespace scalelab::viz {

ImU32 phase_color(Phase phase) {
  switch (phase) {
    case Phase::fwd: return IM_COL32(92, 156, 230, 255);    // blue
    case Phase::bwd: return IM_COL32(245, 145, 50, 255);    // orange
    case Phase::optim: return IM_COL32(98, 185, 90, 255);   // green
    case Phase::comm: return IM_COL32(230, 85, 95, 255);    // red
    case Phase::data: return IM_COL32(115, 205, 200, 255);  // teal
    case Phase::eval: return IM_COL32(170, 170, 170, 255);  // grey
    case Phase::wgrad: return IM_COL32(235, 200, 60, 255);  // yellow: the backward's other half
  }
  return IM_COL32(200, 200, 200, 255);
}

ImU32 memory_color(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::params: return IM_COL32(120, 170, 230, 255);       // blue, like the weights' forward use
    case MemoryCategory::grads: return IM_COL32(250, 180, 110, 255);        // orange, made by backward
    case MemoryCategory::optimizer: return IM_COL32(130, 205, 120, 255);    // green, the optimizer's
    case MemoryCategory::activations: return IM_COL32(190, 130, 210, 255);  // purple
    case MemoryCategory::comm_buffers: return IM_COL32(240, 120, 130, 255); // red, communication's
    case MemoryCategory::workspace: return IM_COL32(185, 180, 170, 255);    // grey
  }
  return IM_COL32(200, 200, 200, 255);
}

ImU32 group_color(const std::string& group) {
  if (group == "tp") return IM_COL32(110, 205, 120, 255);
  if (group == "pp") return IM_COL32(190, 130, 235, 255);
  if (group == "dp") return IM_COL32(95, 180, 245, 255);
  return IM_COL32(160, 160, 170, 255);
}

ImU32 faded(ImU32 color, float alpha) {
  const ImU32 a = static_cast<ImU32>(static_cast<float>((color >> IM_COL32_A_SHIFT) & 0xFF) * alpha);
  return (color & ~IM_COL32_A_MASK) | (a << IM_COL32_A_SHIFT);
}

ImU32 lighter(ImU32 color, float share) {
  auto channel = [&](int shift) {
    const float c = static_cast<float>((color >> shift) & 0xFF);
    return static_cast<ImU32>(c + (255.0f - c) * share) << shift;
  };
  return channel(IM_COL32_R_SHIFT) | channel(IM_COL32_G_SHIFT) | channel(IM_COL32_B_SHIFT) | (color & IM_COL32_A_MASK);
}

void draw_hatched(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 fill, ImU32 hatch) {
  dl->AddRectFilled(a, b, fill);
  const float w = b.x - a.x, h = b.y - a.y;
  if (w < 6 || h < 4) return;
  dl->PushClipRect(a, b, true);
  const float spacing = 7.0f;
  for (float x = a.x - h; x < b.x; x += spacing) dl->AddLine(ImVec2(x, b.y), ImVec2(x + h, a.y), hatch, 1.0f);
  dl->PopClipRect();
}

void draw_label_in(ImDrawList* dl, ImVec2 a, ImVec2 b, const char* text, ImU32 color) {
  const ImVec2 size = ImGui::CalcTextSize(text);
  const float w = b.x - a.x, h = b.y - a.y;
  if (w < 8 || h < ImGui::GetFontSize() * 0.8f) return;
  ImVec2 pos(a.x + 3, a.y + (h - size.y) * 0.5f);
  if (size.x + 6 <= w) pos.x = a.x + (w - size.x) * 0.5f;
  const ImVec4 clip(a.x + 1, a.y, b.x - 1, b.y);
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), pos, color, text, nullptr, 0.0f, &clip);
}

void legend_item(ImU32 color, const char* label) {
  const float s = ImGui::GetFontSize() * 0.8f;
  // Wrap to a new line when the item would not fit on this one (callers chain items with SameLine).
  const float needed = s + 4 + ImGui::CalcTextSize(label).x;
  if (ImGui::GetContentRegionAvail().x < needed && ImGui::GetCursorPosX() > ImGui::GetStyle().WindowPadding.x + 1) ImGui::NewLine();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float y = p.y + (ImGui::GetTextLineHeight() - s) * 0.5f;
  dl->AddRectFilled(ImVec2(p.x, y), ImVec2(p.x + s, y + s), color, 2.0f);
  ImGui::Dummy(ImVec2(s, ImGui::GetTextLineHeight()));
  ImGui::SameLine(0, 4);
  ImGui::TextUnformatted(label);
  ImGui::SameLine(0, 14);
}

void phase_legend(bool weight_gradients) {
  for (Phase p : {Phase::fwd, Phase::bwd, Phase::wgrad, Phase::optim, Phase::comm, Phase::data})
    if (p != Phase::wgrad || weight_gradients) legend_item(phase_color(p), phase_name(p));
  legend_item(kIdleColor, "idle");
  ImGui::NewLine();
}

void flow_text(const std::vector<std::string>& pieces) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string joined = " · " + pieces[i];
    if (i > 0) {
      ImGui::SameLine(0, 0);
      if (ImGui::GetContentRegionAvail().x >= ImGui::CalcTextSize(joined.c_str()).x) {
        ImGui::TextUnformatted(joined.c_str());
        continue;
      }
      ImGui::NewLine();
    }
    ImGui::TextUnformatted(pieces[i].c_str());
  }
}

void draw_cursor(ImDrawList* dl, float x, float y0, float y1) {
  dl->AddLine(ImVec2(x, y0), ImVec2(x, y1), kCursorColor, 2.0f);
}

void draw_time_axis(ImDrawList* dl, float x0, float w, double len_ns, float y_top, float y_axis) {
  const double tick = nice_step(len_ns, std::max(2, static_cast<int>(w / std::max(110.0f, 6 * ImGui::GetFontSize()))));
  for (double t = 0; t <= len_ns; t += tick) {
    const float x = x0 + static_cast<float>(t / len_ns) * w;
    dl->AddLine(ImVec2(x, y_top), ImVec2(x, y_axis), kGridColor);
    const std::string label = format_tick(t, tick);
    if (x + 2 + ImGui::CalcTextSize(label.c_str()).x <= x0 + w + 6) dl->AddText(ImVec2(x + 2, y_axis), kAxisText, label.c_str());
  }
}

double nice_step(double range, int target) {
  if (range <= 0 || target <= 0) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

}  // namespace scalelab::viz

namespace scalelab::viz {

void apply_theme(float font_px) {
  ImGui::StyleColorsDark();
  ImGuiStyle& style = ImGui::GetStyle();
  style.WindowRounding = 4.0f;
  style.FrameRounding = 3.0f;
  style.WindowPadding = ImVec2(8, 6);
  style.ItemSpacing = ImVec2(8, 4);
  style.WindowTitleAlign = ImVec2(0.0f, 0.5f);
  style.Colors[ImGuiCol_WindowBg] = ImVec4(0.10f, 0.105f, 0.12f, 1.0f);
  style.Colors[ImGuiCol_TitleBg] = ImVec4(0.16f, 0.18f, 0.24f, 1.0f);
  style.Colors[ImGuiCol_TitleBgActive] = ImVec4(0.20f, 0.24f, 0.34f, 1.0f);

  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout comes from the window size, not from a file left behind
  static const char* candidates[] = {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                                     "/usr/share/fonts/TTF/DejaVuSans.ttf",
                                     "/usr/share/fonts/dejavu/DejaVuSans.ttf"};
  // Latin-1 (µ, ×, ·), general punctuation (–, —, …), arrows (←, →, ↔), math (−, ≥), shapes (▶, ■).
  static const ImWchar ranges[] = {0x0020, 0x00FF, 0x2000, 0x206F, 0x2190, 0x21FF, 0x2200, 0x22FF, 0x25A0, 0x25FF, 0};
  for (const char* path : candidates) {
    if (FILE* f = std::fopen(path, "rb")) {
      std::fclose(f);
      ImFontConfig config;
      config.OversampleH = 2;
      if (io.Fonts->AddFontFromFileTTF(path, font_px, &config, ranges)) return;
    }
  }
  ImFontConfig config;
  config.SizePixels = font_px;
  io.Fonts->AddFontDefault(&config);
}

}  // namespace scalelab::viz
