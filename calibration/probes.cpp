#include "calibration/probes.h"

namespace scalelab {

std::string format_calibration_probes() {
  std::string out = "# scalelab calibrate: the probes (fields are device.* unless named)\n";
  for (const CalibrationProbe& p : calibration_probes()) {
    const std::string devices = p.cpu && p.cuda ? "cpu, cuda" : p.cpu ? "cpu" : "cuda";
    const std::string name = p.name;
    out += name + std::string(name.size() < 16 ? 16 - name.size() : 1, ' ') + devices + "\n";
    out += "    measures  " + std::string(p.measures) + "\n";
    out += "    writes    " + std::string(p.writes) + "\n";
  }
  for (const char* device : {"cpu", "cuda"}) {
    out += std::string("# run on ") + device + " in this order:";
    for (const std::string& name : calibration_schedule(device)) out += " " + name;
    out += "\n";
  }
  return out;
}

}  // namespace scalelab
