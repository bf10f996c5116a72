// Built when NCCL (or CUDA) is absent: the nccl backend says what is missing instead of failing to link.
#include "core/comm/backends.h"
#include "core/error.h"

namespace scalelab {

bool nccl_available() { return false; }

std::unique_ptr<ProcessGroup> make_nccl_group(int, int, int, const NcclBootstrap&, CommOptions) {
  throw UsageError("nccl", "scalelab was built without NCCL — it needs an NVIDIA GPU machine with the CUDA toolkit and "
                           "NCCL (apt-get install libnccl-dev, or NCCL from NVIDIA), then a rebuild (cmake --preset "
                           "cuda); or use --comm mpi|threads|shm");
}

}  // namespace scalelab
