// Devices on the sim clock: each op's begin and end from the cost model's formulas, by hand on
// the tiny profile's round numbers; the memory ledger and its out-of-memory message; dry runs;
// device counts; hardware profiles and their parse errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/device/clock.h"
#include "core/device/cpu/cpu_executor.h"
#include "core/device/device.h"
#include "core/device/sim/cost_model.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "support/errors.h"

using namespace scalelab;
using nlohmann::json;

namespace {

const std::string kTiny = std::string(SCALELAB_TEST_DATA) + "/tiny.json";

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The cost model's formulas, written out again from DESIGN.md, each rounded to whole ns as the
// clock does.
struct Formulas {
  HardwareProfile p;
  static int64_t ns(double s) { return std::llround(s * 1e9); }
  int64_t gemm(double flops, double bytes) const {
    return ns(std::max(flops / (p.peak_flops_f32 * p.gemm_efficiency), bytes / p.mem_bandwidth_Bps) + p.launch_overhead_s);
  }
  int64_t elementwise(double bytes) const { return ns(bytes / p.mem_bandwidth_Bps + p.launch_overhead_s); }
  int64_t host_copy(double bytes) const { return ns(p.host_link.latency_s + bytes / p.host_link.bandwidth_Bps); }
  int64_t peer_copy(double bytes) const { return ns(p.intra_node.latency_s + bytes / p.intra_node.bandwidth_Bps); }
};

struct Sequence {
  std::vector<Event> events;
  std::vector<float> result;  // r downloaded to the host (real run only)
  bool all_meta = true;
};

// a (4×8) and w (16×8) and bias (16) are uploaded to device 0; c = relu(a·wᵀ + bias) there; c is
// copied to device 1 as r, which is scaled by 2; meanwhile device 0 fills an unrelated z.
Sequence run_sequence(bool dry_run) {
  EventBus bus;
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.count = 2;
  o.profile = load_profile(kTiny);
  o.dry_run = dry_run;
  o.bus = &bus;
  auto devs = make_devices(o);
  Device& d0 = *devs[0];
  Device& d1 = *devs[1];
  std::vector<float> ha(4 * 8), hw(16 * 8), hb(16);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = static_cast<float>(i % 5) - 2.0f;
  for (size_t i = 0; i < hw.size(); ++i) hw[i] = static_cast<float>(i % 3) - 1.0f;
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = static_cast<float>(i) * 0.5f - 4.0f;

  Tensor a = d0.empty({4, 8}, DType::f32, MemoryCategory::activations, "a");
  Tensor w = d0.empty({16, 8}, DType::f32, MemoryCategory::params, "w");
  Tensor b = d0.empty({16}, DType::f32, MemoryCategory::params, "b");
  Tensor c = d0.empty({4, 16}, DType::f32, MemoryCategory::activations, "c");
  Tensor r = d1.empty({4, 16}, DType::f32, MemoryCategory::activations, "r");
  Tensor z = d0.empty({8}, DType::f32, MemoryCategory::workspace, "z");
  d0.upload({"a", Phase::data}, a, ha.data());
  d0.upload({"w", Phase::data}, w, hw.data());
  d0.upload({"b", Phase::data}, b, hb.data());
  d0.gemm({"fc", Phase::fwd, 0}, false, true, a, w, c);
  d0.bias_act({"fc", Phase::fwd, 0}, c, b, Activation::relu);
  d1.copy({"c to 1", Phase::comm}, c, r);
  d1.scale({"double", Phase::fwd}, 2.0f, r);
  d0.fill({"z", Phase::fwd}, z, 1.0f);

  Sequence s;
  for (const Tensor* t : {&a, &w, &b, &c, &r, &z}) s.all_meta = s.all_meta && t->is_meta();
  if (!dry_run) {
    s.result.resize(64);
    d1.download({"r", Phase::data}, s.result.data(), r);
    // The expected numbers, by plain loops.
    std::vector<float> want(64);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 16; ++j) {
        float acc = hb[j];
        for (int k = 0; k < 8; ++k) acc += ha[i * 8 + k] * hw[j * 8 + k];
        want[i * 16 + j] = 2.0f * std::max(acc, 0.0f);
      }
    for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(s.result[i], want[i]) << i;
  }
  s.events = bus.events();
  return s;
}

}  // namespace

