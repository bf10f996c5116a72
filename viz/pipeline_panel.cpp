// Pipeline: stages × time for the cursor's step, forward (F) and backward (B) blocks numbered by
// micro-batch, the idle cells between them hatched as bubbles. Next to it the measured bubble share
// and the textbook's (p − 1)/(m + p − 1), so a student sees the formula come true — or not, when
// communication or uneven stages add to it.
#include "viz/pipeline_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "viz/format.h"
#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

const PipelineStep* PipelineAnalysis::step(int step_index) const {
  auto it = std::lower_bound(steps.begin(), steps.end(), step_index,
                             [](const PipelineStep& s, int v) { return s.step_index < v; });
  return it != steps.end() && it->step_index == step_index ? &*it : nullptr;
}

bool has_pipeline(const DashboardModel& model) {
  for (const Event& e : model.events())
    if (e.micro_batch >= 0 && e.lane == Lane::compute && (e.phase == Phase::fwd || e.phase == Phase::bwd)) return true;
  return false;
}

PipelineAnalysis analyze_pipeline(const DashboardModel& model) {
  PipelineAnalysis a;
  const auto& events = model.events();

  // Stages: devices that ran micro-batches, ordered by the first layer they hold.
  std::map<int, int> min_layer;  // device → smallest layer index
  std::set<int> micro_batches;
  for (const Event& e : events) {
    if (e.micro_batch < 0 || e.lane != Lane::compute || (e.phase != Phase::fwd && e.phase != Phase::bwd)) continue;
    auto [it, fresh] = min_layer.try_emplace(e.device, e.layer >= 0 ? e.layer : 1 << 30);
    if (!fresh && e.layer >= 0) it->second = std::min(it->second, e.layer);
    micro_batches.insert(e.micro_batch);
  }
  if (min_layer.empty()) return a;
  std::vector<std::pair<int, int>> order;  // (layer, device)
  for (const auto& [device, layer] : min_layer) order.emplace_back(layer, device);
  std::sort(order.begin(), order.end());
  std::map<int, int> stage_of;  // device → stage
  for (const auto& [layer, device] : order) {
    stage_of[device] = static_cast<int>(a.stage_devices.size());
    a.stage_devices.push_back(device);
  }
  a.micro_batches = static_cast<int>(micro_batches.size());
  const double p = static_cast<double>(a.stage_devices.size()), m = static_cast<double>(a.micro_batches);
  a.theory = (p - 1) / (m + p - 1);
  a.measured = model.run_metrics().bubble_fraction;

  // Blocks: consecutive compute events of one stage with the same micro-batch and direction.
  std::vector<int64_t> block_lengths;
  const auto& steps = model.steps();
  for (size_t si = 0; si < steps.size(); ++si) {
    PipelineStep ps;
    ps.step_index = static_cast<int>(si);
    ps.begin_ns = INT64_MAX;
    ps.end_ns = INT64_MIN;
    std::vector<int> open(a.stage_devices.size(), -1);  // per stage: index of the block being extended
    std::vector<std::vector<Interval>> busy(a.stage_devices.size());
    std::vector<Event> step_events;
    step_events.reserve(steps[si].events.size());
    for (uint32_t idx : steps[si].events) {
      const Event& e = events[idx];
      step_events.push_back(e);
      if (e.lane != Lane::compute) continue;
      auto st = stage_of.find(e.device);
      if (st == stage_of.end()) continue;
      const size_t s = static_cast<size_t>(st->second);
      ps.begin_ns = std::min(ps.begin_ns, e.t_begin_ns);
      ps.end_ns = std::max(ps.end_ns, e.t_end_ns);
      busy[s].emplace_back(e.t_begin_ns, e.t_end_ns);
      if (e.micro_batch < 0 || (e.phase != Phase::fwd && e.phase != Phase::bwd)) {
        ps.other_compute.push_back({st->second, {e.t_begin_ns, e.t_end_ns}});
        open[s] = -1;
        continue;
      }
      if (open[s] >= 0) {
        PipelineBlock& b = ps.blocks[static_cast<size_t>(open[s])];
        if (b.micro_batch == e.micro_batch && b.phase == e.phase) {
          b.end_ns = std::max(b.end_ns, e.t_end_ns);
          continue;
        }
      }
      open[s] = static_cast<int>(ps.blocks.size());
      ps.blocks.push_back(PipelineBlock{st->second, e.micro_batch, e.phase, e.t_begin_ns, e.t_end_ns});
    }
    if (ps.blocks.empty()) continue;
    for (const PipelineBlock& b : ps.blocks) block_lengths.push_back(b.end_ns - b.begin_ns);
    // 1F1B: on some stage a backward block starts before that stage's last forward block.
    for (size_t s = 0; s < a.stage_devices.size() && !ps.one_f_one_b; ++s) {
      int64_t last_fwd = INT64_MIN, first_bwd = INT64_MAX;
      for (const PipelineBlock& b : ps.blocks) {
        if (b.stage != static_cast<int>(s)) continue;
        if (b.phase == Phase::fwd) last_fwd = std::max(last_fwd, b.begin_ns);
        else first_bwd = std::min(first_bwd, b.begin_ns);
      }
      ps.one_f_one_b = first_bwd < last_fwd;
    }
    // Gaps per stage inside the step's window; kept as bubbles once the threshold is known.
    for (size_t s = 0; s < busy.size(); ++s) {
      auto& v = busy[s];
      std::sort(v.begin(), v.end());
      int64_t t = ps.begin_ns;
      for (const auto& [b, e] : v) {
        if (b > t) ps.bubbles.push_back({static_cast<int>(s), t, b});
        t = std::max(t, e);
      }
      if (ps.end_ns > t) ps.bubbles.push_back({static_cast<int>(s), t, ps.end_ns});
    }
    ps.bubble_fraction = compute_metrics(step_events, {}, model.device_count()).bubble_fraction;
    a.steps.push_back(std::move(ps));
  }

  // A gap under a quarter of the median block is an op boundary on a measured clock, not a bubble.
  if (!block_lengths.empty()) {
    std::nth_element(block_lengths.begin(), block_lengths.begin() + static_cast<std::ptrdiff_t>(block_lengths.size() / 2),
                     block_lengths.end());
    a.min_bubble_ns = std::max<int64_t>(1, block_lengths[block_lengths.size() / 2] / 4);
  }
  for (PipelineStep& ps : a.steps) {
    std::erase_if(ps.bubbles, [&](const PipelineBubble& b) { return b.end_ns - b.begin_ns < a.min_bubble_ns; });
    a.bubble_count += ps.bubbles.size();
  }
  return a;
}

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
    const int si = model.step_index_at(view.cursor_ns);
    const PipelineStep* ps = a.step(si);
    if (!ps && !a.steps.empty()) ps = &a.steps.front();
    if (!ps) {
      ImGui::TextUnformatted("no step ran micro-batches");
      return;
    }
    const int p = static_cast<int>(a.stage_devices.size()), m = a.micro_batches;
    ImGui::Text("%s · p = %d stages · m = %d micro-batch%s · step %lld",
                m == 1 ? "model parallel (a pipeline of one micro-batch)" : ps->one_f_one_b ? "1F1B schedule" : "GPipe schedule",
                p, m, m == 1 ? "" : "es",
                static_cast<long long>(model.steps()[static_cast<size_t>(ps->step_index)].step));
    ImGui::Text("bubble share: measured %.1f%% this step, %.1f%% whole run   vs   (p−1)/(m+p−1) = %d/%d = %.1f%%",
                100 * ps->bubble_fraction, 100 * a.measured, p - 1, m + p - 1, 100 * a.theory);
    legend_item(phase_color(Phase::fwd), "F = forward");
    legend_item(phase_color(Phase::bwd), "B = backward");
    legend_item(phase_color(Phase::optim), "optimizer");
    legend_item(kIdleColor, "bubble (idle)");
    ImGui::NewLine();

    const ImVec2 avail = ImGui::GetContentRegionAvail();
    if (avail.x < 80 || avail.y < 30) return;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("pipeline_grid", avail);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float label_w = 118, axis_h = ImGui::GetFontSize() + 4;
    const float x0 = origin.x + label_w, w = avail.x - label_w - 8;
    const float row_h = std::clamp((avail.y - axis_h) / static_cast<float>(std::max(p, 1)), 12.0f, 40.0f);
    const double t0 = static_cast<double>(ps->begin_ns), len = static_cast<double>(std::max<int64_t>(ps->end_ns - ps->begin_ns, 1));
    auto x_of = [&](int64_t t) { return x0 + static_cast<float>((static_cast<double>(t) - t0) / len) * w; };
    auto faded_if_future = [&](ImU32 c, int64_t begin) { return begin > view.cursor_ns ? faded(c, 0.22f) : c; };

    for (int s = 0; s < p; ++s) {
      const float y = origin.y + row_h * static_cast<float>(s);
      char label[64];
      std::snprintf(label, sizeof label, "stage %d · dev %d", s, a.stage_devices[static_cast<size_t>(s)]);
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
      dl->AddRectFilled(a0, a1, faded_if_future(phase_color(b.phase), b.begin_ns), 2.0f);
      dl->AddRect(a0, a1, IM_COL32(20, 20, 25, 160), 2.0f);
      char t[16];
      std::snprintf(t, sizeof t, "%c%d", b.phase == Phase::fwd ? 'F' : 'B', b.micro_batch);
      if (a1.x - a0.x >= ImGui::CalcTextSize(t).x + 2) draw_label_in(dl, a0, a1, t);
    }
    // Time axis: from the step's first compute.
    const float axis_y = origin.y + row_h * static_cast<float>(p);
    const double tick = nice_step(len, std::max(2, static_cast<int>(w / 110)));
    for (double t = 0; t <= len; t += tick) {
      const float x = x0 + static_cast<float>(t / len) * w;
      dl->AddLine(ImVec2(x, origin.y), ImVec2(x, axis_y), kGridColor);
      dl->AddText(ImVec2(x + 2, axis_y), kAxisText, format_tick(t, tick).c_str());
    }
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
