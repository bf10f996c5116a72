// Events and what reads them: the Chrome-trace writer (checked as JSON and by reading it back),
// the thread-safe event bus, and the metrics pass on hand-built intervals with exact answers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/trace/chrome_trace.h"
#include "core/trace/events.h"
#include "core/trace/metrics.h"
#include "core/trace/wire.h"
#include "support/errors.h"

using namespace scalelab;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Event ev(int device, Lane lane, const std::string& kind, const std::string& name, Phase phase, int64_t b, int64_t e) {
  Event x;
  x.device = device;
  x.lane = lane;
  x.kind = kind;
  x.name = name;
  x.phase = phase;
  x.t_begin_ns = b;
  x.t_end_ns = e;
  return x;
}

struct TraceFixture : ::testing::Test {
  fs::path dir;
  std::vector<Event> events;
  std::vector<MemorySample> memory;
  std::vector<Metric> metrics;
  TraceInfo info;

  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "scalelab-test-trace-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir = templ;

    // Times are deliberately not round: µs in the file must still give back the exact ns.
    Event fwd = ev(0, Lane::compute, "gemm", "fc1.fwd", Phase::fwd, 1'234'567, 3'000'001);
    fwd.flops = 1.5e9;
    fwd.bytes = 4096;
    fwd.step = 3;
    fwd.layer = 0;
    fwd.micro_batch = 1;
    Event ar0 = ev(0, Lane::comm, "all_reduce", "bucket 0", Phase::comm, 2'000'003, 5'000'000);
    ar0.bytes = 1 << 20;
    ar0.bucket = 0;
    ar0.step = 3;
    ar0.flow_id = 7;
    ar0.role = Role::all_reduce;
    ar0.group = "dp";  // a sub-group's call; the others ran in the world's group
    Event ar1 = ev(1, Lane::comm, "all_reduce", "bucket 0", Phase::comm, 2'500'011, 5'000'000);
    ar1.bytes = 1 << 20;
    ar1.bucket = 0;
    ar1.step = 3;
    ar1.flow_id = 7;
    ar1.role = Role::all_reduce;
    ar1.group = "dp";
    ar1.peer = 0;
    Event late = ev(1, Lane::compute, "sgd", "fc1.weight.step", Phase::optim, 5'100'000, 5'200'000);
    late.flow_id = 7;  // a third event of the same flow: a second "f"
    late.step = 3;
    Event lone = ev(1, Lane::copy, "copy_p2p", "", Phase::data, 123'456'789'012, 123'456'789'999);  // unnamed
    lone.peer = 0;
    lone.bytes = 256;
    lone.flow_id = 9;  // alone in its flow: no arrow
    lone.role = Role::replicate;
    Event host = ev(0, Lane::host, "wait", "barrier", Phase::eval, 7, 8);
    // Out of time order on purpose: the flow starts at the earliest event, not the first listed.
    events = {late, ar1, fwd, lone, ar0, host};

    memory = {{0, 0, MemoryCategory::params, 1000},
              {0, 1'234'567, MemoryCategory::activations, 512},
              {1, 2'000'000, MemoryCategory::comm_buffers, 1 << 20},
              {0, 3'000'001, MemoryCategory::activations, 0}};
    metrics = {{0, "loss", 2.302585092994046}, {3, "loss", 0.1234567890123}, {3, "accuracy", 0.875}};
    const std::string tiny = profile_to_json(load_profile(std::string(SCALELAB_TEST_DATA) + "/tiny.json"));
    info.devices = {{"sim:0 (tiny)", "sim:0", tiny}, {"sim:1 (tiny)", "sim:1", tiny}};
    info.title = "scalelab train --strategy ddp \"quoted\"";
    info.simulated = true;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  json written() {
    const fs::path path = dir / "trace.json";
    write_chrome_trace(path.string(), events, memory, metrics, info);
    std::ifstream in(path);
    return json::parse(in);  // throws (and fails the test) if the file is not JSON
  }
};

std::vector<json> with_ph(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == ph) out.push_back(e);
  return out;
}

}  // namespace

TEST_F(TraceFixture, TopLevelHoldsEventsUnitInfoAndMetrics) {
  json t = written();
  ASSERT_TRUE(t.is_object());
  ASSERT_TRUE(t.at("traceEvents").is_array());
  EXPECT_EQ(t.at("displayTimeUnit"), "ns");
  const json& other = t.at("otherData");
  EXPECT_EQ(other.at("title"), info.title);
  EXPECT_EQ(other.at("simulated"), true);
  const json& devices = other.at("devices");
  ASSERT_EQ(devices.size(), 2u);
  for (size_t d = 0; d < 2; ++d) {
    EXPECT_EQ(devices[d].at("name"), info.devices[d].name);
    EXPECT_EQ(devices[d].at("label"), info.devices[d].label);
    // The profile is data in the file (an object a reader can look into), not a string.
    EXPECT_EQ(devices[d].at("profile").at("name"), "tiny");
    EXPECT_TRUE(devices[d].at("profile").at("device").at("mem_capacity_bytes").is_number());
  }
  const json& m = t.at("scalelab_metrics");
  ASSERT_EQ(m.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(m[i].at("step"), metrics[i].step);
    EXPECT_EQ(m[i].at("name"), metrics[i].name);
    EXPECT_EQ(m[i].at("value").get<double>(), metrics[i].value);
  }
}

