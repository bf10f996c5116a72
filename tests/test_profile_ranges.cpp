// Tiny or absurd figures never produce nonsense: every figure of a profile has a range with its
// unit (profile_figure_ranges()), a figure outside it is refused by name, and at its bounds — each
// field alone at its minimum and its maximum, on the shipped profiles — the cost model's prices and
// a short sim run stay finite, ≥ 0 and under the sim clock's horizon, and slower hardware is never
// faster. The sim clock holds durations at its horizon; --trace-steps past the run is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/device/clock.h"
#include "core/device/sim/cost_model.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "run/train.h"
#include "support/errors.h"
#include "support/small_config.h"

using namespace scalelab;
using nlohmann::json;
using scalelab::test::message_of;
namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The shipped profiles and the calibrated ones of profiles/measured.
std::vector<std::string> shipped_profiles() {
  std::vector<std::string> paths;
  for (const std::string& name : list_profiles()) paths.push_back(profiles_dir() + "/" + name + ".json");
  std::vector<std::string> measured;
  for (const auto& e : fs::recursive_directory_iterator(profiles_dir() + "/measured"))
    if (e.path().string().size() > 13 && e.path().string().ends_with("-profile.json")) measured.push_back(e.path().string());
  std::sort(measured.begin(), measured.end());
  paths.insert(paths.end(), measured.begin(), measured.end());
  return paths;
}

// The values a row of profile_figure_ranges() names in `j`: `*` any key, `name[]` each element of
// a list. Of a list of figures (the last part), only the first (for a minimum) or the last (a
// maximum): a curve's sizes must keep increasing.
void expand(const json& j, const std::vector<std::string>& parts, size_t i, const json::json_pointer& at, bool minimum,
            std::vector<json::json_pointer>& out) {
  if (i == parts.size()) {
    if (j.is_number()) out.push_back(at);
    return;
  }
  std::string key = parts[i];
  const bool list = key.ends_with("[]");
  if (list) key.resize(key.size() - 2);
  std::vector<std::string> keys;
  if (key == "*") {
    if (j.is_object())
      for (const auto& [k, v] : j.items()) keys.push_back(k);
  } else if (j.is_object() && j.contains(key)) {
    keys.push_back(key);
  }
  for (const std::string& k : keys) {
    const json& v = j.at(k);
    if (!list) {
      expand(v, parts, i + 1, at / k, minimum, out);
    } else if (v.is_array() && !v.empty()) {
      if (i + 1 == parts.size()) {
        expand(v[minimum ? 0 : v.size() - 1], parts, i + 1, at / k / (minimum ? 0 : v.size() - 1), minimum, out);
      } else {
        for (size_t e = 0; e < v.size(); ++e) expand(v[e], parts, i + 1, at / k / e, minimum, out);
      }
    }
  }
}

std::vector<json::json_pointer> places(const json& profile, const FigureRange& r, bool minimum) {
  std::vector<std::string> parts;
  std::stringstream s(r.field);
  for (std::string part; std::getline(s, part, '.');) parts.push_back(part);
  std::vector<json::json_pointer> out;
  expand(profile, parts, 0, json::json_pointer(), minimum, out);
  return out;
}

json with_value(json j, const std::vector<json::json_pointer>& at, double v) {
  for (const auto& p : at) j[p] = v;
  return j;
}

void expect_duration(double seconds, const std::string& what) {
  EXPECT_TRUE(std::isfinite(seconds) && seconds >= 0) << what << ": " << seconds << " s";
  const int64_t ns = seconds_to_ns(seconds);
  EXPECT_GE(ns, 0) << what;
  EXPECT_LE(ns, kSimHorizonNs) << what;
}

