#include "core/device/sim/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/collective.h"
#include "core/error.h"
#include "core/io/file_check.h"

#ifndef SCALELAB_SOURCE_DIR
#define SCALELAB_SOURCE_DIR "."
#endif

namespace scalelab {

namespace fs = std::filesystem;

const char* protocol_name(Protocol p) {
  switch (p) {
    case Protocol::ll: return "LL";
    case Protocol::ll128: return "LL128";
    case Protocol::simple: return "Simple";
  }
  return "Simple";
}

using nlohmann::json;

double HardwareProfile::peak_flops(DType dtype) const {
  switch (dtype) {
    case DType::f16: return peak_flops_f16 > 0 ? peak_flops_f16 : peak_flops_f32;
    case DType::bf16: return peak_flops_bf16 > 0 ? peak_flops_bf16 : peak_flops_f32;
    default: return peak_flops_f32;
  }
}

double HardwareProfile::gemm_peak_flops(DType dtype) const {
  if (dtype == DType::f32 && tf32 && peak_flops_tf32 > 0) return peak_flops_tf32;
  return peak_flops(dtype);
}

const SizeCurve* HardwareProfile::gemm_curve(DType dtype) const {
  const SizeCurve* c = nullptr;
  switch (dtype) {
    case DType::f16: c = &gemm_curves.f16; break;
    case DType::bf16: c = &gemm_curves.bf16; break;
    default: c = tf32 && peak_flops_tf32 > 0 ? &gemm_curves.tf32 : &gemm_curves.f32; break;
  }
  return c->empty() ? nullptr : c;
}

double HostCalibration::bytes_between_touches(double moved, double held) const {
  const double distinct = std::min(moved, held);
  return distinct + host_cache_retouch * (moved - distinct);
}

double HostCalibration::cold_share(double step_bytes) const {
  const std::vector<double>&moved = host_cache_curve.bytes, &share = host_cache_curve.share;
  if (!moved.empty()) {
    if (!(step_bytes > moved.front())) return 0;
    for (size_t i = 1; i < moved.size(); ++i)
      if (step_bytes <= moved[i]) return share[i - 1] + (step_bytes - moved[i - 1]) / (moved[i] - moved[i - 1]) * (share[i] - share[i - 1]);
    return 1;
  }
  if (host_cache_bytes <= 0) return 0;
  return std::clamp(step_bytes / host_cache_bytes - 1.0, 0.0, 1.0);
}

double GemmTable::seconds(double m, double n, double k, bool trans_a, bool trans_b, double cold, bool accumulate) const {
  std::vector<std::pair<double, const GemmPoint*>> near;  // (distance², point)
  double code_cold = std::numeric_limits<double>::infinity();
  int measured_cold = 0;
  for (const GemmPoint& p : points) {
    if (p.trans_a != trans_a || p.trans_b != trans_b) continue;
    const double dm = std::log2(m / p.m), dn = std::log2(n / p.n), dk = std::log2(k / p.k);
    near.push_back({dm * dm + dn * dn + dk * dk, &p});
    if (p.seconds_cold > 0) {
      code_cold = std::min(code_cold, std::max(0.0, p.seconds_cold - p.seconds));
      ++measured_cold;
    }
  }
  if (measured_cold < 2) code_cold = 0;  // one shape: nothing tells its code's part from its data's
  if (near.empty()) return -1;
  const size_t count = std::min<size_t>(4, near.size());
  std::partial_sort(near.begin(), near.begin() + static_cast<std::ptrdiff_t>(count), near.end(),
                    [](const auto& a, const auto& b) { return a.first < b.first; });
  // A cold measurement follows a flush of the caches, which evicts the code and the page tables
  // too: every call pays for them, and the smallest shapes (2 KB of data) pay little else — 0.4 µs
  // hot, 8 cold on one host, 0.6 and 30 on another. In a run they stay cached (the same kernels run
  // all the time), so the least cold extra of the shapes of this transposition — that fixed part —
  // is taken off each one's cold time: what its data cost from DRAM is left.
  auto time_of = [cold, accumulate, code_cold](const GemmPoint& p) {
    const double from_dram = std::max(p.seconds, p.seconds_cold - code_cold);
    const double t = p.seconds_cold > 0 ? (1 - cold) * p.seconds + cold * from_dram : p.seconds;
    return accumulate && p.seconds_accumulate > 0 ? t * p.seconds_accumulate / p.seconds : t;
  };
  if (near.front().first < 1e-12) return time_of(*near.front().second);
  double weights = 0, log_rate = 0;
  for (size_t i = 0; i < count; ++i) {
    const GemmPoint& p = *near[i].second;
    const double w = 1.0 / near[i].first;
    weights += w;
    log_rate += w * std::log(p.m * p.n * p.k / time_of(p));
  }
  return m * n * k / std::exp(log_rate / weights);
}

double SizeCurve::at(double size, double cold) const {
  if (sizes.empty()) return 1.0;
  if (cold > 0 && size > 0 && efficiency_cold.size() == sizes.size()) {
    // The times blend: size / efficiency is the time at peak. The cold one less the cold extra of
    // the smallest size (of two or more): the code's and page tables' (see GemmTable::seconds),
    // which a run keeps cached.
    const SizeCurve hot{sizes, efficiency, {}}, from_dram{sizes, efficiency_cold, {}};
    const double smallest = sizes.front();
    const double code_cold =
        sizes.size() < 2 ? 0.0 : std::max(0.0, smallest / efficiency_cold.front() - smallest / efficiency.front());
    const double t_hot = size / hot.at(size), t_cold = std::max(t_hot, size / from_dram.at(size) - code_cold);
    return size / ((1 - cold) * t_hot + cold * t_cold);
  }
  // Below the smallest size measured an op takes no less time than that one (it is bound by the
  // launch and the latency, not the FLOPs or bytes), so its share of peak falls with its size.
  if (!(size > sizes.front())) return efficiency.front() * std::max(size, 0.0) / sizes.front();
  if (size >= sizes.back()) return efficiency.back();
  // The first point at or above `size`, and the one before: a straight line in log(size).
  const size_t hi = static_cast<size_t>(std::lower_bound(sizes.begin(), sizes.end(), size) - sizes.begin());
  const size_t lo = hi - 1;
  const double t = std::log(size / sizes[lo]) / std::log(sizes[hi] / sizes[lo]);
  return efficiency[lo] + t * (efficiency[hi] - efficiency[lo]);
}

double TimedCollective::at(double payload) const {
  if (bytes.empty()) return 0;
  if (!(payload > bytes.front())) return seconds.front();
  if (payload >= bytes.back()) return seconds.back() * payload / bytes.back();
  const size_t hi = static_cast<size_t>(std::lower_bound(bytes.begin(), bytes.end(), payload) - bytes.begin());
  const size_t lo = hi - 1;
  const double t = std::log(payload / bytes[lo]) / std::log(bytes[hi] / bytes[lo]);
  return std::exp(std::log(seconds[lo]) + t * (std::log(seconds[hi]) - std::log(seconds[lo])));
}

// Each figure's range. Bandwidths from 1 MB/s (a slow NIC is 1000× more) up; peaks from
// 1 GFLOP/s (one old core); no latency, overhead or hand-off of a second or more; a share of peak
// from a millionth (a tiny GEMM on a large GPU reaches 1e-3). Measured times from 10 ns: less is
// below what calibrate's clocks resolve.
const std::vector<FigureRange>& profile_figure_ranges() {
  static const std::vector<FigureRange> ranges = {
      {"device.peak_flops.*", 1e9, 1e18, "FLOP/s", "1 GFLOP/s to 1 EFLOP/s", false},
      {"device.gemm_efficiency", 1e-6, 1, "share", "1e-6 to 1 of peak", false},
      {"device.gemm_curves.*.mnk[]", 1, 1e18, "m·n·k", "1 to 1e18", false},
      {"device.gemm_curves.*.efficiency[]", 1e-6, 1, "share", "1e-6 to 1 of peak", false},
      {"device.gemm_curves.*.efficiency_cold[]", 1e-6, 1, "share", "1e-6 to 1 of peak", false},
      {"device.mem_bandwidth_Bps", 1e6, 1e15, "B/s", "1 MB/s to 1 PB/s", false},
      {"device.mem_capacity_bytes", 0x1p20, 0x1p50, "B", "1 MiB to 1 PiB", false},
      {"device.launch_overhead_s", 0, 1, "s", "0 to 1 s", false},
      {"device.elementwise_curves.*.bytes[]", 1, 1e15, "B", "1 B to 1 PB", false},
      {"device.elementwise_curves.*.efficiency[]", 1e-6, 1, "share", "1e-6 to 1 of the memory bandwidth", false},
      {"device.elementwise_curves.*.efficiency_cold[]", 1e-6, 1, "share", "1e-6 to 1 of the memory bandwidth", false},
      {"device.gemm_table.f32[].m", 1, 1e6, "count", "1 to 1e6", false},
      {"device.gemm_table.f32[].n", 1, 1e6, "count", "1 to 1e6", false},
      {"device.gemm_table.f32[].k", 1, 1e6, "count", "1 to 1e6", false},
      {"device.gemm_table.f32[].seconds", 1e-8, 3600, "s", "10 ns to 1 hour", false},
      {"device.gemm_table.f32[].seconds_cold", 1e-8, 3600, "s", "10 ns to 1 hour", false},
      {"device.gemm_table.f32[].seconds_accumulate", 1e-8, 3600, "s", "10 ns to 1 hour", false},
      {"device.host_cache_bytes", 1024, 0x1p40, "B", "1 KiB to 1 TiB", false},
      {"device.host_cache_curve.bytes[]", 1, 1e15, "B", "1 B to 1 PB", false},
      {"device.host_cache_curve.cold_share[]", 0, 1, "share", "0 to 1", false},
      {"device.host_cache_retouch", 0, 1, "share", "0 to 1", false},
      {"device.turn_handoff_s", 0, 1, "s", "0 to 1 s", false},
      {"device.turn_gemm_extra_s", 0, 1, "s", "0 to 1 s", false},
      {"device.core_round_trip_s", 0, 1, "s", "0 to 1 s", false},
      {"device.host_op_gap_s", 0, 1, "s", "0 to 1 s", false},
      {"links.*.bandwidth_Bps", 1e6, 1e15, "B/s", "1 MB/s to 1 PB/s", false},
      {"links.*.latency_s", 0, 1, "s", "0 to 1 s", false},
      {"links.*.curve.bytes[]", 1, 1e15, "B", "1 B to 1 PB", false},
      {"links.*.curve.efficiency[]", 1e-6, 1, "share", "1e-6 to 1 of the bandwidth", false},
      {"links.*.curve.efficiency_cold[]", 1e-6, 1, "share", "1e-6 to 1 of the bandwidth", false},
      {"collectives.launch_s", 0, 1, "s", "0 to 1 s", false},
      {"collectives.intra_hop_s", 0, 1, "s", "0 to 1 s", false},
      {"collectives.inter_hop_s", 0, 1, "s", "0 to 1 s", false},
      {"collectives.intra_efficiency", 1e-6, 1, "share", "1e-6 to 1 of the bandwidth", false},
      {"collectives.inter_efficiency", 1e-6, 1, "share", "1e-6 to 1 of the bandwidth", false},
      {"collectives.net_overhead_s", 0, 1, "s", "0 to 1 s", false},
      {"collectives.nvls_efficiency", 1e-6, 1, "share", "0 (none), or 1e-6 to 1 of the bandwidth", true},
      {"collectives.nvls_latency_s", 0, 1, "s", "0 to 1 s", false},
      {"collectives.nvls_tree_latency_s", 0, 1, "s", "0 to 1 s", false},
      {"collectives.shared_host_Bps", 1e6, 1e15, "B/s", "0 (none), or 1 MB/s to 1 PB/s", true},
      {"collectives.measured[].bytes[]", 1, 1e15, "B", "1 B to 1 PB", false},
      {"collectives.measured[].seconds[]", 1e-8, 3600, "s", "10 ns to 1 hour", false},
  };
  return ranges;
}

namespace {

const FigureRange& range_of(const std::string& pattern) {
  for (const FigureRange& r : profile_figure_ranges())
    if (pattern == r.field) return r;
  throw std::logic_error("profile figure '" + pattern + "' has no range in profile_figure_ranges()");
}

// A value read for the figure `pattern` (a row of profile_figure_ranges()), written `raw` in the
// file at `name`: refused outside its range, with the range in words.
double in_range(double v, const json& raw, const std::string& name, const std::string& origin, const std::string& pattern) {
  const FigureRange& r = range_of(pattern);
  if (std::isfinite(v) && ((v >= r.min && v <= r.max) || (r.zero_means_none && v == 0))) return v;
  throw UsageError("hw", origin + ": field '" + name + "' is " + raw.dump() + " — its range is " + r.in_words + " (" +
                        (std::string(r.unit) == "share" ? "a share" : std::string("in ") + r.unit) +
                        "); see profiles/README.md for each figure's range");
}

const json& field(const json& j, const char* key, const std::string& origin, const std::string& where);

// A numeric figure `where + key`, checked against its row `pattern` of profile_figure_ranges().
// The pattern is the field's name where no list or key varies.
double figure(const json& j, const char* key, const std::string& origin, const std::string& where, const std::string& pattern = "") {
  const json& v = field(j, key, origin, where);
  if (!v.is_number())
    throw UsageError("hw", origin + ": field '" + where + key + "' must be a number, got " + v.dump());
  return in_range(v.get<double>(), v, where + key, origin, pattern.empty() ? where + key : pattern);
}

const json& field(const json& j, const char* key, const std::string& origin, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw UsageError("hw", origin + ": missing field '" + where + key + "' — see profiles/README.md for the format");
  return j.at(key);
}

// An optional text field: absent gives `fallback`, anything but a string is refused.
std::string text(const json& j, const char* key, const std::string& fallback, const std::string& origin,
                 const std::string& where) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_string())
    throw UsageError("hw", origin + ": field '" + where + key + "' must be a string, got " + v.dump() +
                          " — see profiles/README.md for the format");
  return v.get<std::string>();
}

