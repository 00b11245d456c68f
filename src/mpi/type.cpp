// MPI_Type_commit / MPI_Type_free: keep the type registry in step with the
// MPI's types.
#include <mpi.h>

#include "loom/loom.h"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"

extern "C" {

int MPI_Type_commit(MPI_Datatype* type) {
  int rc = LOOM_NEXT(MPI_Type_commit)(type);
  if (rc == MPI_SUCCESS && type) loom_type_commit(*type);
  return rc;
}

int MPI_Type_free(MPI_Datatype* type) {
  // A type an enqueued operation still holds is freed when it lets go.
  loom::Runtime* rt = loom::runtime();
  if (type && rt && *type != MPI_DATATYPE_NULL && rt->types.defer_free(*type)) {
    *type = MPI_DATATYPE_NULL;
    return MPI_SUCCESS;
  }
  // Forget the handle first: after the free the MPI may hand it out again.
  if (type) loom_type_free(*type);
  return LOOM_NEXT(MPI_Type_free)(type);
}

}  // extern "C"