TEST(SimClock, OpsBeginWhenTheirLaneIsFreeAndTheirInputsAreReady) {
  Formulas f{load_profile(kTiny)};
  Sequence s = run_sequence(false);
  ASSERT_EQ(s.events.size(), 9u);  // 8 ops and the final download

  // By hand on tiny.json (1 µs launches and latencies, 1e11 B/s memory, 1e10 B/s host link,
  // 1e11 B/s between devices, 5e11 FLOP/s for GEMMs):
  const int64_t up_a = f.host_copy(4 * 8 * 4);                  // 1 µs + 128 B / 1e10 = 1013 ns
  const int64_t up_w = f.host_copy(16 * 8 * 4);                 // 1051 ns
  const int64_t up_b = f.host_copy(16 * 4);                     // 1006 ns
  const int64_t gemm = f.gemm(2.0 * 4 * 16 * 8, 128 + 512 + 256);  // memory-bound: 896 B → 1009 ns
  const int64_t bias = f.elementwise(2 * 256 + 64);             // 1006 ns
  const int64_t p2p = f.peer_copy(256);                         // 1003 ns
  const int64_t scale = f.elementwise(2 * 256);                 // 1005 ns
  const int64_t fill = f.elementwise(8 * 4);                    // 1000 ns
  EXPECT_EQ(up_a, 1013);
  EXPECT_EQ(gemm, 1009);
  EXPECT_EQ(p2p, 1003);

  // The copy lane of device 0 runs the three uploads back to back.
  const int64_t a_end = up_a, w_end = a_end + up_w, b_end = w_end + up_b;
  // The GEMM (compute lane, free at 0) waits for w, the later of its inputs.
  const int64_t gemm_begin = w_end, gemm_end = gemm_begin + gemm;
  // bias_act waits for the GEMM (lane and its output c) and for b's upload, still running.
  const int64_t bias_begin = std::max(gemm_end, b_end), bias_end = bias_begin + bias;
  // Device 1's copy lane is free at 0, but its source c is ready only when bias_act ends.
  const int64_t p2p_begin = bias_end, p2p_end = p2p_begin + p2p;
  const int64_t scale_begin = p2p_end, scale_end = scale_begin + scale;
  // z depends on nothing, but device 0's compute lane is busy until bias_act ends.
  const int64_t fill_begin = bias_end, fill_end = fill_begin + fill;

  struct Want {
    int device;
    Lane lane;
    const char* kind;
    int64_t begin, end;
  };
  const Want want[] = {
      {0, Lane::copy, "copy_h2d", 0, a_end},
      {0, Lane::copy, "copy_h2d", a_end, w_end},
      {0, Lane::copy, "copy_h2d", w_end, b_end},
      {0, Lane::compute, "gemm", gemm_begin, gemm_end},
      {0, Lane::compute, "bias_relu", bias_begin, bias_end},
      {1, Lane::copy, "copy_p2p", p2p_begin, p2p_end},
      {1, Lane::compute, "scale", scale_begin, scale_end},
      {0, Lane::compute, "fill", fill_begin, fill_end},
  };
  for (size_t i = 0; i < std::size(want); ++i) {
    const Event& e = s.events[i];
    SCOPED_TRACE(std::string("op ") + std::to_string(i) + " " + want[i].kind);
    EXPECT_EQ(e.device, want[i].device);
    EXPECT_EQ(e.lane, want[i].lane);
    EXPECT_EQ(e.kind, want[i].kind);
    EXPECT_EQ(e.t_begin_ns, want[i].begin);
    EXPECT_EQ(e.t_end_ns, want[i].end);
  }
  // The figures the events carry.
  EXPECT_EQ(s.events[3].flops, 2.0 * 4 * 16 * 8);
  EXPECT_EQ(s.events[3].bytes, 896);
  EXPECT_EQ(s.events[3].name, "fc");
  EXPECT_EQ(s.events[3].layer, 0);
  EXPECT_EQ(s.events[0].bytes, 128);
  EXPECT_EQ(s.events[5].bytes, 256);
  EXPECT_EQ(s.events[5].peer, 0);  // device 1 copied from device 0
  EXPECT_EQ(s.events[5].phase, Phase::comm);
  // The download waits for the scale to finish, on device 1's copy lane.
  EXPECT_EQ(s.events[8].kind, "copy_d2h");
  EXPECT_EQ(s.events[8].t_begin_ns, scale_end);
  EXPECT_EQ(s.events[8].t_end_ns, scale_end + f.host_copy(256));
  EXPECT_FALSE(s.all_meta);
}

TEST(SimClock, DryRunHasMetaTensorsAndTheSameTimes) {
  Sequence real = run_sequence(false);
  Sequence dry = run_sequence(true);
  EXPECT_TRUE(dry.all_meta);
  EXPECT_FALSE(real.all_meta);
  ASSERT_EQ(dry.events.size(), real.events.size() - 1);  // no download in the dry run
  for (size_t i = 0; i < dry.events.size(); ++i) {
    EXPECT_EQ(dry.events[i].kind, real.events[i].kind) << i;
    EXPECT_EQ(dry.events[i].t_begin_ns, real.events[i].t_begin_ns) << i;
    EXPECT_EQ(dry.events[i].t_end_ns, real.events[i].t_end_ns) << i;
    EXPECT_EQ(dry.events[i].bytes, real.events[i].bytes) << i;
  }
}

