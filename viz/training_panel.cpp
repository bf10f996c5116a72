// Training: loss and accuracy over the steps, throughput below them, from the run's metrics, with
// the cursor's step marked; and a badge saying how close the run is to single-device training (when
// it was compared: --check-equivalence). It answers "did this strategy still learn the same thing?"
// next to how fast it ran.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "run/train.h"
#include "viz/model/format.h"
#include "viz/panel.h"
#include "viz/style.h"

namespace scalelab::viz {

namespace {

constexpr ImU32 kLossColor = IM_COL32(235, 110, 110, 255);
constexpr ImU32 kAccuracyColor = IM_COL32(110, 210, 140, 255);
constexpr ImU32 kThroughputColor = IM_COL32(120, 170, 255, 255);
constexpr ImU32 kBadgeSame = IM_COL32(40, 120, 70, 255);
constexpr ImU32 kBadgeRoundoff = IM_COL32(60, 100, 130, 255);
constexpr ImU32 kBadgeDiffers = IM_COL32(150, 95, 30, 255);
constexpr ImU32 kBadgeUnknown = IM_COL32(70, 70, 80, 255);

using Series = std::vector<std::pair<int64_t, double>>;

Series finite(Series s) {
  s.erase(std::remove_if(s.begin(), s.end(), [](const auto& p) { return !std::isfinite(p.second); }), s.end());
  return s;
}

class TrainingPanel : public Panel {
 public:
  const char* title() const override { return "Training"; }
  bool applies(const DashboardModel& model) const override {
    for (const Metric& m : model.metrics())
      if ((m.name == "loss" || m.name == "accuracy") && std::isfinite(m.value)) return true;
    return false;
  }

