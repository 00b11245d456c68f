// The send modes and send-receive forms beyond p2p.cpp's, on device
// buffers: MPI_Rsend and MPI_Irsend go as standard sends (a correct
// program's ready send is a correct standard send, and Loom's fast paths
// apply); MPI_Bsend and MPI_Ibsend stay the MPI's buffered sends, of a host
// mirror of the data, so they never wait for the receiver;
// MPI_Sendrecv_replace, MPI_Isendrecv and MPI_Isendrecv_replace run the
// MPI's own call on host mirrors (the receive is checked for a device-method
// header, as every receive is while that method is on). Host buffers go
// straight to the MPI.
#include <mpi.h>

#include <vector>

#include "mpi/buffer_calls.hpp"
#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/probed.hpp"
#include "mpi/rendezvous.hpp"
#include "mpi/requests.hpp"
#include "mpi/runtime.hpp"
#include "mpi/span_mirror.hpp"

namespace loom::mpi {
namespace {

bool is_device(const void* buf, int count, MPI_Datatype t) {
  return buf != MPI_IN_PLACE && on_device(buf, count, t);
}

bool watching_host_recvs() {
  Runtime* rt = runtime();
  return rt && rt->rv;
}

// The op of a nonblocking call whose receive went to the caller's host
// buffer (checked while the device method is on) and whose send may hold
// a mirror until it completes.
[[maybe_unused]] PendingOp host_recv_or_send_op(void* rbuf, int rcount, MPI_Datatype rtype,
                                                MPI_Comm comm, const SpanMirror& send) {
  PendingOp op;
  if (watching_host_recvs()) op = host_recv_op(rbuf, rcount, rtype, comm);
  op.mirrors = send.set;  // kept alive until the request completes
  return op;
}

}  // namespace

// The receive is met by a kept message: the send goes from a packed copy,
// since the buffer is overwritten first (for device memory, packed from a
// host mirror).
int sendrecv_replace_probed(Probed& kept, void* buf, int count, MPI_Datatype t, int dest, int stag,
                            MPI_Comm comm, MPI_Status* status) {
  SpanMirror m;
  const void* from = buf;
  if (is_device(buf, count, t)) {
    if (int rc = mirror_span(buf, count, t, comm, true, false, true, &m); rc != MPI_SUCCESS)
      return rc;
    from = m.host();
  }
  int bytes = 0, pos = 0;
  int rc = PMPI_Pack_size(count, t, comm, &bytes);
  if (rc != MPI_SUCCESS) return raise(comm, rc, "MPI_Sendrecv_replace");
  std::vector<char> out(static_cast<size_t>(bytes));
  if ((rc = PMPI_Pack(from, count, t, out.data(), bytes, &pos, comm)) != MPI_SUCCESS)
    return raise(comm, rc, "MPI_Sendrecv_replace");
  MPI_Status st;
  rc = deliver(kept, buf, count, t, comm, st);
  if (status != MPI_STATUS_IGNORE) *status = st;
  if (rc != MPI_SUCCESS) return raise(comm, rc, "MPI_Sendrecv_replace of a probed message");
  return LOOM_NEXT(MPI_Send)(out.data(), pos, MPI_PACKED, dest, stag, comm);
}

}  // namespace loom::mpi

using namespace loom::mpi;

extern "C" {

int MPI_Rsend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm) {
  if (dest != MPI_PROC_NULL && is_device(buf, count, t))
    return MPI_Send(buf, count, t, dest, tag, comm);
  return LOOM_NEXT(MPI_Rsend)(buf, count, t, dest, tag, comm);
}

int MPI_Irsend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
               MPI_Request* r) {
  if (dest != MPI_PROC_NULL && is_device(buf, count, t))
    return MPI_Isend(buf, count, t, dest, tag, comm, r);
  return LOOM_NEXT(MPI_Irsend)(buf, count, t, dest, tag, comm, r);
}

int MPI_Bsend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm) {
  if (dest == MPI_PROC_NULL || !is_device(buf, count, t))
    return LOOM_NEXT(MPI_Bsend)(buf, count, t, dest, tag, comm);
  SpanMirror m;  // the MPI copies it into the attached buffer before returning
  int rc = mirror_span(const_cast<void*>(buf), count, t, comm, true, false, true, &m);
  if (rc != MPI_SUCCESS) return rc;
  return LOOM_NEXT(MPI_Bsend)(m.host(), count, t, dest, tag, comm);
}

int MPI_Ibsend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
               MPI_Request* r) {
  if (dest == MPI_PROC_NULL || !is_device(buf, count, t))
    return LOOM_NEXT(MPI_Ibsend)(buf, count, t, dest, tag, comm, r);
  if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
  SpanMirror m;
  int rc = mirror_span(const_cast<void*>(buf), count, t, comm, true, false, true, &m);
  if (rc != MPI_SUCCESS) return rc;
  rc = LOOM_NEXT(MPI_Ibsend)(m.host(), count, t, dest, tag, comm, r);
  if (rc == MPI_SUCCESS && !m.empty()) {
    PendingOp op;  // a send: the mirror lives until the request completes
    op.kind = PendingOp::Kind::kSend;
    op.mirrors = m.set;
    loom::runtime()->requests.add(*r, std::move(op));
  }
  return rc;
}

