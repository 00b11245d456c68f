// A large count (MPI_Count) as an int count, for the _c forms of MPI-4 that
// Loom implements through their int forms (mpi/large_count.cpp,
// stream/mpix_large_count.cpp).
#pragma once

#include <mpi.h>

#include <climits>

#include "mpi/buffer_calls.hpp"  // LOOM_MPI_HAS_<fn>
#include "mpi/errors.hpp"

#ifdef LOOM_MPI_HAS_MPI_Type_contiguous_c

namespace loom::mpi {

// `call(n, t)` with count elements of type as n elements of t: the count
// itself up to INT_MAX, else one element of a contiguous type of `count`.
// `keep`: a type made here outlives the call (a request or a stream may use
// it later; MPI has no hook to free it then, and such messages move 2 GiB
// or more each).
template <class Call>
int with_int_count(MPI_Count count, MPI_Datatype type, bool keep, Call call) {
  if (count <= INT_MAX) return call(count < 0 ? -1 : static_cast<int>(count), type);
  MPI_Datatype big = MPI_DATATYPE_NULL;
  if (PMPI_Type_contiguous_c(count, type, &big) != MPI_SUCCESS)
    return raise(MPI_COMM_WORLD, MPI_ERR_TYPE, "large count: no contiguous type");
  MPI_Type_commit(&big);  // Loom's, so the type is read once
  const int rc = call(1, big);
  if (!keep) MPI_Type_free(&big);
  return rc;
}

}  // namespace loom::mpi

#endif