// A count (nodes, devices, ranks, links): a whole number from 1 to `max`, not 1.5 silently cut to 1.
int64_t whole(const json& j, const char* key, const std::string& origin, const std::string& where, double max) {
  const json& v = field(j, key, origin, where);
  const double d = v.is_number() ? v.get<double>() : std::nan("");
  if (!(d >= 1 && d <= max) || d != std::floor(d)) {
    char range[64];
    std::snprintf(range, sizeof range, "a whole number from 1 to %.0f", max);
    throw UsageError("hw", origin + ": field '" + where + key + "' must be " + range + ", got " + v.dump());
  }
  return static_cast<int64_t>(d);
}

// The optional "collectives" section (profiles/README.md): absent, the textbook ring.
CollectiveSpec parse_collectives(const json& j, HardwareProfile& p, const std::string& origin) {
  CollectiveSpec c;
  c.intra_hop_s = p.intra_node.latency_s;
  c.inter_hop_s = p.inter_node.latency_s;
  if (!j.contains("collectives")) return c;
  const json& s = j.at("collectives");
  const std::string where = "collectives.";
  if (!s.is_object()) throw UsageError("hw", origin + ": field 'collectives' must be an object — see profiles/README.md for the format");
  auto optional = [&](const char* key, double fallback) {
    return s.contains(key) ? figure(s, key, origin, where) : fallback;
  };
  c.calibrated = true;
  c.tree = true;
  c.protocols = {Protocol::ll, Protocol::ll128, Protocol::simple};
  c.launch_s = optional("launch_s", 0);
  c.intra_hop_s = optional("intra_hop_s", c.intra_hop_s);
  c.inter_hop_s = optional("inter_hop_s", c.inter_hop_s);
  c.intra_efficiency = optional("intra_efficiency", 1);
  c.inter_efficiency = optional("inter_efficiency", 1);
  c.net_overhead_s = optional("net_overhead_s", 0);
  c.nvls_efficiency = optional("nvls_efficiency", 0);
  c.nvls_latency_s = optional("nvls_latency_s", 0);
  c.nvls_tree_latency_s = optional("nvls_tree_latency_s", 0);
  c.shared_host_Bps = optional("shared_host_Bps", 0);
  if (s.contains("tree")) {
    if (!s.at("tree").is_boolean())
      throw UsageError("hw", origin + ": field 'collectives.tree' must be true or false, got " + s.at("tree").dump());
    c.tree = s.at("tree").get<bool>();
  }
  if (s.contains("protocols")) {
    const json& list = s.at("protocols");
    c.protocols.clear();
    for (const json& name : list.is_array() ? list : json::array({list})) {
      bool known = false;
      for (Protocol q : {Protocol::ll, Protocol::ll128, Protocol::simple})
        if (name.is_string() && name.get<std::string>() == protocol_name(q)) c.protocols.push_back(q), known = true;
      if (!known)
        throw UsageError("hw", origin + ": field 'collectives.protocols' holds " + name.dump() +
                              " — list some of \"LL\", \"LL128\", \"Simple\"");
    }
    if (c.protocols.empty()) throw UsageError("hw", origin + ": field 'collectives.protocols' is empty — list at least \"Simple\"");
  }
  if (s.contains("ring_links")) {
    c.links_per_device = static_cast<int>(whole(s, "links_per_device", origin, where, 1 << 10));
    const json& table = s.at("ring_links");
    if (!table.is_object() || table.empty())
      throw UsageError("hw", origin + ": field 'collectives.ring_links' must be an object {\"ranks\": links, …}");
    for (const auto& [ranks, links] : table.items()) {
      char* end = nullptr;
      const long r = std::strtol(ranks.c_str(), &end, 10);
      if (end == ranks.c_str() || *end != '\0' || r < 2 || r > (1 << 20))
        throw UsageError("hw", origin + ": collectives.ring_links key '" + ranks + "' must be a rank count ≥ 2");
      const int64_t l = whole(table, ranks.c_str(), origin, where + "ring_links.", c.links_per_device);
      c.ring_links.emplace_back(static_cast<int>(r), static_cast<int>(l));
    }
    std::sort(c.ring_links.begin(), c.ring_links.end());
  }
  if (s.contains("measured")) {
    if (!p.calibration) p.calibration.emplace();
    auto& measured = p.calibration->collectives;
    const json& list = s.at("measured");
    const std::string at = where + "measured";
    const char* fix = " — `scalelab calibrate` writes it as [{\"op\": \"all_reduce\", \"ranks\": N, \"bytes\": [...], \"seconds\": [...]}, …]";
    if (!list.is_array()) throw UsageError("hw", origin + ": field '" + at + "' must be a list of timed collectives" + fix);
    for (size_t k = 0; k < list.size(); ++k) {
      const json& table = list[k];
      const std::string here = at + "[" + std::to_string(k) + "]";
      if (!table.is_object() || !table.contains("op") || !table.at("op").is_string())
        throw UsageError("hw", origin + ": field '" + here + "' must name its collective (\"op\")" + fix);
      const std::string op = table.at("op").get<std::string>();
      try {
        parse_collective(op);
      } catch (const UsageError& e) {  // a misspelt name would price nothing, silently
        throw UsageError("hw", origin + ": field '" + here + ".op': " + e.message());
      }
      TimedCollective t;
      t.ranks = static_cast<int>(whole(table, "ranks", origin, here + ".", 1 << 20));
      if (!table.contains("bytes") || !table.contains("seconds") || !table.at("bytes").is_array() ||
          !table.at("seconds").is_array() || table.at("bytes").size() != table.at("seconds").size() || table.at("bytes").empty())
        throw UsageError("hw", origin + ": field '" + here + "' must hold as many \"seconds\" as \"bytes\", at least one" + fix);
      for (size_t i = 0; i < table.at("bytes").size(); ++i) {
        const json &b = table.at("bytes")[i], &sec = table.at("seconds")[i];
        if (!b.is_number() || !sec.is_number())
          throw UsageError("hw", origin + ": field '" + here + "', size " + std::to_string(i) + ": bytes " + b.dump() + ", seconds " +
                                sec.dump() + " — both must be numbers" + fix);
        const std::string index = "[" + std::to_string(i) + "]";
        in_range(b.get<double>(), b, here + ".bytes" + index, origin, "collectives.measured[].bytes[]");
        in_range(sec.get<double>(), sec, here + ".seconds" + index, origin, "collectives.measured[].seconds[]");
        if (!t.bytes.empty() && b.get<double>() <= t.bytes.back())
          throw UsageError("hw", origin + ": field '" + here + ".bytes' must increase: " + b.dump() + " comes after " +
                                table.at("bytes")[i - 1].dump() + fix);
        t.bytes.push_back(b.get<double>());
        t.seconds.push_back(sec.get<double>());
      }
      if (measured.count({op, t.ranks}))
        throw UsageError("hw", origin + ": field '" + here + "' times " + op + " on " + std::to_string(t.ranks) +
                              " ranks again — keep one table per collective and rank count");
      measured[{op, t.ranks}] = std::move(t);
    }
  }
  return c;
}

