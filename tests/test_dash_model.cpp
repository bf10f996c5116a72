// The dashboard without a window: its model (rows, steps, memory at a time, idle gaps), the
// timeline's culling, the analyses behind the Pipeline, Buckets and Topology panels on hand-built
// traces with closed-form answers, the PNG writer (decoded here independently): the headless
// library scalelab_viz_model, built everywhere. Where scalelab-dash is built (SCALELAB_HAVE_DASH)
// also the executable's --describe and error messages (which open no window).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/trace/chrome_trace.h"
#include "core/trace/metrics.h"
#include "run/train.h"
#include "strategies/train_config.h"
#include "viz/model/buckets_analysis.h"
#include "viz/model/dashboard_model.h"
#include "viz/model/data_parallel_analysis.h"
#include "viz/model/data_source.h"
#include "viz/model/layer_memory_analysis.h"
#include "viz/model/layout_analysis.h"
#include "viz/model/pipeline_analysis.h"
#include "viz/model/png_writer.h"
#include "viz/model/timeline_culling.h"
#include "viz/model/topology_analysis.h"

#ifdef SCALELAB_HAVE_DASH
#include "viz/dashboard.h"
#endif

using namespace scalelab;
using namespace scalelab::viz;
namespace fs = std::filesystem;

namespace {

Event ev(int device, Lane lane, const char* kind, Phase phase, int64_t b, int64_t e) {
  Event x;
  x.device = device;
  x.lane = lane;
  x.kind = kind;
  x.name = kind;
  x.phase = phase;
  x.t_begin_ns = b;
  x.t_end_ns = e;
  return x;
}

// GPipe with p = 4 stages, m = 4 micro-batches, every block one slot of 1 µs, two steps back to
// back. Stage s runs F0..F3 in slots s..s+3 and B0..B3 in slots 10−s..13−s of a 14-slot step, so
// each stage idles 6 of 14 slots: the bubble share is exactly (p−1)/(m+p−1) = 3/7, and the idle
// gaps are 1 + 3 + 3 + 2 = 9 per step (stage 0 has only the middle one; stage 3's forwards run
// straight into its backwards).
constexpr int kP = 4, kM = 4, kSteps = 2;

// Device d of a run on `profile`, described as a sim device describes itself on the bus.
DeviceDescription sim_device(int d, const HardwareProfile& profile) {
  return {"sim:" + std::to_string(d) + " (" + profile.name + ")", "sim:" + std::to_string(d), profile_to_json(profile)};
}
constexpr int64_t kSlot = 1000, kStepSlots = 14;

TraceContents gpipe_trace() {
  TraceContents t;
  const HardwareProfile a100 = load_profile("a100-nvlink-8");
  for (int d = 0; d < kP; ++d) t.info.devices.push_back(sim_device(d, a100));
  t.info.title = "hand-built GPipe";
  t.info.simulated = true;
  for (int step = 0; step < kSteps; ++step) {
    const int64_t base = step * kStepSlots * kSlot;
    for (int s = 0; s < kP; ++s)
      for (int j = 0; j < kM; ++j) {
        Event f = ev(s, Lane::compute, "gemm", Phase::fwd, base + (s + j) * kSlot, base + (s + j + 1) * kSlot);
        Event b = ev(s, Lane::compute, "gemm", Phase::bwd, base + (10 - s + j) * kSlot, base + (11 - s + j) * kSlot);
        for (Event* e : {&f, &b}) {
          e->step = step;
          e->micro_batch = j;
          e->layer = s;
          t.events.push_back(*e);
        }
      }
    t.metrics.push_back(Metric{step, "loss", 2.0 - 0.1 * step});
  }
  return t;
}

// DDP on 2 devices, one step: backward of layers 2, 1, 0 in [0,1), [1,2), [2,3) µs; bucket b is
// filled at the end of layer (2−b)'s backward and all-reduced for 1.5 µs from (b+1) µs. So bucket 0's
// all-reduce [1, 2.5) is wholly under backward, bucket 1's [2, 3.5) two thirds, bucket 2's [3, 4.5) not at all.
TraceContents ddp_trace() {
  TraceContents t;
  const HardwareProfile a100 = load_profile("a100-nvlink-8");
  t.info.devices = {sim_device(0, a100), sim_device(1, a100)};
  t.info.simulated = true;
  for (int d = 0; d < 2; ++d) {
    for (int l = 2; l >= 0; --l) {
      Event e = ev(d, Lane::compute, "gemm", Phase::bwd, (2 - l) * 1000, (3 - l) * 1000);
      e.step = 0;
      e.layer = l;
      t.events.push_back(e);
    }
    for (int b = 0; b < 3; ++b) {
      Event fill = ev(d, Lane::copy, "copy", Phase::comm, (b + 1) * 1000 - 100, (b + 1) * 1000);
      fill.bucket = b;
      fill.bytes = 4096;
      fill.step = 0;
      Event ar = ev(d, Lane::comm, "all_reduce", Phase::comm, (b + 1) * 1000, (b + 1) * 1000 + 1500);
      ar.bucket = b;
      ar.bytes = 1000;
      ar.peer = 1 - d;
      ar.step = 0;
      ar.role = Role::all_reduce;
      t.events.push_back(fill);
      t.events.push_back(ar);
    }
    Event h2d = ev(d, Lane::copy, "copy_h2d", Phase::data, 0, 500);
    h2d.bytes = 777;
    h2d.step = 0;
    h2d.role = Role::upload;
    t.events.push_back(h2d);
  }
  // A send and its recv: the link carries the bytes once.
  Event send = ev(0, Lane::comm, "send", Phase::comm, 5000, 5100);
  send.peer = 1;
  send.bytes = 64;
  send.role = Role::send;
  Event recv = send;
  recv.device = 1;
  recv.peer = 0;
  recv.kind = "recv";
  recv.role = Role::recv;
  t.events.push_back(send);
  t.events.push_back(recv);
  return t;
}

DashboardModel model_of(const TraceContents& t) {
  DashboardModel m;
  m.set_info(t.info, "test");
  m.append(t.events, t.memory, t.metrics);
  m.rebuild();
  return m;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "scalelab-test-dash-XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

#ifdef SCALELAB_HAVE_DASH
// Runs a command, returns its exit status and puts stdout + stderr in `out`.
int run(const std::string& cmd, std::string& out) {
  out.clear();
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::map<std::string, std::string> key_values(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t c = line.find(": ");
    if (c != std::string::npos) kv[line.substr(0, c)] = line.substr(c + 2);
  }
  return kv;
}
#endif  // SCALELAB_HAVE_DASH

// An independent PNG reader (8-bit RGB, filters 0–4): the writer must produce what any reader reads.
bool decode_png(const std::string& png, int& w, int& h, std::vector<uint8_t>& rgb) {
  if (png.size() < 8 || png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) != 0) return false;
  auto u32 = [&](size_t at) {
    return (uint32_t(uint8_t(png[at])) << 24) | (uint32_t(uint8_t(png[at + 1])) << 16) | (uint32_t(uint8_t(png[at + 2])) << 8) |
           uint32_t(uint8_t(png[at + 3]));
  };
  std::string idat;
  size_t at = 8;
  bool ended = false;
  while (at + 12 <= png.size()) {
    const uint32_t len = u32(at);
    const std::string type = png.substr(at + 4, 4);
    if (at + 12 + len > png.size()) return false;
    const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(png.data() + at + 4), 4 + len);
    if (crc != u32(at + 8 + len)) return false;
    const std::string data = png.substr(at + 8, len);
    if (type == "IHDR") {
      w = static_cast<int>(u32(at + 8));
      h = static_cast<int>(u32(at + 12));
      if (data[8] != 8 || data[9] != 2) return false;
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "IEND") {
      ended = true;
    }
    at += 12 + len;
  }
  if (!ended) return false;
  const size_t stride = static_cast<size_t>(w) * 3;
  std::vector<uint8_t> raw((stride + 1) * static_cast<size_t>(h));
  uLongf size = raw.size();
  if (uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK || size != raw.size())
    return false;
  rgb.assign(stride * static_cast<size_t>(h), 0);
  for (int y = 0; y < h; ++y) {
    const uint8_t f = raw[static_cast<size_t>(y) * (stride + 1)];
    const uint8_t* in = &raw[static_cast<size_t>(y) * (stride + 1) + 1];
    uint8_t* row = &rgb[static_cast<size_t>(y) * stride];
    const uint8_t* up = y > 0 ? row - stride : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= 3 ? row[i - 3] : 0, b = up ? up[i] : 0, c = (up && i >= 3) ? up[i - 3] : 0;
      int pred = 0;
      switch (f) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: return false;
      }
      row[i] = static_cast<uint8_t>(in[i] + pred);
    }
  }
  return true;
}

}  // namespace

