// The collectives: MPI_Bcast, Reduce, Allreduce, Reduce_local,
// Reduce_scatter(_block), Scan, Exscan, Gather(v), Scatter(v), Allgather(v),
// Alltoall(v,w) and the neighbour collectives, each in its blocking,
// nonblocking (MPI_I...) and persistent (MPI-4 ..._init; Open MPI 4.1's
// MPIX_..._init) forms. Host buffers go straight to the MPI. Device buffers
// take the node-local engine where it applies (src/coll), the nonblocking
// and persistent forms schedules of Loom's messages (coll_schedule.hpp),
// else the MPI's own collective runs on host mirrors of them (coll_call.hpp), which holds for
// every datatype and op, user-defined ones included. MPI_Barrier moves no
// data (mpi/blocking.cpp).
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: the persistent collectives (MPIX_..._init)
#endif

#include "mpi/blocking.hpp"
#include "mpi/coll_args.hpp"
#include "mpi/coll_call.hpp"
#include "mpi/coll_engines.hpp"
#include "mpi/coll_schedule.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"

// The persistent forms' names, where the MPI has them.
#if defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && OMPI_HAVE_MPI_EXT_PCOLLREQ
#define LOOM_INIT_FN(Name) MPIX_##Name##_init
#define LOOM_PINIT_FN(Name) PMPIX_##Name##_init
#elif MPI_VERSION >= 4
#define LOOM_INIT_FN(Name) MPI_##Name##_init
#define LOOM_PINIT_FN(Name) PMPI_##Name##_init
#endif
#define LOOM_NEXT_OF(fn) LOOM_NEXT(fn)  // expands fn first
#define LOOM_P(...) __VA_ARGS__
#define LOOM_FIRST_(a, ...) a
#define LOOM_FIRST(...) LOOM_FIRST_(__VA_ARGS__)  // LOOM_FIRST (a, b, c): a

using loom::mpi::Call;
namespace args = loom::mpi::args;
namespace engines = loom::mpi::engines;