// One curve: {"<size_key>": [...], "efficiency": [...]}, sizes strictly increasing, shares in (0, 1].
SizeCurve parse_curve(const json& curves, const std::string& key, const std::string& origin,
                      const std::string& section = "device.gemm_curves.", const char* size_key = "mnk") {
  SizeCurve c;
  if (!curves.contains(key)) return c;
  const std::string where = section + key;
  // Its row in profile_figure_ranges(): every link's curve, every kind's, every dtype's share one.
  const std::string pattern = section.rfind("links.", 0) == 0 ? "links.*." + key : section + "*";
  const json& j = curves.at(key);
  const char* fix = " — see profiles/README.md for the format";
  if (!j.is_object() || !j.contains(size_key) || !j.contains("efficiency") || !j.at(size_key).is_array() ||
      !j.at("efficiency").is_array())
    throw UsageError("hw", origin + ": field '" + where + "' must be {\"" + size_key + "\": [...], \"efficiency\": [...]}" + fix);
  const json& sizes = j.at(size_key);
  const json& shares = j.at("efficiency");
  if (sizes.empty() || sizes.size() != shares.size())
    throw UsageError("hw", origin + ": field '" + where + "' has " + std::to_string(sizes.size()) + " sizes and " +
                          std::to_string(shares.size()) + " efficiencies — give one efficiency per size, at least one");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!sizes[i].is_number() || !shares[i].is_number())
      throw UsageError("hw", origin + ": field '" + at + "' must be numbers, got " + size_key + " " + sizes[i].dump() + ", efficiency " +
                            shares[i].dump() + fix);
    const std::string index = "[" + std::to_string(i) + "]";
    const double s = in_range(sizes[i].get<double>(), sizes[i], where + "." + size_key + index, origin, pattern + "." + size_key + "[]");
    if (!c.sizes.empty() && s <= c.sizes.back())
      throw UsageError("hw", origin + ": field '" + where + "." + size_key + "' must increase: " + sizes[i].dump() + " comes after " +
                            sizes[i - 1].dump() + " — list the sizes from small to large, each once");
    const double e = in_range(shares[i].get<double>(), shares[i], where + ".efficiency" + index, origin, pattern + ".efficiency[]");
    c.sizes.push_back(s);
    c.efficiency.push_back(e);
  }
  if (j.contains("efficiency_cold")) {
    const json& cold = j.at("efficiency_cold");
    if (!cold.is_array() || cold.size() != sizes.size())
      throw UsageError("hw", origin + ": field '" + where + ".efficiency_cold' must be an array of one efficiency per size" + fix);
    for (size_t i = 0; i < cold.size(); ++i) {
      const std::string at = where + ".efficiency_cold[" + std::to_string(i) + "]";
      if (!cold[i].is_number()) throw UsageError("hw", origin + ": field '" + at + "' must be a number, got " + cold[i].dump() + fix);
      c.efficiency_cold.push_back(in_range(cold[i].get<double>(), cold[i], at, origin, pattern + ".efficiency_cold[]"));
    }
  }
  return c;
}

