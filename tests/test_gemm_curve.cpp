// GEMM efficiency by size (issue 15): the curve's interpolation in closed form, the cost model
// pricing a GEMM by it (TF32 included), the shipped GPU curves, and broken curves refused with a
// message that names the field and the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <nlohmann/json.hpp>

#include "core/device/device.h"
#include "core/device/sim/cost_model.h"
#include "core/device/sim/profile.h"
#include "core/proc/child_device.h"
#include "core/error.h"

using namespace scalelab;
using nlohmann::json;

namespace {

// A one-device profile with round figures: 1 TFLOP/s f32, 8 TFLOP/s TF32, memory fast enough that
// no GEMM here is memory-bound, 1 µs launch.
json round_profile() {
  return json::parse(R"({
    "name": "round", "nodes": 1, "devices_per_node": 1,
    "device": {"peak_flops": {"f32": 1e12, "tf32": 8e12, "bf16": 4e12}, "gemm_efficiency": 0.5,
               "mem_bandwidth_Bps": 1e15, "mem_capacity_bytes": 1e9, "launch_overhead_s": 1e-6,
               "gemm_curves": {"f32": {"mnk": [1e3, 1e6], "efficiency": [0.1, 0.4]},
                               "tf32": {"mnk": [1e6], "efficiency": [0.5]}}},
    "links": {"host": {"bandwidth_Bps": 1e10, "latency_s": 1e-6},
              "intra_node": {"bandwidth_Bps": 1e10, "latency_s": 1e-6}}})");
}

OpCost gemm(double m, double n, double k, DType d = DType::f32) {
  return OpCost{OpClass::gemm, 2 * m * n * k, static_cast<double>(dtype_size(d)) * (m * k + k * n + m * n), d, m, n, k};
}

