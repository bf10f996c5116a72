// Topology: the host in the middle, the devices around it, a line per link that carried data —
// thicker for more bytes, bright while a transfer is in flight at the cursor, labelled with the
// bytes moved so far. DataParallel's star through device 0, DDP's ring and the pipeline's chain
// each have their own shape here.
#include "viz/model/topology_analysis.h"

#include <imgui.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "viz/model/format.h"
#include "viz/model/layout_analysis.h"
#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

namespace {

std::string link_name(int a, int b) {
  return (a == kHost ? std::string("host") : "GPU " + std::to_string(a)) + " ↔ GPU " + std::to_string(b);
}

std::string node_link_name(int a, int b, int per_node) {
  const std::string devices = " (GPU " + std::to_string(b * per_node) + "–" + std::to_string((b + 1) * per_node - 1) + ")";
  if (a == kHost) return "host ↔ node " + std::to_string(b) + devices;
  if (a == b) return "inside node " + std::to_string(a) + devices;
  return "node " + std::to_string(a) + " ↔ node " + std::to_string(b);
}

class TopologyPanel : public Panel {
 public:
  const char* title() const override { return "Topology"; }
  bool applies(const DashboardModel& model) const override {
    for (const Event& e : model.events()) {
      int a = 0, b = 0;
      if (link_of(e, a, b)) return true;
    }
    return false;
  }

  void draw(const DashboardModel& model, ViewState& view) override {
    if (model.version() != seen_version_) {
      // A live model that only grew: take in the new events alone.
      if (model.layout_version() != seen_layout_ || !extend_topology(topo_, model, seen_events_)) topo_ = analyze_topology(model);
      seen_version_ = model.version();
      seen_layout_ = model.layout_version();
      seen_events_ = model.events().size();
      groups_ = group_traffic(model.events());
    }
    if (const auto& p = model.profile()) {
      flow_text({p->name + ": " + std::to_string(p->nodes) + " node" + (p->nodes == 1 ? "" : "s") + " × " +
                     std::to_string(p->devices_per_node) + " devices",
                 "device↔device " + p->intra_node.kind + " " + format_rate(p->intra_node.bandwidth_Bps, "B"),
                 "host " + p->host_link.kind + " " + format_rate(p->host_link.bandwidth_Bps, "B")});
    } else {
      ImGui::TextUnformatted("links as used by the run (the trace carries no hardware profile)");
    }

    // The table of links takes the right part when there is room for both; without it, a line
    // says what the numbers on the links are and when the bright ones are in flight.
    const bool table = ImGui::GetContentRegionAvail().x > ImGui::GetContentRegionAvail().y * 1.3f;
    if (!table) {
      ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
      flow_text({"on a link: bytes moved so far", "bright: in flight " + cursor_in_words(model, view)});
      ImGui::PopStyleColor();
    }
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    if (avail.x < 80 || avail.y < 60) return;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("topology_canvas", avail);
    const Canvas c{ImGui::GetWindowDrawList(), origin, avail, table ? avail.x * 0.55f : avail.x, ImGui::GetFontSize(), {}};

    // A box per device while each holds its name; past that (a cluster of many nodes) a box per
    // node, its devices' links summed: 128 boxes and their arcs would be a smear.
    const int n = std::max(topo_.devices, 1);
    const int per_node = model.profile() ? std::max(model.profile()->devices_per_node, 1) : n;
    const float device_box = ImGui::CalcTextSize(("GPU " + std::to_string(n - 1)).c_str()).x + 20;
    const bool by_node = c.diagram_w / static_cast<float>(n) < device_box && per_node < n;
    std::vector<NodeLink> node_links;
    if (by_node) {
      node_links = links_by_node(topo_, per_node);
      draw_nodes(c, node_links, (n + per_node - 1) / per_node, per_node, view.cursor_ns);
    } else {
      draw_devices(c, view.cursor_ns);
    }

    if (!table) {
      // No room for the tables: the groups' shares on one line.
      if (!groups_.empty()) {
        std::vector<std::string> parts;
        for (const GroupTraffic& g : groups_) parts.push_back(g.group + " " + format_bytes(static_cast<double>(g.bytes)));
        ImGui::SetCursorScreenPos(ImVec2(origin.x, origin.y + avail.y - ImGui::GetFrameHeight()));
        flow_text(parts);
      }
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(by_node ? "bytes moved up to the cursor, summed over each node's devices; a bright link is in flight"
                                  : "bytes moved up to the cursor; a bright link is in flight at the cursor");
      return;
    }
    ImGui::SetCursorScreenPos(ImVec2(origin.x + c.diagram_w + 8, origin.y));
    ImGui::BeginChild("topology_table", ImVec2(avail.x - c.diagram_w - 8, avail.y), false);
    // A run with sub-groups (tp, pp, dp): their traffic first — which group uses which links is
    // the lesson; the links' table below it.
    if (!groups_.empty()) {
      draw_groups(view.cursor_ns);
      ImGui::Spacing();
      ImGui::TextUnformatted("by link");
    }
    if (ImGui::BeginTable("links", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) {
      ImGui::TableSetupColumn("link");
      ImGui::TableSetupColumn("so far");
      ImGui::TableSetupColumn("run total");
      ImGui::TableHeadersRow();
      auto row = [](const std::string& name, int64_t so_far, int64_t total) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(name.c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_bytes(static_cast<double>(so_far)).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_bytes(static_cast<double>(total)).c_str());
      };
      if (by_node)
        for (const NodeLink& l : node_links) row(node_link_name(l.a, l.b, per_node), l.bytes_until(view.cursor_ns), l.total_bytes);
      else
        for (const LinkTraffic& l : topo_.links) row(link_name(l.a, l.b), l.bytes_until(view.cursor_ns), l.total_bytes);
      ImGui::EndTable();
    }
    ImGui::TextDisabled(by_node ? "a node's devices' links summed · so far: up to the cursor · bright: in flight"
                                : "so far: up to the cursor · bright link: in flight");
    if (topo_.unplaced_events > 0)
      ImGui::TextWrapped("+ %zu communication events (%s) name no peer: no link is credited with them", topo_.unplaced_events,
                         format_bytes(static_cast<double>(topo_.unplaced_bytes)).c_str());
    ImGui::EndChild();
  }

