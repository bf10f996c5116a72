#include "viz/model/layout_analysis.h"

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <map>

#include "core/comm/parallel_layout.h"

namespace scalelab::viz {

namespace {

// The integer after " FLAG " in the title (the next word), or `fallback`.
int flag_int(const std::string& title, const std::string& flag, int fallback) {
  const size_t at = title.find(" " + flag + " ");
  if (at == std::string::npos) return fallback;
  const int v = std::atoi(title.c_str() + at + flag.size() + 2);
  return v > 0 ? v : fallback;
}

std::string range(int a, int b) { return a == b ? std::to_string(a) : std::to_string(a) + "–" + std::to_string(b); }

}  // namespace

std::optional<Layout3D> layout_from_title(const std::string& title, int devices) {
  if (title.find("--strategy tensor-parallel") == std::string::npos) return std::nullopt;
  Layout3D l;
  l.dp = flag_int(title, "--dp", 1);
  l.pp = flag_int(title, "--pp", 1);
  const int n = flag_int(title, "--devices", devices);
  if (n <= 0 || n % (l.dp * l.pp) != 0) return std::nullopt;
  l.tp = n / (l.dp * l.pp);
  // --model gpt:L-C-H-…: L transformer blocks of width C with H heads.
  const size_t g = title.find("--model gpt:");
  if (g != std::string::npos) {
    int fields[3] = {0, 0, 0};
    const char* at = title.c_str() + g + 12;
    for (int& f : fields) {
      f = std::max(0, std::atoi(at));
      at = std::strchr(at, '-');
      if (!at) break;
      ++at;
    }
    l.blocks = fields[0];
    l.hidden = fields[1];
    l.heads = fields[2];
  }
  return l;
}

std::optional<Layout3D> layout_of(const DashboardModel& model) {
  auto l = layout_from_title(model.info().title, static_cast<int>(model.devices().size()));
  if (l && model.profile()) l->per_node = std::max(model.profile()->devices_per_node, 0);
  return l;
}

RankCell rank_cell(const Layout3D& l, int rank) {
  const ParallelLayout layout(l.dp, l.tp, l.pp);
  const ParallelCoords c = layout.coords(rank);
  return {rank, c.dp, c.tp, c.pp, layout.tp_group(rank), layout.pp_group(rank), layout.dp_group(rank)};
}

std::string rank_holds(const Layout3D& l, int rank) {
  const RankCell c = rank_cell(l, rank);
  // The stage: consecutive blocks (tensor-parallel --pp cuts them equally), the embedding on the
  // first stage and the final LayerNorm and LM head on the last.
  std::string stage = l.pp > 1 ? "stage " + std::to_string(c.pp) + ": " : "";
  std::vector<std::string> parts;
  if (c.pp == 0) parts.push_back("embedding");
  if (l.blocks > 0 && l.blocks % l.pp == 0) {
    const int per = l.blocks / l.pp;
    parts.push_back((per == 1 ? "block " : "blocks ") + range(c.pp * per, (c.pp + 1) * per - 1));
  } else {
    parts.push_back("its blocks");
  }
  if (c.pp == l.pp - 1) parts.push_back("LM head");
  for (size_t i = 0; i < parts.size(); ++i) stage += (i ? ", " : "") + parts[i];
  // The shard: its heads' q, k, v columns and proj rows, its quarter of the MLP's 4C features.
  std::string shard = "shard " + std::to_string(c.tp) + ": ";
  if (l.heads > 0 && l.heads % l.tp == 0 && l.hidden > 0) {
    const int h = l.heads / l.tp, f = 4 * l.hidden / l.tp;
    shard += (h == 1 ? "head " : "heads ") + range(c.tp * h, (c.tp + 1) * h - 1) + ", MLP features " +
             range(c.tp * f, (c.tp + 1) * f - 1);
  } else {
    shard += "1/" + std::to_string(l.tp) + " of the heads and MLP";
  }
  return stage + " · " + shard + " · replica " + std::to_string(c.dp);
}

int64_t GroupTraffic::bytes_until(int64_t t) const {
  const auto it = std::upper_bound(begins.begin(), begins.end(), t);
  return it == begins.begin() ? 0 : cum_bytes[static_cast<size_t>(it - begins.begin()) - 1];
}

std::vector<GroupTraffic> group_traffic(const std::vector<Event>& events) {
  std::map<std::string, GroupTraffic> by;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> sends;  // (begin, bytes)
  for (const Event& e : events) {
    if (e.lane != Lane::comm || e.group.empty()) continue;
    GroupTraffic& g = by[e.group];
    g.group = e.group;
    g.events += 1;
    g.busy_ns += e.t_end_ns - e.t_begin_ns;
    // A transfer shows on both ends: its bytes are counted once, on the sender's side.
    if (e.role == Role::recv) continue;
    g.bytes += e.bytes;
    sends[e.group].emplace_back(e.t_begin_ns, e.bytes);
  }
  for (auto& [name, list] : sends) {
    std::sort(list.begin(), list.end());
    GroupTraffic& g = by[name];
    int64_t sum = 0;
    for (const auto& [t, b] : list) {
      g.begins.push_back(t);
      g.cum_bytes.push_back(sum += b);
    }
  }
  std::vector<GroupTraffic> out;
  for (const char* name : {"tp", "pp", "dp"})
    if (auto it = by.find(name); it != by.end()) {
      out.push_back(it->second);
      by.erase(it);
    }
  for (auto& [name, g] : by) out.push_back(g);
  return out;
}

std::string group_words(const std::string& group) {
  if (group == "tp") return "TP: a layer's shards (inside a node)";
  if (group == "pp") return "PP: activations between stages";
  if (group == "dp") return "DP: gradients across replicas";
  return group;
}

}  // namespace scalelab::viz
