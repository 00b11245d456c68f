// The send modes and send-receive forms beyond p2p.cpp's, on device
// buffers: MPI_Rsend and MPI_Irsend go as standard sends (a correct
// program's ready send is a correct standard send, and Loom's fast paths
// apply); MPI_Bsend and MPI_Ibsend stay the MPI's buffered sends, of a host
// mirror of the data, so they never wait for the receiver;
// MPI_Sendrecv_replace runs the MPI's own call on a host mirror;
// MPI_Isendrecv and MPI_Isendrecv_replace are Loom's receive plus a send of
// a copy that completes by itself. Every receive is checked for a
// device-method header while that method is on. Host buffers go straight
// to the MPI.
#include <mpi.h>

#include <vector>

#include "mpi/blocking.hpp"
#include "mpi/buffer_calls.hpp"
#include "mpi/device_message.hpp"
#include "mpi/device_pull.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/probed.hpp"
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

// Device data as packed bytes in staging. Types Loom cannot read have
// none: their data goes as a span mirror with the caller's type.
struct Packed {
  DevicePlan plan;
  transport::Staged staged;
  ByteArg arg;
  bool none() const { return plan.span(); }
};

// `pack`: the data now (a send); else room for it (a receive).
[[maybe_unused]] int packed(const void* buf, int count, MPI_Datatype t, MPI_Comm comm, bool pack,
                            Packed* out) {
  int rc = plan_device(count, t, comm, out->plan);
  if (rc != MPI_SUCCESS || out->none()) return rc;
  auto s = pack ? out->plan.mover->pack(out->plan.msg, buf)
                : out->plan.mover->stage(static_cast<size_t>(out->plan.msg.bytes));
  if (!s) return raise(comm, s.status());
  out->staged = std::move(s.value());
  return out->arg.make(out->staged.bytes);
}

// The send half of MPI_Isendrecv(_replace): the data is copied out now
// (packed on the GPU for device buffers, by the MPI for host ones), sent
// with the MPI's MPI_Isend, and left to complete by itself (the request
// table tests it and frees the copy, as for a freed request). The call's
// request is then its receive's, whose status the caller gets.
[[maybe_unused]] int send_copied(const void* buf, int count, MPI_Datatype t, int dest, int tag,
                                 MPI_Comm comm) {
  if (dest == MPI_PROC_NULL) return MPI_SUCCESS;
  PendingOp op;
  op.kind = PendingOp::Kind::kSend;
  const void* at = nullptr;
  int n = 0;
  MPI_Datatype type = MPI_PACKED;
  Packed p;
  int rc = MPI_SUCCESS;
  if (count > 0 && is_device(buf, count, t)) {
    if ((rc = packed(buf, count, t, comm, true, &p)) != MPI_SUCCESS) return rc;
    if (!p.none()) {
      op.staged = p.staged;
      at = p.staged.host;
      n = p.arg.count;
      type = p.arg.type;
    } else {
      SpanMirror m;
      rc = mirror_span(const_cast<void*>(buf), count, t, comm, true, false, true, &m);
      if (rc != MPI_SUCCESS) return rc;
      op.mirrors = m.set;
      at = m.host();
      n = count;
      type = t;
    }
  } else {
    int bytes = 0;
    if ((rc = PMPI_Pack_size(count, t, comm, &bytes)) != MPI_SUCCESS)
      return raise(comm, rc, "pack size");
    auto copy = std::make_shared<std::vector<char>>(static_cast<size_t>(bytes) + 1);
    if ((rc = PMPI_Pack(buf, count, t, copy->data(), bytes, &n, comm)) != MPI_SUCCESS)
      return raise(comm, rc, "pack");
    at = copy->data();
    op.staged.hold = std::move(copy);
  }
  MPI_Request r = MPI_REQUEST_NULL;
  rc = LOOM_NEXT(MPI_Isend)(at, n, type, dest, tag, comm, &r);
  p.arg.release();
  if (rc != MPI_SUCCESS) return rc;
  runtime()->requests.detach(r, std::move(op));
  return MPI_SUCCESS;
}

// Loom takes the call: a buffer is device memory, or a receive may meet a
// device-method header or a message a probe kept.
[[maybe_unused]] bool loom_sendrecv(const void* sbuf, int scount, MPI_Datatype stype, int dest,
                                    const void* rbuf, int rcount, MPI_Datatype rtype, int src) {
  return watching_host_recvs() ||
         (dest != MPI_PROC_NULL && scount > 0 && is_device(sbuf, scount, stype)) ||
         (src != MPI_PROC_NULL && rcount > 0 && is_device(rbuf, rcount, rtype));
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
  return blocking_call(
      must_poll(), [&] { return LOOM_NEXT(MPI_Rsend)(buf, count, t, dest, tag, comm); },
      [&](MPI_Request* r) { return LOOM_NEXT(MPI_Irsend)(buf, count, t, dest, tag, comm, r); });
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
// Not the MPI's own for device buffers: MPICH 4.0.2's leaves the status
// empty and releases a derived datatype once too often.
int MPI_Isendrecv(const void* sbuf, int scount, MPI_Datatype stype, int dest, int stag, void* rbuf,
                  int rcount, MPI_Datatype rtype, int src, int rtag, MPI_Comm comm,
                  MPI_Request* r) {
  if (!loom::runtime() || !loom_sendrecv(sbuf, scount, stype, dest, rbuf, rcount, rtype, src))
    return LOOM_NEXT(MPI_Isendrecv)(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag,
                                    comm, r);
  if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
  int rc = MPI_Irecv(rbuf, rcount, rtype, src, rtag, comm, r);  // Loom's
  if (rc != MPI_SUCCESS) return rc;
  if ((rc = send_copied(sbuf, scount, stype, dest, stag, comm)) != MPI_SUCCESS) {
    MPI_Cancel(r);
    MPI_Wait(r, MPI_STATUS_IGNORE);
  }
  return rc;
}
#endif

#ifdef LOOM_MPI_HAS_MPI_Isendrecv_replace
int MPI_Isendrecv_replace(void* buf, int count, MPI_Datatype t, int dest, int stag, int src,
                          int rtag, MPI_Comm comm, MPI_Request* r) {
  if (!loom::runtime() || !loom_sendrecv(buf, count, t, dest, buf, count, t, src))
    return LOOM_NEXT(MPI_Isendrecv_replace)(buf, count, t, dest, stag, src, rtag, comm, r);
  if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
  // The data goes out of a copy, so the receive may land in the buffer.
  int rc = send_copied(buf, count, t, dest, stag, comm);
  if (rc != MPI_SUCCESS) return rc;
  return MPI_Irecv(buf, count, t, src, rtag, comm, r);
}
#endif

}  // extern "C"
