#include <utility>

#include "core/error.h"
#include "viz/data_source.h"

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

ReplaySource::ReplaySource(std::string path) : path_(std::move(path)), contents_(read_scalelab_trace(path_)) {}

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