TEST(SimClock, DryRunCountsMemoryButHoldsNone) {
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile(kTiny);
  o.dry_run = true;
  auto devs = make_devices(o);
  EXPECT_FALSE(devs[0]->computes());
  // 600 KiB on a 1 MiB device: counted in the ledger, though nothing is allocated.
  Tensor t = devs[0]->empty({600 * 256}, DType::f32, MemoryCategory::params, "big");
  EXPECT_TRUE(t.is_meta());
  EXPECT_EQ(t.raw(), nullptr);
  EXPECT_EQ(devs[0]->memory().live(MemoryCategory::params), 600 * 1024);
  EXPECT_TRUE(devs[0]->memory().fits());
  // Past capacity a dry run counts on (what the device would need) and says it does not fit.
  Tensor more = devs[0]->empty({600 * 256}, DType::f32, MemoryCategory::activations, "more");
  EXPECT_EQ(devs[0]->memory().peak_total(), 1200 * 1024);
  EXPECT_FALSE(devs[0]->memory().fits());
  const int64_t peaks[kMemoryCategoryCount] = {600 * 1024, 0, 0, 600 * 1024, 0, 0};
  EXPECT_EQ(past_capacity_note(1200 * 1024, 1024 * 1024, peaks),
            "does not fit: needs 1.17 MiB of its 1.00 MiB (peaks: params 600.00 KiB activations 600.00 KiB)");
  EXPECT_EQ(past_capacity_note(1000, 1024 * 1024, peaks), "");
}

TEST(SimClock, RealRunStillRunsOutOfMemory) {
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile(kTiny);
  auto devs = make_devices(o);
  Tensor t = devs[0]->empty({600 * 256}, DType::f32, MemoryCategory::params, "big");
  EXPECT_THROW(devs[0]->empty({600 * 256}, DType::f32, MemoryCategory::activations, "more"), Error);
}

// The link a peer copy (copy lane) and a collective (comm lane) share, on tiny.json with α = 0:
// 1e11 B/s, so 1e6 B take 10 µs alone.
SimClock link_clock() {
  std::ifstream in(kTiny);
  json j = json::parse(in);
  j["links"]["intra_node"]["latency_s"] = 0;
  return SimClock(std::make_shared<CostModel>(parse_profile(j.dump(), "link.json")));
}
const OpCost kPeerCopy{OpClass::copy_peer, 0, 1e6, DType::f32};  // 10 µs alone, the whole link

TEST(SimClock, TwoTransfersOverlappingOnOneLinkTakeTheirCombinedBytesOverItsBandwidth) {
  {
    SimClock clock = link_clock();
    const Interval copy = clock.run(Lane::copy, 0, kPeerCopy, {});
    EXPECT_EQ(copy.end_ns, 10000);
    // A 2e6 B send over the whole link, from 0 too: (1e6 + 2e6) / 1e11 = 30 µs; the copy, placed
    // first, keeps its time.
    const Interval send = clock.occupy(Lane::comm, 0, 20000, 1.0);
    EXPECT_EQ(send.begin_ns, 0);
    EXPECT_EQ(send.end_ns, 30000);
  }
  {
    // The other order: the collective first, the copy waits for the link the same 20 µs.
    SimClock clock = link_clock();
    EXPECT_EQ(clock.occupy(Lane::comm, 0, 20000, 1.0).end_ns, 20000);
    EXPECT_EQ(clock.run(Lane::copy, 0, kPeerCopy, {}).end_ns, 30000);
  }
  {
    // Starting halfway through a 10 µs collective: 5 µs without progress, then 10 µs.
    SimClock clock = link_clock();
    clock.occupy(Lane::comm, 0, 10000, 1.0);
    const Interval copy = clock.run(Lane::copy, 5000, kPeerCopy, {});
    EXPECT_EQ(copy.begin_ns, 5000);
    EXPECT_EQ(copy.end_ns, 20000);
    // After it: no overlap, no stretch.
    EXPECT_EQ(clock.run(Lane::copy, 25000, kPeerCopy, {}).end_ns, 35000);
  }
}

TEST(SimClock, AnOpGetsWhatTheOtherLeavesOfTheLink) {
  {
    // A collective keeping half the link busy for 20 µs: the copy runs at half speed, 1e6 B at
    // 5e10 B/s = 20 µs.
    SimClock clock = link_clock();
    clock.occupy(Lane::comm, 0, 20000, 0.5);
    EXPECT_EQ(clock.run(Lane::copy, 0, kPeerCopy, {}).end_ns, 20000);
  }
  {
    // Two halves fit side by side: neither is slowed.
    SimClock clock = link_clock();
    clock.occupy(Lane::comm, 0, 20000, 0.5);
    EXPECT_EQ(clock.occupy(Lane::copy, 0, 20000, 0.5).end_ns, 20000);
  }
  {
    // Half speed while a 0.5 collective lasts (8 µs: 4 µs of work done), then full: 8 + 6 = 14 µs.
    SimClock clock = link_clock();
    clock.occupy(Lane::comm, 0, 8000, 0.5);
    EXPECT_EQ(clock.run(Lane::copy, 0, kPeerCopy, {}).end_ns, 14000);
  }
  {
    // Ops not on the link are not slowed: a host copy, a latency-only call (share 0), compute.
    SimClock clock = link_clock();
    clock.occupy(Lane::comm, 0, 20000, 1.0);
    EXPECT_EQ(clock.run(Lane::copy, 0, {OpClass::copy_host, 0, 1e4, DType::f32}, {}).end_ns, 2000);
    EXPECT_EQ(clock.run(Lane::compute, 0, {OpClass::elementwise, 0, 1e5, DType::f32}, {}).end_ns, 2000);
    SimClock other = link_clock();
    other.run(Lane::copy, 0, kPeerCopy, {});
    EXPECT_EQ(other.occupy(Lane::comm, 0, 5000, 0.0).end_ns, 5000);
  }
}