  void draw(const DashboardModel& model, ViewState& view) override {
    if (model.version() != seen_version_) {
      seen_version_ = model.version();
      loss_ = finite(model.metric_series("loss"));
      accuracy_ = finite(model.metric_series("accuracy"));
      throughput_ = finite(model.metric_series("samples_per_s"));
      loss_single_ = finite(model.metric_series("loss_single"));
      weights_diff_ = finite(model.metric_series("max_rel_diff"));
      roundoff_diff_ = finite(model.metric_series("roundoff_rel_diff"));
      loss_roundoff_ = finite(model.metric_series("loss_roundoff"));
    }
    const int si = shown_step_index(model, view);
    const int64_t cursor_step = si >= 0 ? model.steps()[static_cast<size_t>(si)].step : -1;

    legend_item(kLossColor, "loss (left axis)");
    legend_item(kAccuracyColor, "test accuracy (right, 0–1)");
    // Throughput is a time: the cost model's on a sim trace, a clock's otherwise.
    const char* clock = model.info().simulated ? "simulated" : "measured";
    if (!throughput_.empty()) legend_item(kThroughputColor, (std::string("samples/s, ") + clock + " (below)").c_str());
    ImGui::NewLine();
    draw_badge();
    const double* loss_now = value_at(loss_, cursor_step);
    const double* rate_now = value_at(throughput_, cursor_step);
    const double* acc_last = accuracy_.empty() ? nullptr : &accuracy_.back().second;
    std::vector<std::string> now{"step " + std::to_string(cursor_step) + ": loss " + (loss_now ? fmt(*loss_now) : "—")};
    if (rate_now) now.push_back(format_rate(*rate_now, " samples") + " " + clock);
    if (acc_last) {
      char acc[64];
      std::snprintf(acc, sizeof acc, "test accuracy %.4f (step %lld)", *acc_last, static_cast<long long>(accuracy_.back().first));
      now.push_back(acc);
    }
    flow_text(now);

    const ImVec2 avail = ImGui::GetContentRegionAvail();
    if (avail.x < 60 || avail.y < 40) return;
    const ImVec2 a = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("training_plot", avail);
    const float left = 52, right = 40, bottom = ImGui::GetFontSize() + 6;
    // Throughput gets a strip below the loss, on the same step axis.
    const float strip = throughput_.empty() ? 0 : std::round((avail.y - bottom) * 0.3f);
    const ImVec2 p0(a.x + left, a.y + 6), p1(a.x + avail.x - right, a.y + avail.y - bottom - strip);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddRect(p0, p1, IM_COL32(255, 255, 255, 50));

    int64_t s_min = std::numeric_limits<int64_t>::max(), s_max = std::numeric_limits<int64_t>::min();
    for (const auto* s : {&loss_, &accuracy_, &throughput_})
      for (const auto& [step, v] : *s) {
        s_min = std::min(s_min, step);
        s_max = std::max(s_max, step);
      }
    if (s_min > s_max) return;
    if (s_max == s_min) s_max = s_min + 1;
    double l_max = 0;
    for (const auto& [step, v] : loss_) l_max = std::max(l_max, v);
    l_max = l_max > 0 ? l_max * 1.05 : 1;
    auto x_of = [&](double step) { return p0.x + static_cast<float>((step - static_cast<double>(s_min)) / static_cast<double>(s_max - s_min)) * (p1.x - p0.x); };
    auto y_loss = [&](double v) { return p1.y - static_cast<float>(v / l_max) * (p1.y - p0.y); };
    auto y_acc = [&](double v) { return p1.y - static_cast<float>(v) * (p1.y - p0.y); };

    // Axes: loss ticks on the left, accuracy on the right, steps below.
    const double ls = nice_step(l_max, 4);
    for (double v = 0; v <= l_max; v += ls) {
      const float y = y_loss(v);
      dl->AddLine(ImVec2(p0.x, y), ImVec2(p1.x, y), kGridColor);
      dl->AddText(ImVec2(a.x + 2, y - ImGui::GetFontSize() * 0.5f), kLossColor, fmt(v).c_str());
    }
    if (!accuracy_.empty())
      for (double v = 0; v <= 1.0001; v += 0.25) {
        char t[16];
        std::snprintf(t, sizeof t, "%.2f", v);
        dl->AddText(ImVec2(p1.x + 4, y_acc(v) - ImGui::GetFontSize() * 0.5f), kAccuracyColor, t);
      }
    const double ss = std::max(1.0, nice_step(static_cast<double>(s_max - s_min), std::max(2, static_cast<int>((p1.x - p0.x) / 80))));
    const float axis_y = p1.y + strip;
    for (double s = std::ceil(static_cast<double>(s_min) / ss) * ss; s <= static_cast<double>(s_max); s += ss) {
      char t[24];
      std::snprintf(t, sizeof t, "%.0f", s);
      dl->AddText(ImVec2(x_of(s) - ImGui::CalcTextSize(t).x * 0.5f, axis_y + 3), kAxisText, t);
    }
    if (strip > 20) {
      // Throughput: its own scale from 0, one label at the top.
      const ImVec2 q0(p0.x, p1.y + 6), q1(p1.x, axis_y);
      double r_max = 0;
      for (const auto& [step, v] : throughput_) r_max = std::max(r_max, v);
      r_max = r_max > 0 ? r_max * 1.1 : 1;
      auto y_rate = [&](double v) { return q1.y - static_cast<float>(v / r_max) * (q1.y - q0.y); };
      dl->AddRect(q0, q1, IM_COL32(255, 255, 255, 50));
      dl->AddText(ImVec2(a.x + 2, q0.y), kThroughputColor, format_rate(r_max / 1.1, "").c_str());
      dl->AddText(ImVec2(a.x + 2, q1.y - ImGui::GetFontSize()), kThroughputColor, "0");
      dl->PushClipRect(ImVec2(q0.x - 5, q0.y - 5), ImVec2(q1.x + 5, q1.y + 5), true);
      draw_series(dl, throughput_, x_of, y_rate, kThroughputColor, cursor_step, q1.x - q0.x);
      if (cursor_step >= 0) draw_cursor(dl, x_of(static_cast<double>(cursor_step)), q0.y, q1.y);
      dl->PopClipRect();
    }

    // A little beyond the frame, so a point on its edge (the final accuracy) is drawn whole.
    dl->PushClipRect(ImVec2(p0.x - 5, p0.y - 5), ImVec2(p1.x + 5, p1.y + 5), true);
    draw_series(dl, loss_, x_of, y_loss, kLossColor, cursor_step, p1.x - p0.x);
    draw_series(dl, accuracy_, x_of, y_acc, kAccuracyColor, cursor_step, p1.x - p0.x);
    if (cursor_step >= 0) draw_cursor(dl, x_of(static_cast<double>(cursor_step)), p0.y, p1.y);
    dl->PopClipRect();

    // Clicking on the plot moves the cursor to that step's start.
    if (ImGui::IsItemClicked() && !model.steps().empty()) {
      const double step = static_cast<double>(s_min) + (ImGui::GetIO().MousePos.x - p0.x) / (p1.x - p0.x) * static_cast<double>(s_max - s_min);
      for (const StepSpan& s : model.steps())
        if (static_cast<double>(s.step) >= std::round(step)) {
          view.cursor_ns = s.begin_ns;
          view.playing = false;
          view.follow_live = false;
          break;
        }
    }
  }

 private:
  Series loss_, accuracy_, throughput_, loss_single_, weights_diff_, roundoff_diff_, loss_roundoff_;
  uint64_t seen_version_ = 0;

