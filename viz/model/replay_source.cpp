#include <algorithm>
#include <climits>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "viz/model/data_source.h"

namespace scalelab::viz {

namespace {

const char* kHowToWrite = "write one with scalelab train --trace FILE";

TraceContents read_scalelab_trace(const std::string& path) {
  TraceContents t;
  try {
    t = read_chrome_trace(path);
  } catch (const Error& e) {
    // The trace reader says what is wrong with the file; we add how to get a good one, unless it did.
    const std::string inner = e.what();
    throw Error("dash", path + ": cannot replay: " + inner +
                            (inner.find("scalelab train --trace") == std::string::npos ? std::string(" — ") + kHowToWrite : ""));
  }
  // Any Chrome trace parses; ours carry the device names and at least one op. Without them the
  // panels would be empty and the user would not know why.
  if (t.info.devices.empty() && t.events.empty())
    throw Error("dash", path + ": not a scalelab trace (no devices, no events) — " + kHowToWrite);
  if (t.events.empty())
    throw Error("dash", path + ": the trace holds no events (the run did no work?) — " + kHowToWrite);
  return t;
}

}  // namespace

ReplaySource::ReplaySource(std::string path, int copies) : path_(std::move(path)), contents_(read_scalelab_trace(path_)) {
  if (copies > 1) tile_trace(contents_, copies);
}

void tile_trace(TraceContents& t, int copies) {
  if (copies <= 1 || t.events.empty()) return;
  int64_t lo = INT64_MAX, hi = INT64_MIN, steps = 0;
  // Flow ids numbered 0, 1, … first: a sub-group's run to 2^53, and the copies count on from them.
  std::unordered_map<int64_t, int64_t> dense;
  for (Event& e : t.events) {
    lo = std::min(lo, e.t_begin_ns);
    hi = std::max(hi, e.t_end_ns);
    steps = std::max(steps, e.step + 1);
    if (e.flow_id >= 0) e.flow_id = dense.try_emplace(e.flow_id, static_cast<int64_t>(dense.size())).first->second;
  }
  const auto flows = static_cast<int64_t>(dense.size());
  const int64_t span = hi - lo + 1;
  const size_t n = t.events.size(), nm = t.memory.size(), nk = t.metrics.size();
  t.events.reserve(n * static_cast<size_t>(copies));
  t.memory.reserve(nm * static_cast<size_t>(copies));
  t.metrics.reserve(nk * static_cast<size_t>(copies));
  for (int c = 1; c < copies; ++c) {
    for (size_t i = 0; i < n; ++i) {
      Event e = t.events[i];
      e.t_begin_ns += c * span;
      e.t_end_ns += c * span;
      if (e.step >= 0) e.step += c * steps;
      if (e.flow_id >= 0) e.flow_id += c * flows;
      t.events.push_back(std::move(e));
    }
    for (size_t i = 0; i < nm; ++i) {
      MemorySample m = t.memory[i];
      m.t_ns += c * span;
      t.memory.push_back(m);
    }
    for (size_t i = 0; i < nk; ++i) {
      Metric m = t.metrics[i];
      m.step += c * steps;
      t.metrics.push_back(std::move(m));
    }
  }
}

bool ReplaySource::update(DashboardModel& model) {
  if (delivered_) return false;
  delivered_ = true;
  model.clear();
  model.set_info(std::move(contents_.info), path_);
  model.append(std::move(contents_.events), std::move(contents_.memory), std::move(contents_.metrics));
  model.rebuild();
  return true;
}

void load_replay(const std::string& path, DashboardModel& model) {
  ReplaySource source(path);
  source.update(model);
}

}  // namespace scalelab::viz
