// The MPI-4 large-count (_c) collectives and MPI_Pack_c / MPI_Unpack_c,
// where the MPI declares them (MPICH 4; Open MPI 4.1 has none): each
// becomes Loom's int form when its counts (and displacements) fit an int,
// which is how programs written for the _c API call them, so device
// buffers take every engine the int forms have. A count or displacement
// beyond INT_MAX goes to the MPI's own _c call with host buffers; with a
// device buffer it is refused with MPI_ERR_COUNT (the reductions and the
// v, w and neighbour forms cannot be rewritten as fewer, larger elements).
//
// The int copies of a nonblocking or persistent call's arrays must last as
// long as its request (the MPI, and Loom's persistent rounds, read them
// then): they are kept for the process's life, one per distinct array.
#include <mpi.h>

#include <climits>
#include <mutex>
#include <set>
#include <vector>

#include "mpi/buffer_calls.hpp"
#include "mpi/coll_call.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "util/log.hpp"

#ifdef LOOM_MPI_HAS_MPI_Bcast_c

namespace {

using loom::mpi::device_arg;

bool fits(MPI_Count n) {
  return n <= INT_MAX;  // a negative count goes on, for the int form to report
}
int as_int(MPI_Count n) {
  return n < 0 ? -1 : static_cast<int>(n);
}

// n entries of a as ints (false where one does not fit); a null array stays null.
template <class T>
bool narrow(const T* a, int n, std::vector<int>* out) {
  out->clear();
  if (!a) return true;
  for (int i = 0; i < n; ++i) {
    if (a[i] > INT_MAX || a[i] < INT_MIN) return false;
    out->push_back(static_cast<int>(a[i]));
  }
  out->push_back(0);  // a valid pointer where n is 0
  return true;
}

// The array the int form gets: v itself, or (keep) a copy kept for good.
const int* array(const void* orig, const std::vector<int>& v, bool keep) {
  if (!orig) return nullptr;
  if (!keep) return v.data();
  static std::mutex mu;
  static auto* kept = new std::set<std::vector<int>>;  // never freed: requests may outlive main
  std::lock_guard<std::mutex> lk(mu);
  return kept->insert(v).first->data();
}

// What does not fit an int: the MPI's own _c call with host buffers;
// refused with a device buffer.
template <class Next>
int beyond_int(const char* fn, MPI_Comm comm, bool device, int err, Next next) {
  if (!loom::runtime() || !device) return next();
  LOOM_LOG(
      kError, kMpi,
      "%s: %s with device buffers; Loom moves device data only for counts and "
      "displacements within an int",
      fn, err == MPI_ERR_COMM ? "an inter-communicator" : "a count or displacement beyond INT_MAX");
  return loom::mpi::raise(comm, err, fn);
}

bool inter(MPI_Comm comm) {
  int flag = 0;
  return comm != MPI_COMM_NULL && PMPI_Comm_test_inter(comm, &flag) == MPI_SUCCESS && flag;
}
int comm_size(MPI_Comm comm) {
  int n = 0;
  return comm != MPI_COMM_NULL && PMPI_Comm_size(comm, &n) == MPI_SUCCESS ? n : 0;
}
int comm_rank(MPI_Comm comm) {
  int r = -1;
  return comm != MPI_COMM_NULL && PMPI_Comm_rank(comm, &r) == MPI_SUCCESS ? r : -1;
}
// The entries of a neighbour collective's receive and send arrays.
void degrees(MPI_Comm comm, int* in, int* out) {
  *in = *out = 0;
  if (comm == MPI_COMM_NULL || loom::mpi::neighbor_counts(comm, in, out) != MPI_SUCCESS)
    *in = *out = 0;  // the int form reports the communicator
}

}  // namespace

// The three forms: blocking, nonblocking (a request), persistent (info, request).
#define LOOM_LC_EXTRA_B
#define LOOM_LC_EXTRA_I , MPI_Request* r
#define LOOM_LC_EXTRA_P , MPI_Info info, MPI_Request *r
#define LOOM_LC_ARGS_B
#define LOOM_LC_ARGS_I , r
#define LOOM_LC_ARGS_P , info, r
#define LOOM_LC_KEEP_B false
#define LOOM_LC_KEEP_I true
#define LOOM_LC_KEEP_P true

