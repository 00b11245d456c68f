// MPICH's large-count (_c) forms of the stream API, where the MPI declares
// them (MPICH 5.0): each becomes Loom's int form, so it takes Loom's
// streams and device buffers as the int form does. Without them the
// generated interposers (mpi/buffer_calls.hpp) would hand Loom's stream
// communicators to the MPI's own enqueue functions.
//
// Point-to-point: a count beyond INT_MAX goes as one element of a
// contiguous type of that many (kept: the stream uses it later).
// Allreduce: in pieces of at most INT_MAX elements, enqueued in order (an
// op is elementwise; a contiguous type would not take a predefined op).
#include <mpi.h>

#include <climits>

#include "loom/stream.h"
#include "mpi/large_count.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"

#if !defined(LOOM_DECLARES_MPIX_STREAM) && defined(LOOM_MPI_HAS_MPI_Type_contiguous_c)

using loom::mpi::with_int_count;

extern "C" {

#ifdef LOOM_MPI_HAS_MPIX_Send_enqueue_c
int MPIX_Send_enqueue_c(const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                        MPI_Comm comm) {
  if (!loom::runtime())
    return LOOM_NEXT(MPIX_Send_enqueue_c)(buf, count, datatype, dest, tag, comm);
  return with_int_count(count, datatype, true, [&](int n, MPI_Datatype t) {
    return MPIX_Send_enqueue(buf, n, t, dest, tag, comm);
  });
}
#endif

#ifdef LOOM_MPI_HAS_MPIX_Recv_enqueue_c
int MPIX_Recv_enqueue_c(void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                        MPI_Comm comm, MPI_Status* status) {
  if (!loom::runtime())
    return LOOM_NEXT(MPIX_Recv_enqueue_c)(buf, count, datatype, source, tag, comm, status);
  return with_int_count(count, datatype, true, [&](int n, MPI_Datatype t) {
    return MPIX_Recv_enqueue(buf, n, t, source, tag, comm, status);
  });
}
#endif

#ifdef LOOM_MPI_HAS_MPIX_Isend_enqueue_c
int MPIX_Isend_enqueue_c(const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                         MPI_Comm comm, MPI_Request* request) {
  if (!loom::runtime())
    return LOOM_NEXT(MPIX_Isend_enqueue_c)(buf, count, datatype, dest, tag, comm, request);
  return with_int_count(count, datatype, true, [&](int n, MPI_Datatype t) {
    return MPIX_Isend_enqueue(buf, n, t, dest, tag, comm, request);
  });
}
#endif

#ifdef LOOM_MPI_HAS_MPIX_Irecv_enqueue_c
int MPIX_Irecv_enqueue_c(void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                         MPI_Comm comm, MPI_Request* request) {
  if (!loom::runtime())
    return LOOM_NEXT(MPIX_Irecv_enqueue_c)(buf, count, datatype, source, tag, comm, request);
  return with_int_count(count, datatype, true, [&](int n, MPI_Datatype t) {
    return MPIX_Irecv_enqueue(buf, n, t, source, tag, comm, request);
  });
}
#endif

#ifdef LOOM_MPI_HAS_MPIX_Allreduce_enqueue_c
int MPIX_Allreduce_enqueue_c(const void* sendbuf, void* recvbuf, MPI_Count count,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  if (!loom::runtime())
    return LOOM_NEXT(MPIX_Allreduce_enqueue_c)(sendbuf, recvbuf, count, datatype, op, comm);
  if (count <= INT_MAX)  // negative counts too: the int form refuses them
    return MPIX_Allreduce_enqueue(sendbuf, recvbuf, count < 0 ? -1 : static_cast<int>(count),
                                  datatype, op, comm);
  MPI_Aint lb = 0, extent = 0;
  if (datatype == MPI_DATATYPE_NULL || PMPI_Type_get_extent(datatype, &lb, &extent) != MPI_SUCCESS)
    return MPIX_Allreduce_enqueue(sendbuf, recvbuf, 0, datatype, op, comm);  // its error
  for (MPI_Count done = 0; done < count;) {
    const int n = static_cast<int>(count - done < INT_MAX ? count - done : INT_MAX);
    const MPI_Aint off = static_cast<MPI_Aint>(done) * extent;
    const void* s =
        sendbuf == MPI_IN_PLACE ? MPI_IN_PLACE : static_cast<const char*>(sendbuf) + off;
    const int rc =
        MPIX_Allreduce_enqueue(s, static_cast<char*>(recvbuf) + off, n, datatype, op, comm);
    if (rc != MPI_SUCCESS) return rc;
    done += n;
  }
  return MPI_SUCCESS;
}
#endif

#ifdef LOOM_MPI_HAS_MPIX_Stream_send_c
int MPIX_Stream_send_c(const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                       MPI_Comm comm, int source_stream_index, int dest_stream_index) {
  if (!loom::runtime())
    return LOOM_NEXT(MPIX_Stream_send_c)(buf, count, datatype, dest, tag, comm, source_stream_index,
                                         dest_stream_index);
  return with_int_count(count, datatype, false, [&](int n, MPI_Datatype t) {
    return MPIX_Stream_send(buf, n, t, dest, tag, comm, source_stream_index, dest_stream_index);
  });
}
#endif

#ifdef LOOM_MPI_HAS_MPIX_Stream_recv_c
int MPIX_Stream_recv_c(void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                       MPI_Comm comm, int source_stream_index, int dest_stream_index,
                       MPI_Status* status) {
  if (!loom::runtime())
    return LOOM_NEXT(MPIX_Stream_recv_c)(buf, count, datatype, source, tag, comm,
                                         source_stream_index, dest_stream_index, status);
  return with_int_count(count, datatype, false, [&](int n, MPI_Datatype t) {
    return MPIX_Stream_recv(buf, n, t, source, tag, comm, source_stream_index, dest_stream_index,
                            status);
  });
}
#endif

#ifdef LOOM_MPI_HAS_MPIX_Stream_isend_c
int MPIX_Stream_isend_c(const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                        MPI_Comm comm, int source_stream_index, int dest_stream_index,
                        MPI_Request* request) {
  if (!loom::runtime())
    return LOOM_NEXT(MPIX_Stream_isend_c)(buf, count, datatype, dest, tag, comm,
                                          source_stream_index, dest_stream_index, request);
  return with_int_count(count, datatype, true, [&](int n, MPI_Datatype t) {
    return MPIX_Stream_isend(buf, n, t, dest, tag, comm, source_stream_index, dest_stream_index,
                             request);
  });
}
#endif

#ifdef LOOM_MPI_HAS_MPIX_Stream_irecv_c
int MPIX_Stream_irecv_c(void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                        MPI_Comm comm, int source_stream_index, int dest_stream_index,
                        MPI_Request* request) {
  if (!loom::runtime())
    return LOOM_NEXT(MPIX_Stream_irecv_c)(buf, count, datatype, source, tag, comm,
                                          source_stream_index, dest_stream_index, request);
  return with_int_count(count, datatype, true, [&](int n, MPI_Datatype t) {
    return MPIX_Stream_irecv(buf, n, t, source, tag, comm, source_stream_index, dest_stream_index,
                             request);
  });
}
#endif

}  // extern "C"

#endif
