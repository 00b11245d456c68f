// The MPI-4 large-count (_c) point-to-point forms, where the MPI declares
// them: each becomes its int form, Loom's own (so device buffers, kept
// messages and device-method headers are handled alike). A count beyond
// INT_MAX goes as one element of a contiguous type of that many.
#include <mpi.h>

#include <climits>

#include "mpi/buffer_calls.hpp"
#include "mpi/errors.hpp"
#include "mpi/large_count.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"

// MPI-4 (MPICH 4.0 has them; Open MPI 4.1 has none).
#ifdef LOOM_MPI_HAS_MPI_Type_contiguous_c

using loom::mpi::with_int_count;

extern "C" {

#define LOOM_LARGE_SEND(Name, IntName)                                                           \
  int Name(const void* buf, MPI_Count count, MPI_Datatype t, int dest, int tag, MPI_Comm comm) { \
    if (!loom::runtime()) return LOOM_NEXT(Name)(buf, count, t, dest, tag, comm);                \
    return with_int_count(count, t, false, [&](int n, MPI_Datatype u) {                          \
      return IntName(buf, n, u, dest, tag, comm);                                                \
    });                                                                                          \
  }
// The nonblocking and persistent sends (a request).
#define LOOM_LARGE_ISEND(Name, IntName)                                                        \
  int Name(const void* buf, MPI_Count count, MPI_Datatype t, int dest, int tag, MPI_Comm comm, \
           MPI_Request* r) {                                                                   \
    if (!loom::runtime()) return LOOM_NEXT(Name)(buf, count, t, dest, tag, comm, r);           \
    return with_int_count(count, t, true, [&](int n, MPI_Datatype u) {                         \
      return IntName(buf, n, u, dest, tag, comm, r);                                           \
    });                                                                                        \
  }

#ifdef LOOM_MPI_HAS_MPI_Send_c
LOOM_LARGE_SEND(MPI_Send_c, MPI_Send)
#endif
#ifdef LOOM_MPI_HAS_MPI_Ssend_c
LOOM_LARGE_SEND(MPI_Ssend_c, MPI_Ssend)
#endif
#ifdef LOOM_MPI_HAS_MPI_Rsend_c
LOOM_LARGE_SEND(MPI_Rsend_c, MPI_Rsend)
#endif
#ifdef LOOM_MPI_HAS_MPI_Bsend_c
LOOM_LARGE_SEND(MPI_Bsend_c, MPI_Bsend)
#endif
#ifdef LOOM_MPI_HAS_MPI_Isend_c
LOOM_LARGE_ISEND(MPI_Isend_c, MPI_Isend)
#endif
#ifdef LOOM_MPI_HAS_MPI_Issend_c
LOOM_LARGE_ISEND(MPI_Issend_c, MPI_Issend)
#endif
#ifdef LOOM_MPI_HAS_MPI_Irsend_c
LOOM_LARGE_ISEND(MPI_Irsend_c, MPI_Irsend)
#endif
#ifdef LOOM_MPI_HAS_MPI_Ibsend_c
LOOM_LARGE_ISEND(MPI_Ibsend_c, MPI_Ibsend)
#endif
#ifdef LOOM_MPI_HAS_MPI_Send_init_c
LOOM_LARGE_ISEND(MPI_Send_init_c, MPI_Send_init)
#endif
#ifdef LOOM_MPI_HAS_MPI_Ssend_init_c
LOOM_LARGE_ISEND(MPI_Ssend_init_c, MPI_Ssend_init)
#endif
#ifdef LOOM_MPI_HAS_MPI_Rsend_init_c
LOOM_LARGE_ISEND(MPI_Rsend_init_c, MPI_Rsend_init)
#endif
#ifdef LOOM_MPI_HAS_MPI_Bsend_init_c
LOOM_LARGE_ISEND(MPI_Bsend_init_c, MPI_Bsend_init)
#endif

#ifdef LOOM_MPI_HAS_MPI_Recv_c
int MPI_Recv_c(void* buf, MPI_Count count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
               MPI_Status* st) {
  if (!loom::runtime()) return LOOM_NEXT(MPI_Recv_c)(buf, count, t, src, tag, comm, st);
  return with_int_count(count, t, false, [&](int n, MPI_Datatype u) {
    return MPI_Recv(buf, n, u, src, tag, comm, st);
  });
}
#endif
#ifdef LOOM_MPI_HAS_MPI_Irecv_c
int MPI_Irecv_c(void* buf, MPI_Count count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                MPI_Request* r) {
  if (!loom::runtime()) return LOOM_NEXT(MPI_Irecv_c)(buf, count, t, src, tag, comm, r);
  return with_int_count(count, t, true, [&](int n, MPI_Datatype u) {
    return MPI_Irecv(buf, n, u, src, tag, comm, r);
  });
}
#endif
#ifdef LOOM_MPI_HAS_MPI_Recv_init_c
int MPI_Recv_init_c(void* buf, MPI_Count count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                    MPI_Request* r) {
  if (!loom::runtime()) return LOOM_NEXT(MPI_Recv_init_c)(buf, count, t, src, tag, comm, r);
  return with_int_count(count, t, true, [&](int n, MPI_Datatype u) {
    return MPI_Recv_init(buf, n, u, src, tag, comm, r);
  });
}
#endif
#ifdef LOOM_MPI_HAS_MPI_Mrecv_c
int MPI_Mrecv_c(void* buf, MPI_Count count, MPI_Datatype t, MPI_Message* msg, MPI_Status* st) {
  if (!loom::runtime()) return LOOM_NEXT(MPI_Mrecv_c)(buf, count, t, msg, st);
  return with_int_count(count, t, false,
                        [&](int n, MPI_Datatype u) { return MPI_Mrecv(buf, n, u, msg, st); });
}
#endif
#ifdef LOOM_MPI_HAS_MPI_Imrecv_c
int MPI_Imrecv_c(void* buf, MPI_Count count, MPI_Datatype t, MPI_Message* msg, MPI_Request* r) {
  if (!loom::runtime()) return LOOM_NEXT(MPI_Imrecv_c)(buf, count, t, msg, r);
  return with_int_count(count, t, true,
                        [&](int n, MPI_Datatype u) { return MPI_Imrecv(buf, n, u, msg, r); });
}
#endif
#ifdef LOOM_MPI_HAS_MPI_Sendrecv_c
int MPI_Sendrecv_c(const void* sbuf, MPI_Count scount, MPI_Datatype stype, int dest, int stag,
                   void* rbuf, MPI_Count rcount, MPI_Datatype rtype, int src, int rtag,
                   MPI_Comm comm, MPI_Status* st) {
  if (!loom::runtime())
    return LOOM_NEXT(MPI_Sendrecv_c)(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src,
                                     rtag, comm, st);
  return with_int_count(scount, stype, false, [&](int sn, MPI_Datatype su) {
    return with_int_count(rcount, rtype, false, [&](int rn, MPI_Datatype ru) {
      return MPI_Sendrecv(sbuf, sn, su, dest, stag, rbuf, rn, ru, src, rtag, comm, st);
    });
  });
}
#endif
#ifdef LOOM_MPI_HAS_MPI_Sendrecv_replace_c
int MPI_Sendrecv_replace_c(void* buf, MPI_Count count, MPI_Datatype t, int dest, int stag, int src,
                           int rtag, MPI_Comm comm, MPI_Status* st) {
  if (!loom::runtime())
    return LOOM_NEXT(MPI_Sendrecv_replace_c)(buf, count, t, dest, stag, src, rtag, comm, st);
  return with_int_count(count, t, false, [&](int n, MPI_Datatype u) {
    return MPI_Sendrecv_replace(buf, n, u, dest, stag, src, rtag, comm, st);
  });
}
#endif
#if defined(LOOM_MPI_HAS_MPI_Isendrecv_c) && defined(LOOM_MPI_HAS_MPI_Isendrecv)
int MPI_Isendrecv_c(const void* sbuf, MPI_Count scount, MPI_Datatype stype, int dest, int stag,
                    void* rbuf, MPI_Count rcount, MPI_Datatype rtype, int src, int rtag,
                    MPI_Comm comm, MPI_Request* r) {
  if (!loom::runtime())
    return LOOM_NEXT(MPI_Isendrecv_c)(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src,
                                      rtag, comm, r);
  return with_int_count(scount, stype, true, [&](int sn, MPI_Datatype su) {
    return with_int_count(rcount, rtype, true, [&](int rn, MPI_Datatype ru) {
      return MPI_Isendrecv(sbuf, sn, su, dest, stag, rbuf, rn, ru, src, rtag, comm, r);
    });
  });
}
#endif
#if defined(LOOM_MPI_HAS_MPI_Isendrecv_replace_c) && defined(LOOM_MPI_HAS_MPI_Isendrecv_replace)
int MPI_Isendrecv_replace_c(void* buf, MPI_Count count, MPI_Datatype t, int dest, int stag, int src,
                            int rtag, MPI_Comm comm, MPI_Request* r) {
  if (!loom::runtime())
    return LOOM_NEXT(MPI_Isendrecv_replace_c)(buf, count, t, dest, stag, src, rtag, comm, r);
  return with_int_count(count, t, true, [&](int n, MPI_Datatype u) {
    return MPI_Isendrecv_replace(buf, n, u, dest, stag, src, rtag, comm, r);
  });
}
#endif

}  // extern "C"

#endif  // LOOM_MPI_HAS_MPI_Type_contiguous_c