std::string hw_error(const json& j) {
  try {
    parse_profile(j.dump(), "broken.json");
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[hw] broken.json: ", 0), 0u) << what;
    return what;
  }
  ADD_FAILURE() << "accepted: " << j.dump();
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(SizeCurve, InterpolatesInLogSizeAndHoldsTheEnds) {
  const SizeCurve c{{1e3, 1e6}, {0.1, 0.4}, {}};
  EXPECT_DOUBLE_EQ(c.at(1e3), 0.1);
  EXPECT_DOUBLE_EQ(c.at(1e6), 0.4);
  // √(1e3 · 1e6) is half-way in log(m·n·k): half-way in efficiency.
  EXPECT_NEAR(c.at(std::sqrt(1e9)), 0.25, 1e-12);
  // A third of the way (1e4) → 0.1 + 0.3/3.
  EXPECT_NEAR(c.at(1e4), 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(c.at(1e9), 0.4);  // beyond the largest: held
  // Below the smallest the time is held: half the size, half the share of peak.
  EXPECT_NEAR(c.at(500), 0.05, 1e-15);
  const SizeCurve one{{1e6}, {0.5}, {}};
  EXPECT_DOUBLE_EQ(one.at(1e9), 0.5);
  EXPECT_DOUBLE_EQ(one.at(1e5), 0.05);
}

TEST(SizeCurve, TheCostModelPricesAGemmByItsSize) {
  const HardwareProfile p = parse_profile(round_profile().dump(), "round.json");
  const CostModel model(p);
  // 100³ = 1e6: 2e6 FLOP at 0.4 × 1 TFLOP/s = 5 µs; the curve's time is the whole call, no launch added.
  EXPECT_NEAR(model.seconds(gemm(100, 100, 100)), 5e-6, 1e-18);
  // 10 × 100 × 1000 is the same size and costs the same.
  EXPECT_NEAR(model.seconds(gemm(10, 100, 1000)), 5e-6, 1e-18);
  // 1e4 (efficiency 0.2): 2e4 / (0.2 × 1e12) = 0.1 µs.
  EXPECT_NEAR(model.seconds(gemm(10, 10, 100)), 1e-7, 1e-19);
  // No bf16 curve: bf16 falls back to the single efficiency, plus the launch.
  EXPECT_NEAR(model.seconds(gemm(100, 100, 100, DType::bf16)), 2e6 / (4e12 * 0.5) + 1e-6, 1e-18);
  // Without m, n, k the size is flops / 2 (2·m·n·k = flops for every GEMM).
  OpCost shapeless = gemm(100, 100, 100);
  shapeless.m = shapeless.n = shapeless.k = 0;
  EXPECT_NEAR(model.seconds(shapeless), 5e-6, 1e-18);
  // Memory-bound: the bytes over the bandwidth when that is longer.
  HardwareProfile slow = p;
  slow.mem_bandwidth_Bps = 1e9;
  const OpCost g = gemm(100, 100, 100);
  EXPECT_NEAR(CostModel(slow).seconds(g), g.bytes / 1e9, 1e-15);
}

TEST(SizeCurve, Tf32PricesF32GemmsByTheTf32PeakAndCurve) {
  HardwareProfile p = parse_profile(round_profile().dump(), "round.json");
  EXPECT_FALSE(p.tf32);  // PyTorch's default: f32 GEMMs are f32
  p.tf32 = true;
  // 2e6 FLOP at 0.5 × 8 TFLOP/s = 0.5 µs.
  EXPECT_NEAR(CostModel(p).seconds(gemm(100, 100, 100)), 5e-7, 1e-18);
  // A profile that turns TF32 on must have its peak.
  json j = round_profile();
  j["device"]["tf32"] = true;
  EXPECT_TRUE(parse_profile(j.dump(), "round.json").tf32);
  j["device"]["peak_flops"].erase("tf32");
  j["device"]["gemm_curves"].erase("tf32");
  EXPECT_TRUE(contains(hw_error(j), "device.peak_flops.tf32"));
}

TEST(SizeCurve, ACurveSurvivesTheTracesProfileJson) {
  HardwareProfile p = parse_profile(round_profile().dump(), "round.json");
  p.tf32 = true;
  const HardwareProfile q = parse_profile(profile_to_json(p), "again.json");
  EXPECT_EQ(q.gemm_curves.f32.sizes, p.gemm_curves.f32.sizes);
  EXPECT_EQ(q.gemm_curves.f32.efficiency, p.gemm_curves.f32.efficiency);
  EXPECT_EQ(q.gemm_curves.tf32.efficiency, p.gemm_curves.tf32.efficiency);
  EXPECT_EQ(q.peak_flops_tf32, p.peak_flops_tf32);
  EXPECT_TRUE(q.tf32);
}

TEST(SizeCurve, BrokenCurvesAreRefusedNamingTheField) {
  {
    json j = round_profile();
    j["device"]["gemm_curves"]["f32"]["mnk"] = {1e6, 1e3};
    const std::string e = hw_error(j);
    EXPECT_TRUE(contains(e, "device.gemm_curves.f32.mnk' must increase")) << e;
    EXPECT_TRUE(contains(e, "from small to large")) << e;
  }
  {
    json j = round_profile();
    j["device"]["gemm_curves"]["f32"]["mnk"] = {1e3, 1e3};
    EXPECT_TRUE(contains(hw_error(j), "must increase"));
  }
  {
    json j = round_profile();
    j["device"]["gemm_curves"]["f32"]["efficiency"] = {-0.1, 0.4};
    const std::string e = hw_error(j);
    EXPECT_TRUE(contains(e, "device.gemm_curves.f32.efficiency[0]' is -0.1")) << e;
    EXPECT_TRUE(contains(e, "its range is 1e-6 to 1 of peak")) << e;
  }
  {
    json j = round_profile();
    j["device"]["gemm_curves"]["f32"]["efficiency"] = {0.1, 1.2};
    const std::string e = hw_error(j);
    EXPECT_TRUE(contains(e, "efficiency[1]' is 1.2")) << e;
    EXPECT_TRUE(contains(e, "its range is 1e-6 to 1 of peak")) << e;
  }
  {
    json j = round_profile();
    j["device"]["gemm_curves"]["f32"]["efficiency"] = {0.1};
    EXPECT_TRUE(contains(hw_error(j), "2 sizes and 1 efficiencies"));
  }
  {
    json j = round_profile();
    j["device"]["gemm_curves"]["f32"] = {1, 2};
    EXPECT_TRUE(contains(hw_error(j), "device.gemm_curves.f32' must be"));
  }
  {
    json j = round_profile();
    j["device"]["gemm_curves"]["f32"]["mnk"] = {0, 1e3};
    EXPECT_TRUE(contains(hw_error(j), "'device.gemm_curves.f32.mnk[0]' is 0 — its range is 1 to 1e18"));
  }
  {
    json j = round_profile();
    j["device"]["peak_flops"].erase("tf32");
    EXPECT_TRUE(contains(hw_error(j), "'device.gemm_curves.tf32' needs 'device.peak_flops.tf32'"));
  }
}

TEST(SizeCurve, ShippedGpuProfilesHaveCurvesAndPriceWhatTheDeviceHas) {
  for (const char* name : {"a100-nvlink-8", "h100-nvswitch-8", "v100-nvlink-8", "t4-pcie-4"}) {
    const HardwareProfile p = load_profile(name);
    EXPECT_FALSE(p.gemm_curves.f32.empty()) << name;
    EXPECT_FALSE(p.gemm_curves.f16.empty()) << name;
    EXPECT_FALSE(p.gemm_curves.source.empty()) << name;
    // Small GEMMs are further from peak than large ones.
    for (const SizeCurve* c : {&p.gemm_curves.f16, &p.gemm_curves.bf16}) {
      if (c->empty()) continue;
      EXPECT_LT(c->at(1e6), c->at(1e11)) << name;
    }
  }
  // T4 and V100 have no bf16 tensor cores: bf16 is priced at the f32 CUDA cores' rate, and the
  // profile says so in a figure of its own (not a silent fall-back).
  for (const char* name : {"t4-pcie-4", "v100-nvlink-8"}) {
    const HardwareProfile p = load_profile(name);
    EXPECT_EQ(p.peak_flops_bf16, p.peak_flops_f32) << name;
    EXPECT_LT(p.peak_flops_bf16 * 4, p.peak_flops_f16) << name;
    EXPECT_EQ(p.peak_flops_tf32, 0) << name;
  }
  // H100: a 256×4096×4096 bf16 GEMM — XLA's sm_90 table measured 412 TFLOP/s for that shape; the
  // curve (the median of every shape of that m·n·k) is printed next to it and to the old single
  // efficiency (551).
  const HardwareProfile h100 = load_profile("h100-nvswitch-8");
  const OpCost g = gemm(256, 4096, 4096, DType::bf16);
  const double tflops = g.flops / CostModel(h100).seconds(g) * 1e-12;
  std::printf("    H100 bf16 256x4096x4096: %.0f TFLOP/s modelled, 412 in XLA's sm_90 table, %.0f with the single efficiency\n",
              tflops, h100.peak_flops_bf16 * h100.gemm_efficiency * 1e-12);
  EXPECT_LT(std::abs(tflops / 412 - 1), 0.2);
}

TEST(ElementwiseCurve, AKindWithACurveIsPricedByItTheOthersByBandwidthAndLaunch) {
  json j = round_profile();
  j["device"]["mem_bandwidth_Bps"] = 1e10;
  j["device"]["elementwise_curves"] = {{"sgd", {{"bytes", {1e3, 1e6}}, {"efficiency", {0.1, 0.5}}}}, {"source", "test"}};
  const CostModel model(parse_profile(j.dump(), "round"));
  OpCost sgd{OpClass::elementwise, 0, 1e6, DType::f32};
  sgd.kind = "sgd";
  EXPECT_NEAR(model.seconds(sgd), 1e6 / (1e10 * 0.5), 1e-12);
  sgd.bytes = 1e3;  // at the smallest size: 0.1 µs ÷ 0.1
  EXPECT_NEAR(model.seconds(sgd), 1e3 / (1e10 * 0.1), 1e-12);
  sgd.bytes = 1e2;  // below it the time is held
  EXPECT_NEAR(model.seconds(sgd), 1e3 / (1e10 * 0.1), 1e-12);
  OpCost axpy{OpClass::elementwise, 0, 1e6, DType::f32};
  axpy.kind = "axpy";
  EXPECT_NEAR(model.seconds(axpy), 1e6 / 1e10 + 1e-6, 1e-12);
  // Written into a trace and read back: the same curves.
  const HardwareProfile back = parse_profile(profile_to_json(model.profile()), "back");
  ASSERT_EQ(back.elementwise_curves.count("sgd"), 1u);
  EXPECT_EQ(back.elementwise_curves.at("sgd").sizes, (std::vector<double>{1e3, 1e6}));
  EXPECT_EQ(back.elementwise_curves_source, "test");
}

TEST(ElementwiseCurve, ABrokenCurveIsRefusedNamingTheField) {
  json j = round_profile();
  j["device"]["elementwise_curves"] = {{"sgd", {{"bytes", {1e6, 1e3}}, {"efficiency", {0.1, 0.5}}}}};
  EXPECT_TRUE(contains(hw_error(j), "device.elementwise_curves.sgd.bytes' must increase")) << hw_error(j);
  j["device"]["elementwise_curves"] = {{"sgd", {{"mnk", {1e3}}, {"efficiency", {0.1}}}}};
  EXPECT_TRUE(contains(hw_error(j), "device.elementwise_curves.sgd' must be {\"bytes\"")) << hw_error(j);
  j["device"]["elementwise_curves"] = 3;
  EXPECT_TRUE(contains(hw_error(j), "device.elementwise_curves' must be an object")) << hw_error(j);
}

TEST(LinkCurve, ACopyOverALinkWithACurveIsPricedByItAndTheOthersByAlphaBeta) {
  // A calibrated host: memcpy at 1e10 B/s while it fits the caches, at a quarter of it beyond.
  json j = round_profile();
  j["links"]["intra_node"]["curve"] = {{"bytes", {1e4, 1e6}}, {"efficiency", {1.0, 0.25}}};
  const CostModel model(parse_profile(j.dump(), "round"));
  const OpCost peer{OpClass::copy_peer, 0, 1e6, DType::f32};
  EXPECT_NEAR(model.seconds(peer), 1e6 / (1e10 * 0.25), 1e-12);  // no α: the curve's time is the whole copy
  const OpCost small{OpClass::copy_peer, 0, 1e4, DType::f32};
  EXPECT_NEAR(model.seconds(small), 1e4 / 1e10, 1e-12);
  // A send between threads of the host is the same memcpy.
  EXPECT_NEAR(model.collective_seconds(Collective::send, 1e6, 2), 1e6 / (1e10 * 0.25), 1e-12);
  const OpCost host{OpClass::copy_host, 0, 1e6, DType::f32};
  EXPECT_NEAR(model.seconds(host), 1e-6 + 1e6 / 1e10, 1e-12);  // the host link has no curve
  // Written into a trace and read back: the same curve.
  const HardwareProfile back = parse_profile(profile_to_json(model.profile()), "back");
  EXPECT_EQ(back.intra_node.curve.sizes, (std::vector<double>{1e4, 1e6}));
  EXPECT_EQ(back.intra_node.curve.efficiency, (std::vector<double>{1.0, 0.25}));
  EXPECT_TRUE(back.host_link.curve.empty());
}

TEST(LinkCurve, ABrokenCurveIsRefusedNamingTheField) {
  json j = round_profile();
  j["links"]["host"]["curve"] = {{"bytes", {1e4, 1e6}}, {"efficiency", {1.0, 1.5}}};
  EXPECT_TRUE(contains(hw_error(j), "links.host.curve.efficiency[1]' is 1.5")) << hw_error(j);
  j["links"]["host"]["curve"] = {{"mnk", {1e4}}, {"efficiency", {1.0}}};
  EXPECT_TRUE(contains(hw_error(j), "links.host.curve' must be {\"bytes\"")) << hw_error(j);
}

TEST(TimedCollective, ACallOnTheRanksMeasuredIsPricedByItsTimesOthersByTheRing) {
  // A calibrated host timed its all-reduce on 4 ranks at 1 KB (20 µs) and 1 MB (2 ms).
  json j = round_profile();
  j["devices_per_node"] = 8;
  j["collectives"] = {{"intra_hop_s", 1e-6}, {"protocols", {"Simple"}}, {"tree", false}};
  const CostModel ring(parse_profile(j.dump(), "ring"));
  j["collectives"]["measured"] = {{{"op", "all_reduce"}, {"ranks", 4}, {"bytes", {1e3, 1e6}}, {"seconds", {20e-6, 2e-3}}}};
  const CostModel model(parse_profile(j.dump(), "round"));
  EXPECT_NEAR(model.collective_seconds(Collective::all_reduce, 1e6, 4), 2e-3, 1e-12);
  EXPECT_NEAR(model.collective_seconds(Collective::all_reduce, 10, 4), 20e-6, 1e-12);   // below: the smallest's time
  EXPECT_NEAR(model.collective_seconds(Collective::all_reduce, 4e6, 4), 8e-3, 1e-12);   // above: in proportion
  // Between: a straight line in log-log (1000× the bytes took 100× the time: 10× the bytes, 10^⅔×).
  EXPECT_NEAR(model.collective_seconds(Collective::all_reduce, 1e4, 4), 20e-6 * std::pow(10.0, 2.0 / 3.0), 1e-12);
  // Another rank count, or a collective not timed: the ring's closed form.
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, 1e6, 2), ring.collective_seconds(Collective::all_reduce, 1e6, 2));
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_gather, 1e6, 4), ring.collective_seconds(Collective::all_gather, 1e6, 4));
  // Written into a trace and read back: the same times.
  const HardwareProfile back = parse_profile(profile_to_json(model.profile()), "back");
  const auto timed = back.calibration->collectives.find({"all_reduce", 4});
  ASSERT_NE(timed, back.calibration->collectives.end());
  EXPECT_EQ(timed->second.bytes, (std::vector<double>{1e3, 1e6}));
  EXPECT_EQ(timed->second.seconds, (std::vector<double>{20e-6, 2e-3}));
}