// {"bytes": [...], "cold_share": [...]}: bytes increasing, shares in [0, 1] and not falling.
HostCalibration::ColdShareCurve parse_cold_share_curve(const json& j, const std::string& origin) {
  const std::string fix = " — see profiles/README.md for the format, or drop the field (the cache is then priced by "
                          "device.host_cache_bytes alone)";
  if (!j.is_object() || !j.contains("bytes") || !j.contains("cold_share") || !j.at("bytes").is_array() ||
      !j.at("cold_share").is_array() || j.at("bytes").size() != j.at("cold_share").size() || j.at("bytes").empty())
    throw UsageError("hw", origin + ": field 'device.host_cache_curve' must be {\"bytes\": [...], \"cold_share\": [...]}, as many of each, at least one" + fix);
  HostCalibration::ColdShareCurve c;
  for (size_t i = 0; i < j.at("bytes").size(); ++i) {
    const json &b = j.at("bytes")[i], &s = j.at("cold_share")[i];
    const std::string at = "device.host_cache_curve[" + std::to_string(i) + "]";
    if (!b.is_number() || !s.is_number())
      throw UsageError("hw", origin + ": field '" + at + "': bytes " + b.dump() + ", cold_share " + s.dump() + " — both must be numbers" + fix);
    in_range(b.get<double>(), b, "device.host_cache_curve.bytes[" + std::to_string(i) + "]", origin, "device.host_cache_curve.bytes[]");
    in_range(s.get<double>(), s, "device.host_cache_curve.cold_share[" + std::to_string(i) + "]", origin, "device.host_cache_curve.cold_share[]");
    if (!c.bytes.empty() && (b.get<double>() <= c.bytes.back() || s.get<double>() < c.share.back()))
      throw UsageError("hw", origin + ": field '" + at + "' (bytes " + b.dump() + ", cold_share " + s.dump() +
                            ") comes after bytes " + std::to_string(c.bytes.back()) + ", cold_share " + std::to_string(c.share.back()) +
                            ": bytes must increase and cold_share must not fall" + fix);
    c.bytes.push_back(b.get<double>());
    c.share.push_back(s.get<double>());
  }
  return c;
}

