#include "viz/dashboard.h"

#include <imgui.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "viz/model/buckets_analysis.h"
#include "viz/model/data_parallel_analysis.h"
#include "viz/model/format.h"
#include "viz/model/pipeline_analysis.h"
#include "viz/model/topology_analysis.h"
#include "viz/style.h"

namespace scalelab::viz {

std::vector<std::unique_ptr<Panel>> make_all_panels() {
  // Layout order: the timeline across the top, then what is particular to the strategy, then the
  // panels every run has.
  std::vector<std::unique_ptr<Panel>> p;
  p.push_back(make_timeline_panel());
  p.push_back(make_pipeline_panel());
  p.push_back(make_buckets_panel());
  p.push_back(make_data_parallel_panel());
  p.push_back(make_topology_panel());
  p.push_back(make_layout_panel());
  p.push_back(make_memory_panel());
  p.push_back(make_training_panel());
  return p;
}

Dashboard::Dashboard(std::unique_ptr<DataSource> source) : source_(std::move(source)), panels_(make_all_panels()) {
  if (source_ && source_->update(model_)) {
    select_step(static_cast<int>(model_.steps().size()) / 2);
    first_data_ = false;
  }
}

void Dashboard::set_source(std::unique_ptr<DataSource> source) {
  source_ = std::move(source);
  model_.clear();
  model_.rebuild();
  view_ = ViewState{};
  first_data_ = true;
  next_live_update_ = {};
  applies_version_ = 0;
  applies_layout_ = 0;
  applies_events_ = 0;
}

void Dashboard::follow(int64_t cursor_ns) {
  if (!view_.follow_live) return;
  view_.playing = false;
  view_.cursor_ns = std::clamp(cursor_ns, model_.t_begin_ns(), model_.t_end_ns());
  const int si = model_.step_index_at(view_.cursor_ns);
  if (si < 0) {
    fit_run();
    return;
  }
  // The timeline pages with the steps: it shows the one the cursor is in, as it fills.
  const StepSpan& s = model_.steps()[static_cast<size_t>(si)];
  const double len = static_cast<double>(std::max<int64_t>(s.end_ns - s.begin_ns, 1));
  view_.view_begin_ns = static_cast<double>(s.begin_ns) - 0.06 * len;
  view_.view_end_ns = static_cast<double>(s.end_ns) + 0.06 * len;
}

void Dashboard::select_step(int step_index, double fraction) {
  const auto& steps = model_.steps();
  if (steps.empty()) {
    view_.cursor_ns = model_.t_end_ns();
    fit_run();
    return;
  }
  step_index = std::clamp(step_index, 0, static_cast<int>(steps.size()) - 1);
  const StepSpan& s = steps[static_cast<size_t>(step_index)];
  // At its end the cursor may be past the next step's start (steps overlap a little): the panels
  // of one step show the picked one as long as the cursor stays in it.
  view_.picked_step = step_index;
  view_.cursor_ns = s.begin_ns + static_cast<int64_t>(std::clamp(fraction, 0.0, 1.0) * static_cast<double>(s.end_ns - s.begin_ns));
  // The timeline shows the step with a little of its neighbours.
  const double len = static_cast<double>(std::max<int64_t>(s.end_ns - s.begin_ns, 1));
  view_.view_begin_ns = static_cast<double>(s.begin_ns) - 0.06 * len;
  view_.view_end_ns = static_cast<double>(s.end_ns) + 0.06 * len;
}

void Dashboard::fit_run() {
  view_.view_begin_ns = static_cast<double>(model_.t_begin_ns());
  view_.view_end_ns = static_cast<double>(model_.t_end_ns());
}

namespace {
// "Data parallel" -> "data-parallel": a title as a command-line word.
std::string panel_name(const Panel& p) {
  std::string name = p.title();
  for (char& ch : name) ch = ch == ' ' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name;
}
}  // namespace

std::vector<std::string> Dashboard::panel_names() {
  std::vector<std::string> names;
  for (const auto& p : make_all_panels()) names.push_back(panel_name(*p));
  return names;
}

void Dashboard::check_panel_name(const std::string& name) {
  const std::vector<std::string> names = panel_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  throw UsageError("dash", "--panel " + name + ": no such panel — one of " + all);
}

void Dashboard::show_only(const std::string& name) {
  check_panel_name(name);
  std::string applying;
  for (auto& p : panels_) {
    if (!p->applies(model_)) continue;
    const std::string n = panel_name(*p);
    applying += (applying.empty() ? "" : ", ") + n;
    if (n == name) only_ = p.get();
  }
  if (only_) {
    view_.picture = true;
    return;
  }
  throw UsageError("dash", "--panel " + name + ": this run has no " + name + " panel — it has " + applying);
}

std::vector<std::string> Dashboard::shown_windows() const {
  if (only_) return {only_->title()};
  std::vector<std::string> out{live() ? kLiveTitle : kReplayTitle};
  for (const Panel* p : shown_) out.emplace_back(p->title());
  return out;
}

void Dashboard::advance_cursor(double dt_s) {
  if (!view_.playing) return;
  const double steps = static_cast<double>(std::max<size_t>(model_.steps().size(), 1));
  const double mean_step = static_cast<double>(model_.t_end_ns() - model_.t_begin_ns()) / steps;
  view_.cursor_ns += static_cast<int64_t>(dt_s * view_.play_steps_per_s * mean_step);
  if (view_.cursor_ns >= model_.t_end_ns()) {
    view_.cursor_ns = model_.t_end_ns();
    view_.playing = false;
  }
  // Keep the cursor on screen: page the timeline when it runs off the right edge.
  const double span = view_.view_end_ns - view_.view_begin_ns;
  const double c = static_cast<double>(view_.cursor_ns);
  if (c > view_.view_end_ns || c < view_.view_begin_ns) {
    view_.view_begin_ns = c - 0.1 * span;
    view_.view_end_ns = view_.view_begin_ns + span;
  }
}

void Dashboard::update() {
  if (!source_) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (live() && t0 < next_live_update_) return;
  const bool changed = source_->update(model_);
  const auto took = std::chrono::steady_clock::now() - t0;
  // An update costs what arrived since the last (the model is extended, not rebuilt), so waiting
  // longer saves nothing and only lets the view trail the run: wait as long as it took, which
  // keeps at least half of the time for drawing.
  if (live() && took > std::chrono::milliseconds(2)) next_live_update_ = t0 + 2 * took;
  if (changed && first_data_ && !model_.steps().empty()) {
    if (!live()) select_step(static_cast<int>(model_.steps().size()) / 2);
    first_data_ = false;
  }
}

void Dashboard::frame(float width, float height, double dt_s, float left) {
  update();
  advance_cursor(dt_s);

  if (only_) {  // one panel, the whole area; no title bar: the slide has its own
    const ImGuiWindowFlags flags = ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoMove |
                                   ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoResize;
    ImGui::SetNextWindowPos(ImVec2(left, 0), ImGuiCond_Always);
    ImGui::SetNextWindowSize(ImVec2(width - left, height), ImGuiCond_Always);
    if (ImGui::Begin(only_->title(), nullptr, flags)) only_->draw(model_, view_);
    ImGui::End();
    return;
  }

  // Which panels apply depends only on the data: ask again only when it changed.
  const size_t n_events = model_.events().size();
  if (applies_version_ != model_.version() &&
      (applies_layout_ != model_.layout_version() || n_events >= applies_events_ + applies_events_ / 4 + 1)) {
    applies_version_ = model_.version();
    applies_layout_ = model_.layout_version();
    applies_events_ = n_events;
    shown_.clear();
    for (auto& p : panels_)
      if (p->applies(model_)) shown_.push_back(p.get());
  }

  const bool relayout = width != laid_out_w_ || height != laid_out_h_ || shown_.size() != laid_out_count_ ||
                        left != laid_out_left_;
  laid_out_w_ = width;
  laid_out_h_ = height;
  laid_out_count_ = shown_.size();
  laid_out_left_ = left;

  const ImGuiStyle& style = ImGui::GetStyle();
  const float m = 6;
  const float bar_h = ImGui::GetFrameHeight() + 2 * ImGui::GetFrameHeightWithSpacing() + ImGui::GetTextLineHeightWithSpacing() +
                      2 * style.WindowPadding.y;
  draw_replay_bar(relayout, left, width, bar_h);

  // Timeline across the top, as tall as its rows need and at most 45% of what is left; the other
  // panels share the rest in a grid (up to 3 across).
  float y = bar_h + 2 * m;
  std::vector<std::pair<ImVec2, ImVec2>> rects(shown_.size());
  size_t first_grid = 0;
  if (!shown_.empty() && shown_[0]->full_width()) {
    const float rows = static_cast<float>(model_.rows().size());
    const float wanted = ImGui::GetFrameHeight() + ImGui::GetTextLineHeightWithSpacing() + 2 * ImGui::GetFontSize() + 6 + rows * 22 + 3 * style.WindowPadding.y + 8;
    const float rest = height - y - m;
    const float h = shown_.size() == 1 ? rest : std::min(wanted, rest * 0.45f);
    rects[0] = {ImVec2(left + m, y), ImVec2(width - left - 2 * m, h)};
    y += h + m;
    first_grid = 1;
  }
  const size_t n = shown_.size() - first_grid;
  if (n > 0) {
    const size_t cols = n <= 3 ? n : (n + 1) / 2;
    const size_t grid_rows = (n + cols - 1) / cols;
    const float cell_h = (height - y - m) / static_cast<float>(grid_rows) - (grid_rows > 1 ? m * 0.5f : 0);
    for (size_t i = 0; i < n; ++i) {
      const size_t r = i / cols, c = i % cols;
      const size_t in_row = std::min(cols, n - r * cols);  // a last, shorter row spreads across the width
      const float cell_w = (width - left - m * static_cast<float>(in_row + 1)) / static_cast<float>(in_row);
      rects[first_grid + i] = {ImVec2(left + m + static_cast<float>(c) * (cell_w + m), y + static_cast<float>(r) * (cell_h + m)),
                               ImVec2(cell_w, cell_h)};
    }
  }

  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings;
  for (size_t i = 0; i < shown_.size(); ++i) {
    if (relayout) {
      ImGui::SetNextWindowPos(rects[i].first, ImGuiCond_Always);
      ImGui::SetNextWindowSize(rects[i].second, ImGuiCond_Always);
    }
    if (ImGui::Begin(shown_[i]->title(), nullptr, flags)) shown_[i]->draw(model_, view_);
    ImGui::End();
  }
}

void Dashboard::draw_replay_bar(bool relayout, float left, float width, float height) {
  if (relayout) {
    ImGui::SetNextWindowPos(ImVec2(left + 6, 6), ImGuiCond_Always);
    ImGui::SetNextWindowSize(ImVec2(width - left - 12, height), ImGuiCond_Always);
  }
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoScrollbar;
  if (!ImGui::Begin(live() ? kLiveTitle : kReplayTitle, nullptr, flags)) {
    ImGui::End();
    return;
  }
  const TraceInfo& info = model_.info();
  const std::string file = model_.origin().substr(model_.origin().find_last_of('/') + 1);
  ImGui::Text("%s  ·  %d device%s  ·  %zu events  ·  %zu steps  ·  %s", file.c_str(), model_.device_count(),
              model_.device_count() == 1 ? "" : "s", model_.events().size(), model_.steps().size(), info.title.c_str());
  // Where the figures come from, in the colour of the clock (amber: modelled, green: measured);
  // the profile's figures in the tooltip.
  if (provenance_version_ != model_.version()) {
    provenance_ = describe_provenance(model_);
    provenance_version_ = model_.version();
  }
  ImGui::PushStyleColor(ImGuiCol_Text, info.simulated ? kModelledText : kMeasuredText);
  ImGui::TextUnformatted(provenance_.summary.c_str());
  ImGui::PopStyleColor();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", provenance_.details.c_str());

  const auto& steps = model_.steps();
  int si = std::max(shown_step_index(model_, view_), 0);
  const ImGuiIO& io = ImGui::GetIO();
  const bool keys = !io.WantTextInput;
  if (ImGui::Button("◀ step") || (keys && ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow)))) {
    select_step(si - 1);
    view_.playing = false;
    view_.follow_live = false;
  }
  ImGui::SameLine();
  if (ImGui::Button(view_.playing ? "Pause" : "Play ▶", ImVec2(ImGui::GetFontSize() * 4.5f, 0)) ||
      (keys && ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Space)))) {
    if (!view_.playing && view_.cursor_ns >= model_.t_end_ns()) view_.cursor_ns = model_.t_begin_ns();
    view_.playing = !view_.playing;
    view_.follow_live = false;
  }
  ImGui::SameLine();
  if (ImGui::Button("step ▶") || (keys && ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow)))) {
    select_step(si + 1);
    view_.playing = false;
    view_.follow_live = false;
  }
  ImGui::SameLine();
  const float slider_w = (ImGui::GetContentRegionAvail().x - ImGui::GetFontSize() * 12) * 0.5f;
  if (!steps.empty()) {
    ImGui::SetNextItemWidth(slider_w);
    char label[64];
    std::snprintf(label, sizeof label, "step %lld of %zu", static_cast<long long>(steps[static_cast<size_t>(si)].step), steps.size());
    int pick = si;
    if (ImGui::SliderInt("##step", &pick, 0, static_cast<int>(steps.size()) - 1, label) && pick != si) {
      select_step(pick);
      view_.playing = false;
      view_.follow_live = false;
    view_.follow_live = false;
    }
    ImGui::SameLine();
  }
  // Fine scrubbing: the time since the run began.
  double t_us = static_cast<double>(view_.cursor_ns - model_.t_begin_ns()) * 1e-3;
  const double lo = 0, hi = static_cast<double>(model_.t_end_ns() - model_.t_begin_ns()) * 1e-3;
  ImGui::SetNextItemWidth(slider_w);
  const std::string shown = "t = " + format_duration(t_us * 1e3);
  if (ImGui::SliderScalar("##time", ImGuiDataType_Double, &t_us, &lo, &hi, shown.c_str())) {
    view_.cursor_ns = model_.t_begin_ns() + static_cast<int64_t>(t_us * 1e3);
    view_.playing = false;
    view_.follow_live = false;
  }
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
  float speed = static_cast<float>(view_.play_steps_per_s);
  if (ImGui::SliderFloat("##speed", &speed, 0.05f, 20.0f, "%.2f steps/s", ImGuiSliderFlags_Logarithmic))
    view_.play_steps_per_s = speed;
  ImGui::End();
}