TEST(TimedCollective, AMessageIsPricedByTheTwoRankSendTableWhateverTheGroup) {
  // A calibrated host timed a send between 2 ranks at 4 KiB (5 µs) and 1 MiB (50 µs).
  json j = round_profile();
  j["devices_per_node"] = 8;
  j["collectives"] = {{"intra_hop_s", 1e-6}, {"protocols", {"Simple"}}, {"tree", false}};
  const CostModel copy(parse_profile(j.dump(), "copy"));
  j["collectives"]["measured"] = {{{"op", "send"}, {"ranks", 2}, {"bytes", {4096, 1 << 20}}, {"seconds", {5e-6, 50e-6}}}};
  const CostModel model(parse_profile(j.dump(), "timed"));
  for (const int group : {2, 4, 8}) {  // a pipeline of 4 stages sends between neighbours all the same
    EXPECT_NEAR(model.collective_seconds(Collective::send, 1 << 20, group), 50e-6, 1e-15) << group;
    EXPECT_NEAR(model.collective_seconds(Collective::recv, 1 << 20, group), 50e-6, 1e-15) << group;
  }
  // Leaving the node: the network's link, as before.
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::send, 1 << 20, 4, true),
                   copy.collective_seconds(Collective::send, 1 << 20, 4, true));
}