 private:
  struct Canvas {
    ImDrawList* dl;
    ImVec2 origin, avail;
    float diagram_w;  // the diagram's width; the table of links has the rest
    float fs;         // font size
    float host_y() const { return origin.y + fs * 0.5f + 6; }
    float row_y() const { return origin.y + std::min(avail.y * 0.42f, fs * 6.5f); }
    ImVec2 host() const { return ImVec2(origin.x + diagram_w * 0.5f, host_y()); }
    // The i-th of `count` boxes in the row.
    ImVec2 slot(int i, int count) const {
      return ImVec2(origin.x + diagram_w * (static_cast<float>(i) + 0.5f) / static_cast<float>(std::max(count, 1)), row_y());
    }
    // Labels wait until every line is drawn (flush_labels), so no later line runs over one.
    mutable std::vector<std::pair<ImVec2, std::string>> pending;
    void flush_labels() const {
      for (const auto& [m, text] : pending) label(m, text);
      pending.clear();
    }
    void label(ImVec2 m, const std::string& text) const {
      const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
      dl->AddRectFilled(ImVec2(m.x - ts.x * 0.5f - 3, m.y - ts.y * 0.5f), ImVec2(m.x + ts.x * 0.5f + 3, m.y + ts.y * 0.5f),
                        IM_COL32(25, 27, 32, 225), 3.0f);
      dl->AddText(ImVec2(m.x - ts.x * 0.5f, m.y - ts.y * 0.5f), IM_COL32(235, 235, 240, 255), text.c_str());
    }
    void box(ImVec2 p, const char* text, ImU32 fill, float min_half_w = 0) const {
      const ImVec2 ts = ImGui::CalcTextSize(text);
      const float half = std::max(ts.x * 0.5f + 8, min_half_w);
      dl->AddRectFilled(ImVec2(p.x - half, p.y - ts.y * 0.5f - 4), ImVec2(p.x + half, p.y + ts.y * 0.5f + 4), fill, 6.0f);
      dl->AddText(ImVec2(p.x - ts.x * 0.5f, p.y - ts.y * 0.5f), IM_COL32(245, 245, 250, 255), text);
    }
    // A spoke from the host down to a box at p.
    void spoke(ImVec2 p, ImU32 color, float thick, const std::string& text) const {
      const ImVec2 pa(host().x, host_y() + fs * 0.5f + 4);
      const ImVec2 end(p.x, p.y - fs * 0.5f - 4);
      dl->AddLine(pa, end, color, thick);
      if (!text.empty() && end.y - pa.y >= 2.5f * fs)
        pending.emplace_back(ImVec2(pa.x + (end.x - pa.x) * 0.72f, pa.y + (end.y - pa.y) * 0.72f), text);
    }
    // An arc under the row from a to b, its apex `depth` below the boxes; the label at the apex.
    void arc(ImVec2 pa, ImVec2 pb, float depth, ImU32 color, float thick, const std::string* text) const {
      const ImVec2 a0(pa.x, pa.y + fs * 0.5f + 4), b0(pb.x, pb.y + fs * 0.5f + 4);
      const ImVec2 c1(a0.x, a0.y + depth * 1.33f), c2(b0.x, b0.y + depth * 1.33f);  // cubic Bézier, apex `depth` down
      dl->AddBezierCubic(a0, c1, c2, b0, color, thick);
      if (text) pending.emplace_back(ImVec2((a0.x + b0.x) * 0.5f, a0.y + depth), *text);
    }
  };

