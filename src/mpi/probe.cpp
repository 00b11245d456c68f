// MPI_Probe, MPI_Iprobe, MPI_Mprobe, MPI_Improbe, and MPI_Mrecv/MPI_Imrecv
// for the messages they match. Without the device method they go straight
// to the MPI. With it, a probe reports the size of the message a header
// stands for (probed.hpp says how, and how order is kept).
#include <mpi.h>

#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/p2p.hpp"
#include "mpi/probed.hpp"
#include "mpi/requests.hpp"
#include "mpi/runtime.hpp"

namespace loom::mpi {
namespace {

ProbedMessages* watching() {
  Runtime* rt = runtime();
  return rt ? rt->probed.get() : nullptr;
}

void put(MPI_Status* out, const MPI_Status& st) {
  if (out != MPI_STATUS_IGNORE) *out = st;
}

// Every probe has one shape: a kept message answers first; else the MPI's
// probe (`next` fills st and *flag), then a header it met is taken. With
// `msg` (matched probes) the message leaves the queue under a handle.
template <class Next>
int probe(const char* fn, int source, int tag, MPI_Comm comm, int* flag, MPI_Message* msg,
          MPI_Status* status, Next next) {
  ProbedMessages* pm = watching();
  // Zero-copy senders wait for their receivers: receives that landed are
  // finished first (completion.cpp).
  if (Runtime* rt = runtime(); rt->zero_copy_on()) rt->requests.finish_landed();
  Probed p;
  MPI_Status st;
  if (pm->find(comm, source, tag, msg != nullptr, &p)) {
    probed_status(p, st);
    if (msg) *msg = pm->hold(std::move(p));
    *flag = 1;
    put(status, st);
    return MPI_SUCCESS;
  }
  int rc = next(&st);
  if (rc == MPI_SUCCESS && *flag) rc = msg ? pm->take_matched(comm, msg, st) : pm->take(comm, st);
  if (rc != MPI_SUCCESS) return raise(comm, rc, fn);
  if (*flag) put(status, st);
  return rc;
}

// A blocking probe must not block in the MPI while a zero-copy sender may
// wait for this rank to read: it becomes its non-blocking form in a loop.
bool polling() {
  Runtime* rt = runtime();
  return rt->zero_copy_on() && !rt->requests.empty();
}

}  // namespace
}  // namespace loom::mpi

using namespace loom::mpi;

extern "C" {

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  if (!watching()) return LOOM_NEXT(MPI_Iprobe)(source, tag, comm, flag, status);
  return probe("MPI_Iprobe", source, tag, comm, flag, nullptr, status,
               [&](MPI_Status* st) { return LOOM_NEXT(MPI_Iprobe)(source, tag, comm, flag, st); });
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (!watching()) return LOOM_NEXT(MPI_Probe)(source, tag, comm, status);
  for (int flag = 0; polling();) {
    const int rc = MPI_Iprobe(source, tag, comm, &flag, status);
    if (rc != MPI_SUCCESS || flag) return rc;
  }
  int flag = 1;
  return probe("MPI_Probe", source, tag, comm, &flag, nullptr, status,
               [&](MPI_Status* st) { return LOOM_NEXT(MPI_Probe)(source, tag, comm, st); });
}

int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* msg,
                MPI_Status* status) {
  if (!watching()) return LOOM_NEXT(MPI_Improbe)(source, tag, comm, flag, msg, status);
  return probe("MPI_Improbe", source, tag, comm, flag, msg, status, [&](MPI_Status* st) {
    return LOOM_NEXT(MPI_Improbe)(source, tag, comm, flag, msg, st);
  });
}

int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* msg, MPI_Status* status) {
  if (!watching()) return LOOM_NEXT(MPI_Mprobe)(source, tag, comm, msg, status);
  for (int flag = 0; polling();) {
    const int rc = MPI_Improbe(source, tag, comm, &flag, msg, status);
    if (rc != MPI_SUCCESS || flag) return rc;
  }
  int flag = 1;
  return probe("MPI_Mprobe", source, tag, comm, &flag, msg, status,
               [&](MPI_Status* st) { return LOOM_NEXT(MPI_Mprobe)(source, tag, comm, msg, st); });
}

// A message Loom took at the probe is delivered from its copy; the MPI's
// own matched messages are received by the MPI (through staging for device
// buffers) and checked like any receive while the device method is on.
int MPI_Mrecv(void* buf, int count, MPI_Datatype t, MPI_Message* msg, MPI_Status* status) {
  if (msg && *msg == MPI_MESSAGE_NO_PROC)  // from MPI_PROC_NULL: no data
    return LOOM_NEXT(MPI_Mrecv)(buf, count, t, msg, status);
  ProbedMessages* pm = watching();
  Probed p;
  if (pm && msg && pm->redeem(*msg, &p)) {
    *msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    const int rc = deliver(p, buf, count, t, p.comm, st);
    put(status, st);
    return rc == MPI_SUCCESS ? rc : raise(p.comm, rc, "MPI_Mrecv");
  }
  if (buf != MPI_IN_PLACE && on_device(buf, count, t))
    return mrecv_device(buf, count, t, msg, status);
  MPI_Status st;
  int rc = LOOM_NEXT(MPI_Mrecv)(buf, count, t, msg, &st);
  if (rc == MPI_SUCCESS && pm) rc = check_typed_recv(buf, count, t, MPI_COMM_WORLD, st);
  put(status, st);
  return rc;
}

int MPI_Imrecv(void* buf, int count, MPI_Datatype t, MPI_Message* msg, MPI_Request* req) {
  if (msg && *msg == MPI_MESSAGE_NO_PROC) return LOOM_NEXT(MPI_Imrecv)(buf, count, t, msg, req);
  ProbedMessages* pm = watching();
  Probed p;
  if (pm && msg && pm->redeem(*msg, &p)) {
    if (!req) return raise(p.comm, MPI_ERR_REQUEST, "null request");
    *msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    deliver(p, buf, count, t, p.comm, st);  // errors show at completion
    return completed_request(st, req);
  }
  if (buf != MPI_IN_PLACE && on_device(buf, count, t))
    return imrecv_device(buf, count, t, msg, req);
  int rc = LOOM_NEXT(MPI_Imrecv)(buf, count, t, msg, req);
  loom::Runtime* rt = loom::runtime();
  if (rc == MPI_SUCCESS && req && pm)
    rt->requests.add(*req, host_recv_op(buf, count, t, MPI_COMM_WORLD));
  return rc;
}

}  // extern "C"
