#include "core/trace/chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/trace/json_scan.h"

namespace scalelab {

using nlohmann::json;

namespace {

// Chrome traces count in microseconds; ours in ns. A double holds ns/1000 exactly enough that
// reading back with llround gives the same ns for any run shorter than a century.
double to_us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }
int64_t to_ns(double us) { return static_cast<int64_t>(std::llround(us * 1000.0)); }

const char* kMemoryPrefix = "memory ";

// A device's hardware profile goes into the trace as an object (readable in the file), not a string.
json profile_object(const std::string& profile, const std::string& whose) {
  if (profile.empty()) return nullptr;
  json p = json::parse(profile, nullptr, /*allow_exceptions=*/false);
  if (p.is_discarded()) throw Error("trace", whose + ": its hardware profile is not valid JSON — describe it with "
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
                           {"profile", profile_object(devices[d].profile, devices[d].name)}});
    if (devices[d].capacity_bytes > 0) device_rows.back()["capacity_bytes"] = devices[d].capacity_bytes;
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
    json x{{"ph", "X"},
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
               {"role", role_name(e.role)}}}};
    // A sub-group's call says which ("tp", "pp", "dp"); only then, so other events are as before.
    if (!e.group.empty()) x["args"]["group"] = e.group;
    element(x);
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
  json other{{"title", info.title}, {"simulated", info.simulated}, {"devices", std::move(device_rows)}};
  if (!info.predicted_with.empty()) other["predicted_with"] = profile_object(info.predicted_with, "--predict");
  buf += "\n],\"displayTimeUnit\":\"ns\",\"otherData\":" + other.dump() + ",\"scalelab_metrics\":" + metric_rows.dump() + "}";
  file.write(buf);
  file.commit();
}

