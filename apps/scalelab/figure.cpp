// `scalelab figure`: one chart from scalelab's own JSON, measured next to the formula.
//   bubble       `scale --json` of a pipeline over micro-batches: idle share vs (p−1)/(m+p−1)
//   zero-memory  `scale --json` of ddp (stage 0) and zero stages 1, 2 with Adam: weights + gradients
//                + optimizer state per device vs 16Ψ, 4Ψ+4Ψ+8Ψ/N, 4Ψ+12Ψ/N bytes (Ψ parameters)
//   busbw        `bench comm --json`: bus bandwidth vs message size, and the α-β model t = α + β·S
//                fitted to each stretch of rows of one protocol (sim rows name it; measured rows: one
//                fit): latency-bound below α/β, bandwidth-bound above
//   step-time    `scale --json` of ddp over N: the step, its exposed communication, and one all-reduce
//                of the gradients named by the algorithm the cost model picks at each N
#include "apps/scalelab/figure.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "apps/scalelab/svg_chart.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"

namespace scalelab {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  const std::string text = read_regular_file(path, "figure", 64 << 20, "give a file written by scalelab scale --json or bench comm --json");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError("figure", path + ": not JSON (" + json_reason(e) + ") — give a file written by scalelab --json");
  }
}

// A field every row must have; a missing one names the file and the command that writes it.
double field(const json& row, const char* name, const std::string& path, const char* writer) {
  if (!row.contains(name) || !row[name].is_number())
    throw UsageError("figure", path + ": a row without '" + name + "' — this figure reads the JSON of " + writer);
  return row[name].get<double>();
}

const json& rows_of(const json& j, const std::string& path, const char* writer) {
  if (!j.is_object() || !j.contains("rows") || !j["rows"].is_array() || j["rows"].empty())
    throw UsageError("figure", path + ": no rows — this figure reads the JSON of " + writer);
  return j["rows"];
}

std::string bubble(const std::vector<std::string>& files) {
  if (files.size() != 1) throw UsageError("figure", "bubble reads ONE file: scalelab scale --strategy pipeline --micro-batches 1..32 --json F");
  const char* writer = "scalelab scale --strategy pipeline --micro-batches 1..32";
  const json j = read_json(files[0]);
  std::vector<double> xs;
  // scale runs are sim dry runs: the idle share is the cost model's timeline, not a measurement.
  // Interleaved 1F1B (virtual_stages V > 1): (p−1)/(V·m+p−1).
  const int V = j.value("virtual_stages", 1);
  Series measured{"idle share (simulated)", "#d62728", {}},
      formula{V > 1 ? "(p−1)/(V·m+p−1), V = " + std::to_string(V) : "(p−1)/(m+p−1)", "#555", {}, true};
  int p = 0;
  for (const json& r : rows_of(j, files[0], writer)) {
    p = static_cast<int>(field(r, "devices", files[0], writer));
    const double m = field(r, "micro_batches", files[0], writer);
    xs.push_back(m);
    measured.y.push_back(field(r, "bubble_pct", files[0], writer));
    formula.y.push_back(100.0 * (p - 1) / (V * m + p - 1));
  }
  std::ostringstream s;
  // 520 wide: shown at 1.3× beside a slide's text, its 14 px text reads at 18.
  chart(s, 0, 0, 520, 340, "Pipeline bubble: p = " + std::to_string(p) + " stages", "micro-batches m",
        "idle share of the step (%)", xs, {measured, formula}, 0);
  return svg_document(520, 340, s.str(),
                      j.value("model", std::string()) + ", " + j.value("hw", std::string()) + " (simulated)");
}

