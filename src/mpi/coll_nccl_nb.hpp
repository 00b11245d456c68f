// Nonblocking collectives on NCCL (on by default; LOOM_COLL_NCCL_NONBLOCKING=0 off),
// for communicators where every rank has a GPU of its own and the schedules
// of Loom's messages cannot run (ranks on several nodes, or no CUDA IPC; or
// LOOM_COLL_METHOD=nccl): the call queues
// NCCL's work on the communicator's stream and returns; its request
// completes once the GPU has run it (coll_schedule.hpp's `launch` and
// `done`), with no completion call of the peers needed.
//
//   MPI_Iallreduce(...) --> fill device scratch where a buffer is not one
//                           run of device memory (kernel, or MPI_Pack and
//                           a copy up); ncclAllReduce on the stream; an event
//   MPI_Wait / Test     --> the event has passed: drain the scratch into the
//                           user's buffer; the request completes
//
// Every rank takes part whatever its buffers (host or device, any type), so
// the choice rests only on what every rank sees alike (the setting, the
// size, the communicator): no agreement, as MPI's nonblocking calls must
// not wait for their peers.
#pragma once

#include <mpi.h>

#include "mpi/coll_call.hpp"

namespace loom::mpi::nccl_nb {

// Each returns true where it took the call (its result in *rc), false
// where the other engines must. Allreduce (root < 0) and Reduce.
bool reduction(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root,
               int* rc);
bool bcast(Call& c, void* buf, int count, MPI_Datatype t, int root, int* rc);
bool allgather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
               MPI_Datatype rt, int* rc);
bool alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
              int* rc);

}  // namespace loom::mpi::nccl_nb