// The cost model's price of each kind of op, small and large, and of each collective.
void expect_prices_sane(const HardwareProfile& p, const std::string& what) {
  const CostModel model(p);
  for (double size : {8.0, 4096.0})
    for (DType dtype : {DType::f32, DType::f16}) {
      OpCost g{OpClass::gemm, 2 * size * size * size, 3 * 4 * size * size, dtype, size, size, size};
      expect_duration(model.seconds(g), what + ", GEMM " + std::to_string(size));
      g.m = g.n = g.k = 0;  // a shape not known: by its FLOPs
      expect_duration(model.seconds(g), what + ", GEMM by FLOPs");
    }
  for (double bytes : {0.0, 4.0, 1e9}) {
    for (const char* kind : {"sgd", "bias_relu", static_cast<const char*>(nullptr)}) {
      OpCost e{OpClass::elementwise, 0, bytes};
      e.kind = kind;
      e.host_bytes = 1e9;  // past any cache: the cold prices too
      expect_duration(model.seconds(e), what + ", element-wise");
    }
    for (OpClass copy : {OpClass::copy_host, OpClass::copy_peer}) expect_duration(model.seconds({copy, 0, bytes}), what + ", copy");
  }
  const int per_node = p.devices_per_node, all = p.device_count();
  for (int n : {2, per_node, std::min(all, 2 * per_node), all})
    for (Collective op : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather, Collective::broadcast,
                          Collective::reduce, Collective::scatter, Collective::gather, Collective::barrier, Collective::send})
      for (double bytes : {0.0, 4.0, 1e9})
        for (double cold : {0.0, 1.0})
          expect_duration(model.collective_seconds(op, bytes, n, op == Collective::send && all > per_node, cold),
                          what + ", " + collective_name(op) + " on " + std::to_string(n));
}

// A short sim run (ddp, a dry run) on the profile at `path`: its span in ns, after checking every
// event and every device's shares.
int64_t sim_run_span(const std::string& path, int devices, const std::string& what) {
  TrainConfig c = scalelab::test::small_config("ddp", devices, DeviceKind::sim);
  c.hw = path;
  c.dry_run = true;
  c.steps = 2;
  EventBus bus;
  const TrainResult r = train(c, bus);
  for (const Event& e : bus.events()) {
    EXPECT_GE(e.t_begin_ns, 0) << what << ": " << e.kind;
    EXPECT_GE(e.t_end_ns, e.t_begin_ns) << what << ": " << e.kind;
    EXPECT_LT(e.t_end_ns, kSimHorizonNs) << what << ": " << e.kind;
  }
  for (const DeviceMetrics& d : r.metrics.per_device) {
    for (double pct : {d.busy_pct, d.comm_pct, d.idle_pct}) EXPECT_TRUE(pct >= 0 && pct <= 100) << what << ": " << pct;
    // Every instant of the span is idle or some lane's: the shares cover it (more where lanes overlap).
    EXPECT_GE(d.busy_pct + d.comm_pct + d.idle_pct + 100.0 * static_cast<double>(d.copy_ns) / std::max<double>(1, static_cast<double>(r.metrics.t_end_ns - r.metrics.t_begin_ns)),
              100 - 1e-6) << what;
  }
  EXPECT_GT(r.metrics.t_end_ns, r.metrics.t_begin_ns) << what;
  return r.metrics.t_end_ns - r.metrics.t_begin_ns;
}

class ProfileRanges : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/scalelab-ranges.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const json& j) const {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << j.dump();
    return path;
  }
  std::string dir_;
};

}  // namespace

TEST(ProfileRangesTable, TheReadmeListsEveryRangeAsTheParserHasIt) {
  const std::string readme = read_text(profiles_dir() + "/README.md");
  for (const FigureRange& r : profile_figure_ranges()) {
    EXPECT_LT(r.min, r.max) << r.field;
    const std::string line = std::string("| `") + r.field + "` | " + r.in_words + " | " + r.unit + " |";
    EXPECT_NE(readme.find(line), std::string::npos) << "profiles/README.md lacks the line " << line;
  }
}

// The figures: positive, finite, and absurd.
TEST(ProfileRangesTable, TinyFiguresAreRefusedNamingFieldValueAndRange) {
  const json shipped = json::parse(read_text(profiles_dir() + "/h100-ib-16x8.json"));
  struct Case {
    const char* pointer;
    double value;
    const char* field;
    const char* range;
  };
  for (const Case& c : {Case{"/device/mem_bandwidth_Bps", 1e-300, "device.mem_bandwidth_Bps", "1 MB/s to 1 PB/s"},
                        Case{"/device/peak_flops/f32", 5e-324, "device.peak_flops.f32", "1 GFLOP/s to 1 EFLOP/s"},
                        Case{"/links/inter_node/bandwidth_Bps", 1e-300, "links.inter_node.bandwidth_Bps", "1 MB/s to 1 PB/s"},
                        Case{"/links/host/latency_s", 5, "links.host.latency_s", "0 to 1 s"},
                        Case{"/device/mem_capacity_bytes", 1000, "device.mem_capacity_bytes", "1 MiB to 1 PiB"},
                        Case{"/collectives/intra_efficiency", 1e-300, "collectives.intra_efficiency", "1e-6 to 1"}}) {
    json j = shipped;
    j[json::json_pointer(c.pointer)] = c.value;
    const std::string what = message_of<Error>([&] { parse_profile(j.dump(), "tiny.json"); });
    EXPECT_EQ(what.rfind(std::string("[hw] tiny.json: field '") + c.field + "' is ", 0), 0u) << what;
    EXPECT_NE(what.find(json(c.value).dump()), std::string::npos) << what;
    EXPECT_NE(what.find(c.range), std::string::npos) << what;
  }
}