std::string describe(const DashboardModel& model) {
  std::ostringstream out;
  const RunMetrics& rm = model.run_metrics();
  out << "trace: " << model.origin() << "\n";
  out << "title: " << model.info().title << "\n";
  out << "clock: " << (model.info().simulated ? "simulated" : "measured") << "\n";
  out << "provenance: " << describe_provenance(model).summary << "\n";
  out << "devices: " << model.device_count() << "\n";
  out << "events: " << model.events().size() << "\n";
  out << "timeline_rows: " << model.rows().size() << "\n";
  if (model.group_size() > 0)  // shown by group (per node) where the rows do not fit
    out << "timeline_groups: " << (model.device_count() + model.group_size() - 1) / model.group_size() << " of "
        << model.group_size() << " devices\n";
  out << "steps: " << model.steps().size() << "\n";
  out << "memory_samples: " << model.memory().size() << "\n";
  out << "metrics: " << model.metrics().size() << "\n";
  out << "span: " << format_duration(static_cast<double>(rm.t_end_ns - rm.t_begin_ns)) << "\n";

  std::string panels;
  for (const auto& p : make_all_panels())
    if (p->applies(model)) panels += (panels.empty() ? "" : ", ") + std::string(p->title());
  out << "panels: " << panels << "\n";

  const BucketSummary b = summarize_buckets(model);
  out << "buckets: " << b.bucket_ids.size() << "\n";
  out << "bucket_events: " << b.bucket_events << "\n";
  out << "bucket_comm_events: " << b.all_reduce_events << "\n";
  if (!b.bucket_ids.empty()) {  // each bucket's size on device 0, in the middle step (a picture's default)
    std::string sizes;
    for (const BucketTimes& t : analyze_bucket_step(model, static_cast<int>(model.steps().size()) / 2, 0).buckets)
      sizes += (sizes.empty() ? "" : " ") + std::to_string(t.bytes);
    out << "bucket_bytes: " << sizes << "\n";
  }

  const PipelineAnalysis pa = analyze_pipeline(model);
  out << "pipeline_stages: " << pa.stage_devices.size() << "\n";
  out << "micro_batches: " << pa.micro_batches << "\n";
  out << "bubbles: " << pa.bubble_count << "\n";
  char pct[64];
  std::snprintf(pct, sizeof pct, "%.2f%%", 100.0 * rm.bubble_fraction);
  out << "bubble_share: " << pct << "\n";
  if (!pa.stage_devices.empty()) {
    // Zero bubble's formula where the steps ran W blocks (F = B = W), else (p − 1)/(V·m + p − 1).
    const bool zero_bubble = std::any_of(pa.steps.begin(), pa.steps.end(), [](const PipelineStep& s) { return s.zero_bubble; });
    std::snprintf(pct, sizeof pct, "%.2f%%", 100.0 * (zero_bubble ? pa.zero_bubble_theory : pa.theory));
    out << "bubble_share_theory: " << pct << "\n";
    if (zero_bubble) out << "schedule: zero-bubble\n";
  }
  out << "dp_copies: " << count_dp_copies(model) << "\n";

  const Topology topo = analyze_topology(model);
  int64_t link_bytes = 0;
  for (const LinkTraffic& l : topo.links) link_bytes += l.total_bytes;
  out << "links: " << topo.links.size() << "\n";
  out << "link_bytes: " << link_bytes << "\n";
  for (const DeviceMetrics& d : rm.per_device) {
    std::snprintf(pct, sizeof pct, "busy %.1f%% comm %.1f%% idle %.1f%%", d.busy_pct, d.comm_pct, d.idle_pct);
    out << "device " << d.device << ": " << pct << ", peak " << format_bytes(static_cast<double>(d.peak_total)) << "\n";
  }
  return out.str();
}

}  // namespace scalelab::viz
