// Point-to-point calls: MPI_Send, MPI_Ssend, MPI_Recv, MPI_Isend,
// MPI_Issend, MPI_Irecv, MPI_Sendrecv. Host buffers go straight to the MPI;
// device buffers are packed by a mover into host staging, which the MPI
// carries as bytes with the caller's source, tag and communicator, so
// matching and ordering are the MPI's own.
#include <mpi.h>

#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/requests.hpp"

namespace loom::mpi {
namespace {

using SendFn = int (*)(const void*, int, MPI_Datatype, int, int, MPI_Comm);
using IsendFn = int (*)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);

// Packs a device message into staging; for spans, copies the span down.
int stage_send(const void* buf, int count, MPI_Datatype type, MPI_Comm comm, DevicePlan& p,
               transport::Staged& staged) {
  int rc = plan_device(count, type, comm, p);
  if (rc != MPI_SUCCESS) return rc;
  if (!p.span()) {
    auto s = p.mover->pack(p.msg, buf);
    if (!s) return raise(comm, s.status());
    staged = std::move(s.value());
    return MPI_SUCCESS;
  }
  auto s = p.mover->stage(static_cast<size_t>(p.span_bytes));
  if (!s) return raise(comm, s.status());
  staged = std::move(s.value());
  if (p.span_bytes > 0) {
    Status c = p.mover->copy_to_host(staged.host, static_cast<const char*>(buf) + p.span_lo,
                                     static_cast<size_t>(p.span_bytes));
    if (!c) return raise(comm, c);
  }
  return MPI_SUCCESS;
}

// Staging for a receive; for spans, with the span's current bytes, so the
// gaps the MPI leaves alone go back up unchanged.
int stage_recv(void* buf, int count, MPI_Datatype type, MPI_Comm comm, DevicePlan& p,
               PendingOp& op) {
  int rc = stage_send(buf, count, type, comm, p, op.staged);
  if (rc != MPI_SUCCESS) return rc;
  op.mover = p.mover;
  op.user = buf;
  if (p.span()) {
    op.kind = PendingOp::Kind::kSpanRecv;
    op.span_lo = p.span_lo;
  } else {
    op.kind = PendingOp::Kind::kRecv;
    op.type = p.type;
    op.msg = p.msg;
  }
  return MPI_SUCCESS;
}

int send_device(SendFn next, const void* buf, int count, MPI_Datatype type, int dest, int tag,
                MPI_Comm comm) {
  DevicePlan p;
  transport::Staged staged;
  int rc = stage_send(buf, count, type, comm, p, staged);
  if (rc != MPI_SUCCESS) return rc;
  if (p.span())
    return next(static_cast<char*>(staged.host) - p.span_lo, count, type, dest, tag, comm);
  ByteArg a;
  if ((rc = a.make(staged.bytes)) != MPI_SUCCESS) return rc;
  rc = next(staged.host, a.count, a.type, dest, tag, comm);
  a.release();
  return rc;
}

int isend_device(IsendFn next, const void* buf, int count, MPI_Datatype type, int dest, int tag,
                 MPI_Comm comm, MPI_Request* req) {
  if (!req) return raise(comm, MPI_ERR_REQUEST, "null request");
  DevicePlan p;
  PendingOp op;
  op.kind = PendingOp::Kind::kSend;
  int rc = stage_send(buf, count, type, comm, p, op.staged);
  if (rc != MPI_SUCCESS) return rc;
  if (p.span()) {
    rc = next(static_cast<char*>(op.staged.host) - p.span_lo, count, type, dest, tag, comm, req);
  } else {
    ByteArg a;
    if ((rc = a.make(op.staged.bytes)) != MPI_SUCCESS) return rc;
    rc = next(op.staged.host, a.count, a.type, dest, tag, comm, req);
    a.release();  // MPI allows freeing a type while an operation uses it
  }
  if (rc == MPI_SUCCESS) runtime()->requests.add(*req, std::move(op));
  return rc;
}

// Receives into staging: posts a non-blocking receive (req), or, with a
// null req, receives at once into `st`, so errors such as truncation are
// raised by the MPI's own blocking receive, on the communicator.
int post_recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              PendingOp& op, MPI_Request* req, MPI_Status* st) {
  DevicePlan p;
  int rc = stage_recv(buf, count, type, comm, p, op);
  if (rc != MPI_SUCCESS) return rc;
  void* where = op.staged.host;
  ByteArg a;
  if (p.span()) {
    where = static_cast<char*>(op.staged.host) - p.span_lo;
    a.count = count;
    a.type = type;
  } else if ((rc = a.make(op.staged.bytes)) != MPI_SUCCESS) {
    return rc;
  }
  rc = req ? LOOM_NEXT(MPI_Irecv)(where, a.count, a.type, source, tag, comm, req)
           : LOOM_NEXT(MPI_Recv)(where, a.count, a.type, source, tag, comm, st);
  if (!p.span()) a.release();
  return rc;
}

}  // namespace

int irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
          MPI_Request* req) {
  if (!on_device(buf, count, type))
    return LOOM_NEXT(MPI_Irecv)(buf, count, type, source, tag, comm, req);
  if (!req) return raise(comm, MPI_ERR_REQUEST, "null request");
  PendingOp op;
  int rc = post_recv(buf, count, type, source, tag, comm, op, req, nullptr);
  if (rc == MPI_SUCCESS) runtime()->requests.add(*req, std::move(op));
  return rc;
}

// A send in any mode (next: the MPI's MPI_Send or MPI_Ssend; MPI_Isend or
// MPI_Issend): host buffers straight to it, device buffers through staging.
int send_any(SendFn next, const void* buf, int count, MPI_Datatype type, int dest, int tag,
             MPI_Comm comm) {
  if (!on_device(buf, count, type)) return next(buf, count, type, dest, tag, comm);
  return send_device(next, buf, count, type, dest, tag, comm);
}

int isend_any(IsendFn next, const void* buf, int count, MPI_Datatype type, int dest, int tag,
              MPI_Comm comm, MPI_Request* req) {
  if (!on_device(buf, count, type)) return next(buf, count, type, dest, tag, comm, req);
  return isend_device(next, buf, count, type, dest, tag, comm, req);
}

int isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
          MPI_Request* req) {
  return isend_any(LOOM_NEXT(MPI_Isend), buf, count, type, dest, tag, comm, req);
}

int recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
         MPI_Status* status) {
  if (!on_device(buf, count, type))
    return LOOM_NEXT(MPI_Recv)(buf, count, type, source, tag, comm, status);
  PendingOp op;
  MPI_Status st;
  int rc = post_recv(buf, count, type, source, tag, comm, op, nullptr, &st);
  if (rc == MPI_SUCCESS) rc = finish(op, st);
  if (status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

}  // namespace loom::mpi

using namespace loom::mpi;

extern "C" {

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send_any(LOOM_NEXT(MPI_Send), buf, count, type, dest, tag, comm);
}

int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send_any(LOOM_NEXT(MPI_Ssend), buf, count, type, dest, tag, comm);
}

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* req) {
  return isend(buf, count, type, dest, tag, comm, req);
}

int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* req) {
  return isend_any(LOOM_NEXT(MPI_Issend), buf, count, type, dest, tag, comm, req);
}

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status* status) {
  return recv(buf, count, type, source, tag, comm, status);
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request* req) {
  return irecv(buf, count, type, source, tag, comm, req);
}

int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status* status) {
  if (!on_device(sendbuf, sendcount, sendtype) && !on_device(recvbuf, recvcount, recvtype))
    return LOOM_NEXT(MPI_Sendrecv)(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount,
                                   recvtype, source, recvtag, comm, status);
  // Post the receive first so two ranks exchanging with each other cannot deadlock.
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int rc = irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &reqs[0]);
  if (rc != MPI_SUCCESS) return rc;
  rc = isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &reqs[1]);
  if (rc != MPI_SUCCESS) {
    MPI_Cancel(&reqs[0]);
    MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
    return rc;
  }
  MPI_Status st[2];
  rc = MPI_Waitall(2, reqs, st);
  if (status != MPI_STATUS_IGNORE) *status = st[0];
  if (rc == MPI_ERR_IN_STATUS)
    rc = st[0].MPI_ERROR != MPI_SUCCESS ? st[0].MPI_ERROR : st[1].MPI_ERROR;
  return rc;
}

}  // extern "C"