TEST_F(TraceFixture, EveryEventIsACompleteSliceWithItsFields) {
  json t = written();
  auto xs = with_ph(t, "X");
  ASSERT_EQ(xs.size(), events.size());
  for (const Event& e : events) {
    const std::string name = e.name.empty() ? e.kind : e.name;
    auto it = std::find_if(xs.begin(), xs.end(), [&](const json& x) {
      return x.at("pid") == e.device && x.at("tid") == static_cast<int>(e.lane) && x.at("name") == name;
    });
    ASSERT_NE(it, xs.end()) << "no X slice for " << name;
    const json& x = *it;
    EXPECT_EQ(x.at("cat"), phase_name(e.phase)) << name;
    EXPECT_DOUBLE_EQ(x.at("ts").get<double>(), static_cast<double>(e.t_begin_ns) / 1000.0) << name;
    EXPECT_DOUBLE_EQ(x.at("dur").get<double>(), static_cast<double>(e.t_end_ns - e.t_begin_ns) / 1000.0) << name;
    const json& a = x.at("args");
    EXPECT_EQ(a.at("kind"), e.kind) << name;
    EXPECT_EQ(a.at("bytes"), e.bytes) << name;
    EXPECT_EQ(a.at("flops").get<double>(), e.flops) << name;
    EXPECT_EQ(a.at("step"), e.step) << name;
    EXPECT_EQ(a.at("micro_batch"), e.micro_batch) << name;
    EXPECT_EQ(a.at("bucket"), e.bucket) << name;
    EXPECT_EQ(a.at("layer"), e.layer) << name;
    EXPECT_EQ(a.at("peer"), e.peer) << name;
    EXPECT_EQ(a.at("flow_id"), e.flow_id) << name;
    EXPECT_EQ(a.at("role"), role_name(e.role)) << name;
    if (e.group.empty()) EXPECT_FALSE(a.contains("group")) << name << ": the world's group is written as before";
    else EXPECT_EQ(a.at("group"), e.group) << name;
  }
  // The unnamed copy is shown under its kind.
  EXPECT_TRUE(std::any_of(xs.begin(), xs.end(), [](const json& x) { return x.at("name") == "copy_p2p"; }));
}

TEST_F(TraceFixture, MetadataNamesEveryDeviceAndEveryLaneUsed) {
  json t = written();
  auto ms = with_ph(t, "M");
  std::map<int, std::string> processes;
  std::set<std::pair<int, int>> threads;
  for (const json& m : ms) {
    if (m.at("name") == "process_name") processes[m.at("pid").get<int>()] = m.at("args").at("name").get<std::string>();
    if (m.at("name") == "thread_name") {
      const int pid = m.at("pid").get<int>(), tid = m.at("tid").get<int>();
      threads.insert({pid, tid});
      ASSERT_GE(tid, 0);
      ASSERT_LT(tid, kLaneCount);
      const std::string lane = lane_name(static_cast<Lane>(tid));
      EXPECT_NE(m.at("args").at("name").get<std::string>().find(lane), std::string::npos)
          << "thread " << pid << "/" << tid << " is named " << m.at("args").at("name") << ", not after lane " << lane;
    }
  }
  EXPECT_EQ(processes, (std::map<int, std::string>{{0, "sim:0 (tiny)"}, {1, "sim:1 (tiny)"}}));
  for (const Event& e : events)
    EXPECT_TRUE(threads.count({e.device, static_cast<int>(e.lane)})) << "lane " << lane_name(e.lane) << " of device "
                                                                    << e.device << " has no thread_name";
  // Lanes no event used are not named: device 1 has no host lane.
  EXPECT_FALSE(threads.count({1, static_cast<int>(Lane::host)}));
}

TEST_F(TraceFixture, MemorySamplesAreCounters) {
  json t = written();
  auto cs = with_ph(t, "C");
  ASSERT_EQ(cs.size(), memory.size());
  for (const MemorySample& m : memory) {
    const std::string name = std::string("memory ") + memory_category_name(m.category);
    auto it = std::find_if(cs.begin(), cs.end(), [&](const json& c) {
      return c.at("pid") == m.device && c.at("name") == name &&
             c.at("ts").get<double>() == static_cast<double>(m.t_ns) / 1000.0;
    });
    ASSERT_NE(it, cs.end()) << name << " at " << m.t_ns;
    EXPECT_EQ(it->at("args").at("bytes"), m.bytes);
  }
  EXPECT_TRUE(std::any_of(cs.begin(), cs.end(), [](const json& c) { return c.at("name") == "memory params"; }));
}

TEST_F(TraceFixture, SharedFlowIdsBecomeArrowsFromTheEarliestEvent) {
  json t = written();
  auto ss = with_ph(t, "s");
  auto fs_ = with_ph(t, "f");
  // Flow 7 joins three events: one start, two finishes. Flow 9 has one event and -1 is no flow.
  ASSERT_EQ(ss.size(), 1u);
  ASSERT_EQ(fs_.size(), 2u);
  const json& s = ss[0];
  EXPECT_EQ(s.at("id"), 7);
  EXPECT_EQ(s.at("cat"), "flow");
  EXPECT_EQ(s.at("pid"), 0);  // ar0 begins first (2'000'003 ns), though listed after ar1 and late
  EXPECT_EQ(s.at("tid"), static_cast<int>(Lane::comm));
  const double s_ts = s.at("ts").get<double>();
  EXPECT_GE(s_ts, 2000.003);
  EXPECT_LE(s_ts, 5000.0);
  std::set<std::pair<int, int>> finish_at;
  for (const json& f : fs_) {
    EXPECT_EQ(f.at("id"), 7);
    EXPECT_EQ(f.at("cat"), "flow");
    EXPECT_EQ(f.at("bp"), "e");
    EXPECT_GE(f.at("ts").get<double>(), 2500.011);
    finish_at.insert({f.at("pid").get<int>(), f.at("tid").get<int>()});
  }
  EXPECT_EQ(finish_at, (std::set<std::pair<int, int>>{{1, static_cast<int>(Lane::comm)}, {1, static_cast<int>(Lane::compute)}}));
}