// Each figure alone at its minimum, then its maximum, on every shipped profile that has it: the
// prices are durations the clock can hold, and a short sim run (on the first profile that has
// it) stays sane — slower for a slower machine, faster for a faster one. Just outside the range
// the profile is refused, naming the field.
TEST_F(ProfileRanges, EveryFigureAtItsBoundsGivesSaneDurations) {
  std::vector<std::string> profiles = shipped_profiles();
  ASSERT_GE(profiles.size(), 10u);
  std::vector<json> shipped;
  for (const std::string& p : profiles) shipped.push_back(json::parse(read_text(p)));
  // No shipped profile has a GEMM curve measured cold: the test's calibrated host gets one.
  json cold = json::parse(read_text(std::string(SCALELAB_TEST_DATA) + "/calibrated-tiny.json"));
  cold["device"]["gemm_curves"]["f32"]["efficiency_cold"] = {0.05, 0.3, 0.6};
  cold["device"]["host_cache_bytes"] = 1 << 20;
  profiles.push_back("calibrated-tiny-cold.json");
  shipped.push_back(cold);
  std::map<std::string, int64_t> as_shipped_span;  // by profile and device count
  size_t swept = 0;                                 // bounds run on the sim
  for (const FigureRange& r : profile_figure_ranges()) {
    bool found = false;
    for (size_t i = 0; i < profiles.size(); ++i) {
      const json& base = shipped[i];
      if (places(base, r, true).empty()) continue;
      const std::string what = std::string(r.field) + " on " + fs::path(profiles[i]).filename().string();
      for (const bool minimum : {true, false}) {
        const double bound = minimum ? r.min : r.max;
        const std::vector<json::json_pointer> at = places(base, r, minimum);
        const json j = with_value(base, at, bound);
        const std::string here = what + (minimum ? " at its minimum" : " at its maximum");
        HardwareProfile p;
        try {
          p = parse_profile(j.dump(), "bound.json");
        } catch (const Error& e) {
          ADD_FAILURE() << here << " refused: " << e.what();
          continue;
        }
        expect_prices_sane(p, here);
        const double outside = minimum ? (r.min > 0 ? r.min / 2 : -1) : r.max * 2;
        const std::string refused = message_of<Error>([&] { parse_profile(with_value(base, at, outside).dump(), "out.json"); });
        EXPECT_NE(refused.find(std::string("its range is ") + r.in_words), std::string::npos) << here << ": " << refused;
        if (found) continue;  // one sim run per bound: on the first profile that has the figure
        const int devices = std::min(16, std::min(p.device_count(), 2 * p.devices_per_node));
        const int64_t span = sim_run_span(write("bound.json", j), devices, here);
        const std::string key = profiles[i] + "/" + std::to_string(devices);
        if (!as_shipped_span.count(key)) as_shipped_span[key] = sim_run_span(write("shipped.json", base), devices, what + " as shipped");
        const int64_t as_shipped = as_shipped_span[key];
        ++swept;
        // A machine slower in one figure is never faster, nor a faster one slower.
        const std::string unit = r.unit;
        const bool speed = unit == "B/s" || unit == "FLOP/s" || std::string(r.field).find("efficiency") != std::string::npos;
        const bool time = unit == "s";
        if ((speed && minimum) || (time && !minimum)) {
          EXPECT_GE(span, as_shipped) << here;
        }
        if ((speed && !minimum) || (time && minimum)) {
          EXPECT_LE(span, as_shipped) << here;
        }
      }
      found = true;
    }
    EXPECT_TRUE(found) << r.field << ": no shipped profile has it, so its bounds are not swept";
  }
  EXPECT_EQ(swept, 2 * profile_figure_ranges().size());
}