TEST(DashModel, RowsStepsAndIdleGapsAgreeWithTheMetrics) {
  const DashboardModel m = model_of(gpipe_trace());
  EXPECT_EQ(m.events().size(), static_cast<size_t>(kSteps * kP * kM * 2));
  ASSERT_EQ(m.rows().size(), static_cast<size_t>(kP));  // one compute lane per stage
  ASSERT_EQ(m.steps().size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(m.steps()[1].begin_ns, kStepSlots * kSlot);
  EXPECT_EQ(m.step_index_at(0), 0);
  EXPECT_EQ(m.step_index_at(kStepSlots * kSlot - 1), 0);
  EXPECT_EQ(m.step_index_at(kStepSlots * kSlot), 1);
  // The hatched gaps add up to the idle time the metrics pass reports, device by device.
  for (int d = 0; d < kP; ++d) {
    int64_t sum = 0;
    for (const auto& [b, e] : m.idle_gaps(d)) sum += e - b;
    EXPECT_EQ(sum, m.run_metrics().per_device[static_cast<size_t>(d)].idle_ns) << "device " << d;
  }
  EXPECT_NEAR(m.run_metrics().bubble_fraction, 3.0 / 7.0, 1e-12);
}

// Steps overlap (the next batch's upload starts before a step ends): a step picked stays the one
// the panels of one step show while the cursor is in it, its end included, so a picture of a
// whole step does not show the next one's first moment instead.
TEST(DashModel, APickedStepIsShownToItsEnd) {
  TraceContents t;
  t.info.devices = {{"cpu:0", "cpu:0", ""}};
  Event a = ev(0, Lane::compute, "gemm", Phase::fwd, 0, 1000);
  a.step = 0;
  Event upload = ev(0, Lane::copy, "copy_h2d", Phase::data, 900, 1000);
  upload.step = 1;
  Event b = ev(0, Lane::compute, "gemm", Phase::fwd, 1000, 2000);
  b.step = 1;
  t.events = {a, upload, b};
  const DashboardModel m = model_of(t);
  ASSERT_EQ(m.steps().size(), 2u);
  ASSERT_LT(m.steps()[1].begin_ns, m.steps()[0].end_ns);
  ViewState v;
  v.cursor_ns = 1000;
  EXPECT_EQ(shown_step_index(m, v), 1);  // nothing picked: the step the cursor is in
  v.picked_step = 0;
  EXPECT_EQ(shown_step_index(m, v), 0);
  EXPECT_EQ(cursor_in_words(m, v), "at the end of step 0");
  v.cursor_ns = 500;
  EXPECT_EQ(cursor_in_words(m, v), "at 50% of step 0");
  v.cursor_ns = 1500;  // moved out of the picked step
  EXPECT_EQ(shown_step_index(m, v), 1);
}

TEST(DashModel, MemoryAtATimeIsTheLastSampleBeforeIt) {
  TraceContents t = gpipe_trace();
  t.memory = {MemorySample{0, 100, MemoryCategory::params, 10}, MemorySample{0, 200, MemoryCategory::activations, 5},
              MemorySample{0, 300, MemoryCategory::activations, 0}, MemorySample{1, 150, MemoryCategory::grads, 7}};
  const DashboardModel m = model_of(t);
  EXPECT_EQ(m.memory_at(0, 99)[0], 0);
  EXPECT_EQ(m.memory_at(0, 100)[0], 10);
  EXPECT_EQ(m.memory_at(0, 250)[static_cast<int>(MemoryCategory::activations)], 5);
  EXPECT_EQ(m.memory_at(0, 300)[static_cast<int>(MemoryCategory::activations)], 0);
  EXPECT_EQ(m.memory_at(1, 1000)[static_cast<int>(MemoryCategory::grads)], 7);
  EXPECT_EQ(m.memory_at(7, 1000)[0], 0);  // a device that is not there holds nothing
  // Capacity comes from the profile the trace carries.
  EXPECT_GT(m.devices()[0].capacity_bytes, int64_t{1} << 30);
}

// A device's profile comes with the trace as data: a profile shipped nowhere (a JSON file on
// another machine) still gives capacity and links, and nothing is read from the device's name.
TEST(DashModel, DevicesComeWithTheirProfileAsData) {
  HardwareProfile p = load_profile("a100-nvlink-8");
  p.name = "made-up-gpu";
  p.mem_capacity_bytes = 123456789;
  TraceContents t = gpipe_trace();
  t.info.devices = {{"rank zero", "r0", profile_to_json(p)}, {"sim:1 (a100-nvlink-8)", "sim:1", ""}};
  const DashboardModel m = model_of(t);
  ASSERT_EQ(m.device_count(), kP);
  EXPECT_EQ(m.devices()[0].label, "r0");
  EXPECT_EQ(m.devices()[0].capacity_bytes, 123456789);
  ASSERT_TRUE(m.profile());
  EXPECT_EQ(m.profile()->name, "made-up-gpu");
  EXPECT_EQ(m.devices()[1].capacity_bytes, 0) << "no profile in the trace: capacity unknown, whatever the name says";
  EXPECT_EQ(m.devices()[3].name, "device 3");  // not described at all
}

// The Run bar says where the figures come from: modelled, on which profile (a calibrated one with
// its machine and date, TF32 on or off), or measured and how — and for a --predict run, the
// profile its prediction was priced on.
TEST(DashRunBar, SaysModelledOnWhichProfileOrMeasured) {
  HardwareProfile cal = load_profile(std::string(SCALELAB_TEST_DATA) + "/calibrated-tiny.json");
  cal.tf32 = true;
  TraceContents t = gpipe_trace();
  for (int d = 0; d < kP; ++d) t.info.devices[static_cast<size_t>(d)] = sim_device(d, cal);
  RunProvenance r = describe_provenance(model_of(t));
  EXPECT_EQ(r.summary, "modelled times (simulated) · profile calibrated-testhost (calibrated on testhost, 2026-11-24 01:30 UTC) · TF32 on");
  for (const char* detail : {"computed by the cost model", "profile calibrated-testhost — Shaped like",
                             "GEMM efficiency by m·n·k: f32 (3 sizes) — scalelab calibrate: made up for tests",
                             "TF32 on (--tf32)", "collectives NCCL-like: launch 4.00 µs, intra-node link efficiency 0.80",
                             "calibrated by `scalelab calibrate` on testhost (Test CPU @ 1 GHz, 2 cores), 2026-11-24 01:30 UTC, "
                             "as one of 2 devices (--quick)"})
    EXPECT_NE(r.details.find(detail), std::string::npos) << "no '" << detail << "' in:\n" << r.details;

  // A published profile, TF32 off (PyTorch's default).
  r = describe_provenance(model_of(gpipe_trace()));
  EXPECT_EQ(r.summary, "modelled times (simulated) · profile a100-nvlink-8 (published figures) · TF32 off");
  EXPECT_EQ(r.details.find("calibrated by"), std::string::npos);

  // Simulated, but the trace carries no profile (written before devices carried theirs).
  for (auto& d : t.info.devices) d.profile.clear();
  EXPECT_EQ(describe_provenance(model_of(t)).summary, "modelled times (simulated) · profile not recorded in this trace");

  // Measured on 4 cpu devices of one host, with the profile a --predict run was priced on.
  t.info.simulated = false;
  for (int d = 0; d < kP; ++d) t.info.devices[static_cast<size_t>(d)] = {"cpu:" + std::to_string(d), "cpu:" + std::to_string(d), ""};
  EXPECT_EQ(describe_provenance(model_of(t)).summary, "measured times (wall clock) · 4 cpu devices take turns on one host's cores");
  t.info.predicted_with = profile_to_json(cal);
  r = describe_provenance(model_of(t));
  EXPECT_EQ(r.summary, "measured times (wall clock) · 4 cpu devices take turns on one host's cores · predicted on calibrated-testhost "
                       "(calibrated on testhost, 2026-11-24 01:30 UTC)");
  EXPECT_NE(r.details.find("The prediction beside this run (--predict) was priced on:\nprofile calibrated-testhost"), std::string::npos)
      << r.details;

  // One cpu device shares nothing; CUDA times are CUDA events.
  t.info.predicted_with.clear();
  t.info.devices = {{"cpu:0", "cpu:0", ""}};
  t.events.clear();
  EXPECT_EQ(describe_provenance(model_of(t)).summary, "measured times (wall clock)");
  t.info.devices = {{"cuda:0", "cuda:0", ""}, {"cuda:1", "cuda:1", ""}};
  EXPECT_EQ(describe_provenance(model_of(t)).summary, "measured times (CUDA events)");
}

// DataParallel's phases are found by the events' roles: a copy named like a scatter but without
// the role is none of them, and a scatter is one whatever it is called.
TEST(DashDataParallel, PhasesComeFromRolesNotNames) {
  TraceContents t;
  t.info.devices = {{"cpu:0", "cpu:0", ""}, {"cpu:1", "cpu:1", ""}};
  auto copy = [&](int to, Role role, const char* name, int64_t b, int64_t bytes) {
    Event e = ev(to, Lane::copy, "copy_p2p", Phase::comm, b, b + 100);
    e.name = name;
    e.peer = 0;
    e.step = 0;
    e.bytes = bytes;
    e.role = role;
    t.events.push_back(e);
  };
  copy(1, Role::scatter, "rows for device 1", 0, 400);
  copy(1, Role::replicate, "fc1.weight", 100, 1000);
  copy(1, Role::replicate, "fc1.bias", 200, 10);
  copy(0, Role::gather, "gather logits", 300, 80);
  copy(1, Role::none, "scatter but not really", 400, 5);
  copy(0, Role::reduce, "fc1.weight.grad", 500, 1000);
  const DashboardModel m = model_of(t);
  ASSERT_TRUE(has_data_parallel(m));
  EXPECT_EQ(count_dp_copies(m), 5u);
  const DpStep s = analyze_dp_step(m, 0);
  std::vector<std::string> labels;
  for (const DpPhase& p : s.phases) labels.push_back(p.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"rows for device 1", "replicate model", "gather logits", "reduce grads"}));
  EXPECT_EQ(s.phases[1].bytes, 1010);
  ASSERT_EQ(s.phases[1].transfers.size(), 1u);
  EXPECT_EQ(s.phases[1].transfers[0].from, 0);
  EXPECT_EQ(s.phases[1].transfers[0].to, 1);
}