// Receives into host buffers that may match a device-method header while
// the method is on: checked after the MPI's receive, like MPI_Recv.
int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype t, int dest, int stag, int src,
                         int rtag, MPI_Comm comm, MPI_Status* st) {
  Probed kept;
  if (src != MPI_PROC_NULL && take_probed(comm, src, rtag, &kept))
    return sendrecv_replace_probed(kept, buf, count, t, dest, stag, comm, st);
  MPI_Status local;
  MPI_Status* s = st == MPI_STATUS_IGNORE ? &local : st;
  if (!is_device(buf, count, t)) {
    int rc = LOOM_NEXT(MPI_Sendrecv_replace)(buf, count, t, dest, stag, src, rtag, comm, s);
    if (rc == MPI_SUCCESS && watching_host_recvs()) rc = check_typed_recv(buf, count, t, comm, *s);
    return rc;
  }
  SpanMirror m;
  int rc = mirror_span(buf, count, t, comm, true, true, true, &m);
  if (rc != MPI_SUCCESS) return rc;
  rc = LOOM_NEXT(MPI_Sendrecv_replace)(m.host(), count, t, dest, stag, src, rtag, comm, s);
  if (rc != MPI_SUCCESS || m.empty()) return rc;
  PendingOp op = span_recv_op(m, comm);
  rc = finish(op, *s);
  return rc == MPI_SUCCESS ? rc : raise(comm, rc, "MPI_Sendrecv_replace into device memory");
}

#ifdef LOOM_MPI_HAS_MPI_Isendrecv
int MPI_Isendrecv(const void* sbuf, int scount, MPI_Datatype stype, int dest, int stag, void* rbuf,
                  int rcount, MPI_Datatype rtype, int src, int rtag, MPI_Comm comm,
                  MPI_Request* r) {
  if (!loom::runtime())
    return LOOM_NEXT(MPI_Isendrecv)(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag,
                                    comm, r);
  Probed kept;
  if (src != MPI_PROC_NULL && take_probed(comm, src, rtag, &kept)) {
    // The receive is met already; the send goes now, and the request the
    // caller gets is complete, with the receive's status.
    if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
    MPI_Status st;
    int rc = deliver(kept, rbuf, rcount, rtype, comm, st);
    if (rc != MPI_SUCCESS) return raise(comm, rc, "MPI_Isendrecv of a probed message");
    if ((rc = MPI_Send(sbuf, scount, stype, dest, stag, comm)) != MPI_SUCCESS) return rc;
    return completed_request(st, r);
  }
  const bool sdev = dest != MPI_PROC_NULL && is_device(sbuf, scount, stype);
  const bool rdev = src != MPI_PROC_NULL && is_device(rbuf, rcount, rtype);
  SpanMirror sm, rm;
  int rc = MPI_SUCCESS;
  if (sdev && (rc = mirror_span(const_cast<void*>(sbuf), scount, stype, comm, true, false, true,
                                &sm)) != MPI_SUCCESS)
    return rc;
  if (rdev && (rc = mirror_span(rbuf, rcount, rtype, comm, true, true, true, &rm)) != MPI_SUCCESS)
    return rc;
  if ((sdev || rdev || watching_host_recvs()) && !r)
    return raise(comm, MPI_ERR_REQUEST, "null request");
  rc = LOOM_NEXT(MPI_Isendrecv)(sdev ? sm.host() : sbuf, scount, stype, dest, stag,
                                rdev ? rm.host() : rbuf, rcount, rtype, src, rtag, comm, r);
  if (rc != MPI_SUCCESS) return rc;
  PendingOp op;
  if (rdev && !rm.empty()) {
    op = span_recv_op(rm, comm);
    op.mirrors = sm.set;  // the send's mirror lives as long
  } else if (src != MPI_PROC_NULL) {
    op = host_recv_or_send_op(rbuf, rcount, rtype, comm, sm);
    if (op.kind != PendingOp::Kind::kHostRecv && sm.empty()) return rc;  // nothing to finish
  } else if (!sm.empty()) {
    op.kind = PendingOp::Kind::kSend;
    op.mirrors = sm.set;
  } else {
    return rc;
  }
  loom::runtime()->requests.add(*r, std::move(op));
  return rc;
}
#endif

#ifdef LOOM_MPI_HAS_MPI_Isendrecv_replace
int MPI_Isendrecv_replace(void* buf, int count, MPI_Datatype t, int dest, int stag, int src,
                          int rtag, MPI_Comm comm, MPI_Request* r) {
  if (!loom::runtime())
    return LOOM_NEXT(MPI_Isendrecv_replace)(buf, count, t, dest, stag, src, rtag, comm, r);
  Probed kept;
  if (src != MPI_PROC_NULL && take_probed(comm, src, rtag, &kept)) {
    if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
    MPI_Status st;
    int rc = sendrecv_replace_probed(kept, buf, count, t, dest, stag, comm, &st);
    return rc == MPI_SUCCESS ? completed_request(st, r) : rc;
  }
  if (!is_device(buf, count, t)) {
    int rc = LOOM_NEXT(MPI_Isendrecv_replace)(buf, count, t, dest, stag, src, rtag, comm, r);
    if (rc == MPI_SUCCESS && r && src != MPI_PROC_NULL && watching_host_recvs())
      loom::runtime()->requests.add(*r, host_recv_op(buf, count, t, comm));
    return rc;
  }
  if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
  SpanMirror m;
  int rc = mirror_span(buf, count, t, comm, true, true, true, &m);
  if (rc != MPI_SUCCESS) return rc;
  rc = LOOM_NEXT(MPI_Isendrecv_replace)(m.host(), count, t, dest, stag, src, rtag, comm, r);
  if (rc == MPI_SUCCESS && !m.empty()) loom::runtime()->requests.add(*r, span_recv_op(m, comm));
  return rc;
}
#endif

}  // extern "C"