namespace {

// The fields of one traceEvents entry that the reader uses; keys may come in any order, so they
// are gathered first and turned into an event, a memory sample or nothing at the object's end.
struct RawTraceEvent {
  std::string ph, name, cat, kind, arg_name, group, role = "none";
  bool has_arg_name = false;
  double ts = 0, dur = 0, flops = 0;
  int64_t pid = 0, tid = 0, bytes = 0, step = -1, micro_batch = -1, bucket = -1, layer = -1, peer = -1, flow_id = -1;
  // As a fresh one, keeping the strings' buffers (one event after another, a million times).
  void reset() {
    for (std::string* s : {&ph, &name, &cat, &kind, &arg_name, &group}) s->clear();
    role = "none";
    has_arg_name = false;
    ts = dur = flops = 0;
    pid = tid = bytes = 0;
    step = micro_batch = bucket = layer = peer = flow_id = -1;
  }
};

// The phase named by a slice's category; `otherwise` for a category this build does not know.
Phase parse_phase(std::string_view cat, Phase otherwise) {
  for (int p = 0; p < kPhaseCount; ++p)
    if (cat == phase_name(static_cast<Phase>(p))) return static_cast<Phase>(p);
  return otherwise;
}

struct WrongType : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A field of the right type with a value no run writes (a negative device, a negative duration).
struct BadValue : std::runtime_error {
  using std::runtime_error::runtime_error;
};
constexpr int64_t kMaxTraceDevices = int64_t{1} << 20;
constexpr double kMaxTraceMicroseconds = 1e12;  // 11.6 days of run

void read_string(detail::JsonScanner& s, std::string_view key, std::string& out) {
  if (s.peek() != detail::JsonScanner::Kind::string) throw WrongType("'" + std::string(key) + "' is not a string");
  out.assign(s.string());
}
double read_number(detail::JsonScanner& s, std::string_view key) {
  if (s.peek() != detail::JsonScanner::Kind::number) throw WrongType("'" + std::string(key) + "' is not a number");
  return s.number();
}
int64_t read_integer(detail::JsonScanner& s, std::string_view key) {
  if (s.peek() != detail::JsonScanner::Kind::number) throw WrongType("'" + std::string(key) + "' is not a number");
  return s.integer();
}

void read_args(detail::JsonScanner& s, RawTraceEvent& r) {
  if (s.peek() != detail::JsonScanner::Kind::object) throw WrongType("'args' is not an object");
  s.begin_object();
  std::string_view key;
  while (s.next_key(key)) {
    if (key == "kind") read_string(s, key, r.kind);
    else if (key == "name") { read_string(s, key, r.arg_name); r.has_arg_name = true; }
    else if (key == "bytes") r.bytes = read_integer(s, key);
    else if (key == "flops") r.flops = read_number(s, key);
    else if (key == "step") r.step = read_integer(s, key);
    else if (key == "micro_batch") r.micro_batch = read_integer(s, key);
    else if (key == "bucket") r.bucket = read_integer(s, key);
    else if (key == "layer") r.layer = read_integer(s, key);
    else if (key == "peer") r.peer = read_integer(s, key);
    else if (key == "flow_id") r.flow_id = read_integer(s, key);
    else if (key == "role") read_string(s, key, r.role);
    else if (key == "group") read_string(s, key, r.group);
    else s.skip();
  }
}

// One entry of traceEvents: an "X" slice becomes an event, a "C" memory counter a sample; flows
// and metadata are the writer's for other viewers (the devices come from otherData).
void read_trace_event(detail::JsonScanner& s, RawTraceEvent& r, TraceContents& t) {
  if (s.peek() != detail::JsonScanner::Kind::object) throw WrongType("a traceEvents entry is not an object");
  r.reset();
  s.begin_object();
  std::string_view key;
  while (s.next_key(key)) {
    if (key == "ph") read_string(s, key, r.ph);
    else if (key == "name") read_string(s, key, r.name);
    else if (key == "cat") read_string(s, key, r.cat);
    else if (key == "ts") r.ts = read_number(s, key);
    else if (key == "dur") r.dur = read_number(s, key);
    else if (key == "pid") r.pid = read_integer(s, key);
    else if (key == "tid") r.tid = read_integer(s, key);
    else if (key == "args") read_args(s, r);
    else s.skip();
  }
  if (r.ph == "X" || r.ph == "C") {
    // What a reader indexes by or adds up must be sane: a device number (an index into per-device
    // tables), a time and a duration the nanosecond clock holds, bytes that are not negative.
    if (r.pid < 0 || r.pid >= kMaxTraceDevices)
      throw BadValue("'pid' " + std::to_string(r.pid) + " is not a device number in [0, " + std::to_string(kMaxTraceDevices) + ")");
    if (!std::isfinite(r.ts) || std::fabs(r.ts) > kMaxTraceMicroseconds)
      throw BadValue("'ts' " + std::to_string(r.ts) + " µs is not a time within ±1e12 µs");
    if (!std::isfinite(r.dur) || r.dur < 0 || r.dur > kMaxTraceMicroseconds)
      throw BadValue("'dur' " + std::to_string(r.dur) + " µs is not a duration in [0, 1e12] µs");
    if (r.bytes < 0) throw BadValue("bytes " + std::to_string(r.bytes) + " < 0");
  }
  if (r.ph == "X") {
    Event e;
    e.device = static_cast<int>(r.pid);
    e.lane = static_cast<Lane>(std::clamp<int64_t>(r.tid, 0, kLaneCount - 1));
    e.kind = std::move(r.kind);
    e.name = r.has_arg_name ? std::move(r.arg_name) : std::move(r.name);
    e.phase = parse_phase(r.cat, e.phase);
    e.t_begin_ns = to_ns(r.ts);
    e.t_end_ns = e.t_begin_ns + to_ns(r.dur);
    e.bytes = r.bytes;
    e.flops = r.flops;
    e.step = r.step;
    e.micro_batch = static_cast<int>(r.micro_batch);
    e.bucket = static_cast<int>(r.bucket);
    e.layer = static_cast<int>(r.layer);
    e.peer = static_cast<int>(r.peer);
    e.flow_id = r.flow_id;
    e.role = r.role == "none" ? Role::none : parse_role(r.role);
    e.group = std::move(r.group);
    t.events.push_back(std::move(e));
  } else if (r.ph == "C") {
    if (r.name.rfind(kMemoryPrefix, 0) != 0) return;
    const std::string_view cat = std::string_view(r.name).substr(std::string_view(kMemoryPrefix).size());
    for (int c = 0; c < kMemoryCategoryCount; ++c)
      if (cat == memory_category_name(static_cast<MemoryCategory>(c))) {
        MemorySample m;
        m.device = static_cast<int>(r.pid);
        m.t_ns = to_ns(r.ts);
        m.category = static_cast<MemoryCategory>(c);
        m.bytes = r.bytes;
        t.memory.push_back(m);
      }
  }
}

void read_other_data(const json& o, TraceInfo& info) {
  info.title = o.value("title", std::string());
  info.simulated = o.value("simulated", false);
  if (o.contains("devices"))
    for (const json& d : o["devices"])
      info.devices.push_back({d.value("name", std::string()), d.value("label", std::string()),
                              d.contains("profile") && d["profile"].is_object() ? d["profile"].dump() : "",
                              d.contains("capacity_bytes") && d["capacity_bytes"].is_number_integer()
                                  ? std::max<int64_t>(0, d["capacity_bytes"].get<int64_t>())
                                  : 0});
  else if (o.contains("device_names"))  // written before devices carried their profiles
    for (const std::string& name : o["device_names"].get<std::vector<std::string>>())
      info.devices.push_back({name, name, ""});
  if (o.contains("predicted_with") && o["predicted_with"].is_object()) info.predicted_with = o["predicted_with"].dump();
}

}  // namespace

