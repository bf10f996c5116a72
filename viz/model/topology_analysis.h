#pragma once
// Devices and the links between them, with the bytes each link carried: from events that name a
// peer (copies, sends, collective chunks) and from host copies. Apart from the drawing so tests
// and --describe can read the totals.
#include <cstdint>
#include <vector>

#include "viz/model/dashboard_model.h"

namespace scalelab::viz {

constexpr int kHost = -1;

struct LinkTraffic {
  int a = 0, b = 0;                 // a < b; a == kHost for a device's link to the host
  int64_t total_bytes = 0;
  size_t transfers = 0;
  std::vector<int64_t> begin_ns;    // transfer begins, sorted
  std::vector<int64_t> cum_bytes;   // bytes of transfers [0..i]
  std::vector<int64_t> end_prefix_max;
  int64_t bytes_until(int64_t t) const;  // bytes of transfers begun at or before t
  bool active_at(int64_t t) const;       // a transfer is in flight at t
};

struct Topology {
  int devices = 0;
  std::vector<LinkTraffic> links;   // host links first, then device pairs
  // Communication-lane events that name no peer (a collective modelled whole, as --dry-run does):
  // their bytes went over links, but which ones the trace does not say, so they are counted apart.
  size_t unplaced_events = 0;
  int64_t unplaced_bytes = 0;
};

// The links taken node by node (nodes of `devices_per_node` devices, as the profile has them): a
// device's host link goes to its node's, a link between two devices of one node is inside it
// (a == b), the others join their two nodes (a < b). What the panel draws when a box per device
// would not fit; host links first, then each node's inside, then node pairs, each by node.
struct NodeLink {
  int a = kHost, b = 0;                     // nodes; a == kHost: the nodes' host links
  std::vector<const LinkTraffic*> members;  // into the Topology it was made from
  int64_t total_bytes = 0;
  int64_t bytes_until(int64_t t) const;
  bool active_at(int64_t t) const;
};
std::vector<NodeLink> links_by_node(const Topology& t, int devices_per_node);

// Which link an event used, or false. A recv is not counted: its send carries the same bytes.
bool link_of(const Event& e, int& a, int& b);
Topology analyze_topology(const DashboardModel& model);
// Takes in the model's events from `from` on (a live model that grew); false, leaving `t` as it was,
// when one begins before its link's last transfer (then analyze_topology again).
bool extend_topology(Topology& t, const DashboardModel& model, size_t from);

}  // namespace scalelab::viz
