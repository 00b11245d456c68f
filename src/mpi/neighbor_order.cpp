#include "mpi/neighbor_order.hpp"

#include <mutex>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: the persistent collectives (MPIX_..._init)
#endif

#include "util/log.hpp"

namespace loom::mpi {
namespace {

// A topology on MPI_COMM_SELF whose four neighbours are all this rank.
MPI_Comm self_topology(int topo) {
  MPI_Comm t = MPI_COMM_NULL;
  if (topo == MPI_CART) {
    int dims[2] = {1, 1}, periods[2] = {1, 1};
    PMPI_Cart_create(MPI_COMM_SELF, 2, dims, periods, 0, &t);
  } else if (topo == MPI_GRAPH) {
    int index[1] = {4}, edges[4] = {0, 0, 0, 0};
    PMPI_Graph_create(MPI_COMM_SELF, 1, index, edges, 0, &t);
  } else if (topo == MPI_DIST_GRAPH) {
    int ranks[4] = {0, 0, 0, 0};
    PMPI_Dist_graph_create_adjacent(MPI_COMM_SELF, 4, ranks, MPI_UNWEIGHTED, 4, ranks,
                                    MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &t);
  }
  if (t != MPI_COMM_NULL) PMPI_Comm_set_errhandler(t, MPI_ERRORS_RETURN);
  return t;
}

// The persistent forms' names, where the MPI has them (as in coll.cpp).
#if defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && OMPI_HAVE_MPI_EXT_PCOLLREQ
#define LOOM_PINIT(Name) PMPIX_##Name##_init
#elif MPI_VERSION >= 4
#define LOOM_PINIT(Name) PMPI_##Name##_init
#endif

// One call of `call` in form `form` on t: four ints out, one a neighbour.
int run(MPI_Comm t, NeighborCall call, CallForm form, const int* sent, int* got) {
  const int counts[4] = {1, 1, 1, 1}, displs[4] = {0, 1, 2, 3};
  const MPI_Aint bytes[4] = {0, 4, 8, 12};
  const MPI_Datatype types[4] = {MPI_INT, MPI_INT, MPI_INT, MPI_INT};
  if (form == CallForm::kBlocking) {
    switch (call) {
      case NeighborCall::kAlltoall:
        return PMPI_Neighbor_alltoall(sent, 1, MPI_INT, got, 1, MPI_INT, t);
      case NeighborCall::kAlltoallv:
        return PMPI_Neighbor_alltoallv(sent, counts, displs, MPI_INT, got, counts, displs, MPI_INT,
                                       t);
      case NeighborCall::kAlltoallw:
        return PMPI_Neighbor_alltoallw(sent, counts, bytes, types, got, counts, bytes, types, t);
    }
  }
  MPI_Request r = MPI_REQUEST_NULL;
  int rc = MPI_ERR_OTHER;
  if (form == CallForm::kNonblocking) {
    switch (call) {
      case NeighborCall::kAlltoall:
        rc = PMPI_Ineighbor_alltoall(sent, 1, MPI_INT, got, 1, MPI_INT, t, &r);
        break;
      case NeighborCall::kAlltoallv:
        rc = PMPI_Ineighbor_alltoallv(sent, counts, displs, MPI_INT, got, counts, displs, MPI_INT,
                                      t, &r);
        break;
      case NeighborCall::kAlltoallw:
        rc = PMPI_Ineighbor_alltoallw(sent, counts, bytes, types, got, counts, bytes, types, t, &r);
        break;
    }
  } else {
#ifdef LOOM_PINIT
    switch (call) {
      case NeighborCall::kAlltoall:
        rc = LOOM_PINIT(Neighbor_alltoall)(sent, 1, MPI_INT, got, 1, MPI_INT, t, MPI_INFO_NULL, &r);
        break;
      case NeighborCall::kAlltoallv:
        rc = LOOM_PINIT(Neighbor_alltoallv)(sent, counts, displs, MPI_INT, got, counts, displs,
                                            MPI_INT, t, MPI_INFO_NULL, &r);
        break;
      case NeighborCall::kAlltoallw:
        rc = LOOM_PINIT(Neighbor_alltoallw)(sent, counts, bytes, types, got, counts, bytes, types,
                                            t, MPI_INFO_NULL, &r);
        break;
    }
    if (rc == MPI_SUCCESS) rc = PMPI_Start(&r);
#endif
  }
  if (rc == MPI_SUCCESS) rc = PMPI_Wait(&r, MPI_STATUS_IGNORE);
  if (form == CallForm::kPersistent && r != MPI_REQUEST_NULL) PMPI_Request_free(&r);
  return rc;
}

Pairing ask(int topo, NeighborCall call, CallForm form) {
  MPI_Comm t = self_topology(topo);
  if (t == MPI_COMM_NULL) return Pairing::kUnknown;
  const int sent[4] = {0, 1, 2, 3};
  int got[4] = {-1, -1, -1, -1};
  const int rc = run(t, call, form, sent, got);
  PMPI_Comm_free(&t);
  if (rc != MPI_SUCCESS) return Pairing::kUnknown;
  for (Pairing p : {Pairing::kPosting, Pairing::kReverse, Pairing::kByDirection}) {
    bool all = true;
    // Receive i holds the block sent with the rank of key(i) among the keys.
    for (int i = 0; i < 4; ++i) {
      int rank = 0;
      for (int j = 0; j < 4; ++j) rank += pairing_key(p, j) < pairing_key(p, i);
      all = all && got[i] == sent[rank];
    }
    if (all) return p;
  }
  return Pairing::kUnknown;
}

}  // namespace

Pairing neighbor_pairing(int topo, NeighborCall call, CallForm form) {
  static std::once_flag once[3][3][3];
  static Pairing seen[3][3][3];
  const int k = topo == MPI_CART ? 0 : topo == MPI_GRAPH ? 1 : topo == MPI_DIST_GRAPH ? 2 : -1;
  if (k < 0) return Pairing::kUnknown;
  const int c = static_cast<int>(call), f = static_cast<int>(form);
  std::call_once(once[k][c][f], [&] {
    seen[k][c][f] = ask(topo, call, form);
    static const char* const kPairs[] = {"in posting order", "in reverse", "by direction",
                                         "in no order Loom knows"};
    static const char* const kTopos[] = {"Cartesian", "graph", "distributed-graph"};
    static const char* const kCalls[] = {"Neighbor_alltoall", "Neighbor_alltoallv",
                                         "Neighbor_alltoallw"};
    static const char* const kForms[] = {"blocking", "nonblocking", "persistent"};
    LOOM_DEBUG(kMpi, "the MPI's %s %s on %s topologies pairs a repeated neighbour's blocks %s",
               kForms[f], kCalls[c], kTopos[k], kPairs[static_cast<int>(seen[k][c][f])]);
  });
  return seen[k][c][f];
}

}  // namespace loom::mpi