std::string zero_memory(const std::vector<std::string>& files) {
  const char* writer = "scalelab scale --strategy ddp|zero --optimizer adam";
  // stage → (devices → bytes of weights + gradients + optimizer state on the fullest device)
  std::map<int, std::map<int, double>> by_stage;
  double psi = 0;
  std::string caption;
  for (const std::string& f : files) {
    const json j = read_json(f);
    if (j.value("optimizer", std::string()) != "adam")
      throw UsageError("figure", f + ": optimizer '" + j.value("optimizer", std::string("?")) +
                                     "' — the formulas are for Adam (8 bytes of state per parameter): run scale with --optimizer adam");
    if (!j.contains("parameters") || !j.contains("zero_stage"))
      throw UsageError("figure", f + ": no 'parameters' or 'zero_stage' — written by an older scalelab? run scale --json again");
    psi = j["parameters"].get<double>();
    const int stage = j["zero_stage"].get<int>();
    caption = j.value("model", std::string()) + ", " + j.value("hw", std::string());
    for (const json& r : rows_of(j, f, writer)) {
      const json& mem = r.at("peak_bytes");
      const double bytes = mem.value("params", 0.0) + mem.value("grads", 0.0) + mem.value("optimizer", 0.0);
      by_stage[stage][static_cast<int>(field(r, "devices", f, writer))] = bytes;
    }
  }
  if (by_stage.empty()) throw UsageError("figure", "zero-memory needs --json files of scale runs (ddp, zero stage 1, 2)");
  std::vector<double> xs;
  for (const auto& [n, b] : by_stage.begin()->second) xs.push_back(n);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c"};
  std::vector<Series> series;
  for (const auto& [stage, points] : by_stage) {
    if (stage < 0 || stage > 2) throw UsageError("figure", "zero stage " + std::to_string(stage) + ": the figure knows stages 0 (ddp), 1, 2");
    // The ledger's bytes of a sim dry run: every allocation counted, nothing timed or measured.
    Series measured{stage == 0 ? "DDP (simulated run)" : "ZeRO-" + std::to_string(stage) + " (simulated run)", colors[stage], {}};
    Series formula{stage == 0 ? "16Ψ" : stage == 1 ? "8Ψ + 8Ψ/N" : "4Ψ + 12Ψ/N", colors[stage], {}, true};
    for (double n : xs) {
      const auto it = points.find(static_cast<int>(n));
      if (it == points.end())
        throw UsageError("figure", "zero-memory: stage " + std::to_string(stage) + " has no row for " + fmt(n) +
                                       " devices — run every stage over the same --devices");
      measured.y.push_back(it->second / gib);
      const double bytes = stage == 0 ? 16 * psi : stage == 1 ? 8 * psi + 8 * psi / n : 4 * psi + 12 * psi / n;
      formula.y.push_back(bytes / gib);
    }
    series.push_back(measured);
    series.push_back(formula);
  }
  double top = 0;
  for (const Series& se : series) top = std::max(top, *std::max_element(se.y.begin(), se.y.end()));
  std::ostringstream s;
  // 600 wide: shown at 1.3× on a slide, its 14 px text reads at 18.
  chart(s, 0, 0, 600, 340, "Model state per device (Ψ = " + fmt(psi, "%.3g") + ", Adam, fp32)", "devices N",
        "weights + grads + optimizer (GiB)", xs, series, 1.5 * top);  // the legend above the lines
  return svg_document(600, 340, s.str(), "scalelab scale: " + caption + " (simulated, dry run)");
}

// The α-β line t = α + β·S through rows [first, last), least squares on the relative error (small
// and large messages count alike): minimise Σ ((α + β·S_i)/t_i − 1)², two normal equations.
// Fewer than two sizes, or no time per byte (β ≤ 0): no line, {0, 0}.
std::pair<double, double> fit_alpha_beta(const std::vector<double>& S, const std::vector<double>& t, size_t first, size_t last) {
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  for (size_t i = first; i < last; ++i) {
    const double u = 1 / t[i], v = S[i] / t[i];
    s00 += u * u, s01 += u * v, s11 += v * v, r0 += u, r1 += v;
  }
  const double det = s00 * s11 - s01 * s01;
  if (last - first < 2 || !(std::abs(det) > 1e-12 * s00 * s11)) return {0.0, 0.0};
  const double beta = (s00 * r1 - s01 * r0) / det;
  return beta > 0 ? std::pair{std::max(0.0, (r0 * s11 - r1 * s01) / det), beta} : std::pair{0.0, 0.0};
}

