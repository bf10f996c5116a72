// The sim device's collectives next to NCCL's: the model's closed forms for each of its terms
// (protocols, tree, NVLS, NICs, PCIe through the host, the cube mesh), and the model against the
// published nccl-tests tables in profiles/reference/ — printed size by size, with the goals of
// issue 15 asserted on the geometric-mean error (deterministic: no timing is measured here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/device/sim/cost_model.h"
#include "core/device/sim/profile.h"
#include "core/error.h"

using namespace scalelab;
using nlohmann::json;

namespace {

// 2 nodes × 4 devices, round figures, and a collectives section (fields overridden per test).
json calibrated_json() {
  return json::parse(R"({
    "name": "round", "nodes": 2, "devices_per_node": 4,
    "device": { "peak_flops": { "f32": 1e12 }, "gemm_efficiency": 0.5, "mem_bandwidth_Bps": 1e11,
                "mem_capacity_bytes": 1048576, "launch_overhead_s": 1e-6 },
    "links": { "host": { "bandwidth_Bps": 1e10, "latency_s": 1e-6 },
               "intra_node": { "bandwidth_Bps": 1e11, "latency_s": 1e-6 },
               "inter_node": { "bandwidth_Bps": 1e10, "latency_s": 5e-6 } },
    "collectives": { "launch_s": 1e-5, "intra_hop_s": 2e-6, "inter_hop_s": 4e-6, "intra_efficiency": 0.5,
                     "inter_efficiency": 0.8, "net_overhead_s": 2e-5 } })");
}

CostModel model_of(const json& j) { return CostModel(parse_profile(j.dump(), "round.json")); }

constexpr double kLLStep = 0.6 / 3.4, kLL128Step = 1.9 / 3.4;

}  // namespace

TEST(CollectiveModel, ARingPicksTheCheapestProtocolBySize) {
  const CostModel model = model_of(calibrated_json());
  const int n = 4;  // one node
  const double bw = 1e11 * 0.5, steps = 2 * (n - 1), share = 2.0 * (n - 1) / n;
  auto priced = [&](double step, double bandwidth_share, double S) {
    return 1e-5 + step * steps * 2e-6 + share * S / (bw * bandwidth_share);
  };
  // 1 KiB: LL's cheap steps win; 1 GiB: Simple's full bandwidth wins; between, LL128.
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, 1024, n), priced(kLLStep, 0.25, 1024));
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, 1 << 30, n), priced(1, 1, 1 << 30));
  const double mid = 1 << 20;
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, mid, n), priced(kLL128Step, 120.0 / 128, mid));
  // All-gather: n − 1 steps, (n − 1)/n of S, LL at a third of the bandwidth.
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_gather, 1024, n),
                   1e-5 + kLLStep * (n - 1) * 2e-6 + 0.75 * 1024 / (bw / 3));
  // The choice is named with its price (bench comm and scale print it).
  const CollectiveChoice small = model.collective_choice(Collective::all_reduce, 1024, n);
  const CollectiveChoice mid_choice = model.collective_choice(Collective::all_reduce, mid, n);
  const CollectiveChoice large = model.collective_choice(Collective::all_reduce, 1 << 30, n);
  EXPECT_STREQ(small.algorithm, "ring");
  EXPECT_STREQ(small.protocol, "LL");
  EXPECT_STREQ(mid_choice.protocol, "LL128");
  EXPECT_STREQ(large.protocol, "Simple");
  EXPECT_DOUBLE_EQ(large.seconds, model.collective_seconds(Collective::all_reduce, 1 << 30, n));
}

TEST(CollectiveModel, AcrossNodesTheNicsBoundTheRingAndTheTreeWinsSmallMessages) {
  json j = calibrated_json();
  j["collectives"]["protocols"] = json::array({"Simple"});
  const CostModel model = model_of(j);
  const int n = 8, k = 4;  // 2 nodes
  // The ring: 14 steps, 2 between nodes; the node's 4 NICs (0.8 × 10 GB/s each) against NVLink (0.5 × 100).
  const double ring_bw = std::min(1e11 * 0.5, k * 1e10 * 0.8);
  const double S = 1 << 30;
  const double ring = 1e-5 + 2e-5 + (12 * 2e-6 + 2 * 4e-6) + 2.0 * 7 / 8 * S / ring_bw;
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, S, n), ring);
  EXPECT_DOUBLE_EQ(model.ring_bandwidth(k, 2), ring_bw);
  // The tree: 2 × (3 chain steps + 1 level), through two NICs at 0.92.
  const double s = 64;
  const double tree = 1e-5 + 2e-5 + 2 * (3 * 2e-6 + 1 * 4e-6) + 2 * s / (0.92 * 2 * 1e10 * 0.8);
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, s, n), tree);
  j["collectives"]["tree"] = false;
  EXPECT_DOUBLE_EQ(model_of(j).collective_seconds(Collective::all_reduce, s, n),
                   1e-5 + 2e-5 + (12 * 2e-6 + 2 * 4e-6) + 2.0 * 7 / 8 * s / ring_bw);
}