  static float thickness(int64_t bytes, int64_t max_bytes) {
    return 1.5f + 4.5f * static_cast<float>(std::log1p(static_cast<double>(bytes)) / std::log1p(static_cast<double>(max_bytes)));
  }
  static ImU32 link_color(bool active, bool to_host) {
    return active ? kCursorColor : to_host ? faded(phase_color(Phase::data), 0.75f) : faded(phase_color(Phase::comm), 0.75f);
  }

  // Host on top, devices in a row below it; host links are straight spokes, device-to-device links
  // arcs under the row, deeper for devices farther apart, so every label has its own spot (a ring
  // shows as its neighbours' small arcs plus one wide arc closing it).
  void draw_devices(const Canvas& c, int64_t cursor) const {
    const int n = std::max(topo_.devices, 1);
    int max_span = 1;
    int64_t max_bytes = 1;
    for (const LinkTraffic& l : topo_.links) {
      if (l.a != kHost) max_span = std::max(max_span, l.b - l.a);
      max_bytes = std::max(max_bytes, l.total_bytes);
    }
    const float depth_unit = std::max(8.0f, (c.origin.y + c.avail.y - c.row_y() - c.fs - 8) / static_cast<float>(max_span));
    for (const LinkTraffic& l : topo_.links) {
      const ImU32 color = link_color(l.active_at(cursor), l.a == kHost);
      const float thick = thickness(l.total_bytes, max_bytes);
      const std::string text = format_bytes(static_cast<double>(l.bytes_until(cursor)));
      if (l.a == kHost) {
        c.spoke(c.slot(l.b, n), color, thick, text);
      } else {
        // Arcs one step apart in depth would stack their labels; then the table alone has the numbers.
        c.arc(c.slot(l.a, n), c.slot(l.b, n), depth_unit * static_cast<float>(l.b - l.a), color, thick,
              depth_unit >= c.fs + 3 ? &text : nullptr);
      }
    }
    c.flush_labels();
    c.box(c.host(), "host", IM_COL32(60, 64, 72, 255));
    for (int d = 0; d < topo_.devices; ++d) c.box(c.slot(d, n), ("GPU " + std::to_string(d)).c_str(), IM_COL32(70, 90, 130, 255));
  }