TEST(TimedCollective, ABrokenTableIsRefusedNamingTheField) {
  json j = round_profile();
  json t = {{"op", "all_reduce"}, {"ranks", 4}, {"bytes", {1e3, 1e6}}, {"seconds", {20e-6}}};
  j["collectives"] = {{"measured", {t}}};
  EXPECT_TRUE(contains(hw_error(j), "collectives.measured[0]' must hold as many")) << hw_error(j);
  t["bytes"] = {1e6, 1e3};
  t["seconds"] = {1e-3, 1e-3};
  j["collectives"]["measured"] = {t};
  EXPECT_TRUE(contains(hw_error(j), "collectives.measured[0].bytes' must increase")) << hw_error(j);
  t["bytes"] = {1e3};
  t["seconds"] = {-1};
  j["collectives"]["measured"] = {t};
  EXPECT_TRUE(contains(hw_error(j), "'collectives.measured[0].seconds[0]' is -1 — its range is 10 ns to 1 hour")) << hw_error(j);
  t.erase("ranks");
  t["seconds"] = {1e-3};
  j["collectives"]["measured"] = {t};
  EXPECT_TRUE(contains(hw_error(j), "collectives.measured[0].ranks")) << hw_error(j);
  j["collectives"]["measured"] = {{"ranks", 4}};
  EXPECT_TRUE(contains(hw_error(j), "must be a list")) << hw_error(j);
  t["ranks"] = 4;
  t["op"] = "all_reduc";  // a misspelt name would price nothing
  j["collectives"]["measured"] = {t};
  EXPECT_TRUE(contains(hw_error(j), "collectives.measured[0].op': unknown collective 'all_reduc'")) << hw_error(j);
  t["op"] = "all_reduce";
  j["collectives"]["measured"] = {t, t};
  EXPECT_TRUE(contains(hw_error(j), "collectives.measured[1]' times all_reduce on 4 ranks again")) << hw_error(j);
}

