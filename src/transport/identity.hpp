// Which machine a profile belongs to: the GPU and the MPI library. The
// runtime looks its profile up by this at MPI_Init; loom-measure writes it.
#pragma once

#include <string>

#include "model/profile.hpp"

namespace loom::transport {

// gpu: the current CUDA device's name, or "host-test" in the host test mode
// (host_mode), in a build without CUDA and on a machine without a GPU.
// mpi: the first line of MPI_Get_library_version, trimmed.
model::Identity machine_identity(bool host_mode);

// gethostname(), "" when it fails.
std::string host_name();

}  // namespace loom::transport
