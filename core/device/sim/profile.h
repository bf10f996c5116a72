#pragma once
// A hardware profile: the public figures of a machine that the sim cost model prices ops with, and
// for a calibrated host its HostCalibration. Profiles are JSON files in profiles/, each figure with
// its source noted in the file.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace scalelab {

// Efficiency by size: the share of a peak an op reaches as a function of its size, from a table
// of measurements, interpolated linearly in log(size); held flat beyond the largest size, and below
// the smallest the time is held (the share falls in proportion to the size). The time it stands for
// is the whole call (launch included): small ops are far from peak because of it. A GEMM's size is
// m·n·k and its peak the FLOP/s; an element-wise op's size is the bytes it touches and its peak the
// memory bandwidth. A calibrated host also measures each size cold (`efficiency_cold`: the caches
// flushed first); `cold` in [0, 1] is the share of the op's data that comes from DRAM
// (HostCalibration::cold_share), and the hot and cold times blend by it.
struct SizeCurve {
  std::vector<double> sizes;            // strictly increasing, > 0
  std::vector<double> efficiency;       // each in (0, 1]
  std::vector<double> efficiency_cold;  // empty, or one per size in (0, 1]
  bool empty() const { return sizes.empty(); }
  double at(double size, double cold = 0) const;
};

struct LinkSpec {
  std::string kind;            // nvlink, nvswitch, pcie, infiniband, memory
  double bandwidth_Bps = 0;    // one direction, per device
  double latency_s = 0;        // α of the α-β model
  // A copy's share of bandwidth_Bps by its bytes, measured (a calibrated host: memcpy runs at the
  // caches' speed while it fits them, at DRAM's beyond); empty: α + bytes / bandwidth_Bps.
  SizeCurve curve;
};

// How NCCL-like collectives behave on the machine, beyond its links' raw figures (the profile's
// optional "collectives" section; see docs/DESIGN.md, "The cost model"). A profile without the
// section gets the textbook ring: the links' α per step, their raw bandwidth, one protocol.
enum class Protocol : uint8_t { ll, ll128, simple };
const char* protocol_name(Protocol p);  // "LL", "LL128", "Simple": as NCCL and the profiles write them

// A calibrated host's collective, timed: seconds per call by its payload (as `bench comm` counts
// it), on the ranks it was measured with. Between sizes a straight line in log-log; below the
// smallest its time, above the largest in proportion to the bytes.
struct TimedCollective {
  int ranks = 0;
  std::vector<double> bytes;    // strictly increasing, > 0
  std::vector<double> seconds;  // one per size, > 0
  double at(double payload) const;
};

struct CollectiveSpec {
  bool calibrated = false;          // the section is present
  double launch_s = 0;              // fixed cost of one collective kernel
  double intra_hop_s = 0;           // per ring step inside a node (Simple protocol); default the link's α
  double inter_hop_s = 0;           // per ring step between nodes; default the link's α
  double intra_efficiency = 1;      // achieved ÷ raw bandwidth of the links inside a node
  double inter_efficiency = 1;      // achieved ÷ raw bandwidth of a NIC
  double net_overhead_s = 0;        // once per collective that crosses nodes (the network proxy)
  std::vector<Protocol> protocols{Protocol::simple};
  bool tree = false;                // NCCL's tree for all-reduce across nodes
  double nvls_efficiency = 0;       // NVLink SHARP all-reduce in an NVSwitch node: S / (this × B); 0 = none
  double nvls_latency_s = 0;
  // NVLS-tree (all-reduce across NVSwitch nodes): its fixed cost beyond NVLS's own — the pipeline
  // through NVSwitch, the NICs and NVSwitch again fills before it streams.
  double nvls_tree_latency_s = 0;
  double shared_host_Bps = 0;       // PCIe through the host: what all devices of a node share; 0 = none
  // Hybrid cube mesh (DGX-1): {ranks, links a ring over ranks 0..ranks−1 can use}, ascending, and
  // the device's link count; empty = every rank reaches every other on the full bandwidth.
  std::vector<std::pair<int, int>> ring_links;
  int links_per_device = 0;
};

// The compute side of a profile that has curves: one per kind of GEMM. f32 is PyTorch's default
// (no TF32); tf32 prices f32 GEMMs when the profile's `tf32` is on. An empty curve: that kind
// falls back to the single gemm_efficiency.
struct GemmCurves {
  SizeCurve f32, tf32, f16, bf16;
  std::string source;  // where the figures come from (published table, or `scalelab calibrate`)
};