TEST(CostModel, FormulasOnTheTinyProfile) {
  CostModel m(load_profile(kTiny));
  // Compute-bound GEMM 64³: 524288 FLOPs / 5e11 = 1.048576 µs > 49152 B / 1e11; plus 1 µs launch.
  EXPECT_DOUBLE_EQ(m.seconds({OpClass::gemm, 2.0 * 64 * 64 * 64, 3.0 * 64 * 64 * 4, DType::f32}), 2.048576e-6);
  // In f16 the peak is 4e12: now memory-bound, 49152 B / 1e11 = 0.49152 µs.
  EXPECT_DOUBLE_EQ(m.seconds({OpClass::gemm, 2.0 * 64 * 64 * 64, 3.0 * 64 * 64 * 4, DType::f16}), 1.49152e-6);
  // bf16 has no figure in tiny.json: the f32 peak.
  EXPECT_DOUBLE_EQ(m.seconds({OpClass::gemm, 2.0 * 64 * 64 * 64, 3.0 * 64 * 64 * 4, DType::bf16}), 2.048576e-6);
  EXPECT_DOUBLE_EQ(m.seconds({OpClass::elementwise, 0, 1e5, DType::f32}), 2e-6);
  EXPECT_DOUBLE_EQ(m.seconds({OpClass::copy_host, 0, 1e4, DType::f32}), 2e-6);
  EXPECT_DOUBLE_EQ(m.seconds({OpClass::copy_peer, 0, 1e5, DType::f32}), 2e-6);
  EXPECT_EQ(m.seconds({OpClass::none, 1e9, 1e9, DType::f32}), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Memory

TEST(Memory, OutOfMemoryExplainsItself) {
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile(kTiny);
  auto devs = make_devices(o);
  Device& d = *devs[0];
  EXPECT_EQ(d.memory().capacity(), 1048576);
  Tensor params = d.empty({128 * 1024}, DType::f32, MemoryCategory::params, "weights");     // 512 KiB
  Tensor acts = d.empty({64 * 1024}, DType::f32, MemoryCategory::activations, "activations");  // 256 KiB
  try {
    d.empty({128 * 1024}, DType::f32, MemoryCategory::workspace, "scratch");  // 512 KiB more: 1.25 MiB
    FAIL() << "1.25 MiB fitted into 1 MiB";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[memory] ", 0), 0u) << what;
    EXPECT_TRUE(contains(what, d.name())) << what;                       // the device
    EXPECT_TRUE(contains(what, "512.00 KiB of workspace")) << what;      // what was asked
    EXPECT_TRUE(contains(what, "scratch")) << what;
    EXPECT_TRUE(contains(what, "1.00 MiB")) << what;                     // the capacity
    EXPECT_TRUE(contains(what, "768.00 KiB in use")) << what;
    EXPECT_TRUE(contains(what, "params 512.00 KiB")) << what;            // the breakdown
    EXPECT_TRUE(contains(what, "activations 256.00 KiB")) << what;
    EXPECT_TRUE(contains(what, "grads 0 B")) << what;
  }
  // The failed request took nothing; what is left still fits exactly.
  EXPECT_EQ(d.memory().live_total(), 768 * 1024);
  EXPECT_EQ(d.memory().live(MemoryCategory::workspace), 0);
  Tensor rest = d.empty({64 * 1024}, DType::f32, MemoryCategory::workspace, "rest");
  EXPECT_EQ(d.memory().live_total(), 1048576);
  EXPECT_THROW(d.empty({1}, DType::i32, MemoryCategory::grads), Error);
}

TEST(Memory, LedgerKeepsPeaksByCategoryAndTogether) {
  MemoryLedger l("dev", 0);  // capacity 0: unlimited (cpu)
  std::vector<std::pair<MemoryCategory, int64_t>> heard;
  l.set_listener([&](MemoryCategory c, int64_t live) { heard.push_back({c, live}); });
  l.allocate(MemoryCategory::params, 100);
  l.allocate(MemoryCategory::activations, 50);
  l.release(MemoryCategory::activations, 50);
  l.allocate(MemoryCategory::grads, 30);
  EXPECT_EQ(l.peak(MemoryCategory::activations), 50);
  EXPECT_EQ(l.live(MemoryCategory::activations), 0);
  EXPECT_EQ(l.peak_total(), 150);  // params + activations, before the release
  EXPECT_EQ(l.live_total(), 130);
  l.allocate(MemoryCategory::activations, 70);
  EXPECT_EQ(l.peak_total(), 200);
  EXPECT_EQ(l.peak(MemoryCategory::activations), 70);
  EXPECT_EQ(l.peak(MemoryCategory::params), 100);
  l.allocate(MemoryCategory::workspace, int64_t{1} << 40);  // no capacity: anything fits
  l.release(MemoryCategory::workspace, int64_t{1} << 40);
  l.reset_peaks();
  EXPECT_EQ(l.peak(MemoryCategory::workspace), 0);
  EXPECT_EQ(l.peak_total(), 200);  // what is live now
  EXPECT_EQ(l.peak(MemoryCategory::activations), 70);
  const std::vector<std::pair<MemoryCategory, int64_t>> want = {
      {MemoryCategory::params, 100}, {MemoryCategory::activations, 50}, {MemoryCategory::activations, 0},
      {MemoryCategory::grads, 30},   {MemoryCategory::activations, 70}, {MemoryCategory::workspace, int64_t{1} << 40},
      {MemoryCategory::workspace, 0}};
  EXPECT_EQ(heard, want);
}

TEST(Memory, TensorsReturnTheirBytesAndDevicesEmitSamples) {
  EventBus bus;
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile(kTiny);
  o.bus = &bus;
  auto devs = make_devices(o);
  Device& d = *devs[0];
  {
    Tensor a = d.empty({10, 10}, DType::f32, MemoryCategory::activations, "a");
    Tensor view = a.rows_slice(2, 3);  // a view shares the bytes: no second count
    EXPECT_EQ(d.memory().live(MemoryCategory::activations), 400);
    Tensor h = d.zeros({8}, DType::f16, MemoryCategory::grads, "h");
    EXPECT_EQ(d.memory().live(MemoryCategory::grads), 16);
  }
  EXPECT_EQ(d.memory().live_total(), 0);
  EXPECT_EQ(d.memory().peak(MemoryCategory::activations), 400);
  EXPECT_EQ(d.memory().peak_total(), 416);
  auto samples = bus.memory();
  ASSERT_EQ(samples.size(), 4u);  // two allocations, two releases
  EXPECT_EQ(samples[0].category, MemoryCategory::activations);
  EXPECT_EQ(samples[0].bytes, 400);
  EXPECT_EQ(samples[1].category, MemoryCategory::grads);
  EXPECT_EQ(samples[1].bytes, 16);
  for (const auto& m : samples) EXPECT_EQ(m.device, 0);
  EXPECT_EQ(samples[2].bytes + samples[3].bytes, 0);
}

// A freed block is kept and handed out again for the same size, as a GPU framework's caching
// allocator does: a step that frees and makes the same tensors again touches no fresh pages (each
// a page fault on first touch). The ledger still counts only what tensors hold.
TEST(Memory, TheCpuDeviceReusesAFreedBlockOfTheSameSize) {
  EventBus bus;
  DeviceOptions o;
  o.bus = &bus;
  auto devs = make_devices(o);  // cpu
  Device& d = *devs[0];
  auto& host = dynamic_cast<CpuExecutor&>(d.executor());
  const void* first = nullptr;
  {
    Tensor a = d.empty({1024, 400}, DType::f32, MemoryCategory::comm_buffers, "a");  // 1.6 MB
    first = a.raw();
    EXPECT_EQ(host.cached_bytes(), 0);
  }
  EXPECT_EQ(d.memory().live_total(), 0);
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(host.cached_bytes(), 0);  // under AddressSanitizer every block is freed: a use after free is caught
#else
  EXPECT_EQ(host.cached_bytes(), 1024 * 400 * 4);
  Tensor other = d.empty({1024, 300}, DType::f32, MemoryCategory::activations, "other");  // another size: a new block
  EXPECT_NE(other.raw(), first);
  Tensor again = d.empty({400, 1024}, DType::f32, MemoryCategory::activations, "again");  // the same bytes
  EXPECT_EQ(again.raw(), first);
  EXPECT_EQ(host.cached_bytes(), 0);
  EXPECT_EQ(d.memory().live_total(), (1024 * 300 + 400 * 1024) * 4);
#endif
}

// regroup_rows: 2 groups of 3 blocks of 2 rows, (o, i) → (i, o) — sequence parallel's gathered
// shards (rank, sequence) into whole sequences (sequence, rank) — as one op of 2× its bytes.
TEST(Device, RegroupRowsTransposesBlocksOfRowsInOneOp) {
  EventBus bus;
  DeviceOptions o;
  o.bus = &bus;
  auto devs = make_devices(o);  // cpu
  Device& d = *devs[0];
  std::vector<float> rows(12 * 2);
  for (size_t k = 0; k < rows.size(); ++k) rows[k] = static_cast<float>(k);  // row j holds 2j, 2j + 1
  Tensor src = d.empty({12, 2}, DType::f32, MemoryCategory::activations, "src");
  Tensor dst = d.empty({12, 2}, DType::f32, MemoryCategory::activations, "dst");
  d.upload({"src", Phase::data}, src, rows.data());
  const size_t before = bus.event_count();
  d.regroup_rows({"regroup", Phase::fwd}, src, dst, 2, 3);
  const std::vector<Event> events = bus.events_since(before);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, "regroup");
  EXPECT_EQ(events[0].bytes, 2 * 12 * 2 * 4);
  const std::vector<float> out = d.download_f32({"dst", Phase::data}, dst);
  // dst block (i, o) = src block (o, i): source blocks 0 3 1 4 2 5, each rows 2b and 2b + 1.
  std::vector<float> expected;
  for (int b : {0, 3, 1, 4, 2, 5})
    for (int k = 0; k < 4; ++k) expected.push_back(static_cast<float>(b * 4 + k));
  EXPECT_EQ(out, expected);
  EXPECT_THROW(d.regroup_rows({"regroup", Phase::fwd}, src, dst, 5, 1), Error);  // 12 rows are not 5 blocks
}

// ---------------------------------------------------------------------------------------------
// Making devices

TEST(MakeDevices, AskingForMoreDevicesThanTheProfileHasIsAUsageError) {
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile(kTiny);
  o.count = 4;
  EXPECT_EQ(make_devices(o).size(), 4u);  // 2 nodes × 2
  o.count = 5;
  try {
    make_devices(o);
    FAIL() << "5 devices made from a 4-device profile";
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "tiny")) << e.what();
    EXPECT_TRUE(contains(e.what(), "4")) << e.what();
    EXPECT_TRUE(contains(e.what(), "--devices")) << e.what();
  }
  o.count = 0;
  EXPECT_THROW(make_devices(o), UsageError);
}

