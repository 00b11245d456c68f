// The one place where Loom's internal codes become MPI error classes, and
// where errors are raised through a communicator's error handler.
#pragma once

#include <mpi.h>

#include "util/status.hpp"

namespace loom::mpi {

int error_class(Err e);
// Logs the status, raises it on comm's error handler (MPI_COMM_WORLD when
// comm is MPI_COMM_NULL) and returns the MPI error code to hand back.
int raise(MPI_Comm comm, const Status& s);
int raise(MPI_Comm comm, int mpi_class, const char* what);

}  // namespace loom::mpi
