// MPI_Init / MPI_Init_thread / MPI_Finalize: bring Loom's runtime up and down
// around the MPI's own. MPIX_Query_cuda_support says 1 while Loom is active,
// so CUDA-aware callers (mpi4py, for one) hand Loom device buffers.
#include <mpi.h>

#include "loom/loom.h"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "util/knobs.hpp"

namespace {

// The device method's NCCL channel (LOOM_NCCL_P2P) has a thread that calls
// the MPI: Loom asks for MPI_THREAD_MULTIPLE then, whatever the program asked.
bool wants_thread_multiple() {
  const loom::Knobs& k = loom::knobs();
  return !loom::knob_true(k.disable) && !k.nccl_p2p.empty() && k.nccl_p2p != "0";
}

}  // namespace

extern "C" {

int MPI_Init(int* argc, char*** argv) {
  int provided = 0;
  int rc = wants_thread_multiple()
               ? LOOM_NEXT(MPI_Init_thread)(argc, argv, MPI_THREAD_MULTIPLE, &provided)
               : LOOM_NEXT(MPI_Init)(argc, argv);
  if (rc == MPI_SUCCESS) loom_init();
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  if (wants_thread_multiple()) required = MPI_THREAD_MULTIPLE;
  int rc = LOOM_NEXT(MPI_Init_thread)(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) loom_init();
  return rc;
}

int MPI_Finalize(void) {
  loom_finalize();
  return LOOM_NEXT(MPI_Finalize)();
}

// Declared by CUDA-aware MPIs in mpi-ext.h; defined here for all of them.
int MPIX_Query_cuda_support(void) {
  return loom::runtime() ? 1 : 0;
}

}  // extern "C"
