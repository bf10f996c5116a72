// Built when CUDA is absent: the cuda device explains what is missing instead of failing to link.
#include "core/device/device.h"
#include "core/error.h"

namespace scalelab {

bool cuda_available() { return false; }
int cuda_device_count() { return 0; }

std::string cuda_device_name(int) { return ""; }

std::unique_ptr<Executor> make_cuda_executor(int, const std::string&, int, bool) {
  throw UsageError("cuda", "scalelab was built without CUDA — install the CUDA toolkit and rebuild with "
                           "`cmake --preset cuda`, or use --device cpu or --device sim");
}

std::unique_ptr<Clock> make_cuda_clock(Executor&, WallClock::time_point) {
  throw UsageError("cuda", "scalelab was built without CUDA — use --device cpu or --device sim");
}

}  // namespace scalelab
