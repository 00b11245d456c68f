#include "mpi/cuda_aware.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

#include "util/knobs.hpp"

namespace loom::mpi {
namespace {

// Paths of the shared objects loaded now that contain each of `names`.
struct Loaded {
  const char* const* names;
  int n;
  bool found[4];
};

int visit(dl_phdr_info* info, size_t, void* data) {
  auto* l = static_cast<Loaded*>(data);
  if (!info->dlpi_name) return 0;
  for (int i = 0; i < l->n; ++i)
    if (std::strstr(info->dlpi_name, l->names[i])) l->found[i] = true;
  return 0;
}

}  // namespace

bool mpi_moves_device_memory(std::string* why) {
  const std::string k = knobs().mpi_cuda_aware;
  if (k == "1" || k == "yes" || k == "on") {
    *why = "LOOM_MPI_CUDA_AWARE=1";
    return true;
  }
  if (k != "auto") {
    *why = "LOOM_MPI_CUDA_AWARE=" + k;
    return false;
  }
  // The MPI's own answer (Open MPI's mpi-ext, MPICH 4): looked up at run
  // time, as the MPI Loom was built against need not have it.
  using QueryFn = int (*)();
  if (auto q = reinterpret_cast<QueryFn>(dlsym(RTLD_DEFAULT, "MPIX_Query_cuda_support"))) {
    if (q()) {
      *why = "MPIX_Query_cuda_support() says so";
      return true;
    }
  }
  // Open MPI over UCX moves device memory where UCX was built with CUDA,
  // whatever Open MPI was built with: its UCX PML and UCX's CUDA transport
  // are both loaded once MPI_Init has chosen them (unused components are
  // closed again).
  const char* names[] = {"mca_pml_ucx", "libuct_cuda"};
  Loaded l{names, 2, {false, false, false, false}};
  dl_iterate_phdr(visit, &l);
  if (l.found[0] && l.found[1]) {
    *why = "Open MPI's pml ucx over UCX with CUDA";
    return true;
  }
  *why = "the MPI does not say it moves device memory";
  return false;
}

}  // namespace loom::mpi
