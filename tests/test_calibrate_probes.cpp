// `scalelab calibrate` is a table of probes run by one loop over a schedule per device (issue 37):
// every probe a schedule names runs on that device, every probe that runs on a device is in its
// schedule, and `calibrate --list` prints the table and the schedules the loop runs. Options that
// cannot be measured are refused before anything is.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "calibration/calibration.h"
#include "calibration/probes.h"
#include "core/error.h"

using namespace scalelab;

namespace {

const CalibrationProbe* probe_named(const std::string& name) {
  for (const CalibrationProbe& p : calibration_probes())
    if (name == p.name) return &p;
  return nullptr;
}

ProbeRun run_on(const CalibrationProbe& p, const std::string& device) { return device == "cuda" ? p.cuda : p.cpu; }

}  // namespace

TEST(CalibrateProbes, EveryProbeHasANameWhatItMeasuresAndWhatItWritesAndRunsSomewhere) {
  std::set<std::string> names;
  for (const CalibrationProbe& p : calibration_probes()) {
    EXPECT_TRUE(names.insert(p.name).second) << "two probes are named " << p.name;
    EXPECT_GT(std::string(p.measures).size(), 10u) << p.name;
    EXPECT_GT(std::string(p.writes).size(), 5u) << p.name;
    EXPECT_TRUE(p.cpu || p.cuda) << p.name << " runs on no device";
  }
}

TEST(CalibrateProbes, EachScheduleRunsExactlyTheProbesOfItsDevice) {
  for (const std::string device : {"cpu", "cuda"}) {
    const std::vector<std::string>& schedule = calibration_schedule(device);
    for (const std::string& name : schedule) {
      const CalibrationProbe* p = probe_named(name);
      ASSERT_NE(p, nullptr) << device << "'s schedule names " << name << ", which is no probe";
      EXPECT_NE(run_on(*p, device), nullptr) << device << "'s schedule names " << name << ", which does not run on " << device;
    }
    for (const CalibrationProbe& p : calibration_probes()) {
      if (!run_on(p, device)) continue;
      EXPECT_NE(std::find(schedule.begin(), schedule.end(), p.name), schedule.end()) << p.name << " runs on " << device << " but is not in its schedule";
    }
  }
}

TEST(CalibrateProbes, ProbesRunAfterThoseTheyNeed) {
  // collectives prices its ring on the copies' link, host_gap takes off the tiny op's overhead,
  // device_memory rescales the element-wise curves; on the cpu the cache is swept and the cores'
  // round trip timed at the start, middle and end.
  const auto position = [](const std::vector<std::string>& s, const std::string& name) {
    return std::find(s.begin(), s.end(), name) - s.begin();
  };
  for (const std::string device : {"cpu", "cuda"}) {
    const std::vector<std::string>& s = calibration_schedule(device);
    EXPECT_LT(position(s, "peer_copy"), position(s, "collectives")) << device;
  }
  const std::vector<std::string>& cuda = calibration_schedule("cuda");
  EXPECT_LT(position(cuda, "launch"), position(cuda, "host_gap"));
  EXPECT_LT(position(cuda, "elementwise"), position(cuda, "device_memory"));
  const std::vector<std::string>& cpu = calibration_schedule("cpu");
  EXPECT_EQ(std::count(cpu.begin(), cpu.end(), "host_cache"), 3);
  EXPECT_EQ(std::count(cpu.begin(), cpu.end(), "core_round_trip"), 3);
  EXPECT_EQ(cpu.front(), "core_round_trip");
  EXPECT_EQ(cpu.back(), "core_round_trip");
}

TEST(CalibrateProbes, ListPrintsTheTableAndTheSchedules) {
  const std::string listed = format_calibration_probes();
  for (const CalibrationProbe& p : calibration_probes()) {
    EXPECT_NE(listed.find(std::string(p.name) + " "), std::string::npos) << p.name;
    EXPECT_NE(listed.find(p.writes), std::string::npos) << p.name;
  }
  for (const std::string device : {"cpu", "cuda"}) {
    std::string line = "# run on " + device + " in this order:";
    for (const std::string& name : calibration_schedule(device)) line += " " + name;
    EXPECT_NE(listed.find(line + "\n"), std::string::npos) << listed;
  }
}

TEST(CalibrateProbes, AnotherDeviceOrTooFewRanksIsRefusedBeforeMeasuring) {
  CalibrateOptions o;
  o.out = "calibrate-probes-test-never-written.json";
  o.device = "sim";
  try {
    run_calibrate(o);
    FAIL() << "--device sim was measured";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--device sim"), std::string::npos) << e.what();
  }
  o.device = "cpu";
  o.devices = 1;
  try {
    run_calibrate(o);
    FAIL() << "--devices 1 was measured";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--devices 1"), std::string::npos) << e.what();
  }
}