  // The badge: `train --check-equivalence`'s verdict (equal, amplified round-off, differs) on the
  // weights at the end of the run, or while it runs on the losses so far; grey when the run was
  // not compared. "Round-off alone" is single trained on the same batches, each taken in two
  // halves (run/run_parts.h).
  void draw_badge() const {
    char text[200];
    ImU32 fill = kBadgeUnknown;
    std::string tip = "Train with --check-equivalence (the launch panel's \"compare with single\") to check this run "
                      "against one device on the same global batches.";
    double d = -1, roundoff = -1;
    char what[64] = "";
    if (!weights_diff_.empty()) {
      d = weights_diff_.back().second;
      roundoff = roundoff_diff_.empty() ? -1 : roundoff_diff_.back().second;
      std::snprintf(what, sizeof what, "weights after step %lld", static_cast<long long>(weights_diff_.back().first));
      tip = "Every weight compared with single-device training on the same global batches, after the last step.";
    } else if (!loss_single_.empty()) {
      d = largest_relative_gap(loss_, loss_single_);
      roundoff = largest_relative_gap(loss_roundoff_, loss_single_);
      std::snprintf(what, sizeof what, "loss over %zu steps", loss_single_.size());
      tip = "The loss of each step next to single-device training's on the same global batch; the weights are "
            "compared when the run ends.";
    }
    if (d < 0) {
      std::snprintf(text, sizeof text, " not compared with single ");
    } else {
      char rule[320];
      std::snprintf(rule, sizeof rule,
                    " Within %g: the same training. Round-off alone is how far single moves when each batch's rows "
                    "are taken in two halves, their gradients summed: within %gx of it, the difference is round-off amplified over the "
                    "steps, not another algorithm; beyond it, the strategy differs.",
                    kEquivalenceTolerance, kRoundoffFactor);
      tip += rule;
      switch (equivalence_verdict(d, roundoff)) {
        case EquivalenceVerdict::equal:
          fill = kBadgeSame;
          std::snprintf(text, sizeof text, " ≡ single · %s: max relative difference %.2g ", what, d);
          break;
        case EquivalenceVerdict::roundoff:
          fill = kBadgeRoundoff;
          std::snprintf(text, sizeof text, " ≈ single · %s: %.2g apart, round-off alone %.2g: amplified round-off ",
                        what, d, roundoff);
          break;
        case EquivalenceVerdict::differs:
          fill = kBadgeDiffers;
          std::snprintf(text, sizeof text, " ≠ single · %s: %.2g apart, round-off alone %.2g: differs ", what, d,
                        roundoff);
          break;
      }
    }
    const ImVec2 size = ImGui::CalcTextSize(text);
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float pad_y = 2;
    ImGui::Dummy(ImVec2(size.x, size.y + 2 * pad_y));
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tip.c_str());
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddRectFilled(p, ImVec2(p.x + size.x, p.y + size.y + 2 * pad_y), fill, size.y * 0.5f);
    dl->AddText(ImVec2(p.x, p.y + pad_y), IM_COL32(240, 240, 240, 255), text);
  }

  // The largest relative gap of `series` to `reference` over the steps both have.
  double largest_relative_gap(const Series& series, const Series& reference) const {
    double worst = 0;
    for (const auto& [step, ref] : reference)
      if (const double* v = value_at(series, step)) worst = std::max(worst, std::fabs(*v - ref) / std::max(std::fabs(ref), 1e-12));
    return worst;
  }

  static std::string fmt(double v) {
    char t[32];
    std::snprintf(t, sizeof t, std::fabs(v) >= 10 ? "%.1f" : "%.3f", v);
    return t;
  }

  static const double* value_at(const Series& s, int64_t step) {
    auto it = std::lower_bound(s.begin(), s.end(), step, [](const auto& p, int64_t v) { return p.first < v; });
    return it != s.end() && it->first == step ? &it->second : nullptr;
  }

  // A polyline; steps after the cursor are faded (they have not happened yet at the cursor). With
  // more points than pixels, every pixel column keeps its min and max, so spikes stay visible.
  template <typename X, typename Y>
  static void draw_series(ImDrawList* dl, const Series& s, X x_of, Y y_of, ImU32 color, int64_t cursor_step, float width) {
    if (s.empty()) return;
    if (s.size() == 1) {
      dl->AddCircleFilled(ImVec2(x_of(static_cast<double>(s[0].first)), y_of(s[0].second)), 4.0f, color);
      return;
    }
    const size_t stride = std::max<size_t>(1, s.size() / static_cast<size_t>(std::max(width, 1.0f)));
    ImVec2 prev(x_of(static_cast<double>(s[0].first)), y_of(s[0].second));
    for (size_t i = stride; i < s.size(); i += stride) {
      double lo = s[i].second, hi = s[i].second;
      for (size_t k = i - stride + 1; k < i; ++k) {
        lo = std::min(lo, s[k].second);
        hi = std::max(hi, s[k].second);
      }
      const ImVec2 cur(x_of(static_cast<double>(s[i].first)), y_of(s[i].second));
      const ImU32 c = s[i].first > cursor_step ? faded(color, 0.35f) : color;
      if (stride > 1) dl->AddLine(ImVec2(cur.x, y_of(lo)), ImVec2(cur.x, y_of(hi)), c, 1.0f);
      dl->AddLine(prev, cur, c, 2.0f);
      prev = cur;
    }
  }
};

}  // namespace

std::unique_ptr<Panel> make_training_panel() { return std::make_unique<TrainingPanel>(); }

}  // namespace scalelab::viz