TEST(CollectiveModel, NvlsTakesLargeAllReducesInsideOneNode) {
  json j = calibrated_json();
  j["collectives"]["protocols"] = json::array({"Simple"});
  j["collectives"]["nvls_efficiency"] = 0.6;
  j["collectives"]["nvls_latency_s"] = 5e-5;
  const CostModel model = model_of(j);
  const double S = 1 << 30;
  // Each GPU sends S and reads the sum once: S / (0.6 × B) against the ring's 1.5 S / (0.5 B).
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, S, 4), 1e-5 + 5e-5 + S / (1e11 * 0.6));
  // Small: the ring's steps are cheaper than NVLS's fixed cost.
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, 1024, 4), 1e-5 + 6 * 2e-6 + 1.5 * 1024 / (1e11 * 0.5));
  // Not for all-gather.
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_gather, S, 4), 1e-5 + 3 * 2e-6 + 0.75 * S / (1e11 * 0.5));
  EXPECT_STREQ(model.collective_choice(Collective::all_reduce, S, 4).algorithm, "NVLS");
  EXPECT_STREQ(model.collective_choice(Collective::all_reduce, 1024, 4).algorithm, "ring");
}

TEST(CollectiveModel, NvlsTreeSendsSThroughTheNicsOfTwoNodesAnd2SFromThree) {
  json j = calibrated_json();
  j["collectives"]["protocols"] = json::array({"Simple"});
  j["collectives"]["nvls_efficiency"] = 0.6;
  j["collectives"]["nvls_latency_s"] = 5e-5;
  j["collectives"]["nvls_tree_latency_s"] = 1e-4;
  const CostModel model = model_of(j);
  const double S = 1 << 30, nics = 4 * 1e10 * 0.8;  // a node's 4 NICs, achieved
  const double fixed = 1e-5 + 2e-5;                 // launch and the network proxy
  // 2 nodes: the switch reduces in the node, each node sends its sum once (S), one tree level up
  // and down; the ring would move 2(n−1)/n · S = 1.75 S through the same NICs.
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, S, 8), fixed + 5e-5 + 1e-4 + 2 * 1 * 4e-6 + S / nics);
  // 4 nodes: an inner tree node takes its children's halves too, 2S each way, more than the ring's
  // 1.875 S: the ring runs.
  EXPECT_DOUBLE_EQ(model.collective_seconds(Collective::all_reduce, S, 16),
                   fixed + (24 * 2e-6 + 6 * 4e-6) + 2.0 * 15 / 16 * S / nics);
  // Small: its fixed cost loses to the tree.
  EXPECT_LT(model.collective_seconds(Collective::all_reduce, 64, 8), fixed + 5e-5 + 1e-4);
  // Capped by the switch where the NICs are faster than NVLS.
  j["links"]["inter_node"]["bandwidth_Bps"] = 1e12;
  EXPECT_DOUBLE_EQ(model_of(j).collective_seconds(Collective::all_reduce, S, 8),
                   fixed + 5e-5 + 1e-4 + 2 * 4e-6 + S / (1e11 * 0.6));
}

TEST(CollectiveModel, PcieThroughTheHostSharesItAndTheCubeMeshLimitsSmallRings) {
  json j = calibrated_json();
  j["collectives"]["shared_host_Bps"] = 1.2e11;
  EXPECT_DOUBLE_EQ(model_of(j).ring_bandwidth(4, 1), 1.2e11 / 4);  // the host's share, below the link's 50 GB/s
  EXPECT_DOUBLE_EQ(model_of(j).ring_bandwidth(2, 1), 1e11 * 0.5);  // 60 GB/s each from the host: the link is slower
  json mesh = calibrated_json();
  mesh["collectives"]["links_per_device"] = 6;
  mesh["collectives"]["ring_links"] = {{"2", 1}, {"4", 4}, {"8", 6}};
  const CostModel m = model_of(mesh);
  EXPECT_DOUBLE_EQ(m.ring_bandwidth(2, 1), 1e11 * 0.5 / 6);
  EXPECT_DOUBLE_EQ(m.ring_bandwidth(3, 1), 1e11 * 0.5 / 6);  // the largest entry ≤ 3
  EXPECT_DOUBLE_EQ(m.ring_bandwidth(4, 1), 1e11 * 0.5 * 4 / 6);
}