TEST(DashTimeline, CullingVisitsOnlyVisibleEventsAndMergesSubPixelOnes) {
  // 100 000 back-to-back 10 ns events on one row.
  TraceContents t;
  t.info.devices = {{"cpu:0", "cpu:0", ""}};
  for (int i = 0; i < 100000; ++i) {
    Event e = ev(0, Lane::compute, "op", i % 3 == 0 ? Phase::fwd : Phase::bwd, i * 10, i * 10 + 10);
    t.events.push_back(e);
  }
  const DashboardModel m = model_of(t);
  ASSERT_EQ(m.rows().size(), 1u);
  std::vector<DrawnBlock> blocks;

  // Zoomed in on 50 events: only those (and a neighbour at each edge) are visited, each its own block.
  size_t visited = cull_row(m.rows()[0], 500000, 500500, 0, 1000, blocks);
  EXPECT_LE(visited, 52u);
  EXPECT_GE(blocks.size(), 50u);
  for (const DrawnBlock& b : blocks) EXPECT_EQ(b.count, 1u);

  // Everything in 1000 pixels: 100 events a pixel, merged to at most about a block per pixel, and
  // every event accounted for.
  // Drawn from the events, every one is visited; from the level of detail, a few pieces a pixel.
  for (const bool lod : {false, true}) {
    SCOPED_TRACE(lod ? "level of detail" : "every event");
    blocks.clear();
    visited = cull_row(m.rows()[0], 0, 1e6, 0, 1000, blocks, lod);
    if (lod) EXPECT_LE(visited, 4000u);
    else EXPECT_EQ(visited, 100000u);
    EXPECT_LE(blocks.size(), 1000u);
    size_t merged = 0;
    for (const DrawnBlock& b : blocks) {
      merged += b.count;
      EXPECT_GE(b.x1 - b.x0, 1.0f);
      EXPECT_EQ(b.phase, Phase::bwd);  // two thirds of every pixel is backward
    }
    EXPECT_EQ(merged, 100000u);
  }

  // Off screen: nothing visited.
  blocks.clear();
  EXPECT_EQ(cull_row(m.rows()[0], 2e6, 3e6, 0, 1000, blocks), 0u);
  EXPECT_TRUE(blocks.empty());
}

// The level of detail draws what the events draw: on a row with every kind of event (long ones,
// clusters of tiny ones, zero-length ones, overlaps, gaps of every size), at zooms from a few
// events a pixel to the whole run and at odd offsets, the pixel columns covered by the blocks drawn
// from the levels are exactly those covered by the blocks drawn from the events, and the phase
// shown in a column is nearly always the same.
TEST(DashTimeline, LevelOfDetailCoversTheSameColumnsAsTheEvents) {
  TraceContents t;
  t.info.devices = {{"cpu:0", "cpu:0", ""}};
  uint64_t state = 12345;
  auto rnd = [&](int64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(n));
  };
  int64_t t_ns = 0;
  for (int i = 0; i < 60000; ++i) {
    const int64_t kind = rnd(100);
    int64_t dur = kind < 2 ? 20000 + rnd(200000) : kind < 5 ? 0 : 1 + rnd(kind < 60 ? 30 : 400);
    int64_t gap = rnd(10) < 7 ? 0 : rnd(10) < 8 ? rnd(50) : rnd(20000);
    if (rnd(20) == 0) gap = -std::min<int64_t>(t_ns, rnd(100));  // overlaps the one before
    t_ns += gap;
    t.events.push_back(ev(0, Lane::compute, "op", static_cast<Phase>(rnd(3)), t_ns, t_ns + dur));
    t_ns += dur;
  }
  const DashboardModel m = model_of(t);
  ASSERT_EQ(m.rows().size(), 1u);
  const TimelineRow& row = m.rows()[0];
  ASSERT_GE(row.levels.size(), 4u) << "levels of detail are built for a long row";

  const float x0 = 37, width = 1200;
  // Each pixel column: the phase of the last block covering it, or -1.
  auto columns = [&](const std::vector<DrawnBlock>& blocks) {
    std::vector<int> col(static_cast<size_t>(width) + 2, -1);
    for (const DrawnBlock& b : blocks) {
      EXPECT_EQ(b.x0, std::floor(b.x0)) << "blocks are snapped to pixel columns";
      EXPECT_EQ(b.x1, std::floor(b.x1));
      for (int c = static_cast<int>(b.x0); c < static_cast<int>(b.x1); ++c)
        col.at(static_cast<size_t>(c - static_cast<int>(x0))) = static_cast<int>(b.phase);
    }
    return col;
  };
  const double span = static_cast<double>(m.t_end_ns() - m.t_begin_ns());
  int compared_with_lod = 0;
  for (const double zoom : {1.0, 0.5, 0.13, 0.031, 0.0077, 0.002, 0.0004}) {
    for (const double at : {0.0, 0.2371, 0.6}) {
      const double t0 = static_cast<double>(m.t_begin_ns()) + at * span * (1 - zoom) + 0.37;
      const double t1 = t0 + zoom * span;
      SCOPED_TRACE("zoom " + std::to_string(zoom) + " at " + std::to_string(at));
      std::vector<DrawnBlock> full, lod;
      const size_t visited_full = cull_row(row, t0, t1, x0, width, full, false);
      const size_t visited_lod = cull_row(row, t0, t1, x0, width, lod, true);
      const std::vector<int> a = columns(full), b = columns(lod);
      size_t covered = 0, same_phase = 0;
      for (size_t c = 0; c < a.size(); ++c) {
        ASSERT_EQ(a[c] >= 0, b[c] >= 0) << "column " << c << " covered in one drawing only";
        if (a[c] >= 0) ++covered, same_phase += a[c] == b[c];
      }
      EXPECT_GT(covered, 0u);
      EXPECT_GE(static_cast<double>(same_phase), 0.9 * static_cast<double>(covered)) << "the phase shown differs too often";
      if (row.level_for((t1 - t0) / width)) {
        ++compared_with_lod;
        EXPECT_LT(visited_lod, visited_full) << "the level of detail visits fewer pieces than there are events";
        EXPECT_LE(visited_lod, static_cast<size_t>(6 * width)) << "a few pieces a pixel";
      }
    }
  }
  EXPECT_GE(compared_with_lod, 9) << "most zooms are drawn from a level of detail";
}