// {"f32": [{"m", "n", "k", "trans_a", "trans_b", "seconds"}, …], "source": "…"}
GemmTable parse_gemm_table(const json& t, const std::string& origin) {
  const char* fix = " — see profiles/README.md for the format";
  if (!t.is_object() || !t.contains("f32") || !t.at("f32").is_array())
    throw UsageError("hw", origin + ": field 'device.gemm_table' must be {\"f32\": [{\"m\", \"n\", \"k\", \"trans_a\", \"trans_b\", "
                              "\"seconds\"}, …]}" + fix);
  GemmTable table;
  table.source = text(t, "source", "", origin, "device.gemm_table.");
  const json& rows = t.at("f32");
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string where = "device.gemm_table.f32[" + std::to_string(i) + "].";
    const json& r = rows[i];
    if (!r.is_object()) throw UsageError("hw", origin + ": field '" + where.substr(0, where.size() - 1) + "' must be an object" + fix);
    GemmPoint pt;
    pt.m = figure(r, "m", origin, where, "device.gemm_table.f32[].m");
    pt.n = figure(r, "n", origin, where, "device.gemm_table.f32[].n");
    pt.k = figure(r, "k", origin, where, "device.gemm_table.f32[].k");
    pt.seconds = figure(r, "seconds", origin, where, "device.gemm_table.f32[].seconds");
    if (r.contains("seconds_cold")) pt.seconds_cold = figure(r, "seconds_cold", origin, where, "device.gemm_table.f32[].seconds_cold");
    if (r.contains("seconds_accumulate"))
      pt.seconds_accumulate = figure(r, "seconds_accumulate", origin, where, "device.gemm_table.f32[].seconds_accumulate");
    for (auto [key, flag] : {std::pair{"trans_a", &pt.trans_a}, std::pair{"trans_b", &pt.trans_b}}) {
      if (!r.contains(key) || !r.at(key).is_boolean())
        throw UsageError("hw", origin + ": field '" + where + key + "' must be true or false" + fix);
      *flag = r.at(key).get<bool>();
    }
    table.points.push_back(pt);
  }
  return table;
}