TEST_F(TraceFixture, ReadsBackExactlyWhatWasWritten) {
  const std::string path = (dir / "trace.json").string();
  write_chrome_trace(path, events, memory, metrics, info);
  TraceContents c = read_chrome_trace(path);
  EXPECT_EQ(c.info.title, info.title);
  EXPECT_EQ(c.info.simulated, true);
  EXPECT_EQ(c.info.devices, info.devices);

  auto key = [](const Event& e) { return std::make_tuple(e.device, static_cast<int>(e.lane), e.t_begin_ns, e.kind); };
  auto sorted = [&](std::vector<Event> v) {
    std::sort(v.begin(), v.end(), [&](const Event& a, const Event& b) { return key(a) < key(b); });
    return v;
  };
  std::vector<Event> want = sorted(events), got = sorted(c.events);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const Event &a = got[i], &b = want[i];
    SCOPED_TRACE(b.kind + " " + b.name);
    EXPECT_EQ(a.device, b.device);
    EXPECT_EQ(a.lane, b.lane);
    EXPECT_EQ(a.kind, b.kind);
    if (!b.name.empty()) {  // the unnamed event: see UnnamedEventReadsBackUnnamed
      EXPECT_EQ(a.name, b.name);
    }
    EXPECT_EQ(a.phase, b.phase);
    EXPECT_EQ(a.t_begin_ns, b.t_begin_ns);  // exact to the ns through µs doubles
    EXPECT_EQ(a.t_end_ns, b.t_end_ns);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(a.flops, b.flops);
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.micro_batch, b.micro_batch);
    EXPECT_EQ(a.bucket, b.bucket);
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_EQ(a.peer, b.peer);
    EXPECT_EQ(a.flow_id, b.flow_id);
    EXPECT_EQ(a.role, b.role);
    EXPECT_EQ(a.group, b.group);
  }
  auto mkey = [](const MemorySample& m) { return std::make_tuple(m.device, m.t_ns, static_cast<int>(m.category), m.bytes); };
  std::vector<std::tuple<int, int64_t, int, int64_t>> mw, mg;
  for (const auto& m : memory) mw.push_back(mkey(m));
  for (const auto& m : c.memory) mg.push_back(mkey(m));
  std::sort(mw.begin(), mw.end());
  std::sort(mg.begin(), mg.end());
  EXPECT_EQ(mg, mw);
  ASSERT_EQ(c.metrics.size(), metrics.size());
  for (size_t i = 0; i < metrics.size(); ++i) {
    EXPECT_EQ(c.metrics[i].step, metrics[i].step);
    EXPECT_EQ(c.metrics[i].name, metrics[i].name);
    EXPECT_EQ(c.metrics[i].value, metrics[i].value);
  }
}

// A send's arrow starts at the send, even where its recv began first (a recv waits for its send).
TEST_F(TraceFixture, ASendStartsItsArrowEvenWhenItsRecvBeganFirst) {
  Event send = ev(0, Lane::comm, "send", "activations mb 0", Phase::comm, 2'000, 3'000);
  send.role = Role::send;
  send.peer = 1;
  send.flow_id = 11;
  Event recv = ev(1, Lane::comm, "recv", "activations mb 0", Phase::comm, 1'000, 3'000);
  recv.role = Role::recv;
  recv.peer = 0;
  recv.flow_id = 11;
  events = {recv, send};
  json t = written();
  auto ss = with_ph(t, "s");
  auto fs_ = with_ph(t, "f");
  ASSERT_EQ(ss.size(), 1u);
  ASSERT_EQ(fs_.size(), 1u);
  EXPECT_EQ(ss[0].at("id"), 11);
  EXPECT_EQ(ss[0].at("pid"), 0);  // the sender
  EXPECT_EQ(fs_[0].at("id"), 11);
  EXPECT_EQ(fs_[0].at("pid"), 1);  // the receiver
}

// Every role survives the trace by name; a name this build does not know reads as none.
TEST_F(TraceFixture, EveryRoleReadsBack) {
  events.clear();
  for (int r = 0; r < kRoleCount; ++r) {
    Event e = ev(0, Lane::comm, "op", "role " + std::to_string(r), Phase::comm, r * 10, r * 10 + 5);
    e.role = static_cast<Role>(r);
    events.push_back(e);
  }
  const std::string path = (dir / "trace.json").string();
  write_chrome_trace(path, events, {}, {}, info);
  const TraceContents c = read_chrome_trace(path);
  ASSERT_EQ(c.events.size(), events.size());
  std::set<std::string> names;
  for (const Event& e : c.events) {
    EXPECT_EQ(e.name, "role " + std::to_string(static_cast<int>(e.role)));
    names.insert(role_name(e.role));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kRoleCount)) << "two roles share a name";
  EXPECT_EQ(parse_role("a role from the future"), Role::none);
}

// A trace written before devices carried their profiles reads back as devices with names only.
TEST_F(TraceFixture, AnOlderTraceNamesItsDevicesWithoutProfiles) {
  const std::string path = (dir / "trace.json").string();
  json old = written();
  old["otherData"].erase("devices");
  old["otherData"]["device_names"] = {"sim:0 (tiny)", "sim:1 (tiny)"};
  std::ofstream(path) << old.dump();
  const TraceContents c = read_chrome_trace(path);
  ASSERT_EQ(c.info.devices.size(), 2u);
  EXPECT_EQ(c.info.devices[1].name, "sim:1 (tiny)");
  EXPECT_EQ(c.info.devices[1].profile, "");
}

// A sim run priced on a calibrated profile: its trace carries the profile whole — the name, the
// calibration record (machine, date, the raw measurements), the GEMM curve, the collectives and
// --tf32 — and it reads back to the same figures.
TEST_F(TraceFixture, ACalibratedProfileRoundTripsWholeThroughATrace) {
  const std::string file = std::string(SCALELAB_TEST_DATA) + "/calibrated-tiny.json";
  HardwareProfile cal = load_profile(file);
  cal.tf32 = true;  // as `train --tf32` sets it
  const std::string described = profile_to_json(cal);
  info.devices = {{"sim:0 (" + cal.name + ")", "sim:0", described}, {"sim:1 (" + cal.name + ")", "sim:1", described}};

  const json raw = written();
  const json& in_file = raw.at("otherData").at("devices").at(1).at("profile");
  std::ifstream source(file);
  const json original = json::parse(source);
  EXPECT_EQ(in_file.at("calibration"), original.at("calibration")) << "the calibration record, raw measurements included";
  EXPECT_EQ(in_file.at("collectives").at("launch_s"), 4e-6);
  EXPECT_EQ(in_file.at("device").at("gemm_curves").at("f32"), original.at("device").at("gemm_curves").at("f32"));

  const TraceContents c = read_chrome_trace((dir / "trace.json").string());
  ASSERT_EQ(c.info.devices.size(), 2u);
  const HardwareProfile q = parse_profile(c.info.devices[1].profile, "the trace");
  EXPECT_EQ(q.name, "calibrated-testhost");
  ASSERT_TRUE(q.calibration);
  EXPECT_EQ(q.calibration->machine, "testhost");
  EXPECT_EQ(q.calibration->date, "2026-11-24T01:30:12Z");
  EXPECT_EQ(json::parse(q.calibration->record), original.at("calibration"));
  EXPECT_EQ(q.gemm_curves.f32.sizes, (std::vector<double>{1e3, 1e5, 1e7}));
  EXPECT_EQ(q.gemm_curves.f32.efficiency, (std::vector<double>{0.1, 0.5, 0.9}));
  EXPECT_EQ(q.gemm_curves.source, "scalelab calibrate: made up for tests");
  EXPECT_TRUE(q.tf32);
  EXPECT_EQ(q.peak_flops_tf32, 4e11);
  EXPECT_TRUE(q.collectives.calibrated);
  EXPECT_EQ(q.collectives.launch_s, 4e-6);
  EXPECT_EQ(q.collectives.intra_efficiency, 0.8);
  EXPECT_FALSE(q.collectives.tree);
  EXPECT_EQ(q.collectives.protocols, std::vector<Protocol>{Protocol::simple});
  // And once more through the JSON: the same text, so nothing is lost or added on a second trip.
  EXPECT_EQ(profile_to_json(q), described);
}