TEST(SimClockHorizon, DurationsAreHeldAtTheHorizonAndAnOpPastItIsRefused) {
  EXPECT_EQ(seconds_to_ns(std::nan("")), 0);
  EXPECT_EQ(seconds_to_ns(-1), 0);
  EXPECT_EQ(seconds_to_ns(-INFINITY), 0);
  EXPECT_EQ(seconds_to_ns(1e300), kSimHorizonNs);
  EXPECT_EQ(seconds_to_ns(INFINITY), kSimHorizonNs);
  EXPECT_EQ(seconds_to_ns(1.5e-9), 2);
  EXPECT_EQ(add_ns(kSimHorizonNs, kSimHorizonNs), kSimHorizonNs);
  EXPECT_EQ(add_ns(INT64_MAX, 1), kSimHorizonNs);
  EXPECT_EQ(add_ns(3, -5), 3);
  SimClock clock(std::make_shared<const CostModel>(load_profile("a100-nvlink-8")));
  const Interval first = clock.occupy(Lane::comm, 0, kSimHorizonNs / 2);
  EXPECT_EQ(first.end_ns, kSimHorizonNs / 2);
  const std::string what = message_of<Error>([&] { clock.occupy(Lane::comm, 0, kSimHorizonNs); });
  EXPECT_EQ(what.rfind("[sim] ", 0), 0u) << what;
  EXPECT_NE(what.find("horizon"), std::string::npos) << what;
  EXPECT_EQ(clock.lane_free_ns(Lane::comm), kSimHorizonNs / 2);  // the refused op took no time
}

TEST_F(ProfileRanges, TraceStepsPastTheRunAreRefusedAndAWindowPartlyInsideKeepsWhatRan) {
  TrainConfig c = scalelab::test::small_config("ddp", 2, DeviceKind::sim);
  c.dry_run = true;
  c.steps = 2;
  c.trace_path = dir_ + "/trace.json";
  c.trace_first_step = 5;
  c.trace_last_step = 8;
  std::string what = message_of<UsageError>([&] { c.validate(); });
  EXPECT_NE(what.find("--trace-steps 5:8"), std::string::npos) << what;
  EXPECT_NE(what.find("--steps 2"), std::string::npos) << what;
  // By epochs the last step is known once the data are: refused before the first step.
  c.steps = 0;
  c.epochs = 1;
  c.trace_first_step = 100000;
  c.trace_last_step = 100001;
  EventBus refused;
  what = message_of<UsageError>([&] { train(c, refused); });
  EXPECT_NE(what.find("--trace-steps 100000:100001"), std::string::npos) << what;
  EXPECT_NE(what.find("--epochs 1"), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(c.trace_path));
  // A window that ends before the step a resumed run goes on from.
  TrainConfig first = scalelab::test::small_config("single", 1);
  first.steps = 2;
  first.checkpoint_path = dir_ + "/at-2.ckpt";
  EventBus saved;
  train(first, saved);
  TrainConfig resumed = first;
  resumed.steps = 4;
  resumed.checkpoint_path.clear();
  resumed.resume_path = first.checkpoint_path;
  resumed.trace_path = c.trace_path;
  resumed.trace_first_step = 0;
  resumed.trace_last_step = 1;
  EventBus again;
  what = message_of<UsageError>([&] { train(resumed, again); });
  EXPECT_NE(what.find("--trace-steps 0:1 ends before step 2"), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(c.trace_path));

  c.steps = 3;
  c.trace_first_step = 1;
  c.trace_last_step = 8;
  EventBus bus;
  train(c, bus);
  const json trace = json::parse(read_text(c.trace_path));
  const json& events = trace.is_array() ? trace : trace.at("traceEvents");
  int timed = 0;
  for (const json& e : events) {
    for (const char* key : {"ts", "dur"})
      if (e.contains(key) && e.at(key).is_number()) {
        const double v = e.at(key).get<double>();
        EXPECT_TRUE(v >= 0 && v < 1e15) << e.dump();  // µs: under the horizon, never negative
        ++timed;
      }
    if (e.contains("args") && e.at("args").contains("step")) {
      EXPECT_GE(e.at("args").at("step").get<int>(), 1) << e.dump();
    }
  }
  EXPECT_GT(timed, 0);
}
