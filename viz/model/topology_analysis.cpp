// The Topology panel's analysis: the bytes each link carried, and when.
#include "viz/model/topology_analysis.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

namespace scalelab::viz {

int64_t LinkTraffic::bytes_until(int64_t t) const {
  const size_t n = static_cast<size_t>(std::upper_bound(begin_ns.begin(), begin_ns.end(), t) - begin_ns.begin());
  return n == 0 ? 0 : cum_bytes[n - 1];
}

bool LinkTraffic::active_at(int64_t t) const {
  const size_t n = static_cast<size_t>(std::upper_bound(begin_ns.begin(), begin_ns.end(), t) - begin_ns.begin());
  return n > 0 && end_prefix_max[n - 1] > t;
}

int64_t NodeLink::bytes_until(int64_t t) const {
  int64_t sum = 0;
  for (const LinkTraffic* l : members) sum += l->bytes_until(t);
  return sum;
}

bool NodeLink::active_at(int64_t t) const {
  return std::any_of(members.begin(), members.end(), [t](const LinkTraffic* l) { return l->active_at(t); });
}

std::vector<NodeLink> links_by_node(const Topology& t, int devices_per_node) {
  const int per = std::max(devices_per_node, 1);
  std::map<std::pair<int, int>, NodeLink> by;  // (kHost or node, node)
  for (const LinkTraffic& l : t.links) {
    const std::pair<int, int> key{l.a == kHost ? kHost : l.a / per, l.b / per};
    NodeLink& n = by[key];
    n.a = key.first;
    n.b = key.second;
    n.members.push_back(&l);
    n.total_bytes += l.total_bytes;
  }
  std::vector<NodeLink> out;
  for (const auto& [key, n] : by)
    if (n.a == kHost) out.push_back(n);
  for (const auto& [key, n] : by)
    if (n.a == n.b) out.push_back(n);
  for (const auto& [key, n] : by)
    if (n.a != kHost && n.a != n.b) out.push_back(n);
  return out;
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

}  // namespace scalelab::viz
