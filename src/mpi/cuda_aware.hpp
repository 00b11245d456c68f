// Whether the MPI underneath moves device memory itself (LOOM_MPI_CUDA_AWARE).
// Where it does, contiguous device messages to ranks of other nodes go
// straight to it (GPUDirect paths Loom cannot reach from above the MPI);
// everything else keeps Loom's own methods.
#pragma once

#include <string>

namespace loom::mpi {

// This process's verdict, after MPI_Init: the knob when forced (1/0), else
// what the MPI says of itself. *why says how it was decided.
bool mpi_moves_device_memory(std::string* why);

}  // namespace loom::mpi
