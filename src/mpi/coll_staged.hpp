// Blocking collectives on device buffers staged through host memory in
// pipelined chunks, for communicators the node-local engine cannot serve
// (ranks on several nodes, or no CUDA IPC): the dynamic staging of the GPU
// all-to-all paper. While chunk k is exchanged by the host MPI, chunk k+1
// comes down to pinned memory and chunk k-1 goes up, where the host mirrors
// copy everything down, run the MPI, then copy everything up.
//
//   sender:   pack once, D2H chunk 0 | chunk 1 | chunk 2 ...
//                          MPI  chunk 0 | chunk 1 ...          (as each lands)
//   receiver:                    H2D chunk 0 | chunk 1 ...     (as each arrives)
//
// The exchanges are the MPI's own, on host memory: Bcast, Allreduce and
// Reduce run its nonblocking collective once a chunk (any op it has, user
// ops included, on predefined types); the gathers, scatters and all-to-alls
// (v, w and neighbour forms too) send each block in pieces point to point
// on the communicator's private twin (one tag; MPI's non-overtaking order
// pairs the pieces), each piece as soon as its bytes are in host memory. Every rank takes part
// whatever its buffers (host buffers are packed by the MPI's MPI_Pack), so
// one small allreduce decides: the engine runs when some rank has a device
// buffer and every rank can take part, else every rank takes the mirrors.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "mpi/coll_call.hpp"
#include "mpi/coll_schedule.hpp"

namespace loom::mpi::staged {

// Whether a blocking call in which each rank receives `bytes` is tried here
// (settings, the communicator and the size: alike on every rank).
bool gate(const Call& c, int64_t bytes);

// Each returns true when it ran the call (its result in *rc), false when
// every rank takes the mirrors.
bool bcast(Call& c, void* buf, int count, MPI_Datatype t, int root, int* rc);
bool allreduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int* rc);
bool reduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root,
            int* rc);
bool allgather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
               MPI_Datatype rt, int* rc);
bool alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
              int* rc);
bool gather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
            int root, int* rc);
bool scatter(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
             int root, int* rc);

// The v, w and neighbour all-to-alls, Gatherv, Scatterv and Allgatherv, as
// lists of blocks: `sends` each peer's in the order its receiver takes them
// (peer coll::kEveryRank or kEveryOther: one block to many), `recvs` in
// each sender's order. `can`: false where this rank must leave the call to
// the MPI. Their sizes differ by rank, so the agreement weighs them.
bool blocks(Call& c, const std::vector<SchedMsg>& sends, const std::vector<SchedMsg>& recvs,
            bool can, int* rc);

// Calls this process ran here (tests).
long long calls();

}  // namespace loom::mpi::staged