// GEMMs measured shape by shape (a calibrated host, f32): a GEMM is priced by the measured shapes
// nearest to it of its own transposition — the forward (x·Wᵀ), dW (dyᵀ·x) and dx (dy·W) shapes of
// one m·n·k run at different rates, which a curve by m·n·k alone averages away.
struct GemmPoint {
  double m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  double seconds = 0;
  double seconds_cold = 0;  // the caches flushed first; 0: not measured
  // Hot, C added to (beta = 1), as a gradient accumulates over micro-batches; 0: not measured
  // (OpenBLAS clears C in a pass of its own before a beta = 0 GEMM, which beta = 1 skips).
  double seconds_accumulate = 0;
};
struct GemmTable {
  std::vector<GemmPoint> points;
  std::string source;
  bool empty() const { return points.empty(); }
  // The time of an m×n×k GEMM: where a point has its shape and transposition, that point's; else
  // the FLOP rate of the 4 nearest points of its transposition (distance in log2 m, n, k), their
  // log rates weighted by 1/distance². −1 when no point has its transposition. `cold`: as SizeCurve's,
  // the cold times less the least cold extra of the transposition's shapes (two or more).
  // `accumulate`: C is added to — each point's time × its seconds_accumulate / seconds where it
  // was measured so.
  double seconds(double m, double n, double k, bool trans_a, bool trans_b, double cold = 0, bool accumulate = false) const;
};

// What `scalelab calibrate` measured of the host that runs a cpu (or cuda) device, beyond the
// figures a published cluster profile has (docs/calibration.md). The cost model reads it only
// where a profile has it: a sim run on a published profile prices none of it.
struct HostCalibration {
  GemmTable gemm_table;  // f32 GEMMs by shape; priced before the f32 curve (unless tf32)
  // The last-level cache the node's devices share, in effect (0: none modelled). A tensor used once
  // a step is touched again after a step's bytes have passed through the cache: under this, it is
  // still there; past it a share of its data comes from DRAM, all of it from twice this
  // (cold share = clamp(bytes between touches / this − 1, 0, 1)).
  double host_cache_bytes = 0;
  // … or, where calibrate measured it, the cold share itself by the bytes moved since a touch: 0
  // below the first point, linear between points, 1 past the last.
  struct ColdShareCurve {
    std::vector<double> bytes, share;  // bytes moved, increasing; the cold share, 0 … 1, not falling
  } host_cache_curve;
  // How much a byte touched again within a step counts toward pushing a tensor out of the cache:
  // 0 — only the distinct bytes count (an LRU cache); 1 — every byte moved counts.
  double host_cache_retouch = 1;
  // The gap when the host's cores pass from one device's thread to another's (the next thread
  // wakes; HostCores, core/device/clock.h), and what a GEMM takes beyond its own time right after
  // such a pass: the re-timing of `train --predict` (calibration/host_turns.h) puts them in.
  double turn_handoff_s = 0;
  double turn_gemm_extra_s = 0;
  // The turn-taking threads keep to one core, OpenBLAS's helpers to the others
  // (keep_turns_off_blas_helper_cores, core/device/host_cores.h): a threads collective's ranks then copy
  // and add on that one core, at its pace whether the data are cached or not.
  bool turns_on_one_core = false;
  // A cache line's round trip between the turn-taker's core and the first helper's when calibrated
  // (core_round_trip_s, core/device/host_cores.h). Not priced: `train --predict` and `bench predict`
  // compare it with now to tell whether the host has placed the cores otherwise.
  double core_round_trip_s = 0;
  // A calibrated cuda device as scalelab runs it: the host waits for each op to end, then spends
  // this long before issuing the next; the sim then starts each op of a device that much after its
  // last op ended. < 0: the host queues ops ahead of the GPU (nothing waits).
  double host_op_gap_s = -1;
  // Collectives timed on this host: (collective, ranks) → seconds by payload (as `bench comm`
  // counts it). A call on a rank count not timed, or that leaves the node, gets the closed forms.
  std::map<std::pair<std::string, int>, TimedCollective> collectives;
  // calibrate's record (machine, date, fits, raw measurements) as JSON, kept whole so a trace says
  // what its figures came from; machine and date are read out of it for the dashboard's Run bar.
  std::string record;
  std::string machine, date;

  // The cold share of an op's data when `bytes` have passed through the cache since it was touched.
  double cold_share(double bytes) const;
  // The bytes that pass through the cache between two touches of a tensor used once a step, for a
  // device that moved `moved` bytes in its last step while holding `held` bytes of memory.
  double bytes_between_touches(double moved, double held) const;
};

