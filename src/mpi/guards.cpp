// Calls Loom does not move device data for (yet). Handed a device buffer,
// each logs an error and raises MPI_ERR_BUFFER on the communicator instead
// of passing the pointer to an MPI that may crash on it or corrupt memory.
// With host buffers they go straight to the MPI. The list is in the README.
#include <mpi.h>

#include <vector>

#include "mpi/coll_call.hpp"
#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/probed.hpp"
#include "mpi/rendezvous.hpp"
#include "mpi/requests.hpp"
#include "mpi/runtime.hpp"
#include "util/log.hpp"

namespace loom::mpi {
namespace {

bool is_device(const void* buf, int count, MPI_Datatype t) {
  return buf != MPI_IN_PLACE && on_device(buf, count, t);
}

int refuse(MPI_Comm comm, const char* fn) {
  LOOM_LOG(kError, kMpi, "%s was given a device buffer; Loom does not move device data for it yet",
           fn);
  return raise(comm, MPI_ERR_BUFFER, fn);
}

}  // namespace

// MPI_Start of one request. A persistent receive that a message a probe
// kept matches takes it now (the MPI would match a later one): the MPI's
// request stays inactive and its completion reports this receive.
int start_one(MPI_Request* r) {
  Runtime* rt = runtime();
  PendingOp tmpl;
  Probed kept;
  const bool loom_request = rt && r && (rt->rv || rt->requests.has_persistent_colls()) &&
                            rt->requests.persistent_template(*r, &tmpl);
  if (loom_request && tmpl.kind == PendingOp::Kind::kColl) {  // inputs down, then start
    if (Status s = tmpl.mirrors->down(true); !s) return raise(MPI_COMM_WORLD, s);
    int rc = LOOM_NEXT(MPI_Start)(r);
    if (rc == MPI_SUCCESS) rt->requests.started(*r);
    return rc;
  }
  if (loom_request && rt->rv && take_probed(tmpl.comm, tmpl.source, tmpl.tag, &kept)) {
    PendingOp done;
    done.kind = PendingOp::Kind::kDone;
    deliver(kept, tmpl.user, tmpl.count, tmpl.mpi_type, tmpl.comm,
            done.done);  // errors at completion
    rt->requests.add(*r, std::move(done));
    return MPI_SUCCESS;
  }
  int rc = LOOM_NEXT(MPI_Start)(r);
  if (rc == MPI_SUCCESS && r && rt && rt->rv) rt->requests.started(*r);
  return rc;
}

// The receive is met by a kept message: the send goes from a packed copy,
// since the buffer is overwritten first.
int sendrecv_replace_probed(Probed& kept, void* buf, int count, MPI_Datatype t, int dest, int stag,
                            MPI_Comm comm, MPI_Status* status) {
  int bytes = 0, pos = 0;
  int rc = PMPI_Pack_size(count, t, comm, &bytes);
  if (rc != MPI_SUCCESS) return raise(comm, rc, "MPI_Sendrecv_replace");
  std::vector<char> out(static_cast<size_t>(bytes));
  if ((rc = PMPI_Pack(buf, count, t, out.data(), bytes, &pos, comm)) != MPI_SUCCESS)
    return raise(comm, rc, "MPI_Sendrecv_replace");
  MPI_Status st;
  rc = deliver(kept, buf, count, t, comm, st);
  if (status != MPI_STATUS_IGNORE) *status = st;
  if (rc != MPI_SUCCESS) return raise(comm, rc, "MPI_Sendrecv_replace of a probed message");
  return LOOM_NEXT(MPI_Send)(out.data(), pos, MPI_PACKED, dest, stag, comm);
}

}  // namespace loom::mpi

using loom::mpi::is_device;
using loom::mpi::refuse;

