#include "viz/model/layer_memory_analysis.h"

#include <algorithm>
#include <map>
#include <set>

namespace scalelab::viz {

namespace {

// "blocks.3.attn.qkv.fwd" → "blocks.3"; "conv1.fwd" → "conv1".
std::string layer_label(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos) return name;
  if (name.compare(0, dot, "blocks") == 0) {
    const size_t second = name.find('.', dot + 1);
    return name.substr(0, second);
  }
  return name.substr(0, dot);
}

}  // namespace

std::vector<DeviceLayerMemory> analyze_layer_memory(const DashboardModel& model, int step_index) {
  std::vector<DeviceLayerMemory> out;
  if (step_index < 0 || step_index >= static_cast<int>(model.steps().size())) return out;
  const StepSpan& step = model.steps()[static_cast<size_t>(step_index)];
  const auto& events = model.events();
  const int n = model.device_count();

  // Each device's compute ops of the step in begin order, and whether each keeps what it allocates:
  // a forward op of a layer before its micro-batch's backward began.
  struct Op {
    int64_t begin;
    int layer;
    bool kept;
    bool rerun;  // a forward op of a micro-batch already in backward: recompute
  };
  std::vector<std::vector<Op>> ops(static_cast<size_t>(n));
  std::vector<std::set<int64_t>> in_backward(static_cast<size_t>(n));
  std::vector<DeviceLayerMemory> per(static_cast<size_t>(n));
  std::vector<std::map<int, LayerBytes>> layers(static_cast<size_t>(n));
  for (uint32_t i : step.events) {
    const Event& e = events[i];
    if (e.device < 0 || e.device >= n || e.lane != Lane::compute) continue;
    const auto d = static_cast<size_t>(e.device);
    if (e.phase == Phase::bwd || e.phase == Phase::wgrad) in_backward[d].insert(e.micro_batch);
    // A rerun begins with an op named so (in backward's phase), then the block's forward ops.
    const bool recompute = e.name.size() > 10 && e.name.compare(e.name.size() - 10, 10, ".recompute") == 0;
    per[d].recomputed = per[d].recomputed || recompute;
    const bool forward = e.phase == Phase::fwd && e.layer >= 0;
    const bool kept = forward && !in_backward[d].count(e.micro_batch);
    ops[d].push_back({e.t_begin_ns, e.layer, kept, e.layer >= 0 && (recompute || (forward && !kept))});
    if (kept) {
      LayerBytes& l = layers[d][e.layer];
      l.layer = e.layer;
      l.label = layer_label(e.name);  // the layer's last forward op names it ("head", not "ln_f")
    }
  }

  std::vector<int64_t> previous(static_cast<size_t>(n), 0);
  for (const MemorySample& m : model.memory()) {
    if (m.category != MemoryCategory::activations || m.device < 0 || m.device >= n) continue;
    const auto d = static_cast<size_t>(m.device);
    const int64_t delta = m.bytes - previous[d];
    previous[d] = m.bytes;
    if (delta == 0 || m.t_ns < step.begin_ns || m.t_ns > step.end_ns) continue;
    // The op running at t: the last to begin at or before it (strictly before, for a release).
    const auto& o = ops[d];
    auto it = delta > 0 ? std::upper_bound(o.begin(), o.end(), m.t_ns, [](int64_t t, const Op& op) { return t < op.begin; })
                        : std::lower_bound(o.begin(), o.end(), m.t_ns, [](const Op& op, int64_t t) { return op.begin < t; });
    if (it == o.begin()) continue;
    const Op& op = *std::prev(it);
    if (op.kept) layers[d][op.layer].bytes += delta;
    if (op.rerun && delta > 0 && layers[d].count(op.layer)) layers[d][op.layer].rerun += delta;
  }

  for (int d = 0; d < n; ++d) {
    DeviceLayerMemory& dm = per[static_cast<size_t>(d)];
    if (layers[static_cast<size_t>(d)].empty()) continue;
    dm.device = d;
    for (auto& [layer, l] : layers[static_cast<size_t>(d)]) {
      dm.total += l.bytes;
      dm.layers.push_back(std::move(l));
    }
    out.push_back(std::move(dm));
  }
  return out;
}

std::vector<LayerBytes> group_layers(const std::vector<LayerBytes>& layers, int max_bars) {
  if (max_bars < 1 || static_cast<int>(layers.size()) <= max_bars) return layers;
  const size_t per = (layers.size() + static_cast<size_t>(max_bars) - 1) / static_cast<size_t>(max_bars);
  std::vector<LayerBytes> out;
  for (size_t i = 0; i < layers.size(); i += per) {
    const size_t last = std::min(i + per, layers.size()) - 1;
    LayerBytes g{layers[i].layer, layers[i].label, 0, 0};
    for (size_t j = i; j <= last; ++j) {
      g.bytes += layers[j].bytes;
      g.rerun += layers[j].rerun;
    }
    if (last > i) g.label += " – " + layers[last].label;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace scalelab::viz
