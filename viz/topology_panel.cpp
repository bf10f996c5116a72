// Topology: the host in the middle, the devices around it, a line per link that carried data —
// thicker for more bytes, bright while a transfer is in flight at the cursor, labelled with the
// bytes moved so far. DataParallel's star through device 0, DDP's ring and the pipeline's chain
// each have their own shape here.
#include "viz/topology_panel.h"

#include <imgui.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "viz/format.h"
#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

int64_t LinkTraffic::bytes_until(int64_t t) const {
  const size_t n = static_cast<size_t>(std::upper_bound(begin_ns.begin(), begin_ns.end(), t) - begin_ns.begin());
  return n == 0 ? 0 : cum_bytes[n - 1];
}

bool LinkTraffic::active_at(int64_t t) const {
  const size_t n = static_cast<size_t>(std::upper_bound(begin_ns.begin(), begin_ns.end(), t) - begin_ns.begin());
  return n > 0 && end_prefix_max[n - 1] > t;
}

bool link_of(const Event& e, int& a, int& b) {
  if (e.bytes <= 0 || e.device < 0) return false;
  if (e.role == Role::upload || e.role == Role::download) {
    a = kHost;
    b = e.device;
    return true;
  }
  if (e.peer < 0 || e.peer == e.device || e.role == Role::recv) return false;
  if (e.lane != Lane::comm && e.lane != Lane::copy) return false;
  a = std::min(e.device, e.peer);
  b = std::max(e.device, e.peer);
  return true;
}

Topology analyze_topology(const DashboardModel& model) {
  Topology t;
  t.devices = model.device_count();
  std::map<std::pair<int, int>, std::vector<const Event*>> by_link;
  for (const Event& e : model.events()) {
    int a = 0, b = 0;
    if (link_of(e, a, b)) {
      by_link[{a, b}].push_back(&e);
    } else if (e.lane == Lane::comm && e.peer < 0 && e.bytes > 0) {
      ++t.unplaced_events;
      t.unplaced_bytes += e.bytes;
    }
  }
  for (auto& [key, list] : by_link) {
    std::stable_sort(list.begin(), list.end(), [](const Event* x, const Event* y) { return x->t_begin_ns < y->t_begin_ns; });
    LinkTraffic l;
    l.a = key.first;
    l.b = key.second;
    int64_t cum = 0, max_end = INT64_MIN;
    for (const Event* e : list) {
      cum += e->bytes;
      max_end = std::max(max_end, e->t_end_ns);
      l.begin_ns.push_back(e->t_begin_ns);
      l.cum_bytes.push_back(cum);
      l.end_prefix_max.push_back(max_end);
    }
    l.total_bytes = cum;
    l.transfers = list.size();
    t.links.push_back(std::move(l));
  }
  return t;
}

bool extend_topology(Topology& t, const DashboardModel& model, size_t from) {
  const auto& events = model.events();
  auto find = [&](int a, int b) {
    return std::find_if(t.links.begin(), t.links.end(), [&](const LinkTraffic& l) { return l.a == a && l.b == b; });
  };
  // First see that every new transfer goes at the end of a known link (copying the links to undo
  // would cost what the whole analysis does).
  std::vector<int64_t> last_begin(t.links.size());
  for (size_t k = 0; k < t.links.size(); ++k) last_begin[k] = t.links[k].begin_ns.empty() ? INT64_MIN : t.links[k].begin_ns.back();
  for (size_t i = from; i < events.size(); ++i) {
    int a = 0, b = 0;
    if (!link_of(events[i], a, b)) continue;
    auto it = find(a, b);
    if (it == t.links.end()) return false;  // a new link: the order of links is analyze_topology's
    int64_t& last = last_begin[static_cast<size_t>(it - t.links.begin())];
    if (events[i].t_begin_ns < last) return false;
    last = events[i].t_begin_ns;
  }
  t.devices = model.device_count();
  for (size_t i = from; i < events.size(); ++i) {
    const Event& e = events[i];
    int a = 0, b = 0;
    if (!link_of(e, a, b)) {
      if (e.lane == Lane::comm && e.peer < 0 && e.bytes > 0) {
        ++t.unplaced_events;
        t.unplaced_bytes += e.bytes;
      }
      continue;
    }
    LinkTraffic& l = *find(a, b);
    l.total_bytes += e.bytes;
    ++l.transfers;
    l.begin_ns.push_back(e.t_begin_ns);
    l.cum_bytes.push_back(l.total_bytes);
    l.end_prefix_max.push_back(std::max(l.end_prefix_max.empty() ? INT64_MIN : l.end_prefix_max.back(), e.t_end_ns));
  }
  return true;
}