  // The same, a box per node: the host's spokes to the nodes, a node's own traffic (NVLink inside
  // it) a shallow arc under its box, traffic between nodes (the network) deeper arcs.
  static void draw_nodes(const Canvas& c, const std::vector<NodeLink>& links, int nodes, int per_node, int64_t cursor) {
    int max_span = 1;
    int64_t max_bytes = 1;
    for (const NodeLink& l : links) {
      if (l.a != kHost) max_span = std::max(max_span, l.b - l.a);
      max_bytes = std::max(max_bytes, l.total_bytes);
    }
    const float slot_w = c.diagram_w / static_cast<float>(nodes);
    const float inside_depth = c.fs * 1.6f;
    const float depth_unit =
        std::max(8.0f, (c.origin.y + c.avail.y - c.row_y() - inside_depth - c.fs - 8) / static_cast<float>(max_span));
    for (const NodeLink& l : links) {
      const ImU32 color = link_color(l.active_at(cursor), l.a == kHost);
      const float thick = thickness(l.total_bytes, max_bytes);
      const std::string text = format_bytes(static_cast<double>(l.bytes_until(cursor)));
      const bool text_fits = ImGui::CalcTextSize(text.c_str()).x + 8 < slot_w;
      if (l.a == kHost) {
        c.spoke(c.slot(l.b, nodes), color, thick, text_fits ? text : std::string());
      } else if (l.a == l.b) {
        const ImVec2 p = c.slot(l.a, nodes);
        const float half = slot_w * 0.3f;
        c.arc(ImVec2(p.x - half, p.y), ImVec2(p.x + half, p.y), inside_depth, color, thick, text_fits ? &text : nullptr);
      } else {
        // From the right of the left node's box to the left of the right one's: clear of the labels
        // of the nodes' own arcs, in the middle under each box.
        const ImVec2 pa = c.slot(l.a, nodes), pb = c.slot(l.b, nodes);
        c.arc(ImVec2(pa.x + slot_w * 0.3f, pa.y), ImVec2(pb.x - slot_w * 0.3f, pb.y),
              inside_depth + depth_unit * static_cast<float>(l.b - l.a), color, thick,
              text_fits && depth_unit >= c.fs + 3 ? &text : nullptr);
      }
    }
    c.flush_labels();
    c.box(c.host(), "host", IM_COL32(60, 64, 72, 255));
    for (int i = 0; i < nodes; ++i) {
      // The longest name that fits the node's slot: "node 3 · GPU 24–31", "node 3", "3", or none.
      const std::string names[] = {"node " + std::to_string(i) + " · GPU " + std::to_string(i * per_node) + "–" +
                                       std::to_string((i + 1) * per_node - 1),
                                   "node " + std::to_string(i), std::to_string(i), ""};
      const std::string* name = &names[3];
      for (const std::string& t : names)
        if (ImGui::CalcTextSize(t.c_str()).x + 20 <= slot_w) {
          name = &t;
          break;
        }
      c.box(c.slot(i, nodes), name->c_str(), IM_COL32(70, 90, 130, 255), std::min(slot_w * 0.4f, c.fs * 6));
    }
  }

  // The sub-groups' traffic (a tensor-parallel run's tp, pp, dp): which links each group uses is
  // the lesson — TP's all-reduces on NVLink inside a node, DP's gradients across the NICs.
  void draw_groups(int64_t cursor) const {
    ImGui::TextUnformatted("by process group");
    if (!ImGui::BeginTable("groups", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) return;
    ImGui::TableSetupColumn("group");
    ImGui::TableSetupColumn("so far");
    ImGui::TableSetupColumn("run total");
    ImGui::TableSetupColumn("busy");
    ImGui::TableHeadersRow();
    for (const GroupTraffic& g : groups_) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      legend_item(group_color(g.group), group_words(g.group).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(static_cast<double>(g.bytes_until(cursor))).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(static_cast<double>(g.bytes)).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_duration(static_cast<double>(g.busy_ns)).c_str());
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("device-time in this group's calls, summed over its devices");
    }
    ImGui::EndTable();
  }

  Topology topo_;
  std::vector<GroupTraffic> groups_;
  uint64_t seen_version_ = 0, seen_layout_ = 0;
  size_t seen_events_ = 0;
};

}  // namespace

std::unique_ptr<Panel> make_topology_panel() { return std::make_unique<TopologyPanel>(); }

}  // namespace scalelab::viz