// `train --device cpu --predict PROFILE`: the measured run's trace names the profile its prediction
// was priced on; a trace without one (any other run, or an older trace) reads back without.
TEST_F(TraceFixture, AMeasuredRunsTraceNamesTheProfileItsPredictionUsed) {
  EXPECT_FALSE(written().at("otherData").contains("predicted_with"));
  EXPECT_EQ(read_chrome_trace((dir / "trace.json").string()).info.predicted_with, "");

  const HardwareProfile cal = load_profile(std::string(SCALELAB_TEST_DATA) + "/calibrated-tiny.json");
  info.devices = {{"cpu:0", "cpu:0", ""}, {"cpu:1", "cpu:1", ""}};
  info.simulated = false;
  info.predicted_with = profile_to_json(cal);
  EXPECT_EQ(written().at("otherData").at("predicted_with").at("calibration").at("machine"), "testhost");
  const TraceContents c = read_chrome_trace((dir / "trace.json").string());
  EXPECT_FALSE(c.info.simulated);
  EXPECT_EQ(c.info.predicted_with, info.predicted_with);
}

// A "calibration" that is not an object is refused with the field and the fix.
TEST(DeviceDescription, ABrokenCalibrationRecordIsRefused) {
  json p = json::parse(profile_to_json(load_profile(std::string(SCALELAB_TEST_DATA) + "/calibrated-tiny.json")));
  p["calibration"] = "yesterday";
  const std::string m = test::message_of<Error>([&] { parse_profile(p.dump(), "x.json"); });
  EXPECT_NE(m.find("x.json: field 'calibration' must be an object"), std::string::npos) << m;
  p["calibration"] = {{"machine", 7}};
  const std::string m2 = test::message_of<Error>([&] { parse_profile(p.dump(), "x.json"); });
  EXPECT_NE(m2.find("'calibration.machine' must be a string"), std::string::npos) << m2;
}

// A device made on sim describes itself on the bus with its hardware profile as data, and the
// profile's JSON reads back to the same figures (every shipped profile).
TEST(DeviceDescription, SimDevicesCarryTheirProfileAndItReadsBack) {
  for (const std::string& name : list_profiles()) {
    SCOPED_TRACE(name);
    const HardwareProfile p = load_profile(name);
    const HardwareProfile q = parse_profile(profile_to_json(p), "round trip");
    EXPECT_EQ(q.name, p.name);
    EXPECT_EQ(q.description, p.description);
    EXPECT_EQ(q.device_model, p.device_model);
    EXPECT_EQ(q.nodes, p.nodes);
    EXPECT_EQ(q.devices_per_node, p.devices_per_node);
    EXPECT_EQ(q.peak_flops_f32, p.peak_flops_f32);
    EXPECT_EQ(q.peak_flops_f16, p.peak_flops_f16);
    EXPECT_EQ(q.peak_flops_bf16, p.peak_flops_bf16);
    EXPECT_EQ(q.gemm_efficiency, p.gemm_efficiency);
    EXPECT_EQ(q.mem_bandwidth_Bps, p.mem_bandwidth_Bps);
    EXPECT_EQ(q.mem_capacity_bytes, p.mem_capacity_bytes);
    EXPECT_EQ(q.launch_overhead_s, p.launch_overhead_s);
    for (auto [a, b] : {std::pair(&q.host_link, &p.host_link), std::pair(&q.intra_node, &p.intra_node),
                        std::pair(&q.inter_node, &p.inter_node)}) {
      EXPECT_EQ(a->kind, b->kind);
      EXPECT_EQ(a->bandwidth_Bps, b->bandwidth_Bps);
      EXPECT_EQ(a->latency_s, b->latency_s);
    }
  }
  EventBus bus;
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.count = 2;
  o.profile = load_profile(std::string(SCALELAB_TEST_DATA) + "/tiny.json");
  o.bus = &bus;
  auto devices = make_devices(o);
  const std::vector<DeviceDescription> described = bus.devices();
  ASSERT_EQ(described.size(), 2u);
  EXPECT_EQ(described[1].name, devices[1]->name());
  EXPECT_EQ(described[1].label, "sim:1");
  EXPECT_EQ(parse_profile(described[1].profile, "bus").mem_capacity_bytes, o.profile.mem_capacity_bytes);
  DeviceOptions cpu;
  cpu.bus = &bus;
  auto host = make_devices(cpu);
  EXPECT_EQ(bus.devices()[0].profile, "") << "a cpu device has no hardware profile";
}