namespace {

std::string link_name(int a, int b) {
  return (a == kHost ? std::string("host") : "GPU " + std::to_string(a)) + " ↔ GPU " + std::to_string(b);
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
    }
    if (const auto& p = model.profile()) {
      ImGui::TextWrapped("%s: %d node%s × %d devices · device↔device %s %s · host %s %s", p->name.c_str(), p->nodes,
                  p->nodes == 1 ? "" : "s", p->devices_per_node, p->intra_node.kind.c_str(),
                  format_rate(p->intra_node.bandwidth_Bps, "B").c_str(), p->host_link.kind.c_str(),
                  format_rate(p->host_link.bandwidth_Bps, "B").c_str());
    } else {
      ImGui::TextUnformatted("links as used by the run (the trace carries no hardware profile)");
    }

    const ImVec2 avail = ImGui::GetContentRegionAvail();
    if (avail.x < 80 || avail.y < 60) return;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("topology_canvas", avail);
    ImDrawList* dl = ImGui::GetWindowDrawList();

    // The table of links takes the right part when there is room for both.
    const bool table = avail.x > avail.y * 1.3f;
    const float diagram_w = table ? avail.x * 0.55f : avail.x;
    // Host on top, devices in a row below it; host links are straight spokes, device-to-device
    // links arcs under the row, deeper for devices farther apart, so every label has its own spot
    // (a ring shows as its neighbours' small arcs plus one wide arc closing it).
    const int n = std::max(topo_.devices, 1);
    const float fs = ImGui::GetFontSize();
    const float host_y = origin.y + fs * 0.5f + 6;
    const float row_y = origin.y + std::min(avail.y * 0.42f, fs * 6.5f);
    int max_span = 1;
    for (const LinkTraffic& l : topo_.links)
      if (l.a != kHost) max_span = std::max(max_span, l.b - l.a);
    const float depth_unit = std::max(8.0f, (origin.y + avail.y - row_y - fs - 8) / static_cast<float>(max_span));
    auto pos = [&](int d) {
      if (d == kHost) return ImVec2(origin.x + diagram_w * 0.5f, host_y);
      return ImVec2(origin.x + diagram_w * (static_cast<float>(d) + 0.5f) / static_cast<float>(n), row_y);
    };

