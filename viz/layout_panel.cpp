// Layout: a tensor-parallel run's ranks as Megatron lays them out (rank = pp·(D·T) + dp·T + tp,
// core/comm/parallel_layout.h) — a grid per pipeline stage, a row per data-parallel replica, a cell
// per tensor shard — each cell saying what its rank holds, each node's ranks outlined. Hovering a
// rank lights up its three groups: its tp group (the row), its dp group (the column), its pp group
// (the same cell in every stage). It reads only the run's shape, so any pp draws.
#include "viz/model/layout_analysis.h"

#include <imgui.h>

#include <algorithm>
#include <string>

#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

namespace {

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

class LayoutPanel : public Panel {
 public:
  const char* title() const override { return "Layout"; }
  bool applies(const DashboardModel& model) const override {
    const auto l = layout_of(model);
    return l && l->world() > 1;
  }

  void draw(const DashboardModel& model, ViewState&) override {
    const auto l = layout_of(model);
    if (!l) return;
    flow_text({std::to_string(l->pp) + " stage" + (l->pp == 1 ? "" : "s") + " × " + std::to_string(l->dp) + " replica" +
                   (l->dp == 1 ? "" : "s") + " × " + std::to_string(l->tp) + " shard" + (l->tp == 1 ? "" : "s"),
               "rank = stage·" + std::to_string(l->dp * l->tp) + " + replica·" + std::to_string(l->tp) + " + shard"});
    legend_item(group_color("tp"), "TP group: a row, inside a node");
    ImGui::SameLine();
    legend_item(group_color("dp"), "DP group: a column, across");
    ImGui::SameLine();
    legend_item(group_color("pp"), "PP group: across stages");
    ImGui::NewLine();  // legend_item leaves the line open

    const ImVec2 avail = ImGui::GetContentRegionAvail();
    if (avail.x < 80 || avail.y < 40) return;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("layout_canvas", avail);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float fs = ImGui::GetFontSize();

    // Stages side by side where they fit, else one above the other.
    const bool side = l->pp == 1 || avail.x / static_cast<float>(l->pp) > avail.y;
    const float gap = fs * 0.8f, head = fs * 1.4f;
    const float stage_w = side ? (avail.x - gap * static_cast<float>(l->pp - 1)) / static_cast<float>(l->pp) : avail.x;
    const float stage_h = side ? avail.y : (avail.y - gap * static_cast<float>(l->pp - 1)) / static_cast<float>(l->pp);
    const float cell_w = stage_w / static_cast<float>(l->tp), cell_h = (stage_h - head) / static_cast<float>(l->dp);
    auto cell_min = [&](int rank) {
      const RankCell c = rank_cell(*l, rank);
      const float sx = origin.x + (side ? static_cast<float>(c.pp) * (stage_w + gap) : 0);
      const float sy = origin.y + (side ? 0 : static_cast<float>(c.pp) * (stage_h + gap)) + head;
      return ImVec2(sx + static_cast<float>(c.tp) * cell_w, sy + static_cast<float>(c.dp) * cell_h);
    };

    // The rank under the pointer, and its groups.
    int hovered = -1;
    if (ImGui::IsItemHovered()) {
      const ImVec2 m = ImGui::GetIO().MousePos;
      for (int r = 0; r < l->world(); ++r) {
        const ImVec2 a = cell_min(r);
        if (m.x >= a.x && m.x < a.x + cell_w && m.y >= a.y && m.y < a.y + cell_h) hovered = r;
      }
    }
    const RankCell h = rank_cell(*l, std::max(hovered, 0));

    // What rank_holds says in three parts: the stage's layers, the shard's heads and features, the replica.
    auto part = [&](int rank, int which) {
      std::string holds = rank_holds(*l, rank) + " · ";
      for (int i = 0; i < which; ++i) holds = holds.substr(holds.find(" · ") + 4);
      return holds.substr(0, holds.find(" · "));
    };
    for (int s = 0; s < l->pp; ++s) {  // each stage's heading: what its layers are
      const ImVec2 a = cell_min(s * l->dp * l->tp);
      std::string heading = part(s * l->dp * l->tp, 0);
      if (l->pp == 1) heading = "stage 0: " + heading;
      dl->PushClipRect(ImVec2(a.x, a.y - head), ImVec2(a.x + stage_w, a.y), true);
      dl->AddText(ImVec2(a.x, a.y - head + 2), kAxisText, heading.c_str());
      dl->PopClipRect();
    }
    for (int r = 0; r < l->world(); ++r) {
      const ImVec2 a = cell_min(r), b(a.x + cell_w - 3, a.y + cell_h - 3);
      ImU32 fill = IM_COL32(70, 90, 130, 255);
      if (hovered >= 0) {
        if (r == hovered) fill = kCursorColor;
        else if (contains(h.tp_group, r)) fill = group_color("tp");
        else if (contains(h.dp_group, r)) fill = group_color("dp");
        else if (contains(h.pp_group, r)) fill = group_color("pp");
        else fill = IM_COL32(55, 60, 72, 255);
      }
      dl->AddRectFilled(a, b, fill, 4.0f);
      const ImU32 text = hovered >= 0 && fill != IM_COL32(55, 60, 72, 255) ? kLabelOnBlock : IM_COL32(245, 245, 250, 255);
      // "rank 13" with the shard's part ("heads 4–5", "MLP 512–767") and the replica, a line each,
      // where that fits the cell; else "rank 13", or "13" (never a clipped "rank 1").
      std::string label = "rank " + std::to_string(r);
      std::string shard = part(r, 1);
      shard = shard.substr(shard.find(": ") + 2);
      const size_t mlp = shard.find(", MLP features ");
      if (mlp != std::string::npos) shard = shard.substr(0, mlp) + "\nMLP " + shard.substr(mlp + 15);
      const std::string words = label + "\n" + shard + "\n" + part(r, 2);
      const ImVec2 size = ImGui::CalcTextSize(words.c_str());
      if (size.x <= cell_w - 10 && size.y <= cell_h - 6) label = words;
      else if (ImGui::CalcTextSize(label.c_str()).x > cell_w - 10) label = std::to_string(r);
      dl->PushClipRect(a, b, true);
      dl->AddText(ImVec2(a.x + 5, a.y + 3), text, label.c_str());
      dl->PopClipRect();
    }
    // Nodes outlined: a node's ranks are consecutive, so whole rows of a stage when T divides it.
    if (l->per_node > 0 && l->per_node % l->tp == 0) {
      const int rows = l->per_node / l->tp;
      for (int first = 0; first < l->world(); first += l->per_node) {
        const ImVec2 a = cell_min(first);
        const int last_row = std::min(rows, l->dp - rank_cell(*l, first).dp);
        const ImVec2 b(a.x + cell_w * static_cast<float>(l->tp) - 1, a.y + cell_h * static_cast<float>(last_row) - 1);
        dl->AddRect(ImVec2(a.x - 2, a.y - 2), b, IM_COL32(255, 255, 255, 200), 5.0f, 0, 2.0f);
        const std::string name = "node " + std::to_string(first / l->per_node);
        const ImVec2 ts = ImGui::CalcTextSize(name.c_str());
        dl->AddRectFilled(ImVec2(b.x - ts.x - 8, b.y - ts.y - 4), ImVec2(b.x - 1, b.y - 1), IM_COL32(25, 27, 32, 230), 3.0f);
        dl->AddText(ImVec2(b.x - ts.x - 5, b.y - ts.y - 3), IM_COL32(235, 235, 240, 255), name.c_str());
      }
    }
    if (hovered >= 0) {
      auto list = [](const std::vector<int>& g) {
        std::string s;
        for (int r : g) s += (s.empty() ? "" : ", ") + std::to_string(r);
        return s;
      };
      ImGui::SetTooltip("rank %d: %s\ntp group [%s]\ndp group [%s]\npp group [%s]", hovered, rank_holds(*l, hovered).c_str(),
                        list(h.tp_group).c_str(), list(h.dp_group).c_str(), list(h.pp_group).c_str());
    }
  }
};

}  // namespace

std::unique_ptr<Panel> make_layout_panel() { return std::make_unique<LayoutPanel>(); }

}  // namespace scalelab::viz
