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

// Device data as packed bytes in staging, for the nonblocking send-receive
// forms: the MPI then sees only MPI_BYTE (MPICH 4.0.2's MPI_Isendrecv
// releases a derived datatype once too often and destroys it). Types Loom
// cannot read have none: their data goes as a span mirror with the
// caller's type.
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

// The op that unpacks a receive of packed bytes into the caller's buffer.
[[maybe_unused]] PendingOp packed_recv_op(Packed& p, void* buf, int count, MPI_Datatype t,
                                          MPI_Comm comm) {
  PendingOp op;
  op.kind = PendingOp::Kind::kRecv;
  op.staged = p.staged;
  op.mover = p.plan.mover;
  op.type = p.plan.type;
  op.msg = p.plan.msg;
  op.user = buf;
  op.count = count;
  op.mpi_type = t;
  op.comm = comm;
  return op;
}

// Keeps staging alive as long as an op (a send's, beside a receive's).
[[maybe_unused]] std::shared_ptr<MirrorSet> hold(const transport::Staged& s) {
  auto set = std::make_shared<MirrorSet>();
  MirrorSet::Entry e;  // neither copied down nor up
  e.staged = s;
  set->entries.push_back(std::move(e));
  return set;
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
  const bool sdev = dest != MPI_PROC_NULL && scount > 0 && is_device(sbuf, scount, stype);
  const bool rdev = src != MPI_PROC_NULL && rcount > 0 && is_device(rbuf, rcount, rtype);
  if (!sdev && !rdev) {
    int rc = LOOM_NEXT(MPI_Isendrecv)(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src,
                                      rtag, comm, r);
    if (rc == MPI_SUCCESS && r && src != MPI_PROC_NULL && watching_host_recvs())
      loom::runtime()->requests.add(*r, host_recv_op(rbuf, rcount, rtype, comm));
    return rc;
  }
  if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
  // Each device side as packed bytes, or a span mirror for types Loom cannot read.
  Packed sp, rp;
  SpanMirror sm, rm;
  const void* s_at = sbuf;
  void* r_at = rbuf;
  int s_n = scount, r_n = rcount;
  MPI_Datatype s_t = stype, r_t = rtype;
  int rc = MPI_SUCCESS;
  if (sdev) {
    if ((rc = packed(sbuf, scount, stype, comm, true, &sp)) != MPI_SUCCESS) return rc;
    if (sp.none()) {
      rc = mirror_span(const_cast<void*>(sbuf), scount, stype, comm, true, false, true, &sm);
      if (rc != MPI_SUCCESS) return rc;
      s_at = sm.host();
    } else {
      s_at = sp.staged.host;
      s_n = sp.arg.count;
      s_t = sp.arg.type;
    }
  }
  if (rdev) {
    if ((rc = packed(rbuf, rcount, rtype, comm, false, &rp)) != MPI_SUCCESS) return rc;
    if (rp.none()) {
      if ((rc = mirror_span(rbuf, rcount, rtype, comm, true, true, true, &rm)) != MPI_SUCCESS)
        return rc;
      r_at = rm.host();
    } else {
      r_at = rp.staged.host;
      r_n = rp.arg.count;
      r_t = rp.arg.type;
    }
  }
  rc = LOOM_NEXT(MPI_Isendrecv)(s_at, s_n, s_t, dest, stag, r_at, r_n, r_t, src, rtag, comm, r);
  sp.arg.release();  // MPI allows freeing a type while an operation uses it
  rp.arg.release();
  if (rc != MPI_SUCCESS) return rc;
  PendingOp op;
  if (rdev) {
    op = rp.none() ? span_recv_op(rm, comm) : packed_recv_op(rp, rbuf, rcount, rtype, comm);
  } else if (src != MPI_PROC_NULL && watching_host_recvs()) {
    op = host_recv_op(rbuf, rcount, rtype, comm);
  } else {
    op.kind = PendingOp::Kind::kSend;
  }
  if (sdev) op.mirrors = sp.none() ? sm.set : hold(sp.staged);  // the send's staging lives as long
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
  if (count <= 0 || !is_device(buf, count, t)) {
    int rc = LOOM_NEXT(MPI_Isendrecv_replace)(buf, count, t, dest, stag, src, rtag, comm, r);
    if (rc == MPI_SUCCESS && r && src != MPI_PROC_NULL && watching_host_recvs())
      loom::runtime()->requests.add(*r, host_recv_op(buf, count, t, comm));
    return rc;
  }
  if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
  // The packed bytes go out of the staging the reply then lands in.
  Packed p;
  int rc = packed(buf, count, t, comm, true, &p);
  if (rc != MPI_SUCCESS) return rc;
  if (!p.none()) {
    rc = LOOM_NEXT(MPI_Isendrecv_replace)(p.staged.host, p.arg.count, p.arg.type, dest, stag, src,
                                          rtag, comm, r);
    p.arg.release();
    if (rc == MPI_SUCCESS)
      loom::runtime()->requests.add(*r, packed_recv_op(p, buf, count, t, comm));
    return rc;
  }
  SpanMirror m;
  if ((rc = mirror_span(buf, count, t, comm, true, true, true, &m)) != MPI_SUCCESS) return rc;
  rc = LOOM_NEXT(MPI_Isendrecv_replace)(m.host(), count, t, dest, stag, src, rtag, comm, r);
  if (rc == MPI_SUCCESS && !m.empty()) loom::runtime()->requests.add(*r, span_recv_op(m, comm));
  return rc;
}
#endif

}  // extern "C"
