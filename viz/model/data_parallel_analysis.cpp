// The Data parallel panel's analysis: the controller's copies of a step, phase by phase.
#include "viz/model/data_parallel_analysis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace scalelab::viz {

bool is_dp_copy(const Event& e) {
  if (e.lane != Lane::copy || e.peer < 0) return false;
  return e.role == Role::scatter || e.role == Role::replicate || e.role == Role::gather || e.role == Role::reduce;
}

bool has_data_parallel(const DashboardModel& model) {
  return std::any_of(model.events().begin(), model.events().end(), is_dp_copy);
}

size_t count_dp_copies(const DashboardModel& model) {
  return static_cast<size_t>(std::count_if(model.events().begin(), model.events().end(), is_dp_copy));
}

namespace {

// What a phase is called. Replicas and reductions go parameter by parameter: one phase is "the
// model" / "the grads". A scatter or gather is named for what it moves ("scatter batch.x",
// "gather logits", "scatter dlogits"), which tells the phases apart.
std::string dp_phase_label(const Event& e) {
  if (e.role == Role::replicate) return "replicate model";
  if (e.role == Role::reduce) return "reduce grads";
  return e.name;
}

}  // namespace

DpStep analyze_dp_step(const DashboardModel& model, int step_index) {
  DpStep s;
  if (step_index < 0 || step_index >= static_cast<int>(model.steps().size())) return s;
  s.step_index = step_index;
  std::map<std::pair<int, int>, size_t> pair_index;
  std::string current;
  for (uint32_t idx : model.steps()[static_cast<size_t>(step_index)].events) {
    const Event& e = model.events()[idx];
    if (!is_dp_copy(e)) continue;
    std::string label = dp_phase_label(e);
    if (s.phases.empty() || label != current) {
      s.phases.push_back(DpPhase{label, {e.t_begin_ns, e.t_end_ns}, 0, {}});
      pair_index.clear();
      current = label;
    }
    DpPhase& p = s.phases.back();
    p.span = {std::min(p.span.first, e.t_begin_ns), std::max(p.span.second, e.t_end_ns)};
    p.bytes += e.bytes;
    // The copy is recorded on the device it lands on; its peer is where it came from.
    auto [it, fresh] = pair_index.try_emplace({e.peer, e.device}, p.transfers.size());
    if (fresh) p.transfers.push_back(DpTransfer{e.peer, e.device, 0, 0});
    DpTransfer& t = p.transfers[it->second];
    t.bytes += e.bytes;
    ++t.copies;
  }
  return s;
}

}  // namespace scalelab::viz
