// Buckets: for one device and the cursor's step, the backward pass on top and, per gradient
// bucket, its fill (gradients copied in as backward produces them), its all-reduce and its unpack.
// The band of the backward pass runs down through the bucket rows: an all-reduce inside the band
// is hidden under compute — the whole point of bucketing in DDP.
#include "viz/model/buckets_analysis.h"

#include <imgui.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "viz/model/format.h"
#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

namespace {

class BucketsPanel : public Panel {
 public:
  const char* title() const override { return "Buckets"; }
  bool applies(const DashboardModel& model) const override { return has_buckets(model); }

  void draw(const DashboardModel& model, ViewState& view) override {
    if (model.version() != seen_version_) {
      // A live model that only grew: count the new events alone.
      if (model.layout_version() != seen_layout_) summary_ = summarize_buckets(model);
      else extend_bucket_summary(summary_, model, seen_events_);
      seen_version_ = model.version();
      seen_layout_ = model.layout_version();
      seen_events_ = model.events().size();
      cached_step_ = -2;
    }
    const int n = model.device_count();
    if (view.focus_device >= n) view.focus_device = 0;
    const std::string preview = "device " + std::to_string(view.focus_device);
    if (view.picture) {  // a figure: which device, as text
      ImGui::Text("%s ·", preview.c_str());
    } else {
      ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
      if (ImGui::BeginCombo("##bucket_device", preview.c_str())) {
        for (int d = 0; d < n; ++d)
          if (ImGui::Selectable(("device " + std::to_string(d)).c_str(), d == view.focus_device)) view.focus_device = d;
        ImGui::EndCombo();
      }
    }
    const int si = shown_step_index(model, view);
    if (si != cached_step_ || view.focus_device != cached_device_) {
      step_ = analyze_bucket_step(model, si, view.focus_device);
      cached_step_ = si;
      cached_device_ = view.focus_device;
    }
    const auto& per_device = model.run_metrics().per_device;
    const double overlap = view.focus_device < static_cast<int>(per_device.size())
                               ? per_device[static_cast<size_t>(view.focus_device)].overlap_pct : 0.0;
    ImGui::SameLine(0, view.picture ? ImGui::CalcTextSize(" ").x : -1.0f);
    ImGui::Text("%zu bucket%s · step %lld", summary_.bucket_ids.size(), summary_.bucket_ids.size() == 1 ? "" : "s",
                si >= 0 ? static_cast<long long>(model.steps()[static_cast<size_t>(si)].step) : -1LL);
    ImGui::Text("comm hidden under compute on this device: %.1f%% (whole run)", overlap);
    legend_item(phase_color(Phase::bwd), "backward");
    legend_item(phase_color(Phase::data), "fill / unpack (copy)");
    legend_item(phase_color(Phase::comm), "communication");
    legend_item(IM_COL32(245, 145, 50, 60), "backward band: comm here is hidden");
    ImGui::NewLine();

    const ImVec2 avail = ImGui::GetContentRegionAvail();
    if (avail.x < 80 || avail.y < 30 || step_.step_index < 0) return;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("buckets_plot", avail);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float label_w = std::max(150.0f, ImGui::CalcTextSize("bucket 00 · 000 KiB").x + 10), axis_h = ImGui::GetFontSize() + 4;
    const float x0 = origin.x + label_w, w = avail.x - label_w - 6;
    const size_t rows = step_.buckets.size() + 1;
    const float row_h = std::clamp((avail.y - axis_h) / static_cast<float>(rows), 12.0f, std::max(34.0f, 1.8f * ImGui::GetFontSize()));
    const double t0 = static_cast<double>(step_.window.first);
    const double len = static_cast<double>(step_.window.second - step_.window.first);
    auto x_of = [&](int64_t t) { return x0 + static_cast<float>((static_cast<double>(t) - t0) / len) * w; };
    auto col = [&](ImU32 c, int64_t begin) { return begin > view.cursor_ns ? faded(c, 0.22f) : c; };
    const float bottom = origin.y + row_h * static_cast<float>(rows);

    // The backward band, behind everything.
    if (step_.backward.second > step_.backward.first)
      dl->AddRectFilled(ImVec2(x_of(step_.backward.first), origin.y), ImVec2(x_of(step_.backward.second), bottom),
                        IM_COL32(245, 145, 50, 40));

    // Row 0: the device's compute lane.
    dl->AddText(ImVec2(origin.x + 2, origin.y + (row_h - ImGui::GetFontSize()) * 0.5f), IM_COL32(220, 220, 228, 255), "compute");
    for (uint32_t idx : step_.compute) {
      const Event& e = model.events()[idx];
      dl->AddRectFilled(ImVec2(x_of(e.t_begin_ns), origin.y + 3), ImVec2(std::max(x_of(e.t_end_ns), x_of(e.t_begin_ns) + 1), origin.y + row_h - 4),
                        col(phase_color(e.phase), e.t_begin_ns));
    }
    for (size_t k = 0; k < step_.buckets.size(); ++k) {
      const BucketTimes& b = step_.buckets[k];
      const float y = origin.y + row_h * static_cast<float>(k + 1);
      char label[64];
      // The bucket's size from the gradients copied into it; a strategy that all-reduces its
      // gradient buffer in place (ZeRO's one flat bucket) copies none, so say nothing then.
      if (b.bytes > 0)
        std::snprintf(label, sizeof label, "bucket %d · %s", b.bucket, format_bytes(static_cast<double>(b.bytes)).c_str());
      else
        std::snprintf(label, sizeof label, "bucket %d", b.bucket);
      dl->AddText(ImVec2(origin.x + 2, y + (row_h - ImGui::GetFontSize()) * 0.5f), IM_COL32(220, 220, 228, 255), label);
      dl->AddRectFilled(ImVec2(x0, y + 1), ImVec2(x0 + w, y + row_h - 2), kRowBackground);
      auto seg = [&](const Interval& iv, ImU32 c, float inset) {
        if (iv.second <= iv.first) return;
        dl->AddRectFilled(ImVec2(x_of(iv.first), y + inset), ImVec2(std::max(x_of(iv.second), x_of(iv.first) + 1), y + row_h - inset),
                          col(c, iv.first), 2.0f);
      };
      seg(b.fill, faded(phase_color(Phase::data), 0.8f), 7);
      seg(b.unpack, faded(phase_color(Phase::data), 0.8f), 7);
      seg(b.all_reduce, phase_color(Phase::comm), 3);
      if (b.all_reduce.second > b.all_reduce.first) {
        // The label goes beside the bucket's whole activity (fill to unpack), right if it fits,
        // else left, so it never covers a segment.
        const double hidden_pct = b.all_reduce_ns > 0 ? 100.0 * static_cast<double>(b.hidden_ns) / static_cast<double>(b.all_reduce_ns) : 0.0;
        char full[96], brief[64];
        std::snprintf(full, sizeof full, "%s %s, %.0f%% hidden", b.collective.c_str(),
                      format_duration(static_cast<double>(b.all_reduce_ns)).c_str(), hidden_pct);
        std::snprintf(brief, sizeof brief, "%.0f%% hidden", hidden_pct);
        int64_t first = b.all_reduce.first, last = b.all_reduce.second;
        for (const Interval* iv : {&b.fill, &b.unpack})
          if (iv->second > iv->first) {
            first = std::min(first, iv->first);
            last = std::max(last, iv->second);
          }
        const float right = x_of(last) + 6, left_end = x_of(first) - 6;
        const char* t = nullptr;
        float x = 0;
        for (const char* candidate : {full, brief}) {
          const float tw = ImGui::CalcTextSize(candidate).x;
          if (right + tw <= x0 + w) { t = candidate; x = right; break; }
          if (left_end - tw >= x0) { t = candidate; x = left_end - tw; break; }
        }
        if (!t) {  // no room either side: over the row's end, on a backing
          t = brief;
          x = x0 + w - ImGui::CalcTextSize(t).x - 2;
        }
        const ImVec2 ts = ImGui::CalcTextSize(t);
        const float ty = y + (row_h - ts.y) * 0.5f;
        dl->AddRectFilled(ImVec2(x - 2, ty), ImVec2(x + ts.x + 2, ty + ts.y), IM_COL32(25, 27, 32, 200), 3.0f);
        dl->AddText(ImVec2(x, ty), IM_COL32(235, 235, 240, 255), t);
      }
    }
    draw_time_axis(dl, x0, w, len, origin.y, bottom);
    if (view.cursor_ns >= step_.window.first && view.cursor_ns <= step_.window.second)
      draw_cursor(dl, x_of(view.cursor_ns), origin.y, bottom);
  }

 private:
  BucketSummary summary_;
  BucketStep step_;
  int cached_step_ = -2, cached_device_ = -1;
  uint64_t seen_version_ = 0, seen_layout_ = 0;
  size_t seen_events_ = 0;
};

}  // namespace

std::unique_ptr<Panel> make_buckets_panel() { return std::make_unique<BucketsPanel>(); }

}  // namespace scalelab::viz