// Idle gaps: the list a zoomed-out timeline reads holds every gap long enough to be drawn.
TEST(DashTimeline, LongIdleGapsListsHoldEveryGapThatLong) {
  TraceContents t;
  t.info.devices = {{"cpu:0", "cpu:0", ""}};
  int64_t t_ns = 0;
  for (int i = 0; i < 5000; ++i) {
    const int64_t gap = (i * 7919) % 997;  // 0 … 996 ns, scattered
    t_ns += gap;
    t.events.push_back(ev(0, Lane::compute, "op", Phase::fwd, t_ns, t_ns + 50));
    t_ns += 50;
  }
  const DashboardModel m = model_of(t);
  const auto& all = m.idle_gaps(0);
  for (const double min_ns : {1.0, 10.0, 100.0, 500.0, 990.0, 5000.0}) {
    const auto& some = m.idle_gaps_at_least(0, min_ns);
    EXPECT_LE(some.size(), all.size());
    size_t expected = 0;
    for (const viz::Interval& g : all) expected += static_cast<double>(g.second - g.first) >= min_ns;
    size_t found = 0;
    for (const viz::Interval& g : some) found += static_cast<double>(g.second - g.first) >= min_ns;
    EXPECT_EQ(found, expected) << "min " << min_ns;
    EXPECT_TRUE(std::is_sorted(some.begin(), some.end()));
  }
  EXPECT_LT(m.idle_gaps_at_least(0, 2000).size(), all.size() / 4) << "long gaps are a shorter list";
}

// A live run's model grows by extend() from each batch of new events; it must end as the model
// rebuilt from all of them at once: the same rows, steps, idle gaps, memory and drawing. Batches
// of every size, some with their events out of order (threads emit in any order).
TEST(DashModel, ExtendingWithNewEventsGivesTheModelBuiltAtOnce) {
  TraceContents t = gpipe_trace();
  for (const Event& e : t.events)
    if (e.micro_batch == 0 && e.phase == Phase::fwd)
      t.memory.push_back(MemorySample{e.device, e.t_begin_ns, MemoryCategory::activations, 1000 + e.t_begin_ns % 7});
  tile_trace(t, 60);
  ASSERT_GT(t.events.size(), 3000u);
  const DashboardModel whole = model_of(t);

  DashboardModel live;
  live.set_info(t.info, "live");
  size_t at = 0, mat = 0, k = 0;
  while (at < t.events.size()) {
    const size_t n = std::min(t.events.size() - at, size_t{1} + (k * 37) % 300);
    std::vector<Event> batch(t.events.begin() + static_cast<std::ptrdiff_t>(at), t.events.begin() + static_cast<std::ptrdiff_t>(at + n));
    const size_t mn = std::min(t.memory.size() - mat, n / 10);
    std::vector<MemorySample> mem(t.memory.begin() + static_cast<std::ptrdiff_t>(mat), t.memory.begin() + static_cast<std::ptrdiff_t>(mat + mn));
    live.append(std::move(batch), std::move(mem), {});
    live.extend();
    at += n;
    mat += mn;
    ++k;
  }
  live.append({}, std::vector<MemorySample>(t.memory.begin() + static_cast<std::ptrdiff_t>(mat), t.memory.end()), t.metrics);
  live.extend();
  ASSERT_GT(k, 20u);

  // The whole trace was appended in the order `whole` holds it; out-of-order batches come next.
  EXPECT_EQ(live.t_begin_ns(), whole.t_begin_ns());
  EXPECT_EQ(live.t_end_ns(), whole.t_end_ns());
  ASSERT_EQ(live.rows().size(), whole.rows().size());
  for (size_t r = 0; r < whole.rows().size(); ++r) {
    EXPECT_EQ(live.rows()[r].events, whole.rows()[r].events) << "row " << r;
    EXPECT_EQ(live.rows()[r].end_prefix_max, whole.rows()[r].end_prefix_max) << "row " << r;
  }
  ASSERT_EQ(live.steps().size(), whole.steps().size());
  for (size_t i = 0; i < whole.steps().size(); ++i) {
    EXPECT_EQ(live.steps()[i].step, whole.steps()[i].step);
    EXPECT_EQ(live.steps()[i].begin_ns, whole.steps()[i].begin_ns);
    EXPECT_EQ(live.steps()[i].end_ns, whole.steps()[i].end_ns);
    EXPECT_EQ(live.steps()[i].events, whole.steps()[i].events);
  }
  for (int d = 0; d < whole.device_count(); ++d) {
    EXPECT_EQ(live.idle_gaps(d), whole.idle_gaps(d)) << "device " << d;
    for (int64_t at_ns = whole.t_begin_ns(); at_ns < whole.t_end_ns(); at_ns += (whole.t_end_ns() - whole.t_begin_ns()) / 37)
      EXPECT_EQ(live.memory_at(d, at_ns), whole.memory_at(d, at_ns));
  }
  std::vector<DrawnBlock> a, b;
  for (size_t r = 0; r < whole.rows().size(); ++r) {
    cull_row(live.rows()[r], static_cast<double>(whole.t_begin_ns()), static_cast<double>(whole.t_end_ns()), 0, 500, a);
    cull_row(whole.rows()[r], static_cast<double>(whole.t_begin_ns()), static_cast<double>(whole.t_end_ns()), 0, 500, b);
  }
  auto covered = [](const std::vector<DrawnBlock>& blocks) {
    std::set<std::pair<size_t, int>> cols;  // (block run, column): rows are drawn one after another
    size_t run = 0;
    float last = -1;
    for (const DrawnBlock& x : blocks) {
      if (x.x0 < last) ++run;
      last = x.x0;
      for (int c = static_cast<int>(x.x0); c < static_cast<int>(x.x1); ++c) cols.insert({run, c});
    }
    return cols;
  };
  EXPECT_EQ(covered(a), covered(b)) << "the grown model draws what the whole one draws";
  // The metrics pass may lag by up to a quarter of the events; rebuild() makes it exact.
  live.rebuild();
  EXPECT_EQ(live.run_metrics().bubble_fraction, whole.run_metrics().bubble_fraction);
  EXPECT_EQ(live.metric_series("loss"), whole.metric_series("loss"));
}

// Events of a batch that arrive out of order (a late one from another thread) land in their place.
TEST(DashModel, ExtendingPlacesLateEventsInTimeOrder) {
  TraceContents t = gpipe_trace();
  DashboardModel live;
  live.set_info(t.info, "live");
  std::vector<Event> first(t.events.begin(), t.events.begin() + 40), rest(t.events.begin() + 40, t.events.end());
  std::reverse(rest.begin(), rest.end());
  live.append(first, {}, {});
  live.extend();
  live.append(rest, {}, {});
  live.extend();
  TraceContents same = t;
  same.events = first;
  same.events.insert(same.events.end(), rest.begin(), rest.end());
  const DashboardModel whole = model_of(same);
  ASSERT_EQ(live.rows().size(), whole.rows().size());
  for (size_t r = 0; r < whole.rows().size(); ++r) {
    EXPECT_EQ(live.rows()[r].events, whole.rows()[r].events);
    EXPECT_TRUE(std::is_sorted(live.rows()[r].begin_ns.begin(), live.rows()[r].begin_ns.end()));
  }
  for (int d = 0; d < whole.device_count(); ++d) EXPECT_EQ(live.idle_gaps(d), whole.idle_gaps(d));
  ASSERT_EQ(live.steps().size(), whole.steps().size());
  for (size_t i = 0; i < whole.steps().size(); ++i) EXPECT_EQ(live.steps()[i].events, whole.steps()[i].events);
}