LinkSpec parse_link(const json& j, const char* key, const std::string& origin) {
  const json& l = field(j, key, origin, "links.");
  LinkSpec s;
  std::string where = std::string("links.") + key + ".";
  s.kind = text(l, "kind", "link", origin, where);
  s.bandwidth_Bps = figure(l, "bandwidth_Bps", origin, where, "links.*.bandwidth_Bps");
  s.latency_s = figure(l, "latency_s", origin, where, "links.*.latency_s");
  s.curve = parse_curve(l, "curve", origin, where, "bytes");
  return s;
}

json collectives_to_json(const CollectiveSpec& c, const HostCalibration* host) {
  json protocols = json::array();
  for (Protocol q : c.protocols) protocols.push_back(protocol_name(q));
  json j{{"launch_s", c.launch_s},         {"intra_hop_s", c.intra_hop_s},
         {"inter_hop_s", c.inter_hop_s},   {"intra_efficiency", c.intra_efficiency},
         {"inter_efficiency", c.inter_efficiency}, {"net_overhead_s", c.net_overhead_s},
         {"protocols", protocols},         {"tree", c.tree},
         {"nvls_efficiency", c.nvls_efficiency}, {"nvls_latency_s", c.nvls_latency_s},
         {"nvls_tree_latency_s", c.nvls_tree_latency_s},
         {"shared_host_Bps", c.shared_host_Bps}};
  if (!c.ring_links.empty()) {
    json table = json::object();
    for (const auto& [ranks, links] : c.ring_links) table[std::to_string(ranks)] = links;
    j["ring_links"] = table;
    j["links_per_device"] = c.links_per_device;
  }
  if (host && !host->collectives.empty()) {
    json measured = json::array();
    for (const auto& [key, t] : host->collectives)
      measured.push_back({{"op", key.first}, {"ranks", t.ranks}, {"bytes", t.bytes}, {"seconds", t.seconds}});
    j["measured"] = measured;
  }
  return j;
}

}  // namespace