// A sub-group is priced where its members sit. On h100-ib-1024x8 (NVLink 450 GB/s at 0.79 inside a
// node, 50 GB/s NDR per GPU at 0.84 across), the same 1 GiB all-gathered by 8 ranks of one node
// {8, 1} and by 8 ranks one per node {1, 8}: the ring's 7 steps move 7/8 · S each, on NVLink or
// through one NIC per node — the data terms in the ratio 450·0.79 / (50·0.84) ≈ 8.5.
TEST(CollectiveModel, ASubGroupIsPricedOnTheLinksBetweenItsMembers) {
  const CostModel model(load_profile("h100-ib-1024x8"));
  const double S = 1 << 30, nvlink = 450e9 * 0.79, nic = 50e9 * 0.84, launch = 4.5e-6, net = 22e-6;
  const double data_in = 7.0 / 8 * S / nvlink, data_across = 7.0 / 8 * S / nic;
  const double in_node = model.collective_seconds(Collective::all_gather, S, 8, {8, 1});
  const double across = model.collective_seconds(Collective::all_gather, S, 8, {1, 8});
  EXPECT_NEAR(in_node, launch + 7 * 4.5e-6 + data_in, 1e-12);
  EXPECT_NEAR(across, launch + net + 7 * 2e-6 + data_across, 1e-12);
  EXPECT_NEAR((across - launch - net - 7 * 2e-6) / (in_node - launch - 7 * 4.5e-6), nvlink / nic, 1e-9);
  // The world's ranks fill nodes in order: the placement the plain call prices.
  EXPECT_EQ(model.contiguous(64).per_node, 8);
  EXPECT_EQ(model.contiguous(64).nodes, 8);
  EXPECT_EQ(model.contiguous(3).per_node, 3);
  EXPECT_EQ(model.contiguous(3).nodes, 1);
  for (int n : {2, 8, 16, 64})
    EXPECT_EQ(model.collective_seconds(Collective::all_reduce, S, n),
              model.collective_seconds(Collective::all_reduce, S, n, model.contiguous(n)));
  // A data-parallel group of 64, one rank per node, has one NIC per node where 64 contiguous ranks
  // have eight: its all-reduce is dearer, and no NVLS inside a node for it.
  EXPECT_GT(model.collective_seconds(Collective::all_reduce, S, 64, {1, 64}),
            model.collective_seconds(Collective::all_reduce, S, 64));
  EXPECT_STREQ(model.collective_choice(Collective::all_reduce, S, 8, {8, 1}).algorithm, "NVLS");
  EXPECT_STRNE(model.collective_choice(Collective::all_reduce, S, 8, {1, 8}).algorithm, "NVLS");
}