// Each name must be the MPI's own (its PMPI_ twin exists), or the MPI's
// function would be called instead, with device buffers.
// While zero-copy is on, the MPI's nonblocking form runs instead, tested in a
// loop that finishes receives zero-copy senders wait on (mpi/blocking.hpp);
// not where the MPI's nonblocking form differs (mpi/blocking.hpp's
// stays_blocking).
#define LOOM_BLOCKING(Name, IName, params, call_args, describe, engine) \
  static_assert(sizeof(&PMPI_##Name) != 0, "not an MPI function");      \
  int MPI_##Name(LOOM_P params) {                                       \
    Call c(comm, "MPI_" #Name);                                         \
    c.buffers(LOOM_P call_args);                                        \
    if (c.active()) { /* Loom off (LOOM_DISABLE): the MPI's own */      \
      LOOM_P engine;                                                    \
    }                                                                   \
    LOOM_P describe;                                                    \
    return c.blocking([&] {                                             \
      return loom::mpi::blocking_call(                                  \
          loom::mpi::collectives_poll() &&                              \
              !loom::mpi::stays_blocking(#Name, LOOM_FIRST call_args),  \
          [&] { return LOOM_NEXT(MPI_##Name)(LOOM_P call_args); },      \
          [&](MPI_Request* loom_req_) {                                 \
            return LOOM_NEXT(MPI_##IName)(LOOM_P call_args, loom_req_); \
          });                                                           \
    });                                                                 \
  }
// A call `c` named `what`, its buffers and mirrors described.
#define LOOM_DESCRIBED(what, call_args, describe) \
  Call c(comm, what);                             \
  c.buffers(LOOM_P call_args);                    \
  LOOM_P describe;
// The engine runs after `describe` (which only registers the mirrors), so
// that argument errors found there go to the MPI's own call.
#define LOOM_NONBLOCKING(IName, params, call_args, describe, engine)                          \
  static_assert(sizeof(&PMPI_##IName) != 0, "not an MPI function");                           \
  int MPI_##IName(LOOM_P params, MPI_Request* req) {                                          \
    LOOM_DESCRIBED("MPI_" #IName, call_args, describe)                                        \
    if (req && c.active() && c.error() == MPI_SUCCESS) { /* alike on every rank */            \
      c.schedule_into(req);                                                                   \
      LOOM_P engine;                                                                          \
      c.schedule_into(nullptr);                                                               \
    }                                                                                         \
    return c.nonblocking(req, [&] { return LOOM_NEXT(MPI_##IName)(LOOM_P call_args, req); }); \
  }
#ifdef LOOM_INIT_FN
// Where the engine runs the MPI_I... form as a schedule, every MPI_Start
// runs it again (coll_schedule.hpp's persistent_schedule); else the MPI's
// own _init, on host mirrors. The arguments are kept for the starts (MPI
// forbids changing the arrays before the request is freed).
#define LOOM_PERSISTENT(Name, params, call_args, describe, engine)                           \
  static_assert(sizeof(&LOOM_PINIT_FN(Name)) != 0, "not an MPI function");                   \
  int LOOM_INIT_FN(Name)(LOOM_P params, MPI_Info info, MPI_Request * req) {                  \
    auto loom_run_ = [=](MPI_Request* loom_sreq_) mutable -> int {                           \
      LOOM_DESCRIBED(#Name "_init", call_args, describe)                                     \
      if (c.error() != MPI_SUCCESS) return loom::mpi::kNoSchedule;                           \
      c.schedule_into(loom_sreq_, true);                                                     \
      LOOM_P engine;                                                                         \
      return loom::mpi::kNoSchedule;                                                         \
    };                                                                                       \
    if (int loom_rc_;                                                                        \
        loom::runtime() && loom::mpi::persistent_schedule(comm, loom_run_, req, &loom_rc_))  \
      return loom_rc_;                                                                       \
    LOOM_DESCRIBED(#Name "_init", call_args, describe)                                       \
    return c.persistent(                                                                     \
        req, [&] { return LOOM_NEXT_OF(LOOM_INIT_FN(Name))(LOOM_P call_args, info, req); }); \
  }
#else
#define LOOM_PERSISTENT(Name, params, call_args, describe, engine)
#endif
// All three forms of a collective. `engine` may finish a blocking call
// (return) through a faster engine than the host mirrors; it sees the
// caller's own buffers, before `describe` swaps in their mirrors.
#define LOOM_COLLECTIVE(Name, IName, params, call_args, describe, engine) \
  LOOM_BLOCKING(Name, IName, params, call_args, describe, engine)         \
  LOOM_NONBLOCKING(IName, params, call_args, describe, engine)            \
  LOOM_PERSISTENT(Name, params, call_args, describe, engine)

extern "C" {

LOOM_COLLECTIVE(Bcast, Ibcast, (void* buf, int count, MPI_Datatype t, int root, MPI_Comm comm),
                (buf, count, t, root, comm), (args::bcast(c, buf, count, t, root)),
                (int rc; if (engines::bcast(c, buf, count, t, root, &rc)) return rc))

LOOM_COLLECTIVE(Reduce, Ireduce,
                (const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root,
                 MPI_Comm comm),
                (s, r, count, t, op, root, comm),
                (args::reduce(c, s, r, count, t, c.rank() == root)),
                (int rc; if (engines::reduce(c, s, r, count, t, op, root, &rc)) return rc))

LOOM_COLLECTIVE(Allreduce, Iallreduce,
                (const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm),
                (s, r, count, t, op, comm), (args::reduce(c, s, r, count, t, true)),
                (int rc; if (engines::allreduce(c, s, r, count, t, op, &rc)) return rc))

LOOM_COLLECTIVE(Reduce_scatter, Ireduce_scatter,
                (const void* s, void* r, const int rcs[], MPI_Datatype t, MPI_Op op, MPI_Comm comm),
                (s, r, rcs, t, op, comm), (args::reduce_scatter(c, s, r, rcs, t)),
                (int err; if (engines::reduce_scatter(c, s, r, rcs, t, op, &err)) return err))

LOOM_COLLECTIVE(Reduce_scatter_block, Ireduce_scatter_block,
                (const void* s, void* r, int rc, MPI_Datatype t, MPI_Op op, MPI_Comm comm),
                (s, r, rc, t, op, comm), (args::reduce_scatter_block(c, s, r, rc, t)),
                (int err; if (engines::reduce_scatter_block(c, s, r, rc, t, op, &err)) return err))

LOOM_COLLECTIVE(Scan, Iscan,
                (const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm),
                (s, r, count, t, op, comm), (args::reduce(c, s, r, count, t, true)),
                (int rc; if (engines::scan(c, s, r, count, t, op, false, &rc)) return rc))

LOOM_COLLECTIVE(Exscan, Iexscan,
                (const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm),
                (s, r, count, t, op, comm), (args::exscan(c, s, r, count, t)),
                (int rc; if (engines::scan(c, s, r, count, t, op, true, &rc)) return rc))

LOOM_COLLECTIVE(Gather, Igather,
                (const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, int root,
                 MPI_Comm comm),
                (s, sc, st, r, rc, rt, root, comm), (args::gather(c, s, sc, st, r, rc, rt, root)),
                (int err; if (engines::gather(c, s, sc, st, r, rc, rt, root, &err)) return err))

LOOM_COLLECTIVE(Gatherv, Igatherv,
                (const void* s, int sc, MPI_Datatype st, void* r, const int rcs[],
                 const int displs[], MPI_Datatype rt, int root, MPI_Comm comm),
                (s, sc, st, r, rcs, displs, rt, root, comm),
                (args::gatherv(c, s, sc, st, r, rcs, displs, rt, root)),
                (int err;
                 if (engines::gatherv(c, s, sc, st, r, rcs, displs, rt, root, &err)) return err))

LOOM_COLLECTIVE(Scatter, Iscatter,
                (const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, int root,
                 MPI_Comm comm),
                (s, sc, st, r, rc, rt, root, comm), (args::scatter(c, s, sc, st, r, rc, rt, root)),
                (int err; if (engines::scatter(c, s, sc, st, r, rc, rt, root, &err)) return err))

LOOM_COLLECTIVE(Scatterv, Iscatterv,
                (const void* s, const int scs[], const int displs[], MPI_Datatype st, void* r,
                 int rc, MPI_Datatype rt, int root, MPI_Comm comm),
                (s, scs, displs, st, r, rc, rt, root, comm),
                (args::scatterv(c, s, scs, displs, st, r, rc, rt, root)),
                (int err;
                 if (engines::scatterv(c, s, scs, displs, st, r, rc, rt, root, &err)) return err))

LOOM_COLLECTIVE(Allgather, Iallgather,
                (const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                 MPI_Comm comm),
                (s, sc, st, r, rc, rt, comm),
                (args::all_blocks(c, s, sc, st, r, int64_t{rc} * c.size(), rt)),
                (int err; if (engines::allgather(c, s, sc, st, r, rc, rt, &err)) return err))

LOOM_COLLECTIVE(Allgatherv, Iallgatherv,
                (const void* s, int sc, MPI_Datatype st, void* r, const int rcs[],
                 const int displs[], MPI_Datatype rt, MPI_Comm comm),
                (s, sc, st, r, rcs, displs, rt, comm),
                (args::allgatherv(c, s, sc, st, r, rcs, displs, rt, c.size())),
                (int err;
                 if (engines::allgatherv(c, s, sc, st, r, rcs, displs, rt, &err)) return err))

LOOM_COLLECTIVE(Alltoall, Ialltoall,
                (const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                 MPI_Comm comm),
                (s, sc, st, r, rc, rt, comm),
                (args::all_blocks(c, s, int64_t{sc} * c.size(), st, r, int64_t{rc} * c.size(), rt)),
                (int err; if (engines::alltoall(c, s, sc, st, r, rc, rt, &err)) return err))

LOOM_COLLECTIVE(Alltoallv, Ialltoallv,
                (const void* s, const int scs[], const int sdispls[], MPI_Datatype st, void* r,
                 const int rcs[], const int rdispls[], MPI_Datatype rt, MPI_Comm comm),
                (s, scs, sdispls, st, r, rcs, rdispls, rt, comm),
                (args::alltoallv(c, s, scs, sdispls, st, r, rcs, rdispls, rt, c.size(), c.size())),
                (int err; if (engines::alltoallv(c, s, scs, sdispls, st, r, rcs, rdispls, rt,
                                                 &err)) return err))

LOOM_COLLECTIVE(
    Alltoallw, Ialltoallw,
    (const void* s, const int scs[], const int sdispls[], const MPI_Datatype sts[], void* r,
     const int rcs[], const int rdispls[], const MPI_Datatype rts[], MPI_Comm comm),
    (s, scs, sdispls, sts, r, rcs, rdispls, rts, comm),
    (args::AintDispls sd(sdispls, c.size()); args::AintDispls rd(rdispls, c.size());
     args::alltoallw(c, s, scs, sd.data(), sts, r, rcs, rd.data(), rts, c.size(), c.size())),
    (int err;
     if (engines::alltoallw(c, s, scs, sdispls, sts, r, rcs, rdispls, rts, &err)) return err))

LOOM_COLLECTIVE(Neighbor_allgather, Ineighbor_allgather,
                (const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                 MPI_Comm comm),
                (s, sc, st, r, rc, rt, comm),
                (int in = 0, out = 0; if (c.neighbors(&in, &out))
                     args::neighbor_blocks(c, s, sc, st, r, int64_t{rc} * in, rt)),
                (int err;
                 if (engines::neighbor_allgather(c, s, sc, st, r, rc, rt, &err)) return err))

LOOM_COLLECTIVE(Neighbor_allgatherv, Ineighbor_allgatherv,
                (const void* s, int sc, MPI_Datatype st, void* r, const int rcs[],
                 const int displs[], MPI_Datatype rt, MPI_Comm comm),
                (s, sc, st, r, rcs, displs, rt, comm),
                (int in = 0, out = 0; if (c.neighbors(&in, &out))
                     args::allgatherv(c, s, sc, st, r, rcs, displs, rt, in, true)),
                (int err; if (engines::neighbor_allgatherv(c, s, sc, st, r, rcs, displs, rt,
                                                           &err)) return err))

LOOM_COLLECTIVE(Neighbor_alltoall, Ineighbor_alltoall,
                (const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                 MPI_Comm comm),
                (s, sc, st, r, rc, rt, comm),
                (int in = 0, out = 0; if (c.neighbors(&in, &out))
                     args::neighbor_blocks(c, s, int64_t{sc} * out, st, r, int64_t{rc} * in, rt)),
                (int err;
                 if (engines::neighbor_alltoall(c, s, sc, st, r, rc, rt, &err)) return err))

LOOM_COLLECTIVE(Neighbor_alltoallv, Ineighbor_alltoallv,
                (const void* s, const int scs[], const int sdispls[], MPI_Datatype st, void* r,
                 const int rcs[], const int rdispls[], MPI_Datatype rt, MPI_Comm comm),
                (s, scs, sdispls, st, r, rcs, rdispls, rt, comm),
                (int in = 0, out = 0; if (c.neighbors(&in, &out))
                     args::alltoallv(c, s, scs, sdispls, st, r, rcs, rdispls, rt, out, in, true)),
                (int err; if (engines::neighbor_alltoallv(c, s, scs, sdispls, st, r, rcs, rdispls,
                                                          rt, &err)) return err))

LOOM_COLLECTIVE(Neighbor_alltoallw, Ineighbor_alltoallw,
                (const void* s, const int scs[], const MPI_Aint sdispls[], const MPI_Datatype sts[],
                 void* r, const int rcs[], const MPI_Aint rdispls[], const MPI_Datatype rts[],
                 MPI_Comm comm),
                (s, scs, sdispls, sts, r, rcs, rdispls, rts, comm),
                (int in = 0, out = 0; if (c.neighbors(&in, &out))
                     args::alltoallw(c, s, scs, sdispls, sts, r, rcs, rdispls, rts, out, in, true)),
                (int err; if (engines::neighbor_alltoallw(c, s, scs, sdispls, sts, r, rcs, rdispls,
                                                          rts, &err)) return err))

// No communicator: errors go to MPI_COMM_WORLD's handler. Both buffers are
// local, so a device reduction needs no agreement with other ranks.
int MPI_Reduce_local(const void* in, void* inout, int count, MPI_Datatype t, MPI_Op op) {
  Call c(MPI_COMM_SELF, "MPI_Reduce_local");
  c.buffers(in, inout);
  if (int rc; engines::reduce_local(c, in, inout, count, t, op, &rc)) return rc;
  c.in(in, count, t);
  c.inout(inout, count, t);
  return c.blocking([&] { return LOOM_NEXT(MPI_Reduce_local)(in, inout, count, t, op); });
}

}  // extern "C"