// An event with no name is shown under its kind, but reading the trace back must still give the
// event that was written: name empty, not the kind.
// The reader scans the text rather than building a document: keys in any order, unknown keys
// and values of any kind skipped, escapes decoded; broken JSON and fields of the wrong type are
// refused with what and where.
TEST_F(TraceFixture, StreamingReaderTakesAnyKeyOrderAndRefusesBrokenText) {
  const std::string path = (dir / "hand.json").string();
  std::ofstream(path) << R"({"traceEvents": [
      {"args": {"role": "send", "step": 3, "bytes": 1.5e3, "extra": [1, {"a": null}, true], "name": "x\"y\u00e9\ud83d\ude00"},
       "dur": 2.5, "ts": 10, "tid": 1, "pid": 2, "cat": "bwd", "ph": "X", "kind": "ignored"},
      {"ph": "C", "name": "memory grads", "pid": 1, "ts": 4, "args": {"bytes": 64}},
      {"ph": "M", "name": "process_name", "args": {"name": "whatever"}}
    ], "otherData": {"title": "t", "devices": [{"name": "d0", "label": "d0"}]}, "more": -0.5e-3})";
  const TraceContents c = read_chrome_trace(path);
  ASSERT_EQ(c.events.size(), 1u);
  const Event& e = c.events[0];
  EXPECT_EQ(e.name, "x\"y\u00e9\U0001F600");
  EXPECT_EQ(e.device, 2);
  EXPECT_EQ(e.lane, Lane::comm);
  EXPECT_EQ(e.phase, Phase::bwd);
  EXPECT_EQ(e.role, Role::send);
  EXPECT_EQ(e.step, 3);
  EXPECT_EQ(e.bytes, 1500);
  EXPECT_EQ(e.t_begin_ns, 10000);
  EXPECT_EQ(e.t_end_ns, 12500);
  ASSERT_EQ(c.memory.size(), 1u);
  EXPECT_EQ(c.memory[0].category, MemoryCategory::grads);
  EXPECT_EQ(c.memory[0].bytes, 64);
  ASSERT_EQ(c.info.devices.size(), 1u);
  EXPECT_EQ(c.info.title, "t");

  auto refused = [&](const std::string& text, const std::string& says) {
    std::ofstream(path, std::ios::trunc) << text;
    try {
      read_chrome_trace(path);
      ADD_FAILURE() << "read: " << text;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(says), std::string::npos) << err.what();
    }
  };
  refused(R"({"traceEvents": [{"ph": "X", "ts": 1)", "not valid JSON (at byte ");
  refused(R"({"traceEvents": [{"ph": "X"}]} trailing)", "not valid JSON");
  refused(R"({"traceEvents": [{"ph": "X", "pid": "two"}]})", "wrong type ('pid' is not a number)");
  refused(R"({"traceEvents": {}})", "no traceEvents array");
  refused(R"([1, 2])", "no traceEvents array");
}

TEST_F(TraceFixture, UnnamedEventReadsBackUnnamed) {
  const std::string path = (dir / "trace.json").string();
  write_chrome_trace(path, events, memory, metrics, info);
  TraceContents c = read_chrome_trace(path);
  auto it = std::find_if(c.events.begin(), c.events.end(), [](const Event& e) { return e.kind == "copy_p2p"; });
  ASSERT_NE(it, c.events.end());
  EXPECT_EQ(it->name, "");
  // A named event whose name happens to equal its kind keeps it.
  events = {ev(0, Lane::compute, "gemm", "gemm", Phase::fwd, 0, 10)};
  write_chrome_trace(path, events, {}, {}, info);
  EXPECT_EQ(read_chrome_trace(path).events.at(0).name, "gemm");
}

TEST_F(TraceFixture, NothingButTheTraceIsLeftAndRewritingReplacesIt) {
  const std::string path = (dir / "trace.json").string();
  write_chrome_trace(path, events, memory, metrics, info);
  events.resize(1);
  write_chrome_trace(path, events, memory, metrics, info);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"trace.json"});
  EXPECT_EQ(read_chrome_trace(path).events.size(), 1u);
}

TEST_F(TraceFixture, EmptyRunStillWritesAValidTrace) {
  const std::string path = (dir / "empty.json").string();
  write_chrome_trace(path, {}, {}, {}, TraceInfo{});
  std::ifstream in(path);
  json t = json::parse(in);
  EXPECT_TRUE(with_ph(t, "X").empty());
  EXPECT_TRUE(read_chrome_trace(path).events.empty());
}

TEST_F(TraceFixture, UnwritablePathIsATraceError) {
  const std::string path = (dir / "no-such-dir" / "trace.json").string();
  try {
    write_chrome_trace(path, events, memory, metrics, info);
    FAIL() << "wrote into a directory that does not exist";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("[trace]", 0), 0u) << what;
    EXPECT_NE(what.find(path), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(dir / "no-such-dir"));
  EXPECT_TRUE(fs::is_empty(dir));
}

// ---------------------------------------------------------------------------------------------
// EventBus

