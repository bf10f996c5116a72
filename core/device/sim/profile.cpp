#include "core/device/sim/profile.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

#ifndef SCALELAB_SOURCE_DIR
#define SCALELAB_SOURCE_DIR "."
#endif

namespace scalelab {

namespace fs = std::filesystem;
using nlohmann::json;

double HardwareProfile::peak_flops(DType dtype) const {
  switch (dtype) {
    case DType::f16: return peak_flops_f16 > 0 ? peak_flops_f16 : peak_flops_f32;
    case DType::bf16: return peak_flops_bf16 > 0 ? peak_flops_bf16 : peak_flops_f32;
    default: return peak_flops_f32;
  }
}

namespace {

const json& field(const json& j, const char* key, const std::string& origin, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw Error("hw", origin + ": missing field '" + where + key + "' — see profiles/README.md for the format");
  return j.at(key);
}

double positive(const json& j, const char* key, const std::string& origin, const std::string& where,
                bool allow_zero = false) {
  const json& v = field(j, key, origin, where);
  if (!v.is_number())
    throw Error("hw", origin + ": field '" + where + key + "' must be a number, got " + v.dump());
  double d = v.get<double>();
  if (d < 0 || (!allow_zero && d == 0))
    throw Error("hw", origin + ": field '" + where + key + "' must be " + (allow_zero ? "≥ 0" : "> 0") +
                          ", got " + v.dump());
  return d;
}

LinkSpec parse_link(const json& j, const char* key, const std::string& origin) {
  const json& l = field(j, key, origin, "links.");
  LinkSpec s;
  s.kind = l.value("kind", std::string("link"));
  std::string where = std::string("links.") + key + ".";
  s.bandwidth_Bps = positive(l, "bandwidth_Bps", origin, where);
  s.latency_s = positive(l, "latency_s", origin, where, true);
  return s;
}

}  // namespace

HardwareProfile parse_profile(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw Error("hw", origin + ": not valid JSON (" + e.what() + ")");
  }
  HardwareProfile p;
  p.path = origin;
  p.name = field(j, "name", origin, "").get<std::string>();
  p.description = j.value("description", std::string());
  p.nodes = static_cast<int>(positive(j, "nodes", origin, ""));
  p.devices_per_node = static_cast<int>(positive(j, "devices_per_node", origin, ""));
  const json& d = field(j, "device", origin, "");
  p.device_model = d.value("model", std::string("device"));
  const json& pf = field(d, "peak_flops", origin, "device.");
  p.peak_flops_f32 = positive(pf, "f32", origin, "device.peak_flops.");
  p.peak_flops_f16 = pf.contains("f16") ? positive(pf, "f16", origin, "device.peak_flops.") : 0;
  p.peak_flops_bf16 = pf.contains("bf16") ? positive(pf, "bf16", origin, "device.peak_flops.") : 0;
  p.gemm_efficiency = positive(d, "gemm_efficiency", origin, "device.");
  if (p.gemm_efficiency > 1) throw Error("hw", origin + ": device.gemm_efficiency must be in (0, 1]");
  p.mem_bandwidth_Bps = positive(d, "mem_bandwidth_Bps", origin, "device.");
  p.mem_capacity_bytes = static_cast<int64_t>(positive(d, "mem_capacity_bytes", origin, "device."));
  p.launch_overhead_s = positive(d, "launch_overhead_s", origin, "device.", true);
  const json& links = field(j, "links", origin, "");
  p.host_link = parse_link(links, "host", origin);
  p.intra_node = parse_link(links, "intra_node", origin);
  p.inter_node = p.nodes > 1 ? parse_link(links, "inter_node", origin) : p.intra_node;
  return p;
}

std::string profile_to_json(const HardwareProfile& p) {
  auto link = [](const LinkSpec& l) {
    return json{{"kind", l.kind}, {"bandwidth_Bps", l.bandwidth_Bps}, {"latency_s", l.latency_s}};
  };
  json peak{{"f32", p.peak_flops_f32}};
  if (p.peak_flops_f16 > 0) peak["f16"] = p.peak_flops_f16;
  if (p.peak_flops_bf16 > 0) peak["bf16"] = p.peak_flops_bf16;
  json links{{"host", link(p.host_link)}, {"intra_node", link(p.intra_node)}};
  if (p.nodes > 1) links["inter_node"] = link(p.inter_node);
  const json j{{"name", p.name},
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

HardwareProfile load_profile(const std::string& name_or_path) {
  fs::path path = name_or_path;
  if (!fs::exists(path)) path = fs::path(profiles_dir()) / (name_or_path + ".json");
  if (!fs::exists(path)) {
    std::string known;
    for (const auto& n : list_profiles()) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("hw", "no hardware profile '" + name_or_path + "' — pass a JSON file or one of: " +
                               (known.empty() ? "(none found in " + profiles_dir() + ")" : known));
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_profile(ss.str(), path.string());
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