    int64_t max_bytes = 1;
    for (const LinkTraffic& l : topo_.links) max_bytes = std::max(max_bytes, l.total_bytes);
    auto label_at = [&](ImVec2 m, const std::string& text) {
      const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
      dl->AddRectFilled(ImVec2(m.x - ts.x * 0.5f - 3, m.y - ts.y * 0.5f), ImVec2(m.x + ts.x * 0.5f + 3, m.y + ts.y * 0.5f),
                        IM_COL32(25, 27, 32, 225), 3.0f);
      dl->AddText(ImVec2(m.x - ts.x * 0.5f, m.y - ts.y * 0.5f), IM_COL32(235, 235, 240, 255), text.c_str());
    };
    for (const LinkTraffic& l : topo_.links) {
      const bool active = l.active_at(view.cursor_ns);
      const float thick = 1.5f + 4.5f * static_cast<float>(std::log1p(static_cast<double>(l.total_bytes)) /
                                                          std::log1p(static_cast<double>(max_bytes)));
      const ImU32 c = active ? kCursorColor : l.a == kHost ? faded(phase_color(Phase::data), 0.75f) : faded(phase_color(Phase::comm), 0.75f);
      const std::string text = format_bytes(static_cast<double>(l.bytes_until(view.cursor_ns)));
      const ImVec2 pb = pos(l.b);
      if (l.a == kHost) {
        const ImVec2 pa(pos(kHost).x, host_y + fs * 0.5f + 4);
        const ImVec2 end(pb.x, pb.y - fs * 0.5f - 4);
        dl->AddLine(pa, end, c, thick);
        if (end.y - pa.y >= 2.5f * fs) label_at(ImVec2(pa.x + (end.x - pa.x) * 0.72f, pa.y + (end.y - pa.y) * 0.72f), text);
      } else {
        const ImVec2 pa = pos(l.a);
        const float depth = depth_unit * static_cast<float>(l.b - l.a);
        const ImVec2 a0(pa.x, pa.y + fs * 0.5f + 4), b0(pb.x, pb.y + fs * 0.5f + 4);
        // A cubic Bézier whose apex lies `depth` below the row.
        const ImVec2 c1(a0.x, a0.y + depth * 1.33f), c2(b0.x, b0.y + depth * 1.33f);
        dl->AddBezierCubic(a0, c1, c2, b0, c, thick);
        // Arcs one step apart in depth would stack their labels; then the table alone has the numbers.
        if (depth_unit >= fs + 3) label_at(ImVec2((a0.x + b0.x) * 0.5f, a0.y + depth), text);
      }
    }
    auto node = [&](int d, const char* text, ImU32 fill) {
      const ImVec2 p = pos(d), ts = ImGui::CalcTextSize(text);
      dl->AddRectFilled(ImVec2(p.x - ts.x * 0.5f - 8, p.y - ts.y * 0.5f - 4), ImVec2(p.x + ts.x * 0.5f + 8, p.y + ts.y * 0.5f + 4),
                        fill, 6.0f);
      dl->AddText(ImVec2(p.x - ts.x * 0.5f, p.y - ts.y * 0.5f), IM_COL32(245, 245, 250, 255), text);
    };
    node(kHost, "host", IM_COL32(60, 64, 72, 255));
    for (int d = 0; d < topo_.devices; ++d) node(d, ("GPU " + std::to_string(d)).c_str(), IM_COL32(70, 90, 130, 255));

    if (!table) {
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("bytes moved up to the cursor; a bright link is in flight at the cursor");
      return;
    }
    ImGui::SetCursorScreenPos(ImVec2(origin.x + diagram_w + 8, origin.y));
    ImGui::BeginChild("topology_table", ImVec2(avail.x - diagram_w - 8, avail.y), false);
    if (ImGui::BeginTable("links", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) {
      ImGui::TableSetupColumn("link");
      ImGui::TableSetupColumn("so far");
      ImGui::TableSetupColumn("run total");
      ImGui::TableHeadersRow();
      for (const LinkTraffic& l : topo_.links) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(link_name(l.a, l.b).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_bytes(static_cast<double>(l.bytes_until(view.cursor_ns))).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_bytes(static_cast<double>(l.total_bytes)).c_str());
      }
      ImGui::EndTable();
    }
    ImGui::TextDisabled("so far: up to the cursor · bright link: in flight");
    if (topo_.unplaced_events > 0)
      ImGui::TextWrapped("+ %zu communication events (%s) name no peer: no link is credited with them", topo_.unplaced_events,
                         format_bytes(static_cast<double>(topo_.unplaced_bytes)).c_str());
    ImGui::EndChild();
  }

 private:
  Topology topo_;
  uint64_t seen_version_ = 0, seen_layout_ = 0;
  size_t seen_events_ = 0;
};

}  // namespace

std::unique_ptr<Panel> make_topology_panel() { return std::make_unique<TopologyPanel>(); }

}  // namespace scalelab::viz