TEST(HostCache, PastTheCacheTheColdMeasurementsPriceTheOp) {
  // A host whose cache holds 100 MB in effect: a step of 100 MB leaves every tensor in it, 150 MB
  // half of the op's time cold, 200 MB and more all of it.
  json j = round_profile();
  j["device"]["host_cache_bytes"] = 1e8;
  j["device"]["mem_bandwidth_Bps"] = 1e10;
  // (the smallest size no slower cold: no fixed cold part, see ColdTimesLoseWhatTheSmallestCallsPayCold)
  j["device"]["elementwise_curves"] = {{"sgd", {{"bytes", {1e3, 1e6}}, {"efficiency", {0.5, 0.5}}, {"efficiency_cold", {0.5, 0.25}}}}};
  j["links"]["intra_node"]["curve"] = {{"bytes", {1e6}}, {"efficiency", {1.0}}, {"efficiency_cold", {0.5}}};
  j["device"]["gemm_table"] = {{"f32", {{{"m", 32}, {"n", 64}, {"k", 64}, {"trans_a", false}, {"trans_b", true},
                                          {"seconds", 1e-3}, {"seconds_cold", 3e-3}}}}};
  const CostModel model(parse_profile(j.dump(), "round"));
  EXPECT_EQ(model.profile().cold_share(1e8), 0);
  EXPECT_NEAR(model.profile().cold_share(1.5e8), 0.5, 1e-12);
  EXPECT_EQ(model.profile().cold_share(5e8), 1);

  OpCost sgd{OpClass::elementwise, 0, 1e6, DType::f32};
  sgd.kind = "sgd";
  const double hot = 1e6 / (1e10 * 0.5), cold = 1e6 / (1e10 * 0.25);
  sgd.host_bytes = 5e7;
  EXPECT_NEAR(model.seconds(sgd), hot, 1e-12);
  sgd.host_bytes = 1.5e8;  // the times blend
  EXPECT_NEAR(model.seconds(sgd), 0.5 * hot + 0.5 * cold, 1e-12);
  sgd.host_bytes = 1e9;
  EXPECT_NEAR(model.seconds(sgd), cold, 1e-12);

  OpCost copy{OpClass::copy_peer, 0, 1e6, DType::f32};
  copy.host_bytes = 1e9;
  EXPECT_NEAR(model.seconds(copy), 1e6 / (1e10 * 0.5), 1e-12);

  OpCost g = gemm(32, 64, 64);
  g.trans_b = true;
  EXPECT_NEAR(model.seconds(g), 1e-3, 1e-12);  // the shape measured: its time
  g.host_bytes = 1.5e8;
  EXPECT_NEAR(model.seconds(g), 2e-3, 1e-12);
  // A collective on the host: its ranks' copies and adds, slowed as a copy is (here 2× when cold);
  // its fixed part (2(n−1) hand-offs of α) is not. A send moves what was just made: never cold.
  const double ring_fixed = 6 * 1e-6, ring_bytes = 1.5e6 / 1e10;
  EXPECT_NEAR(model.collective_seconds(Collective::all_reduce, 1e6, 4), ring_fixed + ring_bytes, 1e-12);
  EXPECT_NEAR(model.collective_seconds(Collective::all_reduce, 1e6, 4, false, 1.0), ring_fixed + 2 * ring_bytes, 1e-12);
  EXPECT_NEAR(model.collective_seconds(Collective::send, 1e6, 4, false, 1.0), 1e6 / 1e10, 1e-12);
  // A host whose ranks copy and add on one core (turns_on_one_core): the collective goes at that
  // core's pace, cold data or not.
  json one_core = j;
  one_core["device"]["turns_on_one_core"] = true;
  const CostModel on_one_core(parse_profile(one_core.dump(), "one core"));
  EXPECT_NEAR(on_one_core.collective_seconds(Collective::all_reduce, 1e6, 4, false, 1.0), ring_fixed + ring_bytes, 1e-12);
  EXPECT_TRUE(parse_profile(profile_to_json(on_one_core.profile()), "back").calibration->turns_on_one_core);
  one_core["device"]["turns_on_one_core"] = "yes";
  try {
    parse_profile(one_core.dump(), "one core");
    ADD_FAILURE() << "a non-boolean turns_on_one_core was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device.turns_on_one_core"), std::string::npos) << e.what();
  }
  // Written into a trace and read back: the same figures.
  const HardwareProfile back = parse_profile(profile_to_json(model.profile()), "back");
  EXPECT_EQ(back.calibration->host_cache_bytes, 1e8);
  EXPECT_EQ(back.elementwise_curves.at("sgd").efficiency_cold, (std::vector<double>{0.5, 0.25}));
  EXPECT_EQ(back.intra_node.curve.efficiency_cold, (std::vector<double>{0.5}));
  EXPECT_EQ(back.calibration->gemm_table.points.at(0).seconds_cold, 3e-3);
}

TEST(HostCache, AMeasuredColdShareCurveIsInterpolatedAndTakesThePlaceOfTheRamp) {
  json j = round_profile();
  j["device"]["host_cache_bytes"] = 1e8;  // the ramp would say 0 at 1e8, ½ at 1.5e8, 1 from 2e8
  j["device"]["host_cache_curve"] = {{"bytes", {1e8, 2e8, 4e8}}, {"cold_share", {0.0, 0.6, 0.9}}};
  const HardwareProfile p = parse_profile(j.dump(), "round");
  EXPECT_EQ(p.cold_share(5e7), 0);
  EXPECT_NEAR(p.cold_share(1.5e8), 0.3, 1e-12);
  EXPECT_NEAR(p.cold_share(3e8), 0.75, 1e-12);
  EXPECT_EQ(p.cold_share(4e8), 0.9);
  EXPECT_EQ(p.cold_share(1e9), 1);  // past the last point: all of it from DRAM
  const HardwareProfile back = parse_profile(profile_to_json(p), "back");
  EXPECT_EQ(back.calibration->host_cache_curve.share, (std::vector<double>{0.0, 0.6, 0.9}));
  EXPECT_NEAR(back.cold_share(3e8), 0.75, 1e-12);
  for (const auto& [curve, what] : std::vector<std::pair<json, std::string>>{
           {{{"bytes", {1e8, 2e8}}, {"cold_share", {0.5, 0.4}}}, "host_cache_curve[1]' (bytes"},  // falls
           {{{"bytes", {2e8, 1e8}}, {"cold_share", {0.1, 0.4}}}, "bytes must increase"},
           {{{"bytes", {1e8}}, {"cold_share", {1.5}}}, "cold_share[0]' is 1.5 — its range is 0 to 1"},
           {{{"bytes", {1e8, 2e8}}, {"cold_share", {0.5}}}, "as many of each"}}) {
    j["device"]["host_cache_curve"] = curve;
    EXPECT_TRUE(contains(hw_error(j), what)) << hw_error(j);
  }
}

TEST(GemmTable, AShapeMeasuredIsItsTimeOthersTheNearestShapesRate) {
  json j = round_profile();
  // Forward shapes at batch 32 and 128 of a 1024-wide layer; one dW shape.
  j["device"]["gemm_table"] = json::parse(R"({"f32": [
      {"m": 32, "n": 1024, "k": 1024, "trans_a": false, "trans_b": true, "seconds": 2e-3},
      {"m": 128, "n": 1024, "k": 1024, "trans_a": false, "trans_b": true, "seconds": 4e-3},
      {"m": 1024, "n": 1024, "k": 32, "trans_a": true, "trans_b": false, "seconds": 1e-3}], "source": "test"})");
  const CostModel model(parse_profile(j.dump(), "round"));
  OpCost fwd = gemm(32, 1024, 1024);
  fwd.trans_b = true;
  EXPECT_NEAR(model.seconds(fwd), 2e-3, 1e-15);
  // Batch 64, halfway in log2 between the two: their log rates averaged (rates 2^30/2e-3 … ×2).
  fwd.m = 64;
  fwd.flops = 2.0 * 64 * 1024 * 1024;
  const double rate = std::sqrt((32.0 * 1024 * 1024 / 2e-3) * (128.0 * 1024 * 1024 / 4e-3));
  EXPECT_NEAR(model.seconds(fwd), 64.0 * 1024 * 1024 / rate, 1e-12);
  // The dW shape at the same m·n·k as the first: its own point, not the forward's.
  OpCost dw = gemm(1024, 1024, 32);
  dw.trans_a = true;
  EXPECT_NEAR(model.seconds(dw), 1e-3, 1e-15);
  // dx (no transposition) has no point: the curve (none here) or the single efficiency.
  const OpCost dx = gemm(32, 1024, 1024);
  EXPECT_NE(model.seconds(dx), 2e-3);
  const HardwareProfile back = parse_profile(profile_to_json(model.profile()), "back");
  ASSERT_EQ(back.calibration->gemm_table.points.size(), 3u);
  EXPECT_EQ(back.calibration->gemm_table.source, "test");
}

