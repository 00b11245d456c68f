// Persistent point-to-point requests and MPI_Start. A persistent send or
// receive on a device buffer is the MPI's own persistent request on a host
// mirror of the data's span, with the caller's count and type; Loom keeps a
// template for it, of kind kColl like a persistent collective's (so
// MPI_Startall and MPI_Request_free treat them alike): each MPI_Start
// copies the span down (a receive's too, for the bytes the MPI leaves
// alone), and a receive's completion pulls a device-method header it met
// and copies the span back up. Host buffers go straight to the MPI.
#include <mpi.h>

#include "mpi/coll_call.hpp"
#include "mpi/coll_schedule.hpp"
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

using SendInitFn = int (*)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);

// A persistent send in any mode (next: the MPI's _init of that mode).
int send_init(SendInitFn next, const void* buf, int count, MPI_Datatype t, int dest, int tag,
              MPI_Comm comm, MPI_Request* r) {
  if (dest == MPI_PROC_NULL || !is_device(buf, count, t))
    return next(buf, count, t, dest, tag, comm, r);
  if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
  SpanMirror m;  // copied down at each MPI_Start
  int rc = mirror_span(const_cast<void*>(buf), count, t, comm, true, false, false, &m);
  if (rc != MPI_SUCCESS) return rc;
  rc = next(m.host(), count, t, dest, tag, comm, r);
  if (rc != MPI_SUCCESS || m.empty()) return rc;
  PendingOp tmpl;  // a collective's template: inputs down at start, no outputs
  tmpl.kind = PendingOp::Kind::kColl;
  tmpl.mirrors = m.set;
  runtime()->requests.add_persistent(*r, std::move(tmpl));
  return rc;
}

// A persistent receive into device memory: its template is a kColl op
// with `user` set (collectives leave it null).
int recv_init_device(void* buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                     MPI_Request* r) {
  if (!r) return raise(comm, MPI_ERR_REQUEST, "null request");
  SpanMirror m;
  int rc = mirror_span(buf, count, t, comm, true, true, false, &m);
  if (rc != MPI_SUCCESS) return rc;
  rc = LOOM_NEXT(MPI_Recv_init)(m.host(), count, t, src, tag, comm, r);
  if (rc != MPI_SUCCESS || m.empty()) return rc;
  PendingOp tmpl = span_recv_op(m, comm);
  tmpl.kind = PendingOp::Kind::kColl;
  tmpl.mirrors = m.set;
  tmpl.source = src;
  tmpl.tag = tag;
  runtime()->requests.add_persistent(*r, std::move(tmpl));
  return rc;
}

}  // namespace

// MPI_Start of one request. A persistent receive that a message a probe
// kept matches takes it now (the MPI would match a later one): the MPI's
// request stays inactive and its completion reports this receive.
int start_one(MPI_Request* r) {
  loom::Runtime* rt = loom::runtime();
  PendingOp tmpl;
  Probed kept;
  const bool loom_request = rt && r && (rt->rv || rt->requests.has_persistent_colls()) &&
                            rt->requests.persistent_template(*r, &tmpl);
  if (loom_request && tmpl.sched) return start_persistent(tmpl.sched, r);  // a collective's round
  const bool mirrored = loom_request && tmpl.kind == PendingOp::Kind::kColl;
  const bool device_recv = mirrored && tmpl.user;  // collectives' templates have none
  if (loom_request && rt->rv && (!mirrored || device_recv) &&
      take_probed(tmpl.comm, tmpl.source, tmpl.tag, &kept)) {
    PendingOp done;
    done.kind = PendingOp::Kind::kDone;
    deliver(kept, tmpl.user, tmpl.count, tmpl.mpi_type, tmpl.comm,
            done.done);  // errors at completion
    rt->requests.add(*r, std::move(done));
    return MPI_SUCCESS;
  }
  if (mirrored) {
    // Inputs down (a device receive's whole span, for the bytes the MPI
    // leaves alone), then start.
    if (Status s = tmpl.mirrors->down(!device_recv); !s) return raise(MPI_COMM_WORLD, s);
    int rc = LOOM_NEXT(MPI_Start)(r);
    if (rc != MPI_SUCCESS) return rc;
    if (device_recv) {
      tmpl.kind = PendingOp::Kind::kSpanRecv;  // finished as a receive into a span
      rt->requests.add(*r, std::move(tmpl));
    } else {
      rt->requests.started(*r);
    }
    return rc;
  }
  int rc = LOOM_NEXT(MPI_Start)(r);
  if (rc == MPI_SUCCESS && r && rt && rt->rv) rt->requests.started(*r);
  return rc;
}

}  // namespace loom::mpi

using namespace loom::mpi;

extern "C" {

int MPI_Send_init(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                  MPI_Request* r) {
  return send_init(LOOM_NEXT(MPI_Send_init), buf, count, t, dest, tag, comm, r);
}
int MPI_Ssend_init(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                   MPI_Request* r) {
  return send_init(LOOM_NEXT(MPI_Ssend_init), buf, count, t, dest, tag, comm, r);
}
int MPI_Rsend_init(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                   MPI_Request* r) {
  return send_init(LOOM_NEXT(MPI_Rsend_init), buf, count, t, dest, tag, comm, r);
}
int MPI_Bsend_init(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                   MPI_Request* r) {
  return send_init(LOOM_NEXT(MPI_Bsend_init), buf, count, t, dest, tag, comm, r);
}
int MPI_Recv_init(void* buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                  MPI_Request* r) {
  if (src != MPI_PROC_NULL && is_device(buf, count, t))
    return recv_init_device(buf, count, t, src, tag, comm, r);
  loom::Runtime* rt = loom::runtime();
  size_t bytes = 0;
  if (src != MPI_PROC_NULL && r && rt && rt->rv && host_recv_as_bytes(buf, count, t, &bytes)) {
    PendingOp op = host_recv_op(buf, count, t, comm, bytes);  // every start lands in op.bytes
    int rc = LOOM_NEXT(MPI_Recv_init)(op.bytes->data(), static_cast<int>(bytes), MPI_BYTE, src, tag,
                                      comm, r);
    if (rc != MPI_SUCCESS) return rc;
    op.source = src;
    op.tag = tag;
    rt->requests.add_persistent(*r, std::move(op));
    return rc;
  }
  int rc = LOOM_NEXT(MPI_Recv_init)(buf, count, t, src, tag, comm, r);
  if (rc == MPI_SUCCESS && r && rt && rt->rv) {
    PendingOp op = host_recv_op(buf, count, t, comm);
    op.source = src;
    op.tag = tag;
    rt->requests.add_persistent(*r, std::move(op));
  }
  return rc;
}
int MPI_Start(MPI_Request* r) {
  return start_one(r);
}
int MPI_Startall(int n, MPI_Request r[]) {
  loom::Runtime* rt = loom::runtime();
  if (!rt || ((!rt->probed || rt->probed->empty()) && !rt->requests.has_persistent_colls())) {
    int rc = LOOM_NEXT(MPI_Startall)(n, r);
    if (rc == MPI_SUCCESS && rt && rt->rv)
      for (int i = 0; i < n; ++i) rt->requests.started(r[i]);
    return rc;
  }
  // One at a time: some may be met by kept messages, some have mirrors
  // whose inputs go down first.
  for (int i = 0; i < n; ++i)
    if (int rc = start_one(&r[i]); rc != MPI_SUCCESS) return rc;
  return MPI_SUCCESS;
}
}  // extern "C"