// A guard for a call with one typed buffer (b1 = buf, count, type), or two.
#define LOOM_GUARD1(ret_call, fn, b1, comm)   \
  if (is_device b1) return refuse(comm, #fn); \
  return ret_call

extern "C" {

int MPI_Bsend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm) {
  LOOM_GUARD1(LOOM_NEXT(MPI_Bsend)(buf, count, t, dest, tag, comm), MPI_Bsend, (buf, count, t),
              comm);
}
int MPI_Rsend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm) {
  LOOM_GUARD1(LOOM_NEXT(MPI_Rsend)(buf, count, t, dest, tag, comm), MPI_Rsend, (buf, count, t),
              comm);
}
int MPI_Ibsend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
               MPI_Request* r) {
  LOOM_GUARD1(LOOM_NEXT(MPI_Ibsend)(buf, count, t, dest, tag, comm, r), MPI_Ibsend, (buf, count, t),
              comm);
}
int MPI_Irsend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
               MPI_Request* r) {
  LOOM_GUARD1(LOOM_NEXT(MPI_Irsend)(buf, count, t, dest, tag, comm, r), MPI_Irsend, (buf, count, t),
              comm);
}
int MPI_Send_init(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                  MPI_Request* r) {
  LOOM_GUARD1(LOOM_NEXT(MPI_Send_init)(buf, count, t, dest, tag, comm, r), MPI_Send_init,
              (buf, count, t), comm);
}
int MPI_Ssend_init(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                   MPI_Request* r) {
  LOOM_GUARD1(LOOM_NEXT(MPI_Ssend_init)(buf, count, t, dest, tag, comm, r), MPI_Ssend_init,
              (buf, count, t), comm);
}
int MPI_Recv_init(void* buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                  MPI_Request* r) {
  if (is_device(buf, count, t)) return refuse(comm, "MPI_Recv_init");
  int rc = LOOM_NEXT(MPI_Recv_init)(buf, count, t, src, tag, comm, r);
  loom::Runtime* rt = loom::runtime();
  if (rc == MPI_SUCCESS && r && rt && rt->rv) {
    loom::mpi::PendingOp op = loom::mpi::host_recv_op(buf, count, t, comm);
    op.source = src;
    op.tag = tag;
    rt->requests.add_persistent(*r, std::move(op));
  }
  return rc;
}
int MPI_Start(MPI_Request* r) {
  return loom::mpi::start_one(r);
}
int MPI_Startall(int n, MPI_Request r[]) {
  loom::Runtime* rt = loom::runtime();
  if (!rt || ((!rt->probed || rt->probed->empty()) && !rt->requests.has_persistent_colls())) {
    int rc = LOOM_NEXT(MPI_Startall)(n, r);
    if (rc == MPI_SUCCESS && rt && rt->rv)
      for (int i = 0; i < n; ++i) rt->requests.started(r[i]);
    return rc;
  }
  // One at a time: some may be met by kept messages, some are collectives
  // whose inputs go down first.
  for (int i = 0; i < n; ++i)
    if (int rc = loom::mpi::start_one(&r[i]); rc != MPI_SUCCESS) return rc;
  return MPI_SUCCESS;
}
// Receives into host buffers that may match a device-method header while
// the method is on: checked after the MPI's receive, like MPI_Recv.
int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype t, int dest, int stag, int src,
                         int rtag, MPI_Comm comm, MPI_Status* st) {
  if (is_device(buf, count, t)) return refuse(comm, "MPI_Sendrecv_replace");
  loom::mpi::Probed kept;
  if (loom::mpi::take_probed(comm, src, rtag, &kept))
    return loom::mpi::sendrecv_replace_probed(kept, buf, count, t, dest, stag, comm, st);
  MPI_Status local;
  MPI_Status* s = st == MPI_STATUS_IGNORE ? &local : st;
  int rc = LOOM_NEXT(MPI_Sendrecv_replace)(buf, count, t, dest, stag, src, rtag, comm, s);
  if (rc == MPI_SUCCESS) rc = loom::mpi::check_typed_recv(buf, count, t, comm, *s);
  return rc;
}
}  // extern "C"