// More devices than rows fit: a row per (group of 8 devices, lane) holds every event of the
// group's devices on that lane, in time order, and grows with a live model as the device rows do.
TEST(DashModel, ManyDevicesAreGroupedIntoRowsPerNode) {
  TraceContents t;
  const int n = 20;
  for (int d = 0; d < n; ++d) t.info.devices.push_back({"cpu:" + std::to_string(d), "cpu:" + std::to_string(d), ""});
  for (int i = 0; i < 400; ++i) {
    const int d = (i * 7) % n;
    t.events.push_back(ev(d, i % 3 == 0 ? Lane::comm : Lane::compute, "op", Phase::fwd, i * 100 + d, i * 100 + d + 50));
  }
  const DashboardModel m = model_of(t);
  ASSERT_EQ(m.group_size(), 8);
#ifdef SCALELAB_HAVE_DASH
  EXPECT_NE(describe(m).find("timeline_groups: 3 of 8 devices\n"), std::string::npos) << describe(m);
#endif
  std::map<std::pair<int, int>, size_t> expected;  // (group, lane) → events
  for (const Event& e : t.events) ++expected[{e.device / 8, static_cast<int>(e.lane)}];
  ASSERT_EQ(m.group_rows().size(), expected.size());
  for (const TimelineRow& row : m.group_rows()) {
    EXPECT_EQ(row.events.size(), (expected[{row.device, static_cast<int>(row.lane)}])) << "group " << row.device;
    EXPECT_TRUE(std::is_sorted(row.begin_ns.begin(), row.begin_ns.end()));
    for (uint32_t i : row.events) EXPECT_EQ(m.events()[i].device / 8, row.device);
  }
  // Grown event by event batch, the groups end as built at once.
  DashboardModel live;
  live.set_info(t.info, "live");
  for (size_t at = 0; at < t.events.size(); at += 50) {
    live.append(std::vector<Event>(t.events.begin() + static_cast<std::ptrdiff_t>(at), t.events.begin() + static_cast<std::ptrdiff_t>(at + 50)), {}, {});
    live.extend();
  }
  ASSERT_EQ(live.group_rows().size(), m.group_rows().size());
  for (size_t r = 0; r < m.group_rows().size(); ++r) EXPECT_EQ(live.group_rows()[r].events, m.group_rows()[r].events);
  // A few devices are not grouped.
  t.info.devices.resize(4);
  for (Event& e : t.events) e.device %= 4;
  EXPECT_TRUE(model_of(t).group_rows().empty());
}

TEST(DashTimeline, OverlappingEventsAreFoundByTheirEnd) {
  // A long event first, short ones after it: a view late in the long one must still draw it.
  TraceContents t;
  t.info.devices = {{"cpu:0", "cpu:0", ""}};
  t.events.push_back(ev(0, Lane::comm, "long", Phase::comm, 0, 10000));
  for (int i = 1; i < 100; ++i) t.events.push_back(ev(0, Lane::comm, "short", Phase::comm, i * 10, i * 10 + 5));
  const DashboardModel m = model_of(t);
  std::vector<DrawnBlock> blocks;
  cull_row(m.rows()[0], 5000, 6000, 0, 100, blocks);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].first, 0u);
  EXPECT_FLOAT_EQ(blocks[0].x0, 0.0f);
  EXPECT_FLOAT_EQ(blocks[0].x1, 100.0f);
}