TEST(HostCache, ColdTimesLoseWhatTheSmallestCallsPayCold) {
  // After calibrate's flush the code and page tables come from DRAM too: the smallest GEMM (2 KB
  // of data) takes 0.5 µs hot and 8.5 cold. A run keeps them cached, so that 8 µs is taken off
  // every cold time of the transposition; what is left of a larger shape's is its data's.
  json j = round_profile();
  j["device"]["host_cache_bytes"] = 1e8;
  j["device"]["mem_bandwidth_Bps"] = 1e10;
  j["device"]["gemm_table"] = json::parse(R"({"f32": [
      {"m": 8, "n": 16, "k": 16, "trans_a": false, "trans_b": true, "seconds": 0.5e-6, "seconds_cold": 8.5e-6},
      {"m": 128, "n": 256, "k": 256, "trans_a": false, "trans_b": true, "seconds": 80e-6, "seconds_cold": 118e-6},
      {"m": 128, "n": 256, "k": 256, "trans_a": false, "trans_b": false, "seconds": 80e-6, "seconds_cold": 118e-6}]})");
  j["device"]["elementwise_curves"] = {{"sgd", {{"bytes", {1e3, 1e6}}, {"efficiency", {0.5, 0.5}}, {"efficiency_cold", {0.1, 0.25}}}}};
  const CostModel model(parse_profile(j.dump(), "round"));
  OpCost big = gemm(128, 256, 256);
  big.trans_b = true;
  big.host_bytes = 1e9;  // all cold
  EXPECT_NEAR(model.seconds(big), 110e-6, 1e-15);
  OpCost small = gemm(8, 16, 16);
  small.trans_b = true;
  small.host_bytes = 1e9;
  EXPECT_NEAR(model.seconds(small), 0.5e-6, 1e-15);  // no slower than hot
  big.host_bytes = 1.5e8;  // half cold: the times blend
  EXPECT_NEAR(model.seconds(big), 0.5 * 80e-6 + 0.5 * 110e-6, 1e-15);
  // One shape of its transposition: nothing tells its code's part from its data's, its cold time stands.
  OpCost alone = gemm(128, 256, 256);
  alone.host_bytes = 1e9;
  EXPECT_NEAR(model.seconds(alone), 118e-6, 1e-15);

  // An element-wise curve likewise, the fixed part its smallest size's: 1 KB takes 0.2 µs hot and
  // 1 µs cold, so 1 MB takes 400 − 0.8 µs cold.
  OpCost sgd{OpClass::elementwise, 0, 1e6, DType::f32};
  sgd.kind = "sgd";
  sgd.host_bytes = 1e9;
  EXPECT_NEAR(model.seconds(sgd), (1e6 / 0.25 - (1e3 / 0.1 - 1e3 / 0.5)) / 1e10, 1e-15);
  sgd.bytes = 1e3;
  EXPECT_NEAR(model.seconds(sgd), 1e3 / (1e10 * 0.5), 1e-15);
}

TEST(GemmTable, AGemmAddingToCIsPricedByTheShapesAddingTimes) {
  // dW of a micro-batch of 32: 1.25 ms writing C, 1 ms adding to it (no pass clearing C first);
  // the forward shape was not measured adding.
  json j = round_profile();
  j["device"]["gemm_table"] = json::parse(R"({"f32": [
      {"m": 1024, "n": 1024, "k": 32, "trans_a": true, "trans_b": false, "seconds": 1.25e-3, "seconds_cold": 2.5e-3,
       "seconds_accumulate": 1e-3},
      {"m": 32, "n": 1024, "k": 1024, "trans_a": false, "trans_b": true, "seconds": 2e-3}]})");
  j["device"]["host_cache_bytes"] = 1e8;
  const CostModel model(parse_profile(j.dump(), "round"));
  OpCost dw = gemm(1024, 1024, 32);
  dw.trans_a = true;
  EXPECT_NEAR(model.seconds(dw), 1.25e-3, 1e-15);
  dw.accumulates = true;
  EXPECT_NEAR(model.seconds(dw), 1e-3, 1e-15);
  dw.host_bytes = 2e8;  // cold: its cold time, × the same 0.8
  EXPECT_NEAR(model.seconds(dw), 2e-3, 1e-15);
  OpCost fwd = gemm(32, 1024, 1024);
  fwd.trans_b = true;
  fwd.accumulates = true;
  EXPECT_NEAR(model.seconds(fwd), 2e-3, 1e-15);
  EXPECT_EQ(parse_profile(profile_to_json(model.profile()), "back").calibration->gemm_table.points.at(0).seconds_accumulate, 1e-3);

  // A sim device prices Device::gemm with beta ≠ 0 as adding to C.
  EventBus bus;
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.profile = parse_profile(j.dump(), "round");
  o.dry_run = true;
  o.bus = &bus;
  auto devices = make_devices(o);
  Device& d = *devices[0];
  Tensor dy = d.empty({32, 1024}, DType::f32, MemoryCategory::workspace, "dy");
  Tensor x = d.empty({32, 1024}, DType::f32, MemoryCategory::workspace, "x");
  Tensor dW = d.empty({1024, 1024}, DType::f32, MemoryCategory::workspace, "dW");
  d.gemm({"write"}, true, false, dy, x, dW);
  d.gemm({"add"}, true, false, dy, x, dW, 1.0f);
  std::vector<double> seconds;
  for (const Event& e : bus.events())
    if (e.kind == "gemm") seconds.push_back(static_cast<double>(e.t_end_ns - e.t_begin_ns) * 1e-9);
  ASSERT_EQ(seconds.size(), 2u);
  EXPECT_NEAR(seconds[0], 1.25e-3, 1e-8);
  EXPECT_NEAR(seconds[1], 1e-3, 1e-8);

  j["device"]["gemm_table"]["f32"][0]["seconds_accumulate"] = -1;
  EXPECT_TRUE(contains(hw_error(j), "device.gemm_table.f32[0].seconds_accumulate")) << hw_error(j);
}

