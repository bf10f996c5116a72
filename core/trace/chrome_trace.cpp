#include "core/trace/chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/io/atomic_file.h"

namespace scalelab {

using nlohmann::json;

namespace {

// Chrome traces count in microseconds; ours in ns. A double holds ns/1000 exactly enough that
// reading back with llround gives the same ns for any run shorter than a century.
double to_us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }
int64_t to_ns(double us) { return static_cast<int64_t>(std::llround(us * 1000.0)); }

const char* kMemoryPrefix = "memory ";

// A device's hardware profile goes into the trace as an object (readable in the file), not a string.
json profile_object(const DeviceDescription& d) {
  if (d.profile.empty()) return nullptr;
  json p = json::parse(d.profile, nullptr, /*allow_exceptions=*/false);
  if (p.is_discarded()) throw Error("trace", d.name + ": its hardware profile is not valid JSON — describe it with "
                                                      "profile_to_json()");
  return p;
}

}  // namespace

void write_chrome_trace(const std::string& path, const std::vector<Event>& events,
                        const std::vector<MemorySample>& memory, const std::vector<Metric>& metrics,
                        const TraceInfo& info) {
  // Streamed, element by element, through a buffer: a run of millions of events never exists as
  // one JSON document in memory. A path ending in .gz is compressed as it is written.
  const bool gzip = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  AtomicFileWriter file(path, "trace", gzip);
  std::string buf;
  bool first = true;
  auto element = [&](const json& j) {
    buf += first ? "\n" : ",\n";
    first = false;
    buf += j.dump();
    if (buf.size() >= (1u << 20)) {
      file.write(buf);
      buf.clear();
    }
  };
  buf = "{\"traceEvents\":[";

  // Names first: a process per device, a thread per lane it used. The devices' descriptions (with
  // their hardware profiles) go in otherData for our reader.
  const std::vector<DeviceDescription>& devices = info.devices;
  std::set<std::pair<int, int>> lanes_used;
  for (const Event& e : events) lanes_used.insert({e.device, static_cast<int>(e.lane)});
  json device_rows = json::array();
  for (size_t d = 0; d < devices.size(); ++d) {
    device_rows.push_back({{"name", devices[d].name},
                           {"label", devices[d].label},
                           {"profile", profile_object(devices[d])}});
    element({{"ph", "M"}, {"name", "process_name"}, {"pid", d}, {"tid", 0}, {"args", {{"name", devices[d].name}}}});
    element({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", d}, {"tid", 0}, {"args", {{"sort_index", d}}}});
  }
  for (const auto& [device, lane] : lanes_used)
    element({{"ph", "M"}, {"name", "thread_name"}, {"pid", device}, {"tid", lane},
             {"args", {{"name", lane_name(static_cast<Lane>(lane))}}}});

  // Flows: a send starts its flow (its recv may begin first: it waits); otherwise the first event
  // of the flow id by begin time starts it. Every later one ends a leg.
  std::map<int64_t, std::vector<const Event*>> flows;
  for (const Event& e : events) {
    element({{"ph", "X"},
             {"name", e.name.empty() ? e.kind : e.name},
             {"cat", phase_name(e.phase)},
             {"ts", to_us(e.t_begin_ns)},
             {"dur", to_us(e.t_end_ns - e.t_begin_ns)},
             {"pid", e.device},
             {"tid", static_cast<int>(e.lane)},
             {"args",
              {{"kind", e.kind},
               {"name", e.name},  // the slice shows the kind when unnamed; keep the truth
               {"bytes", e.bytes},
               {"flops", e.flops},
               {"step", e.step},
               {"micro_batch", e.micro_batch},
               {"bucket", e.bucket},
               {"layer", e.layer},
               {"peer", e.peer},
               {"flow_id", e.flow_id},
               {"role", role_name(e.role)}}}});
    if (e.flow_id >= 0) flows[e.flow_id].push_back(&e);
  }
  for (auto& [id, members] : flows) {
    if (members.size() < 2) continue;
    std::stable_sort(members.begin(), members.end(), [](const Event* a, const Event* b) {
      return std::pair(a->role != Role::send, a->t_begin_ns) < std::pair(b->role != Role::send, b->t_begin_ns);
    });
    for (size_t i = 0; i < members.size(); ++i) {
      const Event& e = *members[i];
      json f{{"ph", i == 0 ? "s" : "f"}, {"name", "flow"}, {"cat", "flow"}, {"id", id},
             {"ts", to_us(e.t_begin_ns)}, {"pid", e.device}, {"tid", static_cast<int>(e.lane)}};
      if (i > 0) f["bp"] = "e";
      element(f);
    }
  }
  for (const MemorySample& m : memory)
    element({{"ph", "C"},
             {"name", std::string(kMemoryPrefix) + memory_category_name(m.category)},
             {"ts", to_us(m.t_ns)},
             {"pid", m.device},
             {"args", {{"bytes", m.bytes}}}});

  json metric_rows = json::array();
  for (const Metric& m : metrics)
    metric_rows.push_back({{"step", m.step}, {"name", m.name}, {"value", std::isfinite(m.value) ? json(m.value) : json(nullptr)}});
  const json other{{"title", info.title}, {"simulated", info.simulated}, {"devices", std::move(device_rows)}};
  buf += "\n],\"displayTimeUnit\":\"ns\",\"otherData\":" + other.dump() + ",\"scalelab_metrics\":" + metric_rows.dump() + "}";
  file.write(buf);
  file.commit();
}

TraceContents read_chrome_trace(const std::string& path) {
  if (!std::ifstream(path))
    throw Error("trace", path + ": cannot open — check the path (traces come from `scalelab train --trace FILE`)");
  json j;
  try {
    j = json::parse(read_maybe_gzipped(path, "trace"));
  } catch (const json::parse_error& e) {
    throw Error("trace", path + ": not valid JSON (" + e.what() + ") — is it a trace written by scalelab?");
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw Error("trace", path + ": no traceEvents array — not a Chrome trace");

  TraceContents t;
  try {
    if (j.contains("otherData")) {
      const json& o = j["otherData"];
      t.info.title = o.value("title", std::string());
      t.info.simulated = o.value("simulated", false);
      if (o.contains("devices"))
        for (const json& d : o["devices"])
          t.info.devices.push_back({d.value("name", std::string()), d.value("label", std::string()),
                                    d.contains("profile") && d["profile"].is_object() ? d["profile"].dump() : ""});
      else if (o.contains("device_names"))  // written before devices carried their profiles
        for (const std::string& name : o["device_names"].get<std::vector<std::string>>())
          t.info.devices.push_back({name, name, ""});
    }
    for (const json& te : j["traceEvents"]) {
      const std::string ph = te.value("ph", std::string());
      if (ph == "X") {
        Event e;
        const json& a = te.contains("args") ? te["args"] : json::object();
        e.device = te.value("pid", 0);
        e.lane = static_cast<Lane>(std::clamp(te.value("tid", 0), 0, kLaneCount - 1));
        e.kind = a.value("kind", std::string());
        e.name = a.contains("name") ? a.value("name", std::string()) : te.value("name", std::string());
        const std::string cat = te.value("cat", std::string());
        for (int p = 0; p <= static_cast<int>(Phase::eval); ++p)
          if (cat == phase_name(static_cast<Phase>(p))) e.phase = static_cast<Phase>(p);
        const double ts = te.value("ts", 0.0), dur = te.value("dur", 0.0);
        e.t_begin_ns = to_ns(ts);
        e.t_end_ns = e.t_begin_ns + to_ns(dur);
        e.bytes = a.value("bytes", int64_t{0});
        e.flops = a.value("flops", 0.0);
        e.step = a.value("step", int64_t{-1});
        e.micro_batch = a.value("micro_batch", -1);
        e.bucket = a.value("bucket", -1);
        e.layer = a.value("layer", -1);
        e.peer = a.value("peer", -1);
        e.flow_id = a.value("flow_id", int64_t{-1});
        e.role = parse_role(a.value("role", std::string("none")));
        t.events.push_back(std::move(e));
      } else if (ph == "C") {
        const std::string name = te.value("name", std::string());
        if (name.rfind(kMemoryPrefix, 0) != 0) continue;
        const std::string cat = name.substr(std::string(kMemoryPrefix).size());
        for (int c = 0; c < kMemoryCategoryCount; ++c)
          if (cat == memory_category_name(static_cast<MemoryCategory>(c))) {
            MemorySample m;
            m.device = te.value("pid", 0);
            m.t_ns = to_ns(te.value("ts", 0.0));
            m.category = static_cast<MemoryCategory>(c);
            m.bytes = te["args"].value("bytes", int64_t{0});
            t.memory.push_back(m);
          }
      }
    }
    if (j.contains("scalelab_metrics"))
      for (const json& m : j["scalelab_metrics"])
        t.metrics.push_back(Metric{m.value("step", int64_t{0}), m.value("name", std::string()),
                                   m["value"].is_number() ? m["value"].get<double>() : std::nan("")});
  } catch (const json::exception& e) {
    throw Error("trace", path + ": an event has a field of the wrong type (" + e.what() + ") — the trace is corrupt");
  }
  return t;
}

}  // namespace scalelab
