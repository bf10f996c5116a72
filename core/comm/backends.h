#pragma once
// The backends that need a library (Open MPI, NCCL): each is built from its folder when the
// library is found, else from its stub (no_mpi.cpp, no_nccl.cpp), which says what is missing.
#include <memory>
#include <string>

#include "core/comm/process_group.h"

namespace scalelab {

// ---- mpi (core/comm/mpi) --------------------------------------------------------------------

// True when scalelab was built with MPI.
bool mpi_available();
// True when this process was started by mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK is set).
bool launched_by_mpirun();
// This process's rank of MPI_COMM_WORLD. Initialises MPI on first use (MPI_Init_thread, at least
// MPI_THREAD_SERIALIZED) and finalises it once at process exit.
std::unique_ptr<ProcessGroup> make_mpi_group(CommOptions options = {});

// ---- nccl (core/comm/nccl) ------------------------------------------------------------------

// How the ranks agree on NCCL's unique id.
struct NcclBootstrap {
  std::string unique_id_file;  // empty: bootstrap through MPI (rank 0 broadcasts the id)
};

// One rank of an NCCL communicator on GPU `cuda_device`; tensors must live on that GPU.
std::unique_ptr<ProcessGroup> make_nccl_group(int rank, int size, int cuda_device, const NcclBootstrap& bootstrap,
                                              CommOptions options = {});
// True when scalelab was built with NCCL and a CUDA device is visible.
bool nccl_available();

}  // namespace scalelab
