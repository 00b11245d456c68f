// Translation of a committed MPI datatype into Loom's IR, by reading it back
// with MPI_Type_get_envelope / MPI_Type_get_contents (their _c large-count
// variants where the MPI is MPI-4). The only file of src/type with mpi.h.
#pragma once

#include <mpi.h>

#include "type/type_info.hpp"
#include "util/status.hpp"

namespace loom::type {

// Errors: kNullType for MPI_DATATYPE_NULL, kUnsupported for combiners or
// named types Loom cannot read (callers hand those back to the MPI),
// kOverflow, kMpi when the MPI itself fails.
Result<TypeInfo> translate(MPI_Datatype t);

// True for predefined (named) types, which are never committed or freed.
// Asks the MPI unless the handle is one of the C predefined types.
bool is_named(MPI_Datatype t);
// True for the C predefined types, without asking the MPI.
bool is_predefined(MPI_Datatype t);

}  // namespace loom::type