TEST(MakeDevices, SimNeedsAProfileAndDryRunNeedsSim) {
  DeviceOptions o;
  o.kind = DeviceKind::sim;  // no profile
  try {
    make_devices(o);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "--hw")) << e.what();
  }
  DeviceOptions cpu;
  cpu.dry_run = true;
  EXPECT_THROW(make_devices(cpu), UsageError);
  EXPECT_THROW(parse_device_kind("tpu"), UsageError);
  EXPECT_EQ(parse_device_kind("sim"), DeviceKind::sim);
}

TEST(MakeDevices, NamesAndKinds) {
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = load_profile(kTiny);
  o.count = 2;
  auto devs = make_devices(o);
  EXPECT_EQ(devs[1]->index(), 1);
  EXPECT_EQ(devs[1]->kind(), DeviceKind::sim);
  EXPECT_TRUE(contains(devs[1]->name(), "tiny"));
  EXPECT_NE(devs[0]->name(), devs[1]->name());
  EXPECT_TRUE(devs[0]->clock().simulated());
  auto cpu = make_devices(DeviceOptions{});
  EXPECT_FALSE(cpu[0]->clock().simulated());
  EXPECT_EQ(cpu[0]->memory().capacity(), 0);
}

// ---------------------------------------------------------------------------------------------
// Hardware profiles