// A hardware profile: a cluster's devices, their peaks and curves, the links between them and how
// its collectives behave — the figures a student reads — and, for a profile `scalelab calibrate`
// wrote, the host calibration beside them.
struct HardwareProfile {
  std::string name;
  std::string description;
  std::string device_model;
  int nodes = 1;
  int devices_per_node = 1;
  double peak_flops_f32 = 0;
  double peak_flops_f16 = 0;
  double peak_flops_bf16 = 0;
  double peak_flops_tf32 = 0;     // f32 GEMMs on tensor cores (0: the device has none)
  double gemm_efficiency = 1.0;  // the share of peak a large GEMM reaches (without a curve)
  GemmCurves gemm_curves;        // by size; empty curves fall back to gemm_efficiency
  bool tf32 = false;             // f32 GEMMs run as TF32 (PyTorch's allow_tf32; `--tf32`)
  double mem_bandwidth_Bps = 0;
  // Element-wise ops by kind (the event's kind: "sgd", "bias_relu", …), each a share of
  // mem_bandwidth_Bps by bytes touched; a kind without one is priced bytes / mem_bw + launch.
  std::map<std::string, SizeCurve> elementwise_curves;
  std::string elementwise_curves_source;
  int64_t mem_capacity_bytes = 0;
  double launch_overhead_s = 0;
  LinkSpec host_link;   // host <-> device copies
  LinkSpec intra_node;  // device <-> device inside a node
  LinkSpec inter_node;  // between nodes
  CollectiveSpec collectives;
  // The host calibration (a profile `scalelab calibrate` wrote); none for a published profile.
  std::optional<HostCalibration> calibration;
  std::string path;     // where it was loaded from

  int device_count() const { return nodes * devices_per_node; }
  double peak_flops(DType dtype) const;
  // The peak and the curve an f32/f16/bf16 GEMM is priced with (TF32's when `tf32` is on); the
  // curve is null when the profile has none for it.
  double gemm_peak_flops(DType dtype) const;
  const SizeCurve* gemm_curve(DType dtype) const;
  // HostCalibration's, or what a profile without one prices: nothing cold, every byte moved counts.
  double cold_share(double bytes) const { return calibration ? calibration->cold_share(bytes) : 0; }
  double bytes_between_touches(double moved, double held) const {
    return calibration ? calibration->bytes_between_touches(moved, held) : moved;
  }
};

// The range every figure of a profile may take, with its unit (profiles/README.md shows the same
// table): a real machine's figures lie inside; one outside is a typo — a missing exponent, a unit
// in the wrong place — that would price every op absurdly (a bandwidth of 1e-300 B/s makes one op
// outlast the clock's int64 ns). The parser refuses it, naming the field, the value and the range.
struct FigureRange {
  const char* field;     // as the files write it: `*` any key, `[]` each element of a list
  double min, max;       // inclusive
  const char* unit;      // "B/s", "s", "FLOP/s", "B", "share", "m·n·k", "count"
  const char* in_words;  // the range for a reader: "1 MB/s to 1 PB/s"
  bool zero_means_none;  // 0 is allowed as well (the feature is absent)
};
const std::vector<FigureRange>& profile_figure_ranges();

// Parses a profile; throws Error("hw", ...) naming the file and the bad or missing field.
HardwareProfile parse_profile(const std::string& json_text, const std::string& origin);
// The profile in the profile files' format (a calibrated one with its "calibration" record; without
// "sources"): parse_profile reads it back to the same figures. A trace carries its devices'
// profiles this way.
std::string profile_to_json(const HardwareProfile& profile);
// `name_or_path` is a file path, or the name of a file in the profiles directory (without .json).
HardwareProfile load_profile(const std::string& name_or_path);
// The file load_profile reads for `name_or_path`; "" when there is none.
std::string profile_file(const std::string& name_or_path);
// The profile with another cluster shape (0 keeps the profile's): the same devices and links,
// `nodes` nodes of `devices_per_node`; the name says so ("h100-ib-16x8@1024x8"). Throws
// UsageError("hw", ...) for a count < 0, or for more than one node of a profile that describes no
// link between nodes.
HardwareProfile reshaped(const HardwareProfile& profile, int nodes, int devices_per_node);
// Names of the shipped profiles.
std::vector<std::string> list_profiles();
// The directory holding the shipped profiles: $SCALELAB_PROFILES, else next to the sources.
std::string profiles_dir();

}  // namespace scalelab