TEST(EventBus, ManyThreadsEmittingLoseNothing) {
  EventBus bus;
  constexpr int kThreads = 8, kEach = 5000;
  std::atomic<bool> go{false}, done{false};
  std::atomic<size_t> polls{0};
  // A reader polls while writers emit, as the dashboard does each frame.
  std::thread reader([&] {
    size_t seen = 0;
    while (!done) {
      auto fresh = bus.events_since(seen);
      seen += fresh.size();
      polls++;
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t)
    writers.emplace_back([&, t] {
      while (!go) std::this_thread::yield();
      for (int i = 0; i < kEach; ++i) {
        Event e;
        e.device = t;
        e.step = i;
        e.name = "e";  // a heap string in each event: a race would corrupt it
        bus.emit(e);
        bus.emit(MemorySample{t, i, MemoryCategory::grads, i});
        bus.emit(Metric{i, "m", static_cast<double>(t)});
      }
    });
  go = true;
  for (auto& w : writers) w.join();
  done = true;
  reader.join();

  EXPECT_EQ(bus.event_count(), static_cast<size_t>(kThreads * kEach));
  auto events = bus.events();
  ASSERT_EQ(events.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(bus.memory().size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(bus.metrics().size(), static_cast<size_t>(kThreads * kEach));
  // Every (thread, i) exactly once, and each thread's events in the order it emitted them.
  std::vector<int64_t> next(kThreads, 0);
  for (const Event& e : events) {
    ASSERT_EQ(e.name, "e");
    ASSERT_EQ(e.step, next[static_cast<size_t>(e.device)]++);
  }
  EXPECT_EQ(next, std::vector<int64_t>(kThreads, kEach));
  EXPECT_EQ(bus.events_since(events.size() - 3).size(), 3u);
  EXPECT_TRUE(bus.events_since(events.size() + 10).empty());
  bus.clear();
  EXPECT_EQ(bus.event_count(), 0u);
  EXPECT_TRUE(bus.memory().empty());
  EXPECT_TRUE(bus.metrics().empty());
}

// ---------------------------------------------------------------------------------------------
// Interval arithmetic and the metrics pass

TEST(Intervals, UnionLength) {
  EXPECT_EQ(union_length({}), 0);
  EXPECT_EQ(union_length({{0, 10}}), 10);
  EXPECT_EQ(union_length({{20, 30}, {0, 10}, {5, 15}}), 25);  // unsorted, overlapping
  EXPECT_EQ(union_length({{0, 100}, {10, 20}}), 100);         // nested
  EXPECT_EQ(union_length({{0, 5}, {5, 10}}), 10);             // touching
  EXPECT_EQ(union_length({{3, 3}, {7, 7}}), 0);               // empty intervals
  EXPECT_EQ(union_length({{0, 10}, {0, 10}, {0, 10}}), 10);   // repeated
}

TEST(Intervals, IntersectionLength) {
  EXPECT_EQ(intersection_length({{0, 10}, {20, 30}}, {{5, 25}}), 10);
  EXPECT_EQ(intersection_length({{0, 10}, {5, 15}}, {{0, 20}}), 15);  // a is a union, not a sum
  EXPECT_EQ(intersection_length({{0, 10}}, {{10, 20}}), 0);
  EXPECT_EQ(intersection_length({}, {{0, 20}}), 0);
  EXPECT_EQ(intersection_length({{30, 40}, {0, 10}}, {{35, 50}, {5, 8}}), 8);
  EXPECT_EQ(intersection_length({{0, 100}}, {{10, 20}, {15, 30}, {90, 200}}), 30);
}

TEST(Metrics, HandBuiltTimelineGivesExactFigures) {
  const int64_t t0 = 1000;  // the span starts at the first event, not at 0
  std::vector<Event> e;
  // Device 0: compute [0,150) ∪ [300,400) = 250, comm [100,350) = 250, copy [500,600) = 100.
  Event c1 = ev(0, Lane::compute, "gemm", "a", Phase::fwd, t0 + 0, t0 + 100);
  c1.flops = 10;
  c1.bytes = 77;  // compute bytes are not "moved"
  Event c2 = ev(0, Lane::compute, "gemm", "b", Phase::fwd, t0 + 50, t0 + 150);
  c2.flops = 20;
  Event c3 = ev(0, Lane::compute, "sgd", "c", Phase::optim, t0 + 300, t0 + 400);
  c3.flops = 30;
  Event m1 = ev(0, Lane::comm, "all_reduce", "b0", Phase::comm, t0 + 100, t0 + 350);
  m1.bytes = 2000;
  Event p1 = ev(0, Lane::copy, "copy_h2d", "x", Phase::data, t0 + 500, t0 + 600);
  p1.bytes = 1000;
  // Device 1: compute [200,1000) = 800, comm [900,1000) all under compute.
  Event c4 = ev(1, Lane::compute, "gemm", "d", Phase::fwd, t0 + 200, t0 + 1000);
  c4.flops = 1e12;
  Event m2 = ev(1, Lane::comm, "all_reduce", "b0", Phase::comm, t0 + 900, t0 + 1000);
  m2.bytes = 500;
  e = {m2, c3, p1, c1, m1, c4, c2};

  // Device 0 memory, listed out of time order. Live by time: params 100; +act 50; act 80;
  // +grads 100 → 280 (the peak); act 0 → 200; grads 40 → 140.
  std::vector<MemorySample> mem = {
      {0, 50, MemoryCategory::grads, 40},      {0, 20, MemoryCategory::activations, 80},
      {0, 0, MemoryCategory::params, 100},     {0, 40, MemoryCategory::activations, 0},
      {0, 30, MemoryCategory::grads, 100},     {0, 10, MemoryCategory::activations, 50},
      {1, 5, MemoryCategory::optimizer, 64},
  };

  RunMetrics r = compute_metrics(e, mem, 3);
  EXPECT_EQ(r.t_begin_ns, t0);
  EXPECT_EQ(r.t_end_ns, t0 + 1000);
  EXPECT_DOUBLE_EQ(r.span_s(), 1e-6);
  ASSERT_EQ(r.per_device.size(), 3u);

  const DeviceMetrics& d0 = r.per_device[0];
  EXPECT_EQ(d0.device, 0);
  EXPECT_EQ(d0.compute_ns, 250);
  EXPECT_EQ(d0.comm_ns, 250);
  EXPECT_EQ(d0.copy_ns, 100);
  EXPECT_EQ(d0.idle_ns, 500);  // busy [0,400) ∪ [500,600) of [0,1000)
  EXPECT_DOUBLE_EQ(d0.busy_pct, 25.0);
  EXPECT_DOUBLE_EQ(d0.comm_pct, 25.0);
  EXPECT_DOUBLE_EQ(d0.idle_pct, 50.0);
  EXPECT_DOUBLE_EQ(d0.overlap_pct, 40.0);  // comm ∩ compute = [100,150) ∪ [300,350) = 100 of 250
  EXPECT_EQ(d0.bytes_moved, 3000);
  EXPECT_DOUBLE_EQ(d0.flops, 60.0);
  EXPECT_EQ(d0.peak_bytes[static_cast<int>(MemoryCategory::params)], 100);
  EXPECT_EQ(d0.peak_bytes[static_cast<int>(MemoryCategory::activations)], 80);
  EXPECT_EQ(d0.peak_bytes[static_cast<int>(MemoryCategory::grads)], 100);
  EXPECT_EQ(d0.peak_bytes[static_cast<int>(MemoryCategory::optimizer)], 0);
  EXPECT_EQ(d0.peak_total, 280);  // not 100 + 80 + 100 + 50, and not the unsorted running sum

  const DeviceMetrics& d1 = r.per_device[1];
  EXPECT_EQ(d1.device, 1);
  EXPECT_EQ(d1.compute_ns, 800);
  EXPECT_EQ(d1.comm_ns, 100);
  EXPECT_EQ(d1.copy_ns, 0);
  EXPECT_EQ(d1.idle_ns, 200);
  EXPECT_DOUBLE_EQ(d1.busy_pct, 80.0);
  EXPECT_DOUBLE_EQ(d1.comm_pct, 10.0);
  EXPECT_DOUBLE_EQ(d1.idle_pct, 20.0);
  EXPECT_DOUBLE_EQ(d1.overlap_pct, 100.0);
  EXPECT_EQ(d1.bytes_moved, 500);
  EXPECT_DOUBLE_EQ(d1.flops, 1e12);
  EXPECT_EQ(d1.peak_bytes[static_cast<int>(MemoryCategory::optimizer)], 64);
  EXPECT_EQ(d1.peak_total, 64);

  // A device that did nothing was idle the whole span.
  const DeviceMetrics& d2 = r.per_device[2];
  EXPECT_EQ(d2.device, 2);
  EXPECT_EQ(d2.compute_ns, 0);
  EXPECT_EQ(d2.comm_ns, 0);
  EXPECT_EQ(d2.idle_ns, 1000);
  EXPECT_DOUBLE_EQ(d2.busy_pct, 0.0);
  EXPECT_DOUBLE_EQ(d2.idle_pct, 100.0);
  EXPECT_DOUBLE_EQ(d2.overlap_pct, 0.0);  // no comm: 0, not NaN
  EXPECT_EQ(d2.peak_total, 0);

  // Over all devices: (100 + 100) hidden of (250 + 100) comm.
  EXPECT_DOUBLE_EQ(r.overlap_pct, 100.0 * 200.0 / 350.0);
  EXPECT_EQ(r.bytes_moved, 3500);
}

// A device the bus tallies instead of keeping its events counts in the metrics exactly as its
// events would: the hand-built timeline above, devices 1 and 2 tallied, a training step's events
// on device 1 (the bubbles read those), its events given out of order.
TEST(Metrics, ATalliedDeviceCountsAsItsEventsWould) {
  std::vector<Event> e = {ev(0, Lane::compute, "gemm", "a", Phase::fwd, 1000, 1100),
                          ev(0, Lane::comm, "all_reduce", "b0", Phase::comm, 1100, 1350),
                          ev(1, Lane::compute, "gemm", "d", Phase::fwd, 1500, 1900),
                          ev(1, Lane::compute, "gemm", "c", Phase::fwd, 1200, 1500),
                          ev(1, Lane::compute, "gemm", "e", Phase::fwd, 1950, 2000),
                          ev(1, Lane::comm, "all_reduce", "b0", Phase::comm, 1900, 2000),
                          ev(1, Lane::copy, "copy_h2d", "x", Phase::data, 1000, 1200)};
  for (Event& x : e) x.step = 0;
  e[2].flops = 7;
  e[5].bytes = 500;
  e[6].step = -1;  // before the step: counts in the span, not in the bubbles
  const std::vector<MemorySample> mem = {{0, 0, MemoryCategory::params, 100}, {1, 5, MemoryCategory::params, 64},
                                         {1, 6, MemoryCategory::activations, 30}, {1, 7, MemoryCategory::activations, 0}};
  EventBus bus;
  bus.tally_devices(1, 3);
  for (const Event& x : e) bus.emit(x);
  for (const MemorySample& m : mem) bus.emit(m);
  EXPECT_EQ(bus.event_count(), 2u);  // device 0's
  ASSERT_EQ(bus.tallies().size(), 2u);
  EXPECT_EQ(bus.tallies()[0].events, 5);
  EXPECT_EQ(bus.tallies()[1].events, 0);
  EXPECT_EQ(bus.latest_end_ns(), 2000);  // tallied events move the clock too

  const RunMetrics all = compute_metrics(e, mem, 3);
  const RunMetrics tallied = compute_metrics(bus.events(), bus.memory(), 3, bus.tallies());
  EXPECT_EQ(tallied.t_begin_ns, all.t_begin_ns);
  EXPECT_EQ(tallied.t_end_ns, all.t_end_ns);
  EXPECT_DOUBLE_EQ(tallied.overlap_pct, all.overlap_pct);
  EXPECT_DOUBLE_EQ(tallied.bubble_fraction, all.bubble_fraction);
  EXPECT_EQ(tallied.bytes_moved, all.bytes_moved);
  ASSERT_EQ(tallied.per_device.size(), 3u);
  for (int d = 0; d < 3; ++d) {
    SCOPED_TRACE(d);
    const DeviceMetrics &a = all.per_device[static_cast<size_t>(d)], &t = tallied.per_device[static_cast<size_t>(d)];
    EXPECT_EQ(t.compute_ns, a.compute_ns);
    EXPECT_EQ(t.comm_ns, a.comm_ns);
    EXPECT_EQ(t.copy_ns, a.copy_ns);
    EXPECT_EQ(t.idle_ns, a.idle_ns);
    EXPECT_DOUBLE_EQ(t.overlap_pct, a.overlap_pct);
    EXPECT_DOUBLE_EQ(t.flops, a.flops);
    EXPECT_EQ(t.bytes_moved, a.bytes_moved);
    EXPECT_EQ(t.peak_bytes, a.peak_bytes);
    EXPECT_EQ(t.peak_total, a.peak_total);
  }
  EXPECT_EQ(tallied.per_device[1].compute_ns, 750);  // [1200, 1900) ∪ [1950, 2000)
  EXPECT_EQ(tallied.per_device[1].peak_total, 94);
  EXPECT_GT(all.bubble_fraction, 0);

  // The tallies are this process's: they do not travel.
  Records r;
  r.tallies = bus.tallies();
  EXPECT_THROW(encode_records(r), Error);
}

// The time communication counts for next to a priced run: what moved, not what waited.
TEST(Metrics, CommunicationCountsTheTimeItsDataMovedNotTheWait) {
  auto comm = [](int device, const char* kind, Role role, int64_t flow, int64_t begin, int64_t end) {
    Event x = ev(device, Lane::comm, kind, kind, Phase::bwd, begin, end);
    x.role = role;
    x.flow_id = flow;
    return x;
  };
  const std::vector<Event> events = {
      ev(0, Lane::compute, "gemm", "fc1.fwd", Phase::fwd, 0, 100),   // counts its length
      comm(1, "recv", Role::recv, 7, 0, 130),                        // waited 100 for the send
      comm(0, "send", Role::send, 7, 100, 140),                      // 40 from both being there
      // A collective in two steps on two ranks; rank 0 arrives at 150, rank 1 at 200.
      comm(0, "all_reduce", Role::all_reduce, 10, 150, 230),         // first step: the call's id
      comm(0, "all_reduce", Role::all_reduce, -1, 240, 260),         // second step: no id
      comm(1, "all_reduce", Role::all_reduce, 10, 200, 235),
      comm(1, "all_reduce", Role::all_reduce, -1, 240, 270),
      ev(1, Lane::compute, "sgd", "fc1.step", Phase::optim, 280, 300),  // after the call: its own length
  };
  const std::vector<int64_t> t = moving_time_ns(events);
  ASSERT_EQ(t.size(), events.size());
  EXPECT_EQ(t[0], 100);
  EXPECT_EQ(t[1], 30);   // 130 − 100
  EXPECT_EQ(t[2], 40);
  EXPECT_EQ(t[3], 60);   // 260 − 200: from the last rank's arrival to its last step's end
  EXPECT_EQ(t[4], 0);
  EXPECT_EQ(t[5], 70);   // 270 − 200
  EXPECT_EQ(t[6], 0);
  EXPECT_EQ(t[7], 20);
}

TEST(Metrics, HostLaneCountsAsActiveForIdle) {
  std::vector<Event> e = {ev(0, Lane::compute, "gemm", "a", Phase::fwd, 0, 100),
                          ev(0, Lane::host, "wait", "h", Phase::data, 150, 250),
                          ev(0, Lane::comm, "send", "s", Phase::comm, 300, 400)};
  RunMetrics r = compute_metrics(e, {}, 1);
  EXPECT_EQ(r.per_device[0].idle_ns, 400 - 300);  // [100,150) and [250,300)
  EXPECT_DOUBLE_EQ(r.per_device[0].idle_pct, 25.0);
  EXPECT_DOUBLE_EQ(r.per_device[0].overlap_pct, 0.0);
  EXPECT_DOUBLE_EQ(r.overlap_pct, 0.0);
}

TEST(Metrics, NoEventsIsAllZeroNotNaN) {
  RunMetrics r = compute_metrics({}, {}, 2);
  ASSERT_EQ(r.per_device.size(), 2u);
  EXPECT_EQ(r.t_end_ns - r.t_begin_ns, 0);
  for (const auto& d : r.per_device) {
    EXPECT_EQ(d.busy_pct, 0.0);
    EXPECT_EQ(d.comm_pct, 0.0);
    EXPECT_FALSE(std::isnan(d.idle_pct));
    EXPECT_FALSE(std::isnan(d.overlap_pct));
  }
  EXPECT_EQ(r.overlap_pct, 0.0);
}

TEST_F(TraceFixture, AGzPathIsCompressedAndReadsBackTheSame) {
  const std::string plain = (dir / "trace.json").string(), packed = (dir / "trace.json.gz").string();
  write_chrome_trace(plain, events, memory, metrics, info);
  write_chrome_trace(packed, events, memory, metrics, info);
  std::ifstream in(packed, std::ios::binary);
  const int b0 = in.get(), b1 = in.get();
  EXPECT_EQ(b0, 0x1f);  // gzip's magic
  EXPECT_EQ(b1, 0x8b);
  const TraceContents a = read_chrome_trace(plain), b = read_chrome_trace(packed);
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].t_begin_ns, b.events[i].t_begin_ns);
    EXPECT_EQ(a.events[i].name, b.events[i].name);
  }
  EXPECT_EQ(a.memory.size(), b.memory.size());
  EXPECT_EQ(a.metrics.size(), b.metrics.size());
  EXPECT_EQ(a.info.devices, b.info.devices);
  // gunzip gives the same JSON as the plain file.
  EXPECT_EQ(read_maybe_gzipped(packed, "test"), read_maybe_gzipped(plain, "test"));
}

TEST_F(TraceFixture, ACutGzTraceIsACleanError) {
  const std::string packed = (dir / "trace.json.gz").string();
  write_chrome_trace(packed, events, memory, metrics, info);
  fs::resize_file(packed, fs::file_size(packed) / 2);
  const std::string msg = test::message_of<Error>([&] { read_chrome_trace(packed); });
  EXPECT_NE(msg.find("ends early or is corrupt"), std::string::npos) << msg;
}

TEST(AtomicFileWriter, AbandonedLeavesTheOldFileAndNoTemporary) {
  const fs::path dir = fs::temp_directory_path() / ("scalelab-atomic-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "kept.txt").string();
  write_file_atomically(path, "old", "test");
  {
    AtomicFileWriter w(path, "test", /*gzip=*/true);
    w.write(std::string(100000, 'x'));
    // no commit: an exception on the way out, say
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"kept.txt"});
  EXPECT_EQ(read_maybe_gzipped(path, "test"), "old");
  {
    AtomicFileWriter w(path, "test", /*gzip=*/true);
    for (int i = 0; i < 200; ++i) w.write(std::string(10000, static_cast<char>('a' + i % 26)));
    w.commit();
  }
  const std::string back = read_maybe_gzipped(path, "test");
  EXPECT_EQ(back.size(), 2000000u);
  EXPECT_EQ(back[10000 * 27], 'b');
  fs::remove_all(dir);
}

TEST_F(TraceFixture, AMeasuredDevicesCapacityReadsBackWhereItHasNoProfile) {
  // A cuda device's share of its GPU: the dashboard's memory bars are drawn against it.
  info.devices[0] = {"cuda:0.1", "cuda:0.1", "", int64_t{20} << 30};
  info.devices[1] = {"cpu:1", "cpu:1", "", 0};
  const json raw = written();
  EXPECT_EQ(raw.at("otherData").at("devices").at(0).at("capacity_bytes"), int64_t{20} << 30);
  EXPECT_FALSE(raw.at("otherData").at("devices").at(1).contains("capacity_bytes"));  // unknown: not written
  const TraceContents c = read_chrome_trace((dir / "trace.json").string());
  ASSERT_EQ(c.info.devices.size(), 2u);
  EXPECT_EQ(c.info.devices[0], info.devices[0]);
  EXPECT_EQ(c.info.devices[1].capacity_bytes, 0);
}
