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

// How a node's ranks use its GPUs. More ranks than GPUs means some share
// one, and without MPS the GPU time-slices between their processes: every
// message then costs about 150 us, whatever the library.
struct GpuSharing {
  int ranks_on_node = 1;
  int gpus = 0;               // distinct GPUs the node's ranks see (0: none, or host test mode)
  bool mps = false;           // an MPS control daemon's pipe exists
  bool first_on_node = true;  // this is the node's lowest world rank
  bool shared() const { return gpus > 0 && ranks_on_node > gpus; }
};
// Collective over MPI_COMM_WORLD. Counted from the ranks of the node and the
// distinct GPUs they see (by UUID), not from the devices the ranks use:
// MPI_Init usually comes before a program picks its device.
GpuSharing gpu_sharing(bool host_mode);
// The warning for ranks sharing a GPU without MPS; "" when there is none.
std::string sharing_warning(const GpuSharing& s);
// The MPS control daemon's pipe ($CUDA_MPS_PIPE_DIRECTORY, else
// /tmp/nvidia-mps) exists.
bool mps_running();

}  // namespace loom::transport