HardwareProfile parse_profile(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {  // parse errors, and numbers too large for a double
    throw UsageError("hw", origin + ": not valid JSON (" + json_reason(e) + ") — see profiles/README.md for the format");
  }
  if (!j.is_object()) throw UsageError("hw", origin + ": a profile is a JSON object — see profiles/README.md for the format");
  HardwareProfile p;
  p.path = origin;
  p.name = text(j, "name", "", origin, "");
  if (p.name.empty()) throw UsageError("hw", origin + ": missing field 'name' — see profiles/README.md for the format");
  p.description = text(j, "description", "", origin, "");
  constexpr double kMaxDevices = 1 << 20;  // as reshaped() allows
  p.nodes = static_cast<int>(whole(j, "nodes", origin, "", kMaxDevices));
  p.devices_per_node = static_cast<int>(whole(j, "devices_per_node", origin, "", kMaxDevices));
  if (static_cast<int64_t>(p.nodes) * p.devices_per_node > static_cast<int64_t>(kMaxDevices))
    throw UsageError("hw", origin + ": " + std::to_string(p.nodes) + " nodes × " + std::to_string(p.devices_per_node) +
                          " devices is more than 2^20 devices — use a smaller cluster");
  const json& d = field(j, "device", origin, "");
  p.device_model = text(d, "model", "device", origin, "device.");
  const json& pf = field(d, "peak_flops", origin, "device.");
  p.peak_flops_f32 = figure(pf, "f32", origin, "device.peak_flops.", "device.peak_flops.*");
  p.peak_flops_f16 = pf.contains("f16") ? figure(pf, "f16", origin, "device.peak_flops.", "device.peak_flops.*") : 0;
  p.peak_flops_bf16 = pf.contains("bf16") ? figure(pf, "bf16", origin, "device.peak_flops.", "device.peak_flops.*") : 0;
  p.peak_flops_tf32 = pf.contains("tf32") ? figure(pf, "tf32", origin, "device.peak_flops.", "device.peak_flops.*") : 0;
  p.gemm_efficiency = figure(d, "gemm_efficiency", origin, "device.");
  if (d.contains("gemm_curves")) {
    const json& gc = d.at("gemm_curves");
    if (!gc.is_object()) throw UsageError("hw", origin + ": field 'device.gemm_curves' must be an object — see profiles/README.md for the format");
    p.gemm_curves.source = text(gc, "source", "", origin, "device.gemm_curves.");
    p.gemm_curves.f32 = parse_curve(gc, "f32", origin);
    p.gemm_curves.tf32 = parse_curve(gc, "tf32", origin);
    p.gemm_curves.f16 = parse_curve(gc, "f16", origin);
    p.gemm_curves.bf16 = parse_curve(gc, "bf16", origin);
    if (!p.gemm_curves.tf32.empty() && p.peak_flops_tf32 == 0)
      throw UsageError("hw", origin + ": field 'device.gemm_curves.tf32' needs 'device.peak_flops.tf32' — add the TF32 peak, or drop the curve");
  }
  if (d.contains("tf32")) {
    if (!d.at("tf32").is_boolean())
      throw UsageError("hw", origin + ": field 'device.tf32' must be true or false, got " + d.at("tf32").dump());
    p.tf32 = d.at("tf32").get<bool>();
    if (p.tf32 && p.peak_flops_tf32 == 0)
      throw UsageError("hw", origin + ": field 'device.tf32' is on but 'device.peak_flops.tf32' is missing — add the TF32 peak");
  }
  p.mem_bandwidth_Bps = figure(d, "mem_bandwidth_Bps", origin, "device.");
  // The host calibration's fields sit in "device" beside the cluster's (the format calibrate writes).
  for (const char* key : {"gemm_table", "host_cache_bytes", "host_cache_curve", "host_cache_retouch", "turn_handoff_s",
                          "turn_gemm_extra_s", "core_round_trip_s", "host_op_gap_s", "turns_on_one_core"})
    if (d.contains(key) && !p.calibration) p.calibration.emplace();
  if (p.calibration) {
    HostCalibration& h = *p.calibration;
    if (d.contains("gemm_table")) h.gemm_table = parse_gemm_table(d.at("gemm_table"), origin);
    if (d.contains("host_cache_curve")) h.host_cache_curve = parse_cold_share_curve(d.at("host_cache_curve"), origin);
    if (d.contains("host_cache_bytes")) h.host_cache_bytes = figure(d, "host_cache_bytes", origin, "device.");
    if (d.contains("host_cache_retouch")) h.host_cache_retouch = figure(d, "host_cache_retouch", origin, "device.");
    if (d.contains("turn_handoff_s")) h.turn_handoff_s = figure(d, "turn_handoff_s", origin, "device.");
    if (d.contains("turn_gemm_extra_s")) h.turn_gemm_extra_s = figure(d, "turn_gemm_extra_s", origin, "device.");
    if (d.contains("core_round_trip_s")) h.core_round_trip_s = figure(d, "core_round_trip_s", origin, "device.");
    if (d.contains("host_op_gap_s")) h.host_op_gap_s = figure(d, "host_op_gap_s", origin, "device.");
    if (d.contains("turns_on_one_core")) {
      if (!d.at("turns_on_one_core").is_boolean())
        throw UsageError("hw", origin + ": field 'device.turns_on_one_core' must be true or false, got " + d.at("turns_on_one_core").dump());
      h.turns_on_one_core = d.at("turns_on_one_core").get<bool>();
    }
  }
  if (d.contains("elementwise_curves")) {
    const json& ec = d.at("elementwise_curves");
    if (!ec.is_object())
      throw UsageError("hw", origin + ": field 'device.elementwise_curves' must be an object of curves by op kind — see profiles/README.md for the format");
    p.elementwise_curves_source = text(ec, "source", "", origin, "device.elementwise_curves.");
    for (const auto& [kind, curve] : ec.items())
      if (kind != "source") p.elementwise_curves[kind] = parse_curve(ec, kind, origin, "device.elementwise_curves.", "bytes");
  }
  const double capacity = figure(d, "mem_capacity_bytes", origin, "device.");
  if (capacity != std::floor(capacity))
    throw UsageError("hw", origin + ": field 'device.mem_capacity_bytes' is " + d.at("mem_capacity_bytes").dump() + " — a count of bytes is a whole number");
  p.mem_capacity_bytes = static_cast<int64_t>(capacity);
  p.launch_overhead_s = figure(d, "launch_overhead_s", origin, "device.");
  const json& links = field(j, "links", origin, "");
  p.host_link = parse_link(links, "host", origin);
  p.intra_node = parse_link(links, "intra_node", origin);
  p.inter_node = p.nodes > 1 ? parse_link(links, "inter_node", origin) : p.intra_node;
  p.collectives = parse_collectives(j, p, origin);
  if (j.contains("calibration")) {
    const json& c = j.at("calibration");
    if (!c.is_object())
      throw UsageError("hw", origin + ": field 'calibration' must be an object (what `scalelab calibrate` writes) — "
                                 "run it again, or drop the field");
    if (!p.calibration) p.calibration.emplace();
    HostCalibration& h = *p.calibration;
    h.record = c.dump();
    h.machine = text(c, "machine", "", origin, "calibration.");
    h.date = text(c, "date", "", origin, "calibration.");
  }
  return p;
}

namespace {

json curve_json(const SizeCurve& c, const char* size_key) {
  json j{{size_key, c.sizes}, {"efficiency", c.efficiency}};
  if (!c.efficiency_cold.empty()) j["efficiency_cold"] = c.efficiency_cold;
  return j;
}

}  // namespace