// Bcast.
#define LOOM_LC_BCAST(Name, Int, F)                                         \
  int Name(void* buf, MPI_Count count, MPI_Datatype t, int root,            \
           MPI_Comm comm LOOM_LC_EXTRA_##F) {                               \
    if (!loom::runtime() || !fits(count))                                   \
      return beyond_int(#Name, comm, device_arg(buf), MPI_ERR_COUNT, [&] {  \
        return LOOM_NEXT(Name)(buf, count, t, root, comm LOOM_LC_ARGS_##F); \
      });                                                                   \
    return Int(buf, as_int(count), t, root, comm LOOM_LC_ARGS_##F);         \
  }
// Allreduce, Scan, Exscan, Reduce_scatter_block (count: the slice).
#define LOOM_LC_REDUCE_ALL(Name, Int, F)                                                   \
  int Name(const void* s, void* rb, MPI_Count count, MPI_Datatype t, MPI_Op op,            \
           MPI_Comm comm LOOM_LC_EXTRA_##F) {                                              \
    if (!loom::runtime() || !fits(count))                                                  \
      return beyond_int(#Name, comm, device_arg(s) || device_arg(rb), MPI_ERR_COUNT, [&] { \
        return LOOM_NEXT(Name)(s, rb, count, t, op, comm LOOM_LC_ARGS_##F);                \
      });                                                                                  \
    return Int(s, rb, as_int(count), t, op, comm LOOM_LC_ARGS_##F);                        \
  }
#define LOOM_LC_REDUCE(Name, Int, F)                                                       \
  int Name(const void* s, void* rb, MPI_Count count, MPI_Datatype t, MPI_Op op, int root,  \
           MPI_Comm comm LOOM_LC_EXTRA_##F) {                                              \
    if (!loom::runtime() || !fits(count))                                                  \
      return beyond_int(#Name, comm, device_arg(s) || device_arg(rb), MPI_ERR_COUNT, [&] { \
        return LOOM_NEXT(Name)(s, rb, count, t, op, root, comm LOOM_LC_ARGS_##F);          \
      });                                                                                  \
    return Int(s, rb, as_int(count), t, op, root, comm LOOM_LC_ARGS_##F);                  \
  }
// Gather, Scatter.
#define LOOM_LC_ROOTED(Name, Int, F)                                                              \
  int Name(const void* s, MPI_Count sc, MPI_Datatype st, void* rb, MPI_Count rc, MPI_Datatype rt, \
           int root, MPI_Comm comm LOOM_LC_EXTRA_##F) {                                           \
    if (!loom::runtime() || !fits(sc) || !fits(rc))                                               \
      return beyond_int(#Name, comm, device_arg(s) || device_arg(rb), MPI_ERR_COUNT, [&] {        \
        return LOOM_NEXT(Name)(s, sc, st, rb, rc, rt, root, comm LOOM_LC_ARGS_##F);               \
      });                                                                                         \
    return Int(s, as_int(sc), st, rb, as_int(rc), rt, root, comm LOOM_LC_ARGS_##F);               \
  }
// Allgather, Alltoall, Neighbor_allgather, Neighbor_alltoall.
#define LOOM_LC_ALL(Name, Int, F)                                                                 \
  int Name(const void* s, MPI_Count sc, MPI_Datatype st, void* rb, MPI_Count rc, MPI_Datatype rt, \
           MPI_Comm comm LOOM_LC_EXTRA_##F) {                                                     \
    if (!loom::runtime() || !fits(sc) || !fits(rc))                                               \
      return beyond_int(#Name, comm, device_arg(s) || device_arg(rb), MPI_ERR_COUNT, [&] {        \
        return LOOM_NEXT(Name)(s, sc, st, rb, rc, rt, comm LOOM_LC_ARGS_##F);                     \
      });                                                                                         \
    return Int(s, as_int(sc), st, rb, as_int(rc), rt, comm LOOM_LC_ARGS_##F);                     \
  }
// Gatherv: the arrays are the root's.
#define LOOM_LC_GATHERV(Name, Int, F)                                                             \
  int Name(const void* s, MPI_Count sc, MPI_Datatype st, void* rb, const MPI_Count rcs[],         \
           const MPI_Aint displs[], MPI_Datatype rt, int root, MPI_Comm comm LOOM_LC_EXTRA_##F) { \
    const bool at_root = comm_rank(comm) == root, in = inter(comm);                               \
    const int n = at_root ? comm_size(comm) : 0;                                                  \
    std::vector<int> c, d;                                                                        \
    if (!loom::runtime() || in || !fits(sc) || !narrow(rcs, n, &c) || !narrow(displs, n, &d))     \
      return beyond_int(                                                                          \
          #Name, comm, device_arg(s) || device_arg(rb), in ? MPI_ERR_COMM : MPI_ERR_COUNT, [&] {  \
            return LOOM_NEXT(Name)(s, sc, st, rb, rcs, displs, rt, root, comm LOOM_LC_ARGS_##F);  \
          });                                                                                     \
    return Int(s, as_int(sc), st, rb, array(rcs, c, LOOM_LC_KEEP_##F),                            \
               array(displs, d, LOOM_LC_KEEP_##F), rt, root, comm LOOM_LC_ARGS_##F);              \
  }
#define LOOM_LC_SCATTERV(Name, Int, F)                                                           \
  int Name(const void* s, const MPI_Count scs[], const MPI_Aint displs[], MPI_Datatype st,       \
           void* rb, MPI_Count rc, MPI_Datatype rt, int root, MPI_Comm comm LOOM_LC_EXTRA_##F) { \
    const bool at_root = comm_rank(comm) == root, in = inter(comm);                              \
    const int n = at_root ? comm_size(comm) : 0;                                                 \
    std::vector<int> c, d;                                                                       \
    if (!loom::runtime() || in || !fits(rc) || !narrow(scs, n, &c) || !narrow(displs, n, &d))    \
      return beyond_int(                                                                         \
          #Name, comm, device_arg(s) || device_arg(rb), in ? MPI_ERR_COMM : MPI_ERR_COUNT, [&] { \
            return LOOM_NEXT(Name)(s, scs, displs, st, rb, rc, rt, root, comm LOOM_LC_ARGS_##F); \
          });                                                                                    \
    return Int(s, array(scs, c, LOOM_LC_KEEP_##F), array(displs, d, LOOM_LC_KEEP_##F), st, rb,   \
               as_int(rc), rt, root, comm LOOM_LC_ARGS_##F);                                     \
  }
// Allgatherv (entries: the ranks) and Neighbor_allgatherv (the in-neighbours).
#define LOOM_LC_ALLGATHERV(Name, Int, F, NEIGHBOR)                                                 \
  int Name(const void* s, MPI_Count sc, MPI_Datatype st, void* rb, const MPI_Count rcs[],          \
           const MPI_Aint displs[], MPI_Datatype rt, MPI_Comm comm LOOM_LC_EXTRA_##F) {            \
    const bool in = inter(comm);                                                                   \
    int n = comm_size(comm), outs = 0;                                                             \
    if (NEIGHBOR) degrees(comm, &n, &outs);                                                        \
    std::vector<int> c, d;                                                                         \
    if (!loom::runtime() || in || !fits(sc) || !narrow(rcs, n, &c) || !narrow(displs, n, &d))      \
      return beyond_int(                                                                           \
          #Name, comm, device_arg(s) || device_arg(rb), in ? MPI_ERR_COMM : MPI_ERR_COUNT,         \
          [&] { return LOOM_NEXT(Name)(s, sc, st, rb, rcs, displs, rt, comm LOOM_LC_ARGS_##F); }); \
    return Int(s, as_int(sc), st, rb, array(rcs, c, LOOM_LC_KEEP_##F),                             \
               array(displs, d, LOOM_LC_KEEP_##F), rt, comm LOOM_LC_ARGS_##F);                     \
  }
// Alltoallv and Neighbor_alltoallv.
#define LOOM_LC_ALLTOALLV(Name, Int, F, NEIGHBOR)                                                 \
  int Name(const void* s, const MPI_Count scs[], const MPI_Aint sds[], MPI_Datatype st, void* rb, \
           const MPI_Count rcs[], const MPI_Aint rds[], MPI_Datatype rt,                          \
           MPI_Comm comm LOOM_LC_EXTRA_##F) {                                                     \
    const bool in = inter(comm);                                                                  \
    int nin = comm_size(comm), nout = nin;                                                        \
    if (NEIGHBOR) degrees(comm, &nin, &nout);                                                     \
    std::vector<int> sc, sd, rc, rd;                                                              \
    if (!loom::runtime() || in || !narrow(scs, nout, &sc) || !narrow(sds, nout, &sd) ||           \
        !narrow(rcs, nin, &rc) || !narrow(rds, nin, &rd))                                         \
      return beyond_int(                                                                          \
          #Name, comm, device_arg(s) || device_arg(rb), in ? MPI_ERR_COMM : MPI_ERR_COUNT, [&] {  \
            return LOOM_NEXT(Name)(s, scs, sds, st, rb, rcs, rds, rt, comm LOOM_LC_ARGS_##F);     \
          });                                                                                     \
    constexpr bool k = LOOM_LC_KEEP_##F;                                                          \
    return Int(s, array(scs, sc, k), array(sds, sd, k), st, rb, array(rcs, rc, k),                \
               array(rds, rd, k), rt, comm LOOM_LC_ARGS_##F);                                     \
  }
// Alltoallw (int byte displacements).
#define LOOM_LC_ALLTOALLW(Name, Int, F)                                                          \
  int Name(const void* s, const MPI_Count scs[], const MPI_Aint sds[], const MPI_Datatype sts[], \
           void* rb, const MPI_Count rcs[], const MPI_Aint rds[], const MPI_Datatype rts[],      \
           MPI_Comm comm LOOM_LC_EXTRA_##F) {                                                    \
    const bool in = inter(comm);                                                                 \
    const int n = comm_size(comm);                                                               \
    std::vector<int> sc, sd, rc, rd;                                                             \
    if (!loom::runtime() || in || !narrow(scs, n, &sc) || !narrow(sds, n, &sd) ||                \
        !narrow(rcs, n, &rc) || !narrow(rds, n, &rd))                                            \
      return beyond_int(                                                                         \
          #Name, comm, device_arg(s) || device_arg(rb), in ? MPI_ERR_COMM : MPI_ERR_COUNT, [&] { \
            return LOOM_NEXT(Name)(s, scs, sds, sts, rb, rcs, rds, rts, comm LOOM_LC_ARGS_##F);  \
          });                                                                                    \
    constexpr bool k = LOOM_LC_KEEP_##F;                                                         \
    return Int(s, array(scs, sc, k), array(sds, sd, k), sts, rb, array(rcs, rc, k),              \
               array(rds, rd, k), rts, comm LOOM_LC_ARGS_##F);                                   \
  }
// Neighbor_alltoallw (MPI_Aint displacements in the int form too).
#define LOOM_LC_NEIGHBOR_ALLTOALLW(Name, Int, F)                                                 \
  int Name(const void* s, const MPI_Count scs[], const MPI_Aint sds[], const MPI_Datatype sts[], \
           void* rb, const MPI_Count rcs[], const MPI_Aint rds[], const MPI_Datatype rts[],      \
           MPI_Comm comm LOOM_LC_EXTRA_##F) {                                                    \
    const bool in = inter(comm);                                                                 \
    int nin = 0, nout = 0;                                                                       \
    degrees(comm, &nin, &nout);                                                                  \
    std::vector<int> sc, rc;                                                                     \
    if (!loom::runtime() || in || !narrow(scs, nout, &sc) || !narrow(rcs, nin, &rc))             \
      return beyond_int(                                                                         \
          #Name, comm, device_arg(s) || device_arg(rb), in ? MPI_ERR_COMM : MPI_ERR_COUNT, [&] { \
            return LOOM_NEXT(Name)(s, scs, sds, sts, rb, rcs, rds, rts, comm LOOM_LC_ARGS_##F);  \
          });                                                                                    \
    constexpr bool k = LOOM_LC_KEEP_##F;                                                         \
    return Int(s, array(scs, sc, k), sds, sts, rb, array(rcs, rc, k), rds, rts,                  \
               comm LOOM_LC_ARGS_##F);                                                           \
  }
// Reduce_scatter: the ranks' slices.
#define LOOM_LC_REDUCE_SCATTER(Name, Int, F)                                               \
  int Name(const void* s, void* rb, const MPI_Count rcs[], MPI_Datatype t, MPI_Op op,      \
           MPI_Comm comm LOOM_LC_EXTRA_##F) {                                              \
    const bool in = inter(comm);                                                           \
    std::vector<int> c;                                                                    \
    if (!loom::runtime() || in || !narrow(rcs, comm_size(comm), &c))                       \
      return beyond_int(                                                                   \
          #Name, comm, device_arg(s) || device_arg(rb), in ? MPI_ERR_COMM : MPI_ERR_COUNT, \
          [&] { return LOOM_NEXT(Name)(s, rb, rcs, t, op, comm LOOM_LC_ARGS_##F); });      \
    return Int(s, rb, array(rcs, c, LOOM_LC_KEEP_##F), t, op, comm LOOM_LC_ARGS_##F);      \
  }

extern "C" {

#if defined(LOOM_MPI_HAS_MPI_Bcast_c) && defined(LOOM_MPI_HAS_MPI_Bcast)
LOOM_LC_BCAST(MPI_Bcast_c, MPI_Bcast, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ibcast_c) && defined(LOOM_MPI_HAS_MPI_Ibcast)
LOOM_LC_BCAST(MPI_Ibcast_c, MPI_Ibcast, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Bcast_init_c) && defined(LOOM_MPI_HAS_MPI_Bcast_init)
LOOM_LC_BCAST(MPI_Bcast_init_c, MPI_Bcast_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Allreduce_c) && defined(LOOM_MPI_HAS_MPI_Allreduce)
LOOM_LC_REDUCE_ALL(MPI_Allreduce_c, MPI_Allreduce, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Iallreduce_c) && defined(LOOM_MPI_HAS_MPI_Iallreduce)
LOOM_LC_REDUCE_ALL(MPI_Iallreduce_c, MPI_Iallreduce, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Allreduce_init_c) && defined(LOOM_MPI_HAS_MPI_Allreduce_init)
LOOM_LC_REDUCE_ALL(MPI_Allreduce_init_c, MPI_Allreduce_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Scan_c) && defined(LOOM_MPI_HAS_MPI_Scan)
LOOM_LC_REDUCE_ALL(MPI_Scan_c, MPI_Scan, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Iscan_c) && defined(LOOM_MPI_HAS_MPI_Iscan)
LOOM_LC_REDUCE_ALL(MPI_Iscan_c, MPI_Iscan, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Scan_init_c) && defined(LOOM_MPI_HAS_MPI_Scan_init)
LOOM_LC_REDUCE_ALL(MPI_Scan_init_c, MPI_Scan_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Exscan_c) && defined(LOOM_MPI_HAS_MPI_Exscan)
LOOM_LC_REDUCE_ALL(MPI_Exscan_c, MPI_Exscan, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Iexscan_c) && defined(LOOM_MPI_HAS_MPI_Iexscan)
LOOM_LC_REDUCE_ALL(MPI_Iexscan_c, MPI_Iexscan, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Exscan_init_c) && defined(LOOM_MPI_HAS_MPI_Exscan_init)
LOOM_LC_REDUCE_ALL(MPI_Exscan_init_c, MPI_Exscan_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Reduce_scatter_block_c) && \
    defined(LOOM_MPI_HAS_MPI_Reduce_scatter_block)
LOOM_LC_REDUCE_ALL(MPI_Reduce_scatter_block_c, MPI_Reduce_scatter_block, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ireduce_scatter_block_c) && \
    defined(LOOM_MPI_HAS_MPI_Ireduce_scatter_block)
LOOM_LC_REDUCE_ALL(MPI_Ireduce_scatter_block_c, MPI_Ireduce_scatter_block, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Reduce_scatter_block_init_c) && \
    defined(LOOM_MPI_HAS_MPI_Reduce_scatter_block_init)
LOOM_LC_REDUCE_ALL(MPI_Reduce_scatter_block_init_c, MPI_Reduce_scatter_block_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Reduce_c) && defined(LOOM_MPI_HAS_MPI_Reduce)
LOOM_LC_REDUCE(MPI_Reduce_c, MPI_Reduce, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ireduce_c) && defined(LOOM_MPI_HAS_MPI_Ireduce)
LOOM_LC_REDUCE(MPI_Ireduce_c, MPI_Ireduce, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Reduce_init_c) && defined(LOOM_MPI_HAS_MPI_Reduce_init)
LOOM_LC_REDUCE(MPI_Reduce_init_c, MPI_Reduce_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Gather_c) && defined(LOOM_MPI_HAS_MPI_Gather)
LOOM_LC_ROOTED(MPI_Gather_c, MPI_Gather, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Igather_c) && defined(LOOM_MPI_HAS_MPI_Igather)
LOOM_LC_ROOTED(MPI_Igather_c, MPI_Igather, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Gather_init_c) && defined(LOOM_MPI_HAS_MPI_Gather_init)
LOOM_LC_ROOTED(MPI_Gather_init_c, MPI_Gather_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Scatter_c) && defined(LOOM_MPI_HAS_MPI_Scatter)
LOOM_LC_ROOTED(MPI_Scatter_c, MPI_Scatter, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Iscatter_c) && defined(LOOM_MPI_HAS_MPI_Iscatter)
LOOM_LC_ROOTED(MPI_Iscatter_c, MPI_Iscatter, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Scatter_init_c) && defined(LOOM_MPI_HAS_MPI_Scatter_init)
LOOM_LC_ROOTED(MPI_Scatter_init_c, MPI_Scatter_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Allgather_c) && defined(LOOM_MPI_HAS_MPI_Allgather)
LOOM_LC_ALL(MPI_Allgather_c, MPI_Allgather, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Iallgather_c) && defined(LOOM_MPI_HAS_MPI_Iallgather)
LOOM_LC_ALL(MPI_Iallgather_c, MPI_Iallgather, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Allgather_init_c) && defined(LOOM_MPI_HAS_MPI_Allgather_init)
LOOM_LC_ALL(MPI_Allgather_init_c, MPI_Allgather_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Alltoall_c) && defined(LOOM_MPI_HAS_MPI_Alltoall)
LOOM_LC_ALL(MPI_Alltoall_c, MPI_Alltoall, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ialltoall_c) && defined(LOOM_MPI_HAS_MPI_Ialltoall)
LOOM_LC_ALL(MPI_Ialltoall_c, MPI_Ialltoall, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Alltoall_init_c) && defined(LOOM_MPI_HAS_MPI_Alltoall_init)
LOOM_LC_ALL(MPI_Alltoall_init_c, MPI_Alltoall_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_allgather_c) && defined(LOOM_MPI_HAS_MPI_Neighbor_allgather)
LOOM_LC_ALL(MPI_Neighbor_allgather_c, MPI_Neighbor_allgather, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ineighbor_allgather_c) && defined(LOOM_MPI_HAS_MPI_Ineighbor_allgather)
LOOM_LC_ALL(MPI_Ineighbor_allgather_c, MPI_Ineighbor_allgather, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_allgather_init_c) && \
    defined(LOOM_MPI_HAS_MPI_Neighbor_allgather_init)
LOOM_LC_ALL(MPI_Neighbor_allgather_init_c, MPI_Neighbor_allgather_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_alltoall_c) && defined(LOOM_MPI_HAS_MPI_Neighbor_alltoall)
LOOM_LC_ALL(MPI_Neighbor_alltoall_c, MPI_Neighbor_alltoall, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ineighbor_alltoall_c) && defined(LOOM_MPI_HAS_MPI_Ineighbor_alltoall)
LOOM_LC_ALL(MPI_Ineighbor_alltoall_c, MPI_Ineighbor_alltoall, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_alltoall_init_c) && \
    defined(LOOM_MPI_HAS_MPI_Neighbor_alltoall_init)
LOOM_LC_ALL(MPI_Neighbor_alltoall_init_c, MPI_Neighbor_alltoall_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Gatherv_c) && defined(LOOM_MPI_HAS_MPI_Gatherv)
LOOM_LC_GATHERV(MPI_Gatherv_c, MPI_Gatherv, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Igatherv_c) && defined(LOOM_MPI_HAS_MPI_Igatherv)
LOOM_LC_GATHERV(MPI_Igatherv_c, MPI_Igatherv, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Gatherv_init_c) && defined(LOOM_MPI_HAS_MPI_Gatherv_init)
LOOM_LC_GATHERV(MPI_Gatherv_init_c, MPI_Gatherv_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Scatterv_c) && defined(LOOM_MPI_HAS_MPI_Scatterv)
LOOM_LC_SCATTERV(MPI_Scatterv_c, MPI_Scatterv, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Iscatterv_c) && defined(LOOM_MPI_HAS_MPI_Iscatterv)
LOOM_LC_SCATTERV(MPI_Iscatterv_c, MPI_Iscatterv, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Scatterv_init_c) && defined(LOOM_MPI_HAS_MPI_Scatterv_init)
LOOM_LC_SCATTERV(MPI_Scatterv_init_c, MPI_Scatterv_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Allgatherv_c) && defined(LOOM_MPI_HAS_MPI_Allgatherv)
LOOM_LC_ALLGATHERV(MPI_Allgatherv_c, MPI_Allgatherv, B, false)
#endif
#if defined(LOOM_MPI_HAS_MPI_Iallgatherv_c) && defined(LOOM_MPI_HAS_MPI_Iallgatherv)
LOOM_LC_ALLGATHERV(MPI_Iallgatherv_c, MPI_Iallgatherv, I, false)
#endif
#if defined(LOOM_MPI_HAS_MPI_Allgatherv_init_c) && defined(LOOM_MPI_HAS_MPI_Allgatherv_init)
LOOM_LC_ALLGATHERV(MPI_Allgatherv_init_c, MPI_Allgatherv_init, P, false)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_allgatherv_c) && defined(LOOM_MPI_HAS_MPI_Neighbor_allgatherv)
LOOM_LC_ALLGATHERV(MPI_Neighbor_allgatherv_c, MPI_Neighbor_allgatherv, B, true)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ineighbor_allgatherv_c) && \
    defined(LOOM_MPI_HAS_MPI_Ineighbor_allgatherv)
LOOM_LC_ALLGATHERV(MPI_Ineighbor_allgatherv_c, MPI_Ineighbor_allgatherv, I, true)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_allgatherv_init_c) && \
    defined(LOOM_MPI_HAS_MPI_Neighbor_allgatherv_init)
LOOM_LC_ALLGATHERV(MPI_Neighbor_allgatherv_init_c, MPI_Neighbor_allgatherv_init, P, true)
#endif
#if defined(LOOM_MPI_HAS_MPI_Alltoallv_c) && defined(LOOM_MPI_HAS_MPI_Alltoallv)
LOOM_LC_ALLTOALLV(MPI_Alltoallv_c, MPI_Alltoallv, B, false)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ialltoallv_c) && defined(LOOM_MPI_HAS_MPI_Ialltoallv)
LOOM_LC_ALLTOALLV(MPI_Ialltoallv_c, MPI_Ialltoallv, I, false)
#endif
#if defined(LOOM_MPI_HAS_MPI_Alltoallv_init_c) && defined(LOOM_MPI_HAS_MPI_Alltoallv_init)
LOOM_LC_ALLTOALLV(MPI_Alltoallv_init_c, MPI_Alltoallv_init, P, false)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_alltoallv_c) && defined(LOOM_MPI_HAS_MPI_Neighbor_alltoallv)
LOOM_LC_ALLTOALLV(MPI_Neighbor_alltoallv_c, MPI_Neighbor_alltoallv, B, true)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ineighbor_alltoallv_c) && defined(LOOM_MPI_HAS_MPI_Ineighbor_alltoallv)
LOOM_LC_ALLTOALLV(MPI_Ineighbor_alltoallv_c, MPI_Ineighbor_alltoallv, I, true)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_alltoallv_init_c) && \
    defined(LOOM_MPI_HAS_MPI_Neighbor_alltoallv_init)
LOOM_LC_ALLTOALLV(MPI_Neighbor_alltoallv_init_c, MPI_Neighbor_alltoallv_init, P, true)
#endif
#if defined(LOOM_MPI_HAS_MPI_Alltoallw_c) && defined(LOOM_MPI_HAS_MPI_Alltoallw)
LOOM_LC_ALLTOALLW(MPI_Alltoallw_c, MPI_Alltoallw, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ialltoallw_c) && defined(LOOM_MPI_HAS_MPI_Ialltoallw)
LOOM_LC_ALLTOALLW(MPI_Ialltoallw_c, MPI_Ialltoallw, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Alltoallw_init_c) && defined(LOOM_MPI_HAS_MPI_Alltoallw_init)
LOOM_LC_ALLTOALLW(MPI_Alltoallw_init_c, MPI_Alltoallw_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_alltoallw_c) && defined(LOOM_MPI_HAS_MPI_Neighbor_alltoallw)
LOOM_LC_NEIGHBOR_ALLTOALLW(MPI_Neighbor_alltoallw_c, MPI_Neighbor_alltoallw, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ineighbor_alltoallw_c) && defined(LOOM_MPI_HAS_MPI_Ineighbor_alltoallw)
LOOM_LC_NEIGHBOR_ALLTOALLW(MPI_Ineighbor_alltoallw_c, MPI_Ineighbor_alltoallw, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Neighbor_alltoallw_init_c) && \
    defined(LOOM_MPI_HAS_MPI_Neighbor_alltoallw_init)
LOOM_LC_NEIGHBOR_ALLTOALLW(MPI_Neighbor_alltoallw_init_c, MPI_Neighbor_alltoallw_init, P)
#endif
#if defined(LOOM_MPI_HAS_MPI_Reduce_scatter_c) && defined(LOOM_MPI_HAS_MPI_Reduce_scatter)
LOOM_LC_REDUCE_SCATTER(MPI_Reduce_scatter_c, MPI_Reduce_scatter, B)
#endif
#if defined(LOOM_MPI_HAS_MPI_Ireduce_scatter_c) && defined(LOOM_MPI_HAS_MPI_Ireduce_scatter)
LOOM_LC_REDUCE_SCATTER(MPI_Ireduce_scatter_c, MPI_Ireduce_scatter, I)
#endif
#if defined(LOOM_MPI_HAS_MPI_Reduce_scatter_init_c) && defined(LOOM_MPI_HAS_MPI_Reduce_scatter_init)
LOOM_LC_REDUCE_SCATTER(MPI_Reduce_scatter_init_c, MPI_Reduce_scatter_init, P)
#endif

#if defined(LOOM_MPI_HAS_MPI_Reduce_local_c)
int MPI_Reduce_local_c(const void* in, void* inout, MPI_Count count, MPI_Datatype t, MPI_Op op) {
  if (!loom::runtime() || !fits(count))
    return beyond_int("MPI_Reduce_local_c", MPI_COMM_WORLD, device_arg(in) || device_arg(inout),
                      MPI_ERR_COUNT,
                      [&] { return LOOM_NEXT(MPI_Reduce_local_c)(in, inout, count, t, op); });
  return MPI_Reduce_local(in, inout, as_int(count), t, op);
}
#endif
#if defined(LOOM_MPI_HAS_MPI_Pack_c)
int MPI_Pack_c(const void* in, MPI_Count incount, MPI_Datatype t, void* out, MPI_Count outsize,
               MPI_Count* position, MPI_Comm comm) {
  if (!loom::runtime() || !position || !fits(incount) || !fits(outsize) || !fits(*position))
    return beyond_int("MPI_Pack_c", comm, device_arg(in) || device_arg(out), MPI_ERR_COUNT, [&] {
      return LOOM_NEXT(MPI_Pack_c)(in, incount, t, out, outsize, position, comm);
    });
  int pos = as_int(*position);
  const int rc = MPI_Pack(in, as_int(incount), t, out, as_int(outsize), &pos, comm);
  *position = pos;
  return rc;
}
#endif
#if defined(LOOM_MPI_HAS_MPI_Unpack_c)
int MPI_Unpack_c(const void* in, MPI_Count insize, MPI_Count* position, void* out,
                 MPI_Count outcount, MPI_Datatype t, MPI_Comm comm) {
  if (!loom::runtime() || !position || !fits(insize) || !fits(outcount) || !fits(*position))
    return beyond_int("MPI_Unpack_c", comm, device_arg(in) || device_arg(out), MPI_ERR_COUNT, [&] {
      return LOOM_NEXT(MPI_Unpack_c)(in, insize, position, out, outcount, t, comm);
    });
  int pos = as_int(*position);
  const int rc = MPI_Unpack(in, as_int(insize), &pos, out, as_int(outcount), t, comm);
  *position = pos;
  return rc;
}
#endif

}  // extern "C"

#endif  // LOOM_MPI_HAS_MPI_Bcast_c
