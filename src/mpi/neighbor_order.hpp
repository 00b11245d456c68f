// Which block a neighbour collective lands where, when a rank is the same
// neighbour more than once (a periodic dimension of 1 or 2, a graph with
// repeated edges, a rank its own neighbour). MPI-4 fixes it for Cartesian
// grids only, and MPIs differ: Open MPI 4.1's blocking calls pair a grid's
// blocks by direction and its nonblocking ones in posting order; MPICH
// 4.0's Neighbor_alltoall pairs them in reverse and its Neighbor_alltoallv
// and _alltoallw in posting order, in all three forms (seen 2026-11-27).
// Loom must land them as the MPI's own call would, so it asks the MPI once
// per call, form and topology kind, on MPI_COMM_SELF, rather than assume.
#pragma once

#include <mpi.h>

namespace loom::mpi {

// The k-th block a rank receives from a peer is the peer's...
enum class Pairing {
  kPosting,      // ...k-th block sent to it
  kReverse,      // ...k-th block from the last sent to it
  kByDirection,  // (a grid) block sent the other way: receive i takes send i ^ 1
  kUnknown,      // none of these: Loom leaves such calls to the MPI
};

enum class NeighborCall { kAlltoall, kAlltoallv, kAlltoallw };
enum class CallForm { kBlocking, kNonblocking, kPersistent };

// The MPI's pairing in its neighbour collective `call` of form `form` on a
// topology of kind `topo` (MPI_CART, MPI_GRAPH, MPI_DIST_GRAPH). Asked once
// (one call on a topology of MPI_COMM_SELF), then kept. kUnknown where the
// MPI has no such form or the answer fits no known pairing.
Pairing neighbor_pairing(int topo, NeighborCall call, CallForm form);

// The key of receive block i under p: the k-th block a peer sends lands in
// the receive block from it with the k-th smallest key.
inline int pairing_key(Pairing p, int i) {
  return p == Pairing::kReverse ? -i : p == Pairing::kByDirection ? (i ^ 1) : i;
}

}  // namespace loom::mpi