TEST(DashPipeline, GPipeBubblesMatchTheFormula) {
  const DashboardModel m = model_of(gpipe_trace());
  ASSERT_TRUE(has_pipeline(m));
  const PipelineAnalysis a = analyze_pipeline(m);
  EXPECT_EQ(a.stage_devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(a.micro_batches, kM);
  EXPECT_NEAR(a.theory, 3.0 / 7.0, 1e-12);
  EXPECT_NEAR(a.whole_run, 3.0 / 7.0, 1e-12);
  ASSERT_EQ(a.steps.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(a.bubble_count, static_cast<size_t>(9 * kSteps));
  for (const PipelineStep& s : a.steps) {
    EXPECT_EQ(s.blocks.size(), static_cast<size_t>(2 * kP * kM));
    EXPECT_FALSE(s.one_f_one_b);
    EXPECT_NEAR(s.bubble_fraction, 3.0 / 7.0, 1e-12);
    int64_t idle = 0;
    for (const PipelineBubble& b : s.bubbles) idle += b.end_ns - b.begin_ns;
    EXPECT_EQ(idle, 6 * kP * kSlot);  // 6 idle slots on each of the 4 stages
  }
}

TEST(DashBuckets, AllReduceHiddenUnderBackward) {
  const DashboardModel m = model_of(ddp_trace());
  ASSERT_TRUE(has_buckets(m));
  const BucketSummary s = summarize_buckets(m);
  EXPECT_EQ(s.bucket_ids, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(s.bucket_events, 12u);
  EXPECT_EQ(s.all_reduce_events, 6u);
  const BucketStep st = analyze_bucket_step(m, 0, 1);
  ASSERT_EQ(st.buckets.size(), 3u);
  EXPECT_EQ(st.backward, (viz::Interval{0, 3000}));
  const double expect_hidden[] = {1500, 1000, 0};
  for (int b = 0; b < 3; ++b) {
    // Each fill is a copy within the device of 4096 bytes of traffic (read + write): 2048 B of
    // gradients, the bucket's size.
    EXPECT_EQ(st.buckets[static_cast<size_t>(b)].bytes, 2048);
    EXPECT_EQ(st.buckets[static_cast<size_t>(b)].all_reduce_ns, 1500);
    EXPECT_EQ(st.buckets[static_cast<size_t>(b)].hidden_ns, expect_hidden[b]) << "bucket " << b;
  }
  EXPECT_FALSE(has_pipeline(m));
}

TEST(DashBuckets, ACopyCarriesItsBytesOnceWhateverItsTraffic) {
  Event local = ev(0, Lane::copy, "copy", Phase::comm, 0, 10);
  local.bytes = 2 * 524288;  // fc2.weight (512×256 floats) read and written on one device
  EXPECT_EQ(copied_bytes(local), 524288);
  Event peer = ev(0, Lane::copy, "copy_p2p", Phase::comm, 0, 10);
  peer.bytes = 524288;  // written here, read on the peer
  EXPECT_EQ(copied_bytes(peer), 524288);
}

TEST(DashPng, APictureSaysWhatItShowsInExactlyTheseKeys) {
  PictureInfo info;
  info.panel = "buckets";
  info.width = 640;
  info.height = 460;
  info.font_px = 18;
  info.simulated = true;
  info.trace = "data/ddp.trace.json";
  info.step = 12;
  const nlohmann::json j = nlohmann::json::parse(picture_info_json(info));
  EXPECT_EQ(j, nlohmann::json::parse(R"({"panel": "buckets", "width": 640, "height": 460, "font_px": 18.0,
                                        "clock": "simulated", "trace": "data/ddp.trace.json", "step": 12})"));
  // The whole window of a live run on a measured clock, no step yet: nulls, not missing keys.
  const nlohmann::json whole = nlohmann::json::parse(picture_info_json(PictureInfo{.panel = "", .width = 1600, .height = 1000, .font_px = 15, .simulated = false, .trace = "", .step = -1}));
  EXPECT_EQ(whole.size(), 7u);
  EXPECT_TRUE(whole["panel"].is_null());
  EXPECT_TRUE(whole["trace"].is_null());
  EXPECT_TRUE(whole["step"].is_null());
  EXPECT_EQ(whole["clock"], "measured");
}

TEST(DashTopology, LinksCarryEachTransferOnce) {
  const DashboardModel m = model_of(ddp_trace());
  const Topology t = analyze_topology(m);
  std::map<std::pair<int, int>, const LinkTraffic*> links;
  for (const LinkTraffic& l : t.links) links[std::make_pair(l.a, l.b)] = &l;
  ASSERT_EQ(links.size(), 3u);  // host–0, host–1, 0–1
  const LinkTraffic& host0 = *links[std::make_pair(kHost, 0)];
  const LinkTraffic& host1 = *links[std::make_pair(kHost, 1)];
  const LinkTraffic& peers = *links[std::make_pair(0, 1)];
  EXPECT_EQ(host0.total_bytes, 777);
  EXPECT_EQ(host1.total_bytes, 777);
  EXPECT_EQ(peers.total_bytes, 6 * 1000 + 64);  // six all-reduce chunks and the send, not its recv
  EXPECT_EQ(peers.bytes_until(1000), 2000);      // the two bucket-0 chunks have begun
  EXPECT_TRUE(peers.active_at(1200));
  EXPECT_FALSE(peers.active_at(4800));
}

TEST(DashTopology, PastABoxPerDeviceTheLinksAreSummedNodeByNode) {
  // 16 devices in 2 nodes of 8: each device's host link, and a ring 0–1–…–15–0.
  Topology t;
  t.devices = 16;
  auto link = [](int a, int b, int64_t bytes, int64_t begin, int64_t end) {
    LinkTraffic l;
    l.a = a;
    l.b = b;
    l.total_bytes = bytes;
    l.transfers = 1;
    l.begin_ns = {begin};
    l.cum_bytes = {bytes};
    l.end_prefix_max = {end};
    return l;
  };
  for (int d = 0; d < 16; ++d) t.links.push_back(link(kHost, d, 100, 0, 10));
  for (int d = 0; d + 1 < 16; ++d) t.links.push_back(link(d, d + 1, 1000, 20 + d, 30 + d));
  t.links.push_back(link(0, 15, 1000, 50, 60));
  const std::vector<NodeLink> by = links_by_node(t, 8);
  ASSERT_EQ(by.size(), 5u);  // host–node 0, host–node 1, inside 0, inside 1, node 0–node 1
  EXPECT_EQ(std::make_pair(by[0].a, by[0].b), std::make_pair(kHost, 0));
  EXPECT_EQ(std::make_pair(by[1].a, by[1].b), std::make_pair(kHost, 1));
  EXPECT_EQ(std::make_pair(by[2].a, by[2].b), std::make_pair(0, 0));
  EXPECT_EQ(std::make_pair(by[3].a, by[3].b), std::make_pair(1, 1));
  EXPECT_EQ(std::make_pair(by[4].a, by[4].b), std::make_pair(0, 1));
  EXPECT_EQ(by[0].total_bytes, 8 * 100);
  EXPECT_EQ(by[2].total_bytes, 7 * 1000);  // 0–1 … 6–7
  EXPECT_EQ(by[3].total_bytes, 7 * 1000);  // 8–9 … 14–15
  EXPECT_EQ(by[4].total_bytes, 2 * 1000);  // 7–8 and the ring's closing 0–15
  EXPECT_EQ(by[4].bytes_until(40), 1000);  // 7–8 began at 27; 0–15 at 50
  EXPECT_TRUE(by[4].active_at(55));
  EXPECT_FALSE(by[2].active_at(55));
  // One node holding every device: the same links, summed once.
  const std::vector<NodeLink> one = links_by_node(t, 16);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[1].total_bytes, 16 * 1000);
}

TEST(DashLayout, TheTitleGivesTheShapeAndEachRankItsPlaceAsMegatronLaysItOut) {
  EXPECT_FALSE(layout_from_title("scalelab train --strategy ddp --devices 8", 8));
  // What a tensor-parallel run's trace says (TrainConfig's layout_words).
  TrainConfig c;
  c.strategy = "tensor-parallel";
  c.devices = 16;
  c.dp = 2;
  c.pp = 2;
  const auto l = layout_from_title(
      "scalelab train --strategy tensor-parallel --devices 16 --model gpt:6-256-8-64-256" + layout_words(c), 0);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->tp, 4);
  EXPECT_EQ(l->dp, 2);
  EXPECT_EQ(l->pp, 2);
  EXPECT_EQ(l->blocks, 6);
  // Rank 13 = stage 1 · 8 + replica 1 · 4 + shard 1.
  const RankCell r = rank_cell(*l, 13);
  EXPECT_EQ(r.pp, 1);
  EXPECT_EQ(r.dp, 1);
  EXPECT_EQ(r.tp, 1);
  EXPECT_EQ(r.tp_group, (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(r.dp_group, (std::vector<int>{9, 13}));
  EXPECT_EQ(r.pp_group, (std::vector<int>{5, 13}));
  EXPECT_EQ(l->hidden, 256);
  EXPECT_EQ(l->heads, 8);
  // Its stage's half of the 6 blocks and the LM head; its shard's 2 of 8 heads and 256 of 4·256 features.
  EXPECT_EQ(rank_holds(*l, 13), "stage 1: blocks 3–5, LM head · shard 1: heads 2–3, MLP features 256–511 · replica 1");
  EXPECT_EQ(rank_holds(*l, 0), "stage 0: embedding, blocks 0–2 · shard 0: heads 0–1, MLP features 0–255 · replica 0");
  // Only dp and pp from the title: T from the devices the trace has.
  const auto d = layout_from_title("live: --strategy tensor-parallel --dp 2", 8);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->tp, 4);
  EXPECT_FALSE(layout_from_title("scalelab train --strategy tensor-parallel --devices 6 --dp 4", 6));  // 4 ∤ 6
}

TEST(DashLayout, EachGroupsTrafficIsCountedOnceInTpPpDpOrder) {
  auto comm = [](int device, const char* group, Role role, int64_t bytes, int64_t t0, int64_t t1) {
    Event e = ev(device, Lane::comm, role_name(role), Phase::comm, t0, t1);
    e.group = group;
    e.role = role;
    e.bytes = bytes;
    return e;
  };
  const std::vector<Event> events = {
      comm(0, "dp", Role::all_reduce, 500, 900, 1000), comm(0, "tp", Role::all_reduce, 100, 0, 10),
      comm(1, "tp", Role::all_reduce, 100, 5, 20),     comm(0, "pp", Role::send, 64, 50, 60),
      comm(1, "pp", Role::recv, 64, 40, 60),           comm(0, "", Role::all_reduce, 7, 0, 1)};
  const std::vector<GroupTraffic> g = group_traffic(events);
  ASSERT_EQ(g.size(), 3u);  // the world's group ("") is not one
  EXPECT_EQ(g[0].group, "tp");
  EXPECT_EQ(g[0].bytes, 200);
  EXPECT_EQ(g[0].busy_ns, 25);
  EXPECT_EQ(g[0].bytes_until(4), 100);
  EXPECT_EQ(g[1].group, "pp");
  EXPECT_EQ(g[1].bytes, 64);  // the send, not its recv
  EXPECT_EQ(g[1].busy_ns, 30);
  EXPECT_EQ(g[2].group, "dp");
  EXPECT_EQ(g[2].bytes_until(899), 0);
  EXPECT_EQ(g[2].bytes_until(900), 500);
}

TEST(DashModel, ALiveBusFillsTheSameModelAsAReplay) {
  // The seam for the live launch panel: the panels read one model, whichever source fills it.
  const TraceContents t = gpipe_trace();
  EventBus bus;
  BusSource live(bus, t.info);
  DashboardModel m;
  EXPECT_FALSE(live.update(m));
  const size_t half = t.events.size() / 2;
  for (size_t i = 0; i < half; ++i) bus.emit(t.events[i]);
  EXPECT_TRUE(live.update(m));
  EXPECT_EQ(m.events().size(), half);
  EXPECT_EQ(m.steps().size(), 1u);
  for (size_t i = half; i < t.events.size(); ++i) bus.emit(t.events[i]);
  for (const Metric& x : t.metrics) bus.emit(x);
  EXPECT_TRUE(live.update(m));
  EXPECT_FALSE(live.update(m));  // nothing new
  const DashboardModel replayed = model_of(t);
  EXPECT_EQ(m.events().size(), replayed.events().size());
  EXPECT_EQ(m.steps().size(), replayed.steps().size());
  EXPECT_EQ(m.metrics().size(), replayed.metrics().size());
  EXPECT_EQ(analyze_pipeline(m).bubble_count, analyze_pipeline(replayed).bubble_count);
  EXPECT_GT(m.version(), 0u);
}

TEST(DashPng, WritesWhatAnIndependentReaderReads) {
  const int w = 37, h = 23;  // odd sizes: rows that are not a multiple of anything
  std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[static_cast<size_t>((y * w + x) * 3)];
      p[0] = static_cast<uint8_t>(x * 7);                  // smooth: favours Sub
      p[1] = static_cast<uint8_t>(y * 11);                 // smooth vertically: favours Up
      p[2] = static_cast<uint8_t>((x * 131 + y * 71) % 251);  // noise
    }
  const std::string png = encode_png(w, h, rgb.data());
  int rw = 0, rh = 0;
  std::vector<uint8_t> back;
  ASSERT_TRUE(decode_png(png, rw, rh, back));
  EXPECT_EQ(rw, w);
  EXPECT_EQ(rh, h);
  EXPECT_EQ(back, rgb);

  TempDir dir;
  const std::string path = (dir.path / "x.png").string();
  write_png(path, w, h, rgb);
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(file, png);
  EXPECT_THROW(write_png((dir.path / "missing" / "x.png").string(), w, h, rgb), Error);
}

TEST(DashReplay, NamesTheFileAndWhatToDo) {
  TempDir dir;
  const std::string junk = (dir.path / "notes.json").string();
  std::ofstream(junk) << R"({"traceEvents": []})";
  try {
    ReplaySource source(junk);
    FAIL() << "an empty Chrome trace was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[dash] " + junk), std::string::npos) << what;
    EXPECT_NE(what.find("not a scalelab trace"), std::string::npos) << what;
    EXPECT_NE(what.find("scalelab train --trace FILE"), std::string::npos) << what;
  }
  EXPECT_THROW(ReplaySource((dir.path / "nope.json").string()), Error);
}

