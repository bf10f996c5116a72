// The Pipeline panel's analysis: stages, micro-batches and the bubbles between their blocks.
#include "viz/model/pipeline_analysis.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

namespace scalelab::viz {

// A pipeline task's phase: F, B, or a zero-bubble schedule's W.
static bool is_pass(Phase phase) { return phase == Phase::fwd || phase == Phase::bwd || phase == Phase::wgrad; }

const PipelineStep* PipelineAnalysis::step(int step_index) const {
  auto it = std::lower_bound(steps.begin(), steps.end(), step_index,
                             [](const PipelineStep& s, int v) { return s.step_index < v; });
  return it != steps.end() && it->step_index == step_index ? &*it : nullptr;
}

bool has_pipeline(const DashboardModel& model) {
  for (const Event& e : model.events())
    if (e.micro_batch >= 0 && e.lane == Lane::compute && is_pass(e.phase)) return true;
  return false;
}

PipelineAnalysis analyze_pipeline(const DashboardModel& model) {
  PipelineAnalysis a;
  const auto& events = model.events();

  // Stages: devices that ran micro-batches, ordered by the first layer they hold.
  std::map<int, int> min_layer;  // device → smallest layer index
  std::map<int, std::set<int>> layers;  // device → the layers it ran
  std::set<int> micro_batches;
  for (const Event& e : events) {
    if (e.micro_batch < 0 || e.lane != Lane::compute || !is_pass(e.phase)) continue;
    auto [it, fresh] = min_layer.try_emplace(e.device, e.layer >= 0 ? e.layer : 1 << 30);
    if (!fresh && e.layer >= 0) it->second = std::min(it->second, e.layer);
    if (e.layer >= 0) layers[e.device].insert(e.layer);
    micro_batches.insert(e.micro_batch);
  }
  if (min_layer.empty()) return a;
  // Chunks: a stage's layers in runs of consecutive ones (interleaved, stage s holds virtual
  // stages s, s + p, …); a layer's chunk is its run's index.
  std::map<std::pair<int, int>, int> chunk_of;  // (device, layer) → chunk
  for (const auto& [device, held] : layers) {
    int chunk = 0, previous = -2;
    for (int l : held) {
      if (previous >= 0 && l != previous + 1) ++chunk;
      chunk_of[{device, l}] = chunk;
      previous = l;
    }
    a.chunks = std::max(a.chunks, chunk + 1);
  }
  std::vector<std::pair<int, int>> order;  // (layer, device)
  for (const auto& [device, layer] : min_layer) order.emplace_back(layer, device);
  std::sort(order.begin(), order.end());
  std::map<int, int> stage_of;  // device → stage
  for (const auto& [layer, device] : order) {
    stage_of[device] = static_cast<int>(a.stage_devices.size());
    a.stage_devices.push_back(device);
    if (a.stages == 0 || layer != min_layer[a.stage_devices[a.stage_devices.size() - 2]]) ++a.stages;
    a.row_stage.push_back(a.stages - 1);
  }
  a.micro_batches = static_cast<int>(micro_batches.size());
  const double p = static_cast<double>(a.stages), m = static_cast<double>(a.micro_batches);
  a.theory = (p - 1) / (a.chunks * m + p - 1);
  a.zero_bubble_theory = (p - 1) / (3 * m + p - 1);
  a.whole_run = model.run_metrics().bubble_fraction;

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
      if (e.micro_batch < 0 || !is_pass(e.phase)) {
        ps.other_compute.push_back({st->second, {e.t_begin_ns, e.t_end_ns}});
        open[s] = -1;
        continue;
      }
      const auto chunk = chunk_of.find({e.device, e.layer});
      const int c = chunk == chunk_of.end() ? 0 : chunk->second;  // the loss: no layer, its chunk's block
      if (open[s] >= 0) {
        PipelineBlock& b = ps.blocks[static_cast<size_t>(open[s])];
        if (b.micro_batch == e.micro_batch && b.phase == e.phase && (b.chunk == c || chunk == chunk_of.end())) {
          b.end_ns = std::max(b.end_ns, e.t_end_ns);
          continue;
        }
      }
      open[s] = static_cast<int>(ps.blocks.size());
      ps.blocks.push_back(PipelineBlock{st->second, e.micro_batch, c, e.phase, e.t_begin_ns, e.t_end_ns});
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
    ps.zero_bubble = std::any_of(ps.blocks.begin(), ps.blocks.end(), [](const PipelineBlock& b) { return b.phase == Phase::wgrad; });
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

}  // namespace scalelab::viz
