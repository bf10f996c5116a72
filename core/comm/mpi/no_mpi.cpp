// Built when MPI is absent: the mpi backend says what is missing instead of failing to link.
#include <cstdlib>

#include "core/comm/backends.h"
#include "core/error.h"

namespace scalelab {

namespace {
const char* kWhy =
    "scalelab was built without MPI — apt-get install libopenmpi-dev openmpi-bin and rebuild, or use --comm threads|shm";
}

bool mpi_available() { return false; }

// Still true under mpirun, so a caller can say that this build cannot use the ranks mpirun started.
bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK"); }

std::unique_ptr<ProcessGroup> make_mpi_group(CommOptions) { throw UsageError("mpi", kWhy); }

}  // namespace scalelab