// --- the executable, without a window ---

#ifndef SCALELAB_HAVE_DASH

TEST(DashCli, NotBuilt) {
  GTEST_SKIP() << "scalelab-dash is not built (configure found no ImGui + GLFW + OpenGL: apt-get install "
                  "libimgui-dev libglfw3-dev libgl-dev) — its command line is not tested";
}

#else

TEST(DashCli, DescribeCountsAKnownTrace) {
  TempDir dir;
  const TraceContents g = gpipe_trace();
  const std::string gpipe = (dir.path / "gpipe.trace.json").string();
  write_chrome_trace(gpipe, g.events, g.memory, g.metrics, g.info);
  std::string out;
  ASSERT_EQ(run(std::string(SCALELAB_DASH_EXE) + " --replay " + gpipe + " --describe", out), 0) << out;
  auto kv = key_values(out);
  EXPECT_EQ(kv["events"], std::to_string(kSteps * kP * kM * 2));
  EXPECT_EQ(kv["steps"], std::to_string(kSteps));
  EXPECT_EQ(kv["pipeline_stages"], "4");
  EXPECT_EQ(kv["micro_batches"], "4");
  EXPECT_EQ(kv["bubbles"], std::to_string(9 * kSteps));
  EXPECT_EQ(kv["bubble_share"], "42.86%");
  EXPECT_EQ(kv["bubble_share_theory"], "42.86%");
  EXPECT_EQ(kv["buckets"], "0");
  EXPECT_EQ(kv["panels"], "Timeline, Pipeline, Training");
  EXPECT_EQ(kv["provenance"], "modelled times (simulated) · profile a100-nvlink-8 (published figures) · TF32 off");

  const TraceContents d = ddp_trace();
  const std::string ddp = (dir.path / "ddp.trace.json").string();
  write_chrome_trace(ddp, d.events, d.memory, d.metrics, d.info);
  ASSERT_EQ(run(std::string(SCALELAB_DASH_EXE) + " --replay " + ddp + " --describe", out), 0) << out;
  kv = key_values(out);
  EXPECT_EQ(kv["events"], std::to_string(d.events.size()));
  EXPECT_EQ(kv["buckets"], "3");
  EXPECT_EQ(kv["bucket_comm_events"], "6");
  EXPECT_EQ(kv["bubbles"], "0");
  EXPECT_EQ(kv["links"], "3");
  EXPECT_EQ(kv["link_bytes"], std::to_string(2 * 777 + 6 * 1000 + 64));
  EXPECT_EQ(kv["panels"], "Timeline, Buckets, Topology");
}

TEST(DashCli, BadInputSaysWhatToDo) {
  TempDir dir;
  std::string out;
  // No display: the window cannot open, and the message says how to run headless.
  EXPECT_EQ(run(std::string("env -u DISPLAY -u WAYLAND_DISPLAY ") + SCALELAB_DASH_EXE, out), 1) << out;
  EXPECT_NE(out.find("[dash] cannot open a window"), std::string::npos) << out;
  EXPECT_NE(out.find("xvfb-run -a"), std::string::npos) << out;
  // A live run's settings are checked before anything runs.
  EXPECT_EQ(run(std::string(SCALELAB_DASH_EXE) + " --strategy no-such-strategy --describe", out), 2) << out;
  EXPECT_NE(out.find("no-such-strategy"), std::string::npos) << out;
  EXPECT_NE(out.find("ddp"), std::string::npos) << out;  // the known ones are listed
  EXPECT_EQ(run(std::string(SCALELAB_DASH_EXE) + " --strategy ddp --devices 4 --micro-batches 4 --describe", out), 2) << out;
  EXPECT_NE(out.find("[pipeline] --micro-batches"), std::string::npos) << out;
  EXPECT_EQ(run(std::string(SCALELAB_DASH_EXE) + " --speed -1 --describe", out), 2) << out;
  EXPECT_NE(out.find("--speed -1"), std::string::npos) << out;
  EXPECT_EQ(run(std::string(SCALELAB_DASH_EXE) + " --live-for 2", out), 2) << out;
  EXPECT_NE(out.find("--live-for takes a picture of a run in progress: add --screenshot"), std::string::npos) << out;

  const std::string text = (dir.path / "readme.txt").string();
  std::ofstream(text) << "not json";
  EXPECT_EQ(run(std::string(SCALELAB_DASH_EXE) + " --replay " + text + " --describe", out), 1) << out;
  EXPECT_NE(out.find("[dash] " + text), std::string::npos) << out;
  EXPECT_NE(out.find("write one with scalelab train --trace FILE"), std::string::npos) << out;

  EXPECT_EQ(run(std::string(SCALELAB_DASH_EXE) + " --replay " + text + " --size 12", out), 2) << out;
  EXPECT_NE(out.find("--size 12: expected WIDTHxHEIGHT"), std::string::npos) << out;
}

#endif  // SCALELAB_HAVE_DASH

namespace {

// A sim run of `model` through `strategy`, filled into a dashboard model as a live run fills it.
DashboardModel trained(const std::string& model, bool recompute, const std::string& strategy = "single", int devices = 1,
                       const std::function<void(TrainConfig&)>& adjust = nullptr) {
  TrainConfig c;
  c.strategy = strategy;
  c.device = DeviceKind::sim;
  c.hw = "a100-nvlink-8";
  c.devices = devices;
  c.model = model;
  c.dataset = "synthetic";
  c.batch = 4;
  c.steps = 2;
  c.recompute = recompute;
  if (adjust) adjust(c);
  EventBus bus;
  train(c, bus);
  DashboardModel m;
  BusSource source(bus, TraceInfo{bus.devices(), "test", true, ""}, [] { return true; });
  source.update(m);
  return m;
}

}  // namespace