std::string profile_to_json(const HardwareProfile& p) {
  auto link = [](const LinkSpec& l) {
    json j{{"kind", l.kind}, {"bandwidth_Bps", l.bandwidth_Bps}, {"latency_s", l.latency_s}};
    if (!l.curve.empty()) j["curve"] = curve_json(l.curve, "bytes");
    return j;
  };
  json peak{{"f32", p.peak_flops_f32}};
  if (p.peak_flops_f16 > 0) peak["f16"] = p.peak_flops_f16;
  if (p.peak_flops_bf16 > 0) peak["bf16"] = p.peak_flops_bf16;
  if (p.peak_flops_tf32 > 0) peak["tf32"] = p.peak_flops_tf32;
  json curves = json::object();
  auto curve = [&](const char* key, const SizeCurve& c) {
    if (!c.empty()) curves[key] = curve_json(c, "mnk");
  };
  curve("f32", p.gemm_curves.f32);
  curve("tf32", p.gemm_curves.tf32);
  curve("f16", p.gemm_curves.f16);
  curve("bf16", p.gemm_curves.bf16);
  if (!curves.empty() && !p.gemm_curves.source.empty()) curves["source"] = p.gemm_curves.source;
  json links{{"host", link(p.host_link)}, {"intra_node", link(p.intra_node)}};
  if (p.nodes > 1) links["inter_node"] = link(p.inter_node);
  json j{{"name", p.name},
               {"description", p.description},
               {"nodes", p.nodes},
               {"devices_per_node", p.devices_per_node},
               {"device",
                {{"model", p.device_model},
                 {"peak_flops", peak},
                 {"gemm_efficiency", p.gemm_efficiency},
                 {"mem_bandwidth_Bps", p.mem_bandwidth_Bps},
                 {"mem_capacity_bytes", p.mem_capacity_bytes},
                 {"launch_overhead_s", p.launch_overhead_s}}},
               {"links", links}};
  const HostCalibration* h = p.calibration ? &*p.calibration : nullptr;
  if (p.collectives.calibrated) j["collectives"] = collectives_to_json(p.collectives, h);
  if (!curves.empty()) j["device"]["gemm_curves"] = curves;
  if (h && !h->gemm_table.empty()) {
    json rows = json::array();
    for (const GemmPoint& pt : h->gemm_table.points) {
      rows.push_back({{"m", pt.m}, {"n", pt.n}, {"k", pt.k}, {"trans_a", pt.trans_a}, {"trans_b", pt.trans_b}, {"seconds", pt.seconds}});
      if (pt.seconds_cold > 0) rows.back()["seconds_cold"] = pt.seconds_cold;
      if (pt.seconds_accumulate > 0) rows.back()["seconds_accumulate"] = pt.seconds_accumulate;
    }
    j["device"]["gemm_table"] = {{"f32", rows}};
    if (!h->gemm_table.source.empty()) j["device"]["gemm_table"]["source"] = h->gemm_table.source;
  }
  if (!p.elementwise_curves.empty()) {
    json ec = json::object();
    for (const auto& [kind, c] : p.elementwise_curves) ec[kind] = curve_json(c, "bytes");
    if (!p.elementwise_curves_source.empty()) ec["source"] = p.elementwise_curves_source;
    j["device"]["elementwise_curves"] = ec;
  }
  if (p.tf32) j["device"]["tf32"] = true;
  if (h) {
    if (h->host_cache_bytes > 0) j["device"]["host_cache_bytes"] = h->host_cache_bytes;
    if (!h->host_cache_curve.bytes.empty())
      j["device"]["host_cache_curve"] = {{"bytes", h->host_cache_curve.bytes}, {"cold_share", h->host_cache_curve.share}};
    if (h->host_cache_retouch != 1) j["device"]["host_cache_retouch"] = h->host_cache_retouch;
    if (h->turn_handoff_s > 0) j["device"]["turn_handoff_s"] = h->turn_handoff_s;
    if (h->turn_gemm_extra_s > 0) j["device"]["turn_gemm_extra_s"] = h->turn_gemm_extra_s;
    if (h->turns_on_one_core) j["device"]["turns_on_one_core"] = true;
    if (h->core_round_trip_s > 0) j["device"]["core_round_trip_s"] = h->core_round_trip_s;
    if (h->host_op_gap_s >= 0) j["device"]["host_op_gap_s"] = h->host_op_gap_s;
    if (!h->record.empty()) j["calibration"] = json::parse(h->record);
  }
  return j.dump();
}

std::string profiles_dir() {
  if (const char* env = std::getenv("SCALELAB_PROFILES")) return env;
  return std::string(SCALELAB_SOURCE_DIR) + "/profiles";
}

std::vector<std::string> list_profiles() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(profiles_dir(), ec))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string profile_file(const std::string& name_or_path) {
  // exists() with an error code: a symlink loop or an unreadable directory is "not a path here".
  std::error_code ec;
  if (fs::symlink_status(name_or_path, ec).type() != fs::file_type::not_found && !ec) return name_or_path;
  const fs::path named = fs::path(profiles_dir()) / (name_or_path + ".json");
  return fs::exists(named, ec) ? named.string() : "";
}

HardwareProfile load_profile(const std::string& name_or_path) {
  const std::string path = profile_file(name_or_path);
  if (path.empty()) {
    std::string known;
    for (const auto& n : list_profiles()) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("hw", "no hardware profile '" + name_or_path + "' — pass a JSON file or one of: " +
                               (known.empty() ? "(none found in " + profiles_dir() + ")" : known));
  }
  // A directory, a FIFO or a device named by mistake is refused before it is read.
  const std::string text_bytes = read_regular_file(path, "hw", 16 << 20, "pass a profile JSON file (see `scalelab profiles`)");
  return parse_profile(text_bytes, path);
}

HardwareProfile reshaped(const HardwareProfile& profile, int nodes, int devices_per_node) {
  if (nodes < 0 || devices_per_node < 0)
    throw UsageError("hw", "--nodes " + std::to_string(nodes) + " / --devices-per-node " + std::to_string(devices_per_node) +
                               ": counts are ≥ 1 (0 keeps the profile's)");
  HardwareProfile p = profile;
  if (nodes > 0) p.nodes = nodes;
  if (devices_per_node > 0) p.devices_per_node = devices_per_node;
  if (p.nodes == profile.nodes && p.devices_per_node == profile.devices_per_node) return p;
  if (p.nodes > 1 && profile.nodes == 1)
    throw UsageError("hw", "profile " + profile.name + " describes one node and no link between nodes, so --nodes " +
                               std::to_string(p.nodes) + " cannot be priced — reshape a cluster profile (e.g. h100-ib-16x8)");
  if (static_cast<int64_t>(p.nodes) * p.devices_per_node > (1 << 20))
    throw UsageError("hw", std::to_string(p.nodes) + " nodes × " + std::to_string(p.devices_per_node) +
                               " devices: more than 2^20 devices — use a smaller cluster");
  p.name = profile.name + "@" + std::to_string(p.nodes) + "x" + std::to_string(p.devices_per_node);
  p.description = profile.description + " — reshaped to " + std::to_string(p.nodes) + " nodes × " +
                  std::to_string(p.devices_per_node) + " devices";
  return p;
}

}  // namespace scalelab