TEST(GemmTable, ABrokenTableIsRefusedNamingTheField) {
  json j = round_profile();
  j["device"]["gemm_table"] = {{"f32", {{{"m", 32}, {"n", 64}, {"k", 64}, {"trans_a", false}, {"seconds", 1e-3}}}}};
  EXPECT_TRUE(contains(hw_error(j), "device.gemm_table.f32[0].trans_b' must be true or false")) << hw_error(j);
  j["device"]["gemm_table"] = {{"f32", {{{"m", 0}, {"n", 64}, {"k", 64}, {"trans_a", false}, {"trans_b", false}, {"seconds", 1e-3}}}}};
  EXPECT_TRUE(contains(hw_error(j), "device.gemm_table.f32[0].m")) << hw_error(j);
  j["device"]["gemm_table"] = 7;
  EXPECT_TRUE(contains(hw_error(j), "device.gemm_table' must be")) << hw_error(j);
  j = round_profile();
  j["device"]["elementwise_curves"] = {{"sgd", {{"bytes", {1e3}}, {"efficiency", {0.5}}, {"efficiency_cold", {0.5, 0.1}}}}};
  EXPECT_TRUE(contains(hw_error(j), "efficiency_cold' must be an array of one efficiency per size")) << hw_error(j);
}

namespace {

// Two sim devices on one host whose cache in effect is `cache_bytes` (cold share: the ramp) and
// whose `scale` runs at half of 10 GB/s hot, a tenth cold.
DeviceOptions two_sim_devices_options(double cache_bytes, double retouch, EventBus& bus) {
  json j = round_profile();
  j["devices_per_node"] = 2;
  j["device"]["host_cache_bytes"] = cache_bytes;
  j["device"]["host_cache_retouch"] = retouch;
  j["device"]["mem_bandwidth_Bps"] = 1e10;
  j["device"]["elementwise_curves"] = {{"scale", {{"bytes", {1e3}}, {"efficiency", {0.5}}, {"efficiency_cold", {0.1}}}}};
  DeviceOptions o;
  o.kind = DeviceKind::sim;
  o.count = 2;
  o.profile = parse_profile(j.dump(), "round");
  o.dry_run = true;
  o.bus = &bus;
  return o;
}

std::vector<std::unique_ptr<Device>> two_sim_devices_scaling_at(double cache_bytes, double retouch, EventBus& bus) {
  return make_devices(two_sim_devices_options(cache_bytes, retouch, bus));
}

}  // namespace

TEST(HostCache, ASimDeviceCountsTheBytesItsHostMovesInAStep) {
  // Two devices on a host whose cache holds 1 KiB: the first op of a run has seen nothing move and
  // is priced hot; by the second, the host (both devices, as much each) has moved twice its bytes
  // — past twice the cache: cold. A new step starts from what the last one moved.
  EventBus bus;
  auto devices = two_sim_devices_scaling_at(1024, 1, bus);
  Device& d = *devices[0];
  Tensor x = d.empty({1000}, DType::f32, MemoryCategory::workspace, "x");  // scale touches 8 kB
  d.set_step(0);
  d.scale({"a"}, 2.0f, x);
  d.scale({"b"}, 2.0f, x);
  d.set_step(1);
  d.scale({"c"}, 2.0f, x);
  std::vector<double> seconds;
  for (const Event& e : bus.events())
    if (e.kind == "scale") seconds.push_back(static_cast<double>(e.t_end_ns - e.t_begin_ns) * 1e-9);
  ASSERT_EQ(seconds.size(), 3u);
  EXPECT_NEAR(seconds[0], 8e3 / (1e10 * 0.5), 1e-9);
  EXPECT_NEAR(seconds[1], 8e3 / (1e10 * 0.1), 1e-9);
  EXPECT_NEAR(seconds[2], 8e3 / (1e10 * 0.1), 1e-9);
}

TEST(HostCache, OneThreadsDevicesTogetherStandForTheirShareOfTheHost) {
  // Two sim devices on a host whose cache holds 10 kB (cold share: the ramp), every byte counting.
  // Device 0 scales a 4 kB tensor (8 kB touched) in step 0; its op in step 1 follows 8 kB moved.
  // Driven alone by its thread, device 0 stands for one of the host's two devices: 16 kB, cold
  // share 0.6. Where the same thread also drives device 1, which moved next to nothing, the two
  // stand for the whole host: 8 kB, hot (a ddp-mp rank's two stages). Device 1 driven by another
  // thread leaves this thread's count alone, however much it moves; driven in a step by another
  // thread and this one (data parallel's replica and controller), it stands alone, as device 0 then.
  const auto op_of_step_1 = [](const char* device_1) {
    EventBus bus;
    auto devices = two_sim_devices_scaling_at(1e4, 1, bus);
    Device &d0 = *devices[0], &d1 = *devices[1];
    Tensor x = d0.empty({1000}, DType::f32, MemoryCategory::workspace, "x");
    Tensor y = d1.empty({1000}, DType::f32, MemoryCategory::workspace, "y");
    Tensor one = d1.empty({1}, DType::f32, MemoryCategory::workspace, "one");
    d0.set_step(0);
    d0.scale({"a"}, 2.0f, x);
    if (std::string(device_1) == "this thread") d1.scale({"b"}, 2.0f, one);
    if (std::string(device_1) == "another thread") std::thread([&] { d1.scale({"b"}, 2.0f, y); }).join();
    if (std::string(device_1) == "both threads") {
      d1.set_step(0);
      std::thread([&] { d1.scale({"b"}, 2.0f, one); }).join();
      d1.scale({"b"}, 2.0f, one);
    }
    d0.set_step(1);
    d0.scale({"c"}, 2.0f, x);
    for (const Event& e : bus.events())
      if (e.name == "c") return static_cast<double>(e.t_end_ns - e.t_begin_ns) * 1e-9;
    return -1.0;
  };
  const double hot = 8e3 / (1e10 * 0.5), cold = 8e3 / (1e10 * 0.1);
  EXPECT_NEAR(op_of_step_1("none"), 0.4 * hot + 0.6 * cold, 1e-9);
  EXPECT_NEAR(op_of_step_1("this thread"), hot, 1e-9);
  EXPECT_NEAR(op_of_step_1("another thread"), 0.4 * hot + 0.6 * cold, 1e-9);
  EXPECT_NEAR(op_of_step_1("both threads"), 0.4 * hot + 0.6 * cold, 1e-9);
}

