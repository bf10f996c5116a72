#pragma once
// What `scalelab calibrate` measures, probe by probe: its name, what it times, the profile fields it
// writes and how it runs on each device — the table `scalelab calibrate --list` prints and the loop
// of calibrate runs in the order of a device's schedule (as nccl-tests and ggml's test-backend-ops
// list and run theirs). The probes themselves: calibration/calibrate.cpp.
#include <string>
#include <vector>

namespace scalelab {

// What the probes of one calibration share: the options, the devices, the profile being written,
// the raw-measurement record, the summary and the progress line (calibration/calibrate.cpp).
struct CalibrationSession;
using ProbeRun = void (*)(CalibrationSession&);

struct CalibrationProbe {
  const char* name;
  const char* measures;  // what is timed, and how
  const char* writes;    // the profile fields it gives (device.* unless named otherwise)
  ProbeRun cpu;          // how it runs on the cpu device; none: it is not run there
  ProbeRun cuda;         // … and on the cuda device
};

// The probes, in the order their lines come in calibrate's summary.
const std::vector<CalibrationProbe>& calibration_probes();

// The probes' names in the order calibrate runs them on `device` (cpu | cuda; another is refused):
// on the cpu host_cache and core_round_trip run three times, at the start, middle and end.
const std::vector<std::string>& calibration_schedule(const std::string& device);

// The table, for `calibrate --list`: one probe a row, the devices it runs on, what it writes; then
// each device's schedule.
std::string format_calibration_probes();

}  // namespace scalelab