TraceContents read_chrome_trace(const std::string& path) {
  std::error_code ec;  // not std::ifstream: opening a FIFO to test it blocks until a writer comes
  if (!std::filesystem::exists(path, ec) && !ec)
    throw Error("trace", path + ": cannot open — check the path (traces come from `scalelab train --trace FILE`)");
  const std::string text = read_maybe_gzipped(path, "trace");  // a .gz trace is inflated first

  // Streamed: the events are pulled out of the text as it is scanned (no document tree, which for a
  // 1M-event trace costs gigabytes and most of the time); the small parts (otherData, the metrics)
  // are parsed as documents.
  TraceContents t;
  detail::JsonScanner s(text.data(), text.data() + text.size());
  bool have_events = false;
  try {
    if (s.peek() != detail::JsonScanner::Kind::object) {
      s.skip();
      if (!s.at_end()) s.fail("text after the JSON value");
      throw Error("trace", path + ": no traceEvents array — not a Chrome trace");
    }
    s.begin_object();
    std::string_view key;
    RawTraceEvent raw;
    while (s.next_key(key)) {
      if (key == "traceEvents" && s.peek() == detail::JsonScanner::Kind::array) {
        have_events = true;
        t.events.reserve(text.size() / 280);  // at least what an event takes in the file
        s.begin_array();
        while (s.next_element()) read_trace_event(s, raw, t);
      } else if (key == "otherData" || key == "scalelab_metrics") {
        const bool other = key == "otherData";
        const char* begin = s.position();
        s.skip();
        const json j = json::parse(begin, s.position());
        if (other) {
          if (j.is_object()) read_other_data(j, t.info);
        } else {
          for (const json& m : j)
            t.metrics.push_back(Metric{m.value("step", int64_t{0}), m.value("name", std::string()),
                                       m["value"].is_number() ? m["value"].get<double>() : std::nan("")});
        }
      } else {
        if (key == "traceEvents") have_events = false;
        s.skip();
      }
    }
    if (!s.at_end()) s.fail("text after the JSON value");
  } catch (const detail::JsonSyntaxError& e) {
    throw Error("trace", path + ": not valid JSON (" + e.what() + ") — is it a trace written by scalelab?");
  } catch (const WrongType& e) {
    throw Error("trace", path + ": an event has a field of the wrong type (" + e.what() + ") — the trace is corrupt");
  } catch (const BadValue& e) {
    throw Error("trace", path + ": an event has an impossible value (" + e.what() + ") — the trace is corrupt");
  } catch (const json::exception& e) {
    throw Error("trace", path + ": an event has a field of the wrong type (" + json_reason(e) + ") — the trace is corrupt");
  }
  if (!have_events) throw Error("trace", path + ": no traceEvents array — not a Chrome trace");
  return t;
}

}  // namespace scalelab
