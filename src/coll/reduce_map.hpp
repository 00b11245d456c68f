// MPI handles to the reduction enums of reduce_op.hpp (the MPI-facing half;
// part of libloom, built once per MPI).
#pragma once

#include <mpi.h>

#include "coll/reduce_op.hpp"

namespace loom::coll {

// The (ReduceOp, Basic) that computes `op` on `type`, when Loom can: a
// predefined operation on a predefined datatype for which MPI-4.1 §6.9.2
// defines it (MPI_REPLACE and MPI_NO_OP on every type below), with sizes
// taken from the MPI (long, Fortran INTEGER/REAL/LOGICAL...). Types: the C
// integers (MPI_SIGNED_CHAR ... MPI_UNSIGNED_LONG_LONG, MPI_INT8_T ...
// MPI_UINT64_T), MPI_AINT, MPI_OFFSET, MPI_COUNT, MPI_BYTE, MPI_FLOAT,
// MPI_DOUBLE, MPI_C_BOOL, MPI_CXX_BOOL, the C, C++ and Fortran complex
// types of float and double, MPI_INTEGER[1248], MPI_REAL[48],
// MPI_DOUBLE_PRECISION, MPI_LOGICAL[1248] (0/1 integers of their size), and
// the pair types MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_2INT,
// MPI_SHORT_INT, MPI_2REAL, MPI_2DOUBLE_PRECISION, MPI_2INTEGER.
// False otherwise: user operations, derived types, MPI_CHAR, MPI_WCHAR, long
// double, pairs the table leaves undefined (the caller then lets the MPI
// reduce host copies, and reports its errors).
bool reduce_of(MPI_Op op, MPI_Datatype type, ReduceOp* rop, Basic* b);

// One of MPI's predefined operations (MPI_SUM ... MPI_NO_OP). MPI-4.1 §6.9.2
// defines them on predefined datatypes only: Open MPI 4.1 and MPICH 4.0/5.0
// refuse a derived type with MPI_ERR_OP (a contiguous one of doubles too).
bool predefined_op(MPI_Op op);

}  // namespace loom::coll