std::string busbw(const std::vector<std::string>& files) {
  const char* writer = "scalelab bench comm --json";
  if (files.size() != 1) throw UsageError("figure", "busbw reads ONE file: scalelab bench comm --json F");
  const json j = read_json(files[0]);
  std::vector<double> xs, t, bw;
  std::vector<std::string> regime;  // the algorithm/protocol of each row (sim), or "" (measured)
  double factor = 1;  // busbw / algbw: nccl-tests' 2(n−1)/n for an all-reduce
  for (const json& r : rows_of(j, files[0], writer)) {
    xs.push_back(field(r, "bytes", files[0], writer));
    t.push_back(1e-6 * field(r, "time_us", files[0], writer));
    if (t.back() <= 0) throw UsageError("figure", files[0] + ": a row with time_us ≤ 0 — not a measured run");
    bw.push_back(field(r, "busbw", files[0], writer));
    const double alg = field(r, "algbw", files[0], writer);
    if (alg > 0) factor = bw.back() / alg;
    regime.push_back(r.contains("protocol") && r["protocol"].is_string()
                         ? r.value("algorithm", std::string()) + " " + r["protocol"].get<std::string>()
                         : std::string());
  }
  if (xs.size() < 2) throw UsageError("figure", files[0] + ": the α-β fit needs two sizes or more");
  // One α-β line cannot follow the curve of a library that switches protocol (or algorithm) with
  // the size, as NCCL does and the sim with it: each protocol has its own α and bandwidth, and the
  // cheapest wins. So one line per stretch of rows of one protocol, each drawn over every size:
  // the curve runs along the best of them. Rows that name no protocol (a measured run) get one line.
  Series measured{j.value("simulated", false) ? "busbw (simulated)" : "busbw (measured)", "#1f77b4", {}};
  measured.y = bw;
  std::vector<Series> series{measured};
  const char* colors[] = {"#2ca02c", "#ff7f0e", "#d62728", "#9467bd", "#555"};
  for (size_t first = 0, k = 0; first < xs.size(); ++k) {
    size_t last = first + 1;
    while (last < xs.size() && regime[last] == regime[first]) ++last;
    const auto [alpha, beta] = fit_alpha_beta(xs, t, first, last);
    const std::string rows = regime[first].empty() ? "fit" : regime[first] + " (" + std::to_string(last - first) + " sizes)";
    first = last;
    if (beta <= 0) continue;  // a protocol on one size alone: no line through it
    Series line{rows + ": α = " + fmt(alpha * 1e6, "%.3g") + " µs, busbw → " + fmt(factor / beta * 1e-9, "%.3g") + " GB/s",
                colors[std::min<size_t>(k, 4)], {}, true};
    for (double S : xs) line.y.push_back(S / (alpha + beta * S) * factor * 1e-9);
    series.push_back(line);
  }
  if (series.size() == 1)
    throw UsageError("figure", files[0] + ": no α-β line — it needs two sizes or more of one protocol, timed longer for the larger");
  auto bytes_label = [](double v) {
    const char* units[] = {"B", "K", "M", "G"};
    int u = 0;
    while (v >= 1024 && u < 3) v /= 1024, ++u;
    return fmt(v) + units[u];
  };
  std::ostringstream s;
  // 580 wide: shown beside a slide's text at 1.3× its size, its 14 px text reads at 18.
  chart(s, 0, 0, 580, 400, j.value("op", std::string("all_reduce")) + ", " + std::to_string(j.value("ranks", 0)) +
                               " ranks: t = α + β·S", "message size S", "busbw (GB/s)", xs, series,
        1.3 * *std::max_element(measured.y.begin(), measured.y.end()),  // the legend above the lines
        bytes_label);
  return svg_document(580, 400, s.str(),
                      j.value("simulated", false) ? "scalelab bench comm --device sim --hw " + j.value("hw", std::string("?")) +
                                                        " (the cost model's times)"
                                                  : "scalelab bench comm --comm " + j.value("comm", std::string()) +
                                                        " (measured on this machine)");
}

// The step of a DDP-like sweep against N, and one all-reduce of all the gradients at each N named
// by the algorithm the cost model picks there: the slide's picture of why the step stops growing.
std::string step_time(const std::vector<std::string>& files) {
  const char* writer = "scalelab scale --json (of this build: rows name their all-reduce's algorithm)";
  if (files.size() != 1) throw UsageError("figure", "step-time reads ONE file: scalelab scale --json F");
  const json j = read_json(files[0]);
  std::vector<double> xs;
  Series step{"step", "#1f77b4", {}}, exposed{"exposed communication", "#d62728", {}};
  Series all_reduce{"one all-reduce of the gradients", "#555", {}, true};
  for (const json& r : rows_of(j, files[0], writer)) {
    xs.push_back(field(r, "devices", files[0], writer));
    step.y.push_back(field(r, "step_ms", files[0], writer));
    exposed.y.push_back(field(r, "exposed_comm_ms", files[0], writer));
    all_reduce.y.push_back(field(r, "grad_all_reduce_ms", files[0], writer));
    all_reduce.labels.push_back(r.value("grad_all_reduce_algorithm", std::string()));
  }
  std::ostringstream s;
  // 580 wide: shown at 1.3× on a slide, its 14 px text reads at 18.
  chart(s, 0, 0, 580, 400, "Step time, " + j.value("strategy", std::string()) + " on " + j.value("hw", std::string()),
        "devices N", "ms", xs, {step, exposed, all_reduce}, 0);
  return svg_document(580, 400, s.str(), "scalelab scale: " + j.value("model", std::string()) + " (simulated, dry run)");
}

}  // namespace

int run_figure(const FigureOptions& o) {
  check_output_path(o.out, "figure");
  std::vector<PathUse> paths = {{"--out", o.out, true}};
  for (const std::string& input : o.json) paths.push_back({"--json", input, false});
  check_distinct_paths(paths, "figure");
  std::string svg;
  if (o.kind == "bubble") svg = bubble(o.json);
  else if (o.kind == "zero-memory") svg = zero_memory(o.json);
  else if (o.kind == "busbw") svg = busbw(o.json);
  else if (o.kind == "step-time") svg = step_time(o.json);
  else throw UsageError("figure", "'" + o.kind + "': no such figure — bubble, zero-memory, busbw or step-time");
  write_file_atomically(o.out, svg, "figure");
  std::printf("[figure] %s: %s\n", o.kind.c_str(), o.out.c_str());
  return 0;
}

}  // namespace scalelab