TEST(Profile, TinyParsesToItsFigures) {
  HardwareProfile p = load_profile(kTiny);
  EXPECT_EQ(p.name, "tiny");
  EXPECT_EQ(p.nodes, 2);
  EXPECT_EQ(p.devices_per_node, 2);
  EXPECT_EQ(p.device_count(), 4);
  EXPECT_EQ(p.peak_flops(DType::f32), 1e12);
  EXPECT_EQ(p.peak_flops(DType::f16), 4e12);
  EXPECT_EQ(p.peak_flops(DType::bf16), 1e12);
  EXPECT_EQ(p.gemm_efficiency, 0.5);
  EXPECT_EQ(p.mem_bandwidth_Bps, 1e11);
  EXPECT_EQ(p.mem_capacity_bytes, 1048576);
  EXPECT_EQ(p.launch_overhead_s, 1e-6);
  EXPECT_EQ(p.host_link.bandwidth_Bps, 1e10);
  EXPECT_EQ(p.intra_node.kind, "nvlink");
  EXPECT_EQ(p.inter_node.bandwidth_Bps, 1e10);
  EXPECT_EQ(p.inter_node.latency_s, 5e-6);
  EXPECT_EQ(p.path, kTiny);
}

namespace {

json tiny_json() {
  std::ifstream in(kTiny);
  return json::parse(in);
}

// The hw error for a broken profile; checks it names the origin and returns the message.
std::string hw_error(const json& j, const std::string& origin = "broken.json") {
  try {
    parse_profile(j.dump(), origin);
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("[hw] ", 0), 0u) << what;
    EXPECT_TRUE(contains(what, origin)) << what;
    return what;
  }
  ADD_FAILURE() << "accepted: " << j.dump();
  return "";
}

}  // namespace