TEST(CollectiveModel, TheSectionRoundTripsAndBadFiguresAreRefused) {
  json j = calibrated_json();
  j["collectives"]["protocols"] = json::array({"LL", "Simple"});
  j["collectives"]["links_per_device"] = 6;
  j["collectives"]["ring_links"] = {{"2", 1}, {"8", 6}};
  const HardwareProfile p = parse_profile(j.dump(), "round.json");
  const HardwareProfile q = parse_profile(profile_to_json(p), "again");
  const CostModel a(p), b(q);
  for (double S : {64.0, 1e6, 1e9})
    for (int n : {2, 4, 8}) EXPECT_EQ(a.collective_seconds(Collective::all_reduce, S, n), b.collective_seconds(Collective::all_reduce, S, n));
  auto refused = [](json bad, const std::string& says) {
    try {
      parse_profile(bad.dump(), "bad.json");
      ADD_FAILURE() << "accepted: " << bad["collectives"].dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  json e = calibrated_json();
  e["collectives"]["protocols"] = json::array({"LL64"});
  refused(e, "\"LL64\"");
  e = calibrated_json();
  e["collectives"]["intra_efficiency"] = 1.5;
  refused(e, "collectives.intra_efficiency");
  e = calibrated_json();
  e["collectives"]["ring_links"] = {{"2", 1}};
  refused(e, "collectives.links_per_device");
}

// ---- Next to nccl-tests -------------------------------------------------------------------------

namespace {

struct Row {
  double bytes, published_s, simulated_s;
};

// The published time of a row: given as time, or as busbw (nccl-tests: busbw = S / t × factor).
double published_seconds(const json& row, Collective op, int n) {
  const double S = row.at("bytes").get<double>();
  if (row.contains("time_us")) return row.at("time_us").get<double>() * 1e-6;
  const double factor = op == Collective::all_reduce ? 2.0 * (n - 1) / n
                        : (op == Collective::all_gather || op == Collective::reduce_scatter) ? static_cast<double>(n - 1) / n
                                                                                              : 1.0;
  return S * factor / (row.at("busbw_GBps").get<double>() * 1e9);
}

// The geometric mean of the factor by which simulated and published differ, less 1 (an
// over- and an under-estimate do not cancel): 0.05 is "5 % off, typically".
double geomean_error(const std::vector<Row>& rows) {
  if (rows.empty()) return 0;
  double sum = 0;
  for (const Row& r : rows) sum += std::abs(std::log(r.simulated_s / r.published_s));
  return std::exp(sum / static_cast<double>(rows.size())) - 1;
}

}  // namespace

TEST(NcclTestsReference, TheSimulatorIsWithinTheGoalsOfEveryPublishedTable) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(profiles_dir()) / "reference";
  std::vector<fs::path> tables;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".json") tables.push_back(entry.path());
  std::sort(tables.begin(), tables.end());
  ASSERT_GE(tables.size(), 6u) << "the reference tables are missing from " << dir;
  std::map<std::string, std::vector<Row>> small, middle, large;  // per profile: < 1 MiB, between, ≥ 64 MiB
  for (const fs::path& file : tables) {
    std::ifstream in(file);
    const json t = json::parse(in);
    const std::string profile_name = t.at("profile");
    const std::string op_name = t.at("op");
    const Collective op = op_name == "all_reduce" ? Collective::all_reduce : Collective::all_gather;
    ASSERT_TRUE(op_name == "all_reduce" || op_name == "all_gather") << file;
    for (const char* key : {"source", "nccl_version", "machine"}) ASSERT_TRUE(t.contains(key)) << file << " lacks " << key;
    // A table marked "goals": false is printed, not held to the goals (it says why).
    const bool goals = t.value("goals", true);
    const std::string key = goals ? profile_name : file.stem().string() + " (no goal)";
    if (!goals) std::printf("\n%s: %s", file.filename().c_str(), t.at("why_no_goals").get<std::string>().c_str());
    const int nodes = t.at("nodes"), per_node = t.at("devices_per_node"), n = nodes * per_node;
    const HardwareProfile base = load_profile(profile_name);
    const CostModel model(reshaped(base, nodes, per_node));
    std::printf("\n%s %s on %d × %d — %s, NCCL %s\n  %s\n", profile_name.c_str(), op_name.c_str(), nodes, per_node,
                t.at("machine").get<std::string>().c_str(), t.at("nccl_version").get<std::string>().c_str(),
                t.at("source").at("url").get<std::string>().c_str());
    std::printf("  %14s %14s %14s %9s\n", "bytes", "published µs", "sim µs", "error");
    for (const json& row : t.at("rows")) {
      Row r{row.at("bytes").get<double>(), published_seconds(row, op, n), 0};
      r.simulated_s = model.collective_seconds(op, r.bytes, n);
      std::printf("  %14.0f %14.2f %14.2f %+8.1f%%\n", r.bytes, r.published_s * 1e6, r.simulated_s * 1e6,
                  100 * (r.simulated_s / r.published_s - 1));
      if (r.bytes < (1 << 20)) small[key].push_back(r);
      if (r.bytes >= (64 << 20)) large[key].push_back(r);
      if (r.bytes >= (1 << 20) && r.bytes < (64 << 20)) middle[key].push_back(r);
    }
  }
  std::printf("\n%-42s %18s %18s %18s\n", "profile", "error < 1 MiB", "≥ 64 MiB", "between (no goal)");
  int held = 0;
  for (const auto& [name, rows] : large) {
    const double e_small = geomean_error(small[name]), e_large = geomean_error(rows);
    std::printf("%-42s %12.1f %% (%2zu) %12.1f %% (%2zu) %12.1f %% (%2zu)\n", name.c_str(), 100 * e_small,
                small[name].size(), 100 * e_large, rows.size(), 100 * geomean_error(middle[name]), middle[name].size());
    if (name.find("(no goal)") != std::string::npos) continue;
    ++held;
    EXPECT_LE(e_small, 0.15) << name << ": geometric-mean error below 1 MiB (goal ≤ 15 %)";
    EXPECT_LE(e_large, 0.05) << name << ": geometric-mean error at ≥ 64 MiB (goal ≤ 5 %)";
  }
  EXPECT_EQ(held, 4) << "a profile with a table but no row at ≥ 64 MiB";
}