TEST(DashLayerMemory, EachBlockKeepsKorthikantisCountAndWithRecomputeItsOutputAlone) {
  // gpt:L-h-a-s-V, batch b, fp32: a block keeps 16·s·b·h + a·s²·b values and a mean and an rstd per
  // token per LayerNorm (tests/test_transformer_layers.cpp); with recompute, its output alone. The
  // embedding's output is taken in by the first block, so blocks.0 holds s·b·h values more.
  const int64_t L = 3, h = 64, a = 2, s = 16, b = 4;
  const int64_t full_block = 4 * (16 * s * b * h + a * s * s * b + 4 * s * b);
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "with recompute" : "without recompute");
    const DashboardModel m = trained("gpt:3-64-2-16-96", recompute);
    const auto per = analyze_layer_memory(m, 1);
    ASSERT_EQ(per.size(), 1u);
    EXPECT_EQ(per[0].recomputed, recompute);
    const int64_t per_block = recompute ? 4 * s * b * h : 4 * (16 * s * b * h + a * s * s * b + 4 * s * b);
    std::map<std::string, int64_t> by_label;
    for (const LayerBytes& l : per[0].layers) by_label[l.label] = l.bytes;
    ASSERT_EQ(per[0].layers.size(), static_cast<size_t>(L + 2)) << "embed, 3 blocks, head";
    EXPECT_EQ(per[0].layers.front().label, "embed");
    EXPECT_EQ(per[0].layers.back().label, "head");
    // Which op frees the embedding's output is a matter of timing; it is kept by blocks.0 or not at all.
    EXPECT_GE(by_label["blocks.0"], per_block);
    EXPECT_LE(by_label["blocks.0"], per_block + 4 * s * b * h);
    EXPECT_EQ(by_label["blocks.1"], per_block);
    EXPECT_EQ(by_label["blocks.2"], per_block);
    // Rerun in backward, a block allocates again what it would have kept (and its output anew).
    for (const LayerBytes& l : per[0].layers)
      if (l.label.rfind("blocks.", 0) == 0) {
        if (recompute) {
          EXPECT_GE(l.rerun, full_block - 4 * s * b * h) << l.label;
          EXPECT_LE(l.rerun, full_block + 4 * s * b * h) << l.label;
        } else {
          EXPECT_EQ(l.rerun, 0) << l.label;
        }
      }
    int64_t sum = 0;
    for (const LayerBytes& l : per[0].layers) sum += l.bytes;
    EXPECT_EQ(per[0].total, sum);
  }
}

TEST(DashLayerMemory, PipelineStagesHoldTheirOwnBlocksForEveryMicroBatch) {
  // 6 blocks on 2 stages: each device shows only its layers; a block's bytes are the whole batch's
  // (the micro-batches' shares summed), as on one device. (A stage's last block also holds the
  // output it sends on, so the blocks inside a stage are compared.)
  const DashboardModel single = trained("gpt:6-64-2-16-96", false);
  const DashboardModel piped = trained("gpt:6-64-2-16-96", false, "pipeline", 2);
  const auto one = analyze_layer_memory(single, 1);
  const auto two = analyze_layer_memory(piped, 1);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(two.size(), 2u);
  std::map<std::string, int64_t> want;
  for (const LayerBytes& l : one[0].layers) want[l.label] = l.bytes;
  size_t layers = 0, compared = 0;
  for (const DeviceLayerMemory& d : two) {
    EXPECT_FALSE(d.layers.empty());
    layers += d.layers.size();
    for (size_t i = 1; i + 1 < d.layers.size(); ++i) {
      const LayerBytes& l = d.layers[i];
      if (l.label == "blocks.0" || l.label.rfind("blocks.", 0) != 0) continue;
      EXPECT_EQ(l.bytes, want[l.label]) << l.label;
      ++compared;
    }
  }
  EXPECT_GE(compared, 2u);
  EXPECT_EQ(layers, one[0].layers.size());
}

TEST(DashLayerMemory, ManyLayersAreSummedIntoFewerBars) {
  std::vector<LayerBytes> layers;
  for (int i = 0; i < 98; ++i) layers.push_back({i, "l" + std::to_string(i), i, 0});
  const auto bars = group_layers(layers, 24);
  ASSERT_EQ(bars.size(), 20u);  // 5 layers a bar: 19 full bars and one of 3
  EXPECT_EQ(bars[0].label, "l0 – l4");
  EXPECT_EQ(bars[0].bytes, 0 + 1 + 2 + 3 + 4);
  EXPECT_EQ(bars.back().label, "l95 – l97");
  int64_t sum = 0;
  for (const LayerBytes& b : bars) sum += b.bytes;
  EXPECT_EQ(sum, 97 * 98 / 2);
  EXPECT_EQ(group_layers(layers, 200).size(), 98u);
}

TEST(DashPipeline, ZeroBubbleBlocksIncludeTheWsAndTheFormulaHas3m) {
  // 4 stages of mlp:32-24-16-12-8, m = 4, --schedule zero-bubble: each stage runs a block per
  // (micro-batch, pass) — F, B and W (the wgrad phase) — each W after its B; the textbook share
  // with F = B = W is (p − 1)/(3m + p − 1) = 3/15. A trace written and read back keeps the phase.
  const DashboardModel m = trained("mlp:32-24-16-12-8", false, "pipeline", 4, [](TrainConfig& c) {
    c.batch = 32;
    c.micro_batches = 4;
    c.schedule = Schedule::zero_bubble;
  });
  const PipelineAnalysis a = analyze_pipeline(m);
  EXPECT_NEAR(a.zero_bubble_theory, 3.0 / 15.0, 1e-12);
  ASSERT_FALSE(a.steps.empty());
  const PipelineStep& s = a.steps.back();
  EXPECT_TRUE(s.zero_bubble);
  std::map<std::tuple<int, int, Phase>, int64_t> begin;  // (stage, micro-batch, pass) → its block's start
  for (const PipelineBlock& b : s.blocks) begin[{b.stage, b.micro_batch, b.phase}] = b.begin_ns;
  EXPECT_EQ(begin.size(), 4u * 4 * 3);  // stages × micro-batches × F, B and W
  for (int stage = 0; stage < 4; ++stage)
    for (int i = 0; i < 4; ++i)
      EXPECT_GT(begin.at({stage, i, Phase::wgrad}), begin.at({stage, i, Phase::bwd})) << "stage " << stage << " mb " << i;
  TempDir dir;
  const std::string path = (dir.path / "zb.trace.json").string();
  std::vector<Event> events(m.events().begin(), m.events().end());
  write_chrome_trace(path, events, {}, {}, m.info());
  const TraceContents back = read_chrome_trace(path);
  EXPECT_EQ(std::count_if(back.events.begin(), back.events.end(), [](const Event& e) { return e.phase == Phase::wgrad; }),
            std::count_if(events.begin(), events.end(), [](const Event& e) { return e.phase == Phase::wgrad; }));
}

TEST(DashPipeline, InterleavedBlocksNameTheirChunkAndTheFormulaHasV) {
  // 2 devices × 2 chunks of mlp:32-24-16-12-8 (device 0: layers 0 and 2, device 1: 1 and 3), m = 4:
  // every block is one (pass, micro-batch, chunk) task, and the textbook share is (p − 1)/(V·m + p − 1).
  const PipelineAnalysis a = analyze_pipeline(trained("mlp:32-24-16-12-8", false, "pipeline", 2, [](TrainConfig& c) {
    c.batch = 32;
    c.micro_batches = 4;
    c.schedule = Schedule::interleaved;
    c.virtual_stages = 2;
  }));
  EXPECT_EQ(a.stage_devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(a.chunks, 2);
  EXPECT_NEAR(a.theory, 1.0 / 9.0, 1e-12);
  ASSERT_FALSE(a.steps.empty());
  std::set<std::tuple<int, int, int, Phase>> tasks;  // (stage, chunk, micro-batch, pass)
  for (const PipelineBlock& b : a.steps.back().blocks) tasks.insert({b.stage, b.chunk, b.micro_batch, b.phase});
  EXPECT_EQ(a.steps.back().blocks.size(), 2u * 2 * 4 * 2);  // stages × chunks × micro-batches × F and B
  EXPECT_EQ(tasks.size(), a.steps.back().blocks.size());
}
