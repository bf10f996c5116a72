#include "viz/launch_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/device/sim/profile.h"
#include "core/error.h"
#include "strategies/strategy.h"
#include "viz/model/data_source.h"
#include "viz/model/format.h"

namespace scalelab::viz {

namespace {

constexpr ImU32 kErrorText = IM_COL32(255, 120, 110, 255);
constexpr ImU32 kOkText = IM_COL32(130, 220, 150, 255);

const char* const kModelPresets[] = {"mlp:784-256-128-10", "mlp:784-512-256-128-10", "mlp:784-1024-1024-1024-10",
                                     "mlp:784-4096-4096-4096-4096-10", "convnet", "gpt:2-128-4-64-96", "gpt:12-768-12-1024-50257"};

// A combo over a list of strings; returns true when the choice changed.
bool combo(const char* label, std::string& value, const std::vector<std::string>& options,
           const std::vector<std::string>& tips = {}) {
  bool changed = false;
  if (ImGui::BeginCombo(label, value.c_str())) {
    for (size_t i = 0; i < options.size(); ++i) {
      const bool selected = options[i] == value;
      if (ImGui::Selectable(options[i].c_str(), selected)) {
        changed = options[i] != value;
        value = options[i];
      }
      if (i < tips.size() && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tips[i].c_str());
      if (selected) ImGui::SetItemDefaultFocus();
    }
    ImGui::EndCombo();
  }
  return changed;
}

int profile_device_count(const std::string& hw) {
  static std::map<std::string, int> counts;
  auto it = counts.find(hw);
  if (it != counts.end()) return it->second;
  int n = 8;
  try {
    n = load_profile(hw).device_count();
  } catch (const std::exception&) {
    // Unknown profile: Start will say so; the slider keeps a sensible range meanwhile.
  }
  return counts[hw] = std::max(1, n);
}

}  // namespace

LaunchPanel::LaunchPanel(Dashboard& dashboard, TrainConfig initial, double speed)
    : dash_(dashboard), fields_(std::move(initial)), speed_(speed > 0 ? speed : 1e-4), paced_(speed > 0) {
  if (fields_.device == DeviceKind::sim && fields_.hw.empty()) fields_.hw = "a100-nvlink-8";
  if (fields_.steps <= 0) fields_.steps = 200;
  std::snprintf(model_text_, sizeof model_text_, "%s", fields_.model.c_str());
  device_kinds_ = {"sim", "cpu"};
  if (cuda_available()) device_kinds_.emplace_back("cuda");
  profiles_ = list_profiles();
}

TrainConfig LaunchPanel::config() const {
  TrainConfig c = fields_;
  const TrainConfig defaults;
  const StrategyInfo& info = find_strategy(c.strategy);
  c.model = model_text_;
  c.launch = Launch::threads;
  if (info.device_count.min == info.device_count.max) c.devices = info.device_count.min;
  if (c.device != DeviceKind::sim) {
    c.hw.clear();
    c.dry_run = false;
  }
  // The fields of the options this strategy does not take go back to their defaults (the panel
  // keeps what was typed, for when such a strategy is picked again).
  using O = StrategyOption;
  if (!info.takes(O::buckets)) {
    c.bucket_mb = defaults.bucket_mb;
    c.first_bucket_mb = defaults.first_bucket_mb;
  }
  if (!info.takes(O::no_sync)) c.no_sync = defaults.no_sync;
  if (!info.takes(O::micro_batches)) c.micro_batches = defaults.micro_batches;
  if (!info.takes(O::schedule)) c.schedule = defaults.schedule;
  // Interleaving and zero bubble are the pipeline strategy's alone (tensor-parallel's stages run
  // GPipe or 1F1B).
  if (info.name != "pipeline" && (c.schedule == Schedule::interleaved || c.schedule == Schedule::zero_bubble))
    c.schedule = Schedule::one_f_one_b;
  // Chunks per device are the interleaved schedule's alone, and it needs two at least.
  c.virtual_stages = c.schedule == Schedule::interleaved ? std::max(2, c.virtual_stages) : defaults.virtual_stages;
  if (!info.takes(O::zero_stage)) c.zero_stage = defaults.zero_stage;
  // zero's stage is 1 to 3; tensor-parallel's 0 (off) or 1 (over each data-parallel group).
  if (info.name == "zero") c.zero_stage = std::clamp(c.zero_stage, 1, 3);
  else c.zero_stage = std::min(c.zero_stage, 1);
  if (!info.takes(O::amp)) c.amp = defaults.amp;
  if (!info.takes(O::sequence_parallel)) c.sequence_parallel = defaults.sequence_parallel;
  if (!info.synchronous) c.check_equivalence = false;
  if (c.model.rfind("gpt:", 0) != 0) c.recompute = false;  // a model without blocks refuses it
  if (c.amp != Amp::fp16) c.amp_initial_scale = defaults.amp_initial_scale;
  return c;
}

void LaunchPanel::start_or_throw(bool paused, bool unpaced) {
  auto next = std::make_unique<LiveRun>(config(), paced_ && !unpaced ? speed_ : 0.0, paused);
  // The dashboard's source reads the new run's bus; the old run (if any) ends after the swap.
  dash_.set_source(std::make_unique<BusSource>(next->bus(), next->info(), [run = next.get()] { return run->done(); }));
  run_ = std::move(next);
  error_.clear();
}

bool LaunchPanel::start(bool paused, bool unpaced) {
  try {
    start_or_throw(paused, unpaced);
    return true;
  } catch (const std::exception& e) {
    error_ = e.what();
    return false;
  }
}

void LaunchPanel::draw(float width, float height) {
  ImGui::SetNextWindowPos(ImVec2(6, 6), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(width - 6, height - 12), ImGuiCond_Always);
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoMove |
                                 ImGuiWindowFlags_NoResize;
  if (ImGui::Begin(kTitle, nullptr, flags)) {
    const bool running = run_ && !run_->done();
    draw_settings(running);
    ImGui::Separator();
    draw_controls();
    ImGui::Separator();
    draw_status();
  }
  ImGui::End();
}

void LaunchPanel::draw_settings(bool locked) {
  ImGui::PushItemWidth(-ImGui::GetFontSize() * 6.5f);
  if (locked) ImGui::BeginDisabled();

  std::vector<std::string> names, summaries;
  for (const StrategyInfo& s : strategy_registry()) {
    names.push_back(s.name);
    summaries.push_back(s.summary);
  }
  combo("strategy", fields_.strategy, names, summaries);
  const StrategyInfo& info = find_strategy(fields_.strategy);
  using O = StrategyOption;
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("%s", info.summary.c_str());
  ImGui::PopStyleColor();

  std::string device = device_kind_name(fields_.device);
  if (combo("device", device, device_kinds_)) {
    fields_.device = parse_device_kind(device);
    if (fields_.device == DeviceKind::sim && fields_.hw.empty()) fields_.hw = "a100-nvlink-8";
  }
  if (fields_.device == DeviceKind::sim) {
    combo("hardware", fields_.hw, profiles_);
    ImGui::Checkbox("dry run (shapes and times only)", &fields_.dry_run);
  }
  const int max_devices = fields_.device == DeviceKind::sim ? profile_device_count(fields_.hw) : 8;
  const DeviceCountRule& rule = info.device_count;
  if (rule.min == rule.max) {
    int fixed = rule.min;  // what the strategy means (single: one); the others keep the slider's value
    ImGui::BeginDisabled();
    ImGui::SliderInt("devices", &fixed, 1, std::max(2, max_devices));
    ImGui::EndDisabled();
  } else {
    const int top = std::max(rule.min + 1, rule.max > 0 ? std::min(rule.max, max_devices) : max_devices);
    ImGui::SliderInt("devices", &fields_.devices, rule.min, top);
    if (fields_.devices % rule.multiple_of != 0) {
      ImGui::SameLine();
      ImGui::TextDisabled("(a multiple of %d)", rule.multiple_of);
    }
  }

  ImGui::InputText("model", model_text_, sizeof model_text_);
  if (ImGui::BeginCombo("##model presets", "model presets…")) {
    for (const char* m : kModelPresets)
      if (ImGui::Selectable(m)) {
        std::snprintf(model_text_, sizeof model_text_, "%s", m);
        fields_.dataset = default_dataset(m);  // a GPT reads text, the others images
      }
    ImGui::EndCombo();
  }
  combo("dataset", fields_.dataset, {"fashion-mnist", "text", "synthetic"},
        {"images, 1×28×28, 10 classes", "the fortunes corpus as character tokens (a GPT)", "random data of the model's shape"});
  // Activation checkpointing is a transformer block's: offered for a GPT.
  if (std::string(model_text_).rfind("gpt:", 0) == 0)
    ImGui::Checkbox("recompute (activation checkpointing)", &fields_.recompute);
  int batch = static_cast<int>(fields_.batch), steps = static_cast<int>(fields_.steps);
  if (ImGui::InputInt("batch", &batch, 16, 128)) fields_.batch = std::max(1, batch);
  if (ImGui::InputInt("steps", &steps, 10, 100)) fields_.steps = std::max(1, steps);

  // What only some strategies take: shown where it applies.
  if (info.takes(O::micro_batches)) ImGui::SliderInt("micro-batches", &fields_.micro_batches, 1, 32);
  if (info.takes(O::schedule)) {
    std::string schedule = schedule_name(fields_.schedule);
    std::vector<std::string> schedules = {schedule_name(Schedule::gpipe), schedule_name(Schedule::one_f_one_b)};
    if (info.name == "pipeline")  // tensor-parallel's stages run GPipe or 1F1B
      for (Schedule s : {Schedule::interleaved, Schedule::zero_bubble}) schedules.push_back(schedule_name(s));
    if (combo("schedule", schedule, schedules)) fields_.schedule = parse_schedule(schedule);
    if (fields_.schedule == Schedule::interleaved) {
      fields_.virtual_stages = std::max(2, fields_.virtual_stages);
      ImGui::SliderInt("virtual stages", &fields_.virtual_stages, 2, 8);
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip("chunks of layers per device; micro-batches a multiple of the devices");
    }
  }
  if (info.takes(O::no_sync)) {
    ImGui::SliderInt("no_sync K", &fields_.no_sync, 1, 8);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("accumulate gradients over K batches, all-reduce (step) every K-th");
  }
  if (info.takes(O::buckets)) {
    float mb = static_cast<float>(fields_.bucket_mb);
    if (ImGui::SliderFloat("bucket MB", &mb, 0.01f, 100.0f, "%.2f", ImGuiSliderFlags_Logarithmic)) fields_.bucket_mb = mb;
    float first = static_cast<float>(fields_.first_bucket_mb);
    if (ImGui::SliderFloat("first bucket MB", &first, 0.01f, 100.0f, "%.2f", ImGuiSliderFlags_Logarithmic))
      fields_.first_bucket_mb = first;
  }
  if (info.takes(O::zero_stage) && info.name == "zero") {
    fields_.zero_stage = std::clamp(fields_.zero_stage, 1, 3);
    ImGui::SliderInt("ZeRO stage", &fields_.zero_stage, 1, 3);
    ImGui::TextDisabled(fields_.zero_stage == 1   ? "shards the optimizer state"
                        : fields_.zero_stage == 2 ? "shards optimizer state and gradients"
                                                  : "shards the weights too, gathered a layer at a time (FSDP)");
  } else if (info.takes(O::zero_stage)) {  // tensor-parallel: ZeRO-1 over each data-parallel group
    bool zero1 = fields_.zero_stage >= 1;
    if (ImGui::Checkbox("ZeRO-1 over the data-parallel groups", &zero1)) fields_.zero_stage = zero1 ? 1 : 0;
  }
  if (info.takes(O::sequence_parallel))
    ImGui::Checkbox("sequence parallel (LayerNorms on T/N positions)", &fields_.sequence_parallel);
  if (info.takes(O::amp)) {
    std::string amp = amp_name(fields_.amp);
    if (combo("AMP", amp, {amp_name(Amp::off), amp_name(Amp::fp16), amp_name(Amp::bf16)})) fields_.amp = parse_amp(amp);
  }
  if (info.synchronous) ImGui::Checkbox("compare with single", &fields_.check_equivalence);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("also train one device on the same global batches; the Training panel shows the difference");

  if (locked) ImGui::EndDisabled();
  ImGui::PopItemWidth();
}

void LaunchPanel::draw_controls() {
  const float w = (ImGui::GetContentRegionAvail().x - 3 * ImGui::GetStyle().ItemSpacing.x) / 4;
  const bool running = run_ && !run_->done();
  if (!running) {
    if (ImGui::Button("Start", ImVec2(w, 0))) start();
  } else if (ImGui::Button("Stop", ImVec2(w, 0))) {
    run_->stop();
  }
  ImGui::SameLine();
  if (!running) ImGui::BeginDisabled();
  const bool paused = running && run_->state() == LiveRun::State::paused;
  if (ImGui::Button(paused ? "Resume" : "Pause", ImVec2(w, 0))) {
    if (paused) run_->resume();
    else run_->pause();
    dash_.view().follow_live = true;
  }
  ImGui::SameLine();
  if (ImGui::Button("Step", ImVec2(w, 0))) {
    run_->step();
    dash_.view().follow_live = true;
  }
  if (!running) ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::Checkbox("follow", &dash_.view().follow_live);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("the cursor follows the run; scrubbing lets go");

  // Speed: only a simulated clock can be slowed down to watch; a measured one runs as it runs.
  const bool sim = (run_ ? run_->config().device : fields_.device) == DeviceKind::sim;
  if (!sim) ImGui::BeginDisabled();
  if (ImGui::Checkbox("paced", &paced_) && run_) run_->set_speed(paced_ ? speed_ : 0.0);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("off: as fast as the host computes");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(-1);
  float log_speed = static_cast<float>(std::log10(speed_));
  const std::string shown = format_duration(speed_ * 1e9) + " of GPU time per second";
  if (!paced_) ImGui::BeginDisabled();
  if (ImGui::SliderFloat("##speed", &log_speed, -7.0f, -1.0f, shown.c_str())) {
    speed_ = std::pow(10.0, static_cast<double>(log_speed));
    if (run_) run_->set_speed(speed_);
  }
  if (!paced_) ImGui::EndDisabled();
  const DashboardModel& m = dash_.model();
  if (sim && paced_ && m.steps().size() > 1) {
    const double step_ns = static_cast<double>(m.t_end_ns() - m.t_begin_ns()) / static_cast<double>(m.steps().size());
    char line[128];
    std::snprintf(line, sizeof line, "a step takes %s simulated: about %.2g steps per second at this speed",
                  format_duration(step_ns).c_str(), speed_ * 1e9 / step_ns);
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s", line);
    ImGui::PopStyleColor();
  }
  if (!sim) ImGui::EndDisabled();
}

void LaunchPanel::draw_status() {
  if (!error_.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, kErrorText);
    ImGui::TextWrapped("%s", error_.c_str());
    ImGui::PopStyleColor();
  }
  if (!run_) {
    ImGui::TextWrapped("Pick a strategy and press Start. Every panel shows the run as it trains.");
    return;
  }
  const LiveRun::State state = run_->state();
  const int64_t done = run_->steps_done(), total = std::max<int64_t>(run_->total_steps(), run_->config().steps);
  char label[64];
  std::snprintf(label, sizeof label, "%lld / %lld steps", static_cast<long long>(done), static_cast<long long>(total));
  ImGui::ProgressBar(total > 0 ? static_cast<float>(done) / static_cast<float>(total) : 0.0f, ImVec2(-1, 0), label);
  ImGui::Text("%s", LiveRun::state_name(state));
  if (state == LiveRun::State::failed) {
    ImGui::PushStyleColor(ImGuiCol_Text, kErrorText);
    ImGui::TextWrapped("%s", run_->error().c_str());
    ImGui::PopStyleColor();
  }
  if (const auto r = run_->result()) {
    ImGui::PushStyleColor(ImGuiCol_Text, kOkText);
    if (r->test_accuracy >= 0) ImGui::Text("test accuracy %.4f", r->test_accuracy);
    ImGui::Text("%s %s: %.0f samples/s", r->simulated ? "simulated" : "measured", format_duration(r->time_s * 1e9).c_str(),
                r->samples_per_s);
    ImGui::PopStyleColor();
  }
}

}  // namespace scalelab::viz
