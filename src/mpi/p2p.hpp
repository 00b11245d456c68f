// Receive paths of src/mpi/p2p.cpp that other call families reuse.
#pragma once

#include <mpi.h>

namespace loom::mpi {

// MPI_Mrecv / MPI_Imrecv of a message the MPI matched, into device memory
// (through staging, as MPI_Recv does).
int mrecv_device(void* buf, int count, MPI_Datatype type, MPI_Message* msg, MPI_Status* status);
int imrecv_device(void* buf, int count, MPI_Datatype type, MPI_Message* msg, MPI_Request* req);

}  // namespace loom::mpi
