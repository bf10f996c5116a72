#pragma once
// What `scalelab calibrate` measures, probe by probe: its name, what it times, and the profile
// fields it writes — the table `scalelab calibrate --list` prints (as nccl-tests and ggml's
// test-backend-ops list theirs).
#include <string>
#include <vector>

namespace scalelab {

struct CalibrationProbe {
  const char* name;
  const char* measures;  // what is timed, and how
  const char* writes;    // the profile fields it gives (device.* unless named otherwise)
  bool cpu, cuda;        // on which device calibrate runs it
};

// About in the order calibrate runs them (on the cpu the host cache is swept three times — at the
// start, after the GEMMs and after the copies — and the round trip timed at the start, middle and end).
const std::vector<CalibrationProbe>& calibration_probes();

// The table, for `calibrate --list`: one probe a row, the devices it runs on, what it writes.
std::string format_calibration_probes();

}  // namespace scalelab