TEST(Profile, ParseErrorsNameTheMissingField) {
  {
    json j = tiny_json();
    j.erase("name");
    EXPECT_TRUE(contains(hw_error(j), "'name'"));
  }
  {
    json j = tiny_json();
    j["device"].erase("mem_bandwidth_Bps");
    EXPECT_TRUE(contains(hw_error(j), "device.mem_bandwidth_Bps"));
  }
  {
    json j = tiny_json();
    j["device"]["peak_flops"].erase("f32");
    EXPECT_TRUE(contains(hw_error(j), "device.peak_flops.f32"));
  }
  {
    json j = tiny_json();
    j["links"].erase("intra_node");
    EXPECT_TRUE(contains(hw_error(j), "links.intra_node"));
  }
  {
    json j = tiny_json();
    j["links"]["host"].erase("latency_s");
    EXPECT_TRUE(contains(hw_error(j), "links.host.latency_s"));
  }
  {
    json j = tiny_json();  // two nodes: the network between them must be described
    j["links"].erase("inter_node");
    EXPECT_TRUE(contains(hw_error(j), "links.inter_node"));
    j["nodes"] = 1;  // one node: it need not be
    HardwareProfile p = parse_profile(j.dump(), "one-node.json");
    EXPECT_EQ(p.inter_node.bandwidth_Bps, p.intra_node.bandwidth_Bps);
  }
  {
    json j = tiny_json();
    j["device"]["mem_capacity_bytes"] = -1;
    EXPECT_TRUE(contains(hw_error(j), "device.mem_capacity_bytes"));
  }
  {
    json j = tiny_json();
    j["device"]["launch_overhead_s"] = "fast";
    EXPECT_TRUE(contains(hw_error(j), "device.launch_overhead_s"));
  }
  {
    json j = tiny_json();
    j["device"]["gemm_efficiency"] = 1.5;
    EXPECT_TRUE(contains(hw_error(j), "gemm_efficiency"));
  }
  try {
    parse_profile("{ \"name\": ", "cut.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "cut.json")) << e.what();
    EXPECT_TRUE(contains(e.what(), "not valid JSON")) << e.what();
  }
}

TEST(Profile, EveryShippedProfileLoads) {
  const std::vector<std::string> names = list_profiles();
  for (const char* expected : {"a100-80gb-ib-124x8", "a100-80gb-opa-48x8", "a100-nvlink-8", "h100-efa-2x8", "h100-ib-1024x8", "h100-ib-16x8", "h100-nvswitch-8", "laptop-cpu",
                               "t4-pcie-4", "v100-nvlink-8"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected << " is not listed";
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const std::string& n : names) {
    SCOPED_TRACE(n);
    HardwareProfile p = load_profile(n);
    EXPECT_EQ(p.name, n);  // the file is named after the profile
    EXPECT_GE(p.device_count(), 1);
    EXPECT_GT(p.peak_flops(DType::f32), 0);
    EXPECT_GT(p.mem_bandwidth_Bps, 0);
    EXPECT_GT(p.mem_capacity_bytes, 0);
    EXPECT_GT(p.host_link.bandwidth_Bps, 0);
    EXPECT_GT(p.intra_node.bandwidth_Bps, 0);
    if (p.nodes > 1) {
      EXPECT_GT(p.inter_node.bandwidth_Bps, 0);
    }
    // And a device of it can be made.
    DeviceOptions o;
    o.kind = DeviceKind::sim;
    o.profile = p;
    o.count = p.device_count();
    EXPECT_EQ(static_cast<int>(make_devices(o).size()), p.device_count());
  }
  HardwareProfile a100 = load_profile("a100-nvlink-8");
  EXPECT_EQ(a100.device_count(), 8);
  EXPECT_EQ(a100.peak_flops_f32, 19.5e12);
  EXPECT_EQ(load_profile("h100-ib-16x8").device_count(), 128);
  // The large one prices dry runs of thousands of ranks: 1024 nodes of 8.
  const HardwareProfile large = load_profile("h100-ib-1024x8");
  EXPECT_EQ(large.device_count(), 8192);
  EXPECT_EQ(large.devices_per_node, 8);
  EXPECT_EQ(large.inter_node.bandwidth_Bps, 50e9);
}

TEST(Profile, UnknownNameListsTheShippedOnes) {
  try {
    load_profile("no-such-machine");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "no-such-machine")) << e.what();
    EXPECT_TRUE(contains(e.what(), "a100-nvlink-8")) << e.what();
  }
}