TEST(HostCache, AProcessOfTheRunSharesTheHostWithTheOthersDevices) {
  // A Hogwild worker (or an mpi or procs rank) makes only its own device, in its own process; the
  // host's cache is still the run's. Device 1 of the two-device run above, made in a child: its op
  // of step 1 follows 8 kB moved by it, and as much by device 0 — 16 kB, cold share 0.6 — not its
  // 8 kB alone (hot), as it was priced when the child's device counted only itself. Where the 4 kB
  // it holds are one segment both devices map (Hogwild's parameters), the host holds them once:
  // 16 kB − 4 kB, cold share 0.2.
  const auto op_of_step_1 = [](double shared_bytes) {
    EventBus bus;
    std::unique_ptr<Device> d = make_child_device(two_sim_devices_options(1e4, 1, bus), 1, bus);
    EXPECT_EQ(d->index(), 1);
    Tensor x = d->empty({1000}, DType::f32, MemoryCategory::workspace, "x");
    d->host_meter()->mark_shared_with_run(shared_bytes);
    d->set_step(0);
    d->scale({"a"}, 2.0f, x);
    d->set_step(1);
    d->scale({"c"}, 2.0f, x);
    for (const Event& e : bus.events())
      if (e.name == "c") return static_cast<double>(e.t_end_ns - e.t_begin_ns) * 1e-9;
    return -1.0;
  };
  const double hot = 8e3 / (1e10 * 0.5), cold = 8e3 / (1e10 * 0.1);
  EXPECT_NEAR(op_of_step_1(0), 0.4 * hot + 0.6 * cold, 1e-9);
  EXPECT_NEAR(op_of_step_1(4e3), 0.8 * hot + 0.2 * cold, 1e-9);
}

TEST(HostCache, WhereABytesSecondTouchCountsLessTheMemoryHeldBoundsWhatPassesBetweenTouches) {
  // calibrate measures how much a byte touched again within a step counts toward pushing a tensor
  // out (host_cache_retouch): 0, an LRU cache, where only the distinct bytes — at most the memory
  // the devices hold — count; 1, every byte moved. Between, distinct + retouch · (the rest).
  json j = round_profile();
  HardwareProfile p = parse_profile(j.dump(), "round");
  EXPECT_EQ(p.calibration.value_or(HostCalibration{}).host_cache_retouch, 1);  // without it: every byte moved counts
  EXPECT_EQ(p.bytes_between_touches(3e4, 1e4), 3e4);
  j["device"]["host_cache_retouch"] = 0.25;
  p = parse_profile(j.dump(), "round");
  EXPECT_EQ(p.bytes_between_touches(3e4, 1e4), 1e4 + 0.25 * 2e4);
  EXPECT_EQ(p.bytes_between_touches(5e3, 1e4), 5e3);  // what was not touched does not count
  EXPECT_EQ(parse_profile(profile_to_json(p), "back").calibration->host_cache_retouch, 0.25);
  for (const json& bad : {json(1.5), json(-0.1), json("0.5")}) {
    j["device"]["host_cache_retouch"] = bad;
    EXPECT_TRUE(contains(hw_error(j), "device.host_cache_retouch'")) << hw_error(j);
  }

  // Two sim devices on a host whose cache holds 10 kB (cold share: the ramp, bytes / 1e4 − 1),
  // each holding a 4 kB tensor that it scales three times a step (8 kB touched each time). The
  // first op of step 1 follows a step that moved 24 kB on each device.
  const auto first_op_of_step_1 = [&](double retouch) {
    EventBus bus;
    auto devices = two_sim_devices_scaling_at(1e4, retouch, bus);
    Device& d = *devices[0];
    Tensor x = d.empty({1000}, DType::f32, MemoryCategory::workspace, "x");
    d.set_step(0);
    for (const char* name : {"a", "b", "c"}) d.scale({name}, 2.0f, x);
    d.set_step(1);
    d.scale({"d"}, 2.0f, x);
    for (const Event& e : bus.events())
      if (e.name == "d") return static_cast<double>(e.t_end_ns - e.t_begin_ns) * 1e-9;
    return -1.0;
  };
  const double hot = 8e3 / (1e10 * 0.5), cold = 8e3 / (1e10 * 0.1);
  // Every byte counts: 2 × 24 kB since x was last touched, past twice the cache — all cold.
  EXPECT_NEAR(first_op_of_step_1(1), cold, 1e-9);
  // Only distinct bytes: 2 × the 4 kB each holds, under the cache — hot.
  EXPECT_NEAR(first_op_of_step_1(0), hot, 1e-9);
  // A quarter: 2 × (4 kB + ¼ · 20 kB) = 18 kB, cold share 0.8.
  EXPECT_NEAR(first_op_of_step_1(0.25), 0.2 * hot + 0.8 * cold, 1e-9);
}
