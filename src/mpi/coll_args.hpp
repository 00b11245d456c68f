// Which buffers of each collective are read and written, on which ranks,
// and how many elements each holds: one description per collective, shared
// by its blocking, nonblocking and persistent forms. Each replaces the
// device buffers it is given by their host mirrors (coll_call.hpp).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "mpi/coll_call.hpp"

namespace loom::mpi::args {

inline int64_t sum(const int* counts, int n) {
  int64_t s = 0;
  for (int i = 0; counts && i < n; ++i) s += counts[i];
  return s;
}

inline void bcast(Call& c, void*& buf, int count, MPI_Datatype t, int root) {
  if (c.rank() == root)
    c.in(buf, count, t);
  else
    c.out(buf, count, t);
}

// Reduce, Allreduce, Scan: in place, the receive buffer is also the input.
inline void reduce(Call& c, const void*& s, void*& r, int count, MPI_Datatype t, bool r_here) {
  if (s == MPI_IN_PLACE) {
    if (r_here) c.inout(r, count, t);
    return;
  }
  c.in(s, count, t);
  if (r_here) c.out(r, count, t);
}

// Exscan leaves rank 0's receive buffer alone: it stays as it was.
inline void exscan(Call& c, const void*& s, void*& r, int count, MPI_Datatype t) {
  if (s != MPI_IN_PLACE) c.in(s, count, t);
  c.inout(r, count, t);
}

inline void reduce_scatter(Call& c, const void*& s, void*& r, const int* counts, MPI_Datatype t) {
  const int64_t total = sum(counts, c.size());
  if (s == MPI_IN_PLACE) {
    c.inout(r, total, t);
    return;
  }
  c.in(s, total, t);
  c.out(r, counts ? counts[c.rank()] : 0, t);
}

inline void reduce_scatter_block(Call& c, const void*& s, void*& r, int count, MPI_Datatype t) {
  const int64_t total = int64_t{count} * c.size();
  if (s == MPI_IN_PLACE) {
    c.inout(r, total, t);
    return;
  }
  c.in(s, total, t);
  c.out(r, count, t);
}

inline void gather(Call& c, const void*& s, int sc, MPI_Datatype st, void*& r, int rc,
                   MPI_Datatype rt, int root) {
  if (s != MPI_IN_PLACE) c.in(s, sc, st);
  if (c.rank() != root) return;
  if (s == MPI_IN_PLACE)
    c.inout(r, int64_t{rc} * c.size(), rt);
  else
    c.out(r, int64_t{rc} * c.size(), rt);
}

inline void gatherv(Call& c, const void*& s, int sc, MPI_Datatype st, void*& r, const int* rcs,
                    const int* displs, MPI_Datatype rt, int root) {
  if (s != MPI_IN_PLACE) c.in(s, sc, st);
  if (c.rank() == root) c.v(r, c.size(), rcs, displs, rt, s == MPI_IN_PLACE, true);
}

inline void scatter(Call& c, const void*& s, int sc, MPI_Datatype st, void*& r, int rc,
                    MPI_Datatype rt, int root) {
  if (c.rank() == root) c.in(s, int64_t{sc} * c.size(), st);
  c.out(r, rc, rt);  // MPI_IN_PLACE at the root stays
}

inline void scatterv(Call& c, const void*& s, const int* scs, const int* displs, MPI_Datatype st,
                     void*& r, int rc, MPI_Datatype rt, int root) {
  if (c.rank() == root) c.v(s, c.size(), scs, displs, st, true, false);
  c.out(r, rc, rt);
}

// Allgather and Alltoall: n blocks of rc received; in place, the receive
// buffer holds the input too.
inline void all_blocks(Call& c, const void*& s, int64_t s_count, MPI_Datatype st, void*& r,
                       int64_t r_count, MPI_Datatype rt) {
  if (s == MPI_IN_PLACE) {
    c.inout(r, r_count, rt);
    return;
  }
  c.in(s, s_count, st);
  c.out(r, r_count, rt);
}

inline void allgatherv(Call& c, const void*& s, int sc, MPI_Datatype st, void*& r, const int* rcs,
                       const int* displs, MPI_Datatype rt, int n, bool keep = false) {
  if (s != MPI_IN_PLACE) c.in(s, sc, st);
  c.v(r, n, rcs, displs, rt, keep || s == MPI_IN_PLACE, true);
}

inline void alltoallv(Call& c, const void*& s, const int* scs, const int* sdispls, MPI_Datatype st,
                      void*& r, const int* rcs, const int* rdispls, MPI_Datatype rt, int n_out,
                      int n_in, bool keep = false) {
  if (s != MPI_IN_PLACE) c.v(s, n_out, scs, sdispls, st, true, false);
  c.v(r, n_in, rcs, rdispls, rt, keep || s == MPI_IN_PLACE, true);
}

inline void alltoallw(Call& c, const void*& s, const int* scs, const MPI_Aint* sdispls,
                      const MPI_Datatype* sts, void*& r, const int* rcs, const MPI_Aint* rdispls,
                      const MPI_Datatype* rts, int n_out, int n_in, bool keep = false) {
  if (s != MPI_IN_PLACE) c.w(s, n_out, scs, sdispls, sts, true, false);
  c.w(r, n_in, rcs, rdispls, rts, keep || s == MPI_IN_PLACE, true);
}

// The neighbour collectives leave the blocks of MPI_PROC_NULL neighbours
// (edges of a non-periodic grid) as they were, so their receive buffers go
// down too (`keep` in the v and w forms).
inline void neighbor_blocks(Call& c, const void*& s, int64_t s_count, MPI_Datatype st, void*& r,
                            int64_t r_count, MPI_Datatype rt) {
  c.in(s, s_count, st);
  c.inout(r, r_count, rt);
}

// Alltoallw takes byte displacements as int; the neighbour form as MPI_Aint.
struct AintDispls {
  std::vector<MPI_Aint> v;
  AintDispls(const int* d, int n) {
    for (int i = 0; d && i < n; ++i) v.push_back(d[i]);
  }
  const MPI_Aint* data() const { return v.empty() ? nullptr : v.data(); }
};

}  // namespace loom::mpi::args