TEST(Profile, ReshapedKeepsTheDevicesAndLinksAndNamesTheShape) {
  const HardwareProfile h100 = load_profile("h100-ib-16x8");
  const HardwareProfile big = reshaped(h100, 1024, 0);
  EXPECT_EQ(big.device_count(), 8192);
  EXPECT_EQ(big.devices_per_node, 8);
  EXPECT_EQ(big.name, "h100-ib-16x8@1024x8");
  EXPECT_EQ(big.peak_flops_f16, h100.peak_flops_f16);
  EXPECT_EQ(big.inter_node.bandwidth_Bps, h100.inter_node.bandwidth_Bps);
  EXPECT_EQ(big.intra_node.bandwidth_Bps, h100.intra_node.bandwidth_Bps);
  EXPECT_EQ(reshaped(h100, 0, 0).name, "h100-ib-16x8");  // 0: the profile's own shape
  EXPECT_EQ(reshaped(h100, 4, 4).device_count(), 16);
  // The shape read back from a trace's copy of the profile is the reshaped one.
  EXPECT_EQ(parse_profile(profile_to_json(big), "test").device_count(), 8192);
}

TEST(Profile, ReshapedRefusesWhatCannotBePriced) {
  const std::string one_node = test::message_of<UsageError>([] { (void)reshaped(load_profile("a100-nvlink-8"), 4, 0); });
  EXPECT_TRUE(contains(one_node, "no link between nodes")) << one_node;
  const std::string negative = test::message_of<UsageError>([] { (void)reshaped(load_profile("h100-ib-16x8"), -1, 0); });
  EXPECT_TRUE(contains(negative, "--nodes -1")) << negative;
  // One node of a single-node profile with fewer devices is fine: no link between nodes needed.
  EXPECT_EQ(reshaped(load_profile("a100-nvlink-8"), 1, 4).device_count(), 4);
}

// A calibrated cuda device as scalelab runs it: the host waits for each op, then spends
// host_op_gap_s before the next. On sim, a device's ops then follow one another, the gap apart,
// on any of its lanes; another device's are not held up; without the field they overlap.
TEST(SimClock, AHostThatWaitsForEachOpIssuesTheNextOneTheGapAfterTheLastEnded) {
  std::ifstream in(kTiny);
  const std::string tiny((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j = json::parse(tiny);
  j["device"]["host_op_gap_s"] = 1e-6;
  for (bool waits : {false, true}) {
    DeviceOptions o;
    o.kind = DeviceKind::sim;
    o.count = 2;
    o.profile = parse_profile(waits ? j.dump() : tiny, "gap.json");
    EventBus bus;
    o.bus = &bus;
    auto devs = make_devices(o);
    Tensor a0 = devs[0]->zeros({256}, DType::f32, MemoryCategory::activations);
    Tensor b0 = devs[0]->zeros({256}, DType::f32, MemoryCategory::activations);
    Tensor c0 = devs[0]->zeros({256}, DType::f32, MemoryCategory::activations);
    Tensor a1 = devs[1]->zeros({256}, DType::f32, MemoryCategory::activations);
    const size_t first = bus.event_count();
    devs[0]->scale({"x0"}, 2.0f, a0);  // independent ops: without waiting, each starts when its lane is free
    devs[0]->scale({"y0"}, 2.0f, b0);
    devs[0]->copy({"c0"}, a1, c0);  // the copy lane is free, and c0 needs nothing of y0
    devs[1]->scale({"x1"}, 2.0f, a1);
    const std::vector<Event> e = bus.events_since(first);
    ASSERT_EQ(e.size(), 4u);
    if (waits) {
      EXPECT_EQ(e[1].t_begin_ns, e[0].t_end_ns + 1000);
      EXPECT_EQ(e[2].t_begin_ns, e[1].t_end_ns + 1000);  // the host waited for y0 first
    } else {
      EXPECT_EQ(e[1].t_begin_ns, e[0].t_end_ns);  // one lane: back to back
      EXPECT_LT(e[2].t_begin_ns, e[1].t_end_ns);  // the copy lane did not wait for y0 to end
    }
    EXPECT_LT(e[3].t_begin_ns, e[1].t_begin_ns);  // another device: beside the first, either way
  }
  j["device"]["host_op_gap_s"] = -1;
  EXPECT_THROW(parse_profile(j.dump(), "bad-gap.json"), Error);
}

// A calibrated host's GEMM extra after a handoff: kept through a round trip, refused out of range
// with the field named.
TEST(HardwareProfile, TheGemmExtraAfterAHandoffIsReadBackAndCheckedForRange) {
  std::ifstream in(kTiny);
  json j = json::parse(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  EXPECT_FALSE(parse_profile(j.dump(), "none.json").calibration);  // a published profile: no host calibration
  j["device"]["turn_gemm_extra_s"] = 4.6e-6;
  const HardwareProfile p = parse_profile(j.dump(), "extra.json");
  EXPECT_DOUBLE_EQ(p.calibration->turn_gemm_extra_s, 4.6e-6);
  EXPECT_DOUBLE_EQ(parse_profile(profile_to_json(p), "again.json").calibration->turn_gemm_extra_s, 4.6e-6);
  for (const json& bad : {json(-1e-6), json(2.0), json("5us")}) {
    j["device"]["turn_gemm_extra_s"] = bad;
    try {
      parse_profile(j.dump(), "bad-extra.json");
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("device.turn_gemm_extra_s"), std::string::npos) << e.what();
    }
  }
}
