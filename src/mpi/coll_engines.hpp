// The faster engines for blocking collectives on device buffers, tried
// before the host mirrors. Each returns true when it ran the call (its
// result in *rc), false when the mirrors must: the choice is made alike on
// every rank of the communicator (it depends only on what all ranks agree
// on), so no rank takes an engine its peers do not. `c` holds the call's
// communicator; the buffers are the caller's own.
#pragma once

#include <mpi.h>

#include "mpi/coll_call.hpp"

namespace loom::mpi::engines {

bool bcast(Call& c, void* buf, int count, MPI_Datatype t, int root, int* rc);
bool allreduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int* rc);
bool reduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root,
            int* rc);
bool reduce_scatter_block(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op,
                          int* rc);
// Reduce_scatter (counts differ by rank), Scan and Exscan (`exclusive`).
bool reduce_scatter(Call& c, const void* s, void* r, const int* rcs, MPI_Datatype t, MPI_Op op,
                    int* rc);
bool scan(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, bool exclusive,
          int* rc);
bool allgather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
               MPI_Datatype rt, int* rc);
bool alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
              int* rc);
// The v, w and neighbour all-to-alls (Cartesian, graph and distributed-graph
// topologies), Gather(v), Scatter(v) and Allgatherv: every rank enters their
// exchange whatever its sizes.
bool alltoallv(Call& c, const void* s, const int* scs, const int* sd, MPI_Datatype st, void* r,
               const int* rcs, const int* rd, MPI_Datatype rt, int* rc);
bool alltoallw(Call& c, const void* s, const int* scs, const int* sd, const MPI_Datatype* sts,
               void* r, const int* rcs, const int* rd, const MPI_Datatype* rts, int* rc);
bool gather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
            int root, int* rc);
bool gatherv(Call& c, const void* s, int sc, MPI_Datatype st, void* r, const int* rcs,
             const int* displs, MPI_Datatype rt, int root, int* rc);
bool scatter(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
             int root, int* rc);
bool scatterv(Call& c, const void* s, const int* scs, const int* displs, MPI_Datatype st, void* r,
              int rcount, MPI_Datatype rt, int root, int* rc);
bool allgatherv(Call& c, const void* s, int sc, MPI_Datatype st, void* r, const int* rcs,
                const int* displs, MPI_Datatype rt, int* rc);
bool neighbor_allgather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
                        MPI_Datatype rt, int* rc);
bool neighbor_allgatherv(Call& c, const void* s, int sc, MPI_Datatype st, void* r, const int* rcs,
                         const int* displs, MPI_Datatype rt, int* rc);
bool neighbor_alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
                       MPI_Datatype rt, int* rc);
bool neighbor_alltoallv(Call& c, const void* s, const int* scs, const int* sd, MPI_Datatype st,
                        void* r, const int* rcs, const int* rd, MPI_Datatype rt, int* rc);
bool neighbor_alltoallw(Call& c, const void* s, const int* scs, const MPI_Aint* sd,
                        const MPI_Datatype* sts, void* r, const int* rcs, const MPI_Aint* rd,
                        const MPI_Datatype* rts, int* rc);
// Both buffers are this rank's: a GPU kernel reduces them, no agreement needed.
bool reduce_local(Call& c, const void* in, void* inout, int count, MPI_Datatype t, MPI_Op op,
                  int* rc);

}  // namespace loom::mpi::engines
