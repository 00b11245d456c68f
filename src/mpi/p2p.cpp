// Point-to-point calls: MPI_Send, MPI_Ssend, MPI_Recv, MPI_Isend,
// MPI_Issend, MPI_Irecv, MPI_Sendrecv. Host buffers go straight to the MPI,
// and so does every call with an MPI_PROC_NULL peer, which moves no data;
// device buffers are packed by a mover into host staging, which the MPI
// carries as bytes with the caller's source, tag and communicator, so
// matching and ordering are the MPI's own. The device method sends a header
// in their place (rendezvous.hpp); while it is on, every receive is checked.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "mpi/blocking.hpp"
#include "mpi/coll_schedule.hpp"
#include "mpi/device_message.hpp"
#include "mpi/device_pull.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/p2p.hpp"
#include "mpi/probed.hpp"
#include "mpi/requests.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom::mpi {
namespace {

using SendFn = int (*)(const void*, int, MPI_Datatype, int, int, MPI_Comm);
using IsendFn = int (*)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);

// Packs a device message (planned) into staging; for spans, copies the span down.
int stage_send(const void* buf, MPI_Comm comm, DevicePlan& p, transport::Staged& staged) {
  stats::Scope phase(stats::kStageSend);
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

// Receives from this size take reserved, untouched staging while the
// device method is on (transport::ReservedPool): peers of the node send such
// messages as a header, and only peers elsewhere fill the staging.
constexpr int64_t kLazyStageMin = int64_t{1} << 20;

// Packed messages from this size go through device scratch to a peer the
// MPI reaches with device memory; smaller ones are staged, which was faster
// for them (one H200, ranks as on nodes of their own over UCX with CUDA: a
// vector of 8 KiB took 47.6 us through scratch against 27.2 staged; 32 KiB
// 37.6 against 34.8; 128 KiB 36.7 against 49.3). Each end decides alone:
// the MPI carries the bytes wherever they lie.
constexpr int64_t kNativePackedMin = int64_t{32} << 10;

// Scratch for a message of p to or from a peer the MPI reaches with device
// memory (Rendezvous::native_to). False: none (host staging then).
bool native_scratch(const DevicePlan& p, MPI_Comm comm, int peer, transport::Staged& out) {
  Runtime* rt = runtime();
  if (p.span() || !p.mover || p.msg.bytes < kNativePackedMin || !rt->rv ||
      !rt->rv->native_to(comm, peer))
    return false;
  auto s = p.mover->scratch(static_cast<size_t>(p.msg.bytes));
  if (!s) return false;
  out = std::move(s.value());
  return true;
}

// Staging for a receive; for spans, with the span's current bytes, so the
// gaps the MPI leaves alone go back up unchanged. From a `peer` the MPI
// reaches with device memory (Rendezvous::native_to), the packed bytes land
// in the mover's scratch instead (kNativeRecv).
int stage_recv(void* buf, int count, MPI_Datatype type, MPI_Comm comm, DevicePlan& p, PendingOp& op,
               int peer = MPI_ANY_SOURCE) {
  int rc = plan_device(count, type, comm, p);
  if (rc != MPI_SUCCESS) return rc;
  Runtime* rt = runtime();
  const size_t bytes = static_cast<size_t>(p.msg.bytes);
  op.kind = PendingOp::Kind::kRecv;
  if (p.span()) {
    op.kind = PendingOp::Kind::kSpanRecv;
    op.span_lo = p.span_lo;
    rc = stage_send(buf, comm, p, op.staged);
    if (rc != MPI_SUCCESS) return rc;
  } else if (native_scratch(p, comm, peer, op.staged)) {
    op.kind = PendingOp::Kind::kNativeRecv;
  } else {  // just room: the receive overwrites it (packing the buffer first cost a copy)
    const bool lazy = rt->rv && rt->rv->lends() && p.msg.bytes >= kLazyStageMin;
    auto s = lazy ? rt->reserved.stage(bytes) : p.mover->stage(bytes);
    if (!s) return raise(comm, s.status());
    op.staged = std::move(s.value());
  }
  op.mover = p.mover;
  op.user = buf;
  op.count = count;
  op.comm = comm;
  if (p.span()) {
    keep_type(op, type);  // the span's receive reads it at completion
  } else {
    op.mpi_type = type;
    op.type = p.type;
    op.msg = p.msg;
  }
  return MPI_SUCCESS;
}

// The device method, when plan_device chose it: enqueues the pack into a
// lent segment and fills hdr, which is then sent in place of the packed
// bytes; the caller waits for the pack (Rendezvous::wait_packed) before the
// user may reuse buf. `defer`: the pack may wait for a batch (a non-blocking
// send; a blocking one launches it before its header goes). False: use staging.
bool device_method_send(const DevicePlan& p, const void* buf, MPI_Comm comm, int dest, Header* hdr,
                        bool defer) {
  if (p.span() || !p.mover || p.method != transport::Method::kDevice) return false;
  Rendezvous& rv = *runtime()->rv;
  Status s = rv.lend(*p.mover, p.msg, buf, hdr, /*wait=*/false, rv.world_rank(comm, dest), defer);
  if (s.is_ok()) return true;
  if (s.code() == Err::kUnsupported)  // expected (a channel peer's message under 128 bytes)
    LOOM_DEBUG(kTransport, "device method: %s; staging this message", s.message().c_str());
  else
    LOOM_WARN(kTransport, "device method: %s; staging this message instead", s.message().c_str());
  return false;
}

// The zero-copy device method, when it applies (a device-method message,
// Runtime::zero_copy): lends the user's own bytes as they lie (a derived
// type in its own layout, which the receiver reads), posts the receive of
// their ack into *ack and fills hdr. False: pack or stage.
bool zero_copy_send(const DevicePlan& p, const void* buf, MPI_Comm comm, int dest, Header* hdr,
                    MPI_Request* ack) {
  Runtime* rt = runtime();
  int64_t base = 0;
  const Runtime::Lend how = p.span() || p.method != transport::Method::kDevice
                                ? Runtime::Lend::kNo
                                : rt->lend_as(p.msg, &base);
  if (how == Runtime::Lend::kNo || posting_schedule()) return false;
  const int to = rt->rv->world_rank(comm, dest);
  if (to < 0 || rt->rv->channel_to(to)) return false;  // a channel peer cannot map it
  stats::Scope phase(stats::kLend);
  Status s = how == Runtime::Lend::kContiguous
                 ? rt->rv->lend_user(static_cast<const char*>(buf) + base,
                                     static_cast<size_t>(p.msg.bytes), to, hdr, ack)
                 : rt->rv->lend_typed(p.msg, buf, to, hdr, ack);
  if (s.is_ok()) return true;
  LOOM_DEBUG(kTransport, "zero-copy send: %s; packing into a segment", s.message().c_str());
  return false;
}

// The header of a zero-copy send could not go: its ack will never come.
void abandon_zero_copy(const Header& hdr, MPI_Request* ack) {
  PMPI_Cancel(ack);
  PMPI_Wait(ack, MPI_STATUS_IGNORE);
  runtime()->rv->acked(hdr.seq);
}

// Pipelined staged transfer, when it applies (a large staged message and
// the handshake on): chunks go on Loom's communicator and hdr in place of
// the packed bytes. False: one staging buffer, one MPI message.
bool chunked_send(const DevicePlan& p, const void* buf, MPI_Comm comm, int dest, Header* hdr) {
  Runtime* rt = runtime();
  if (p.span() || !p.mover || p.method != transport::Method::kStaged ||
      !rt->pipelined(static_cast<size_t>(p.msg.bytes)) || rt->rv->native_to(comm, dest))
    return false;
  const int to = rt->rv->world_rank(comm, dest);
  if (to < 0) return false;
  Status s = rt->rv->send_chunks(*p.mover, p.msg, buf, to, hdr);
  if (s.is_ok()) return true;
  LOOM_WARN(kTransport, "pipelined send: %s; one staging buffer instead", s.message().c_str());
  return false;
}

// A device message the MPI takes as it lies (Rendezvous::native_to): a
// contiguous message of a type Loom reads, to or from a rank of another
// node, where the MPI moves device memory itself. Both ends decide alike:
// such a peer is never sent a header. The MPI is given the bytes as
// MPI_BYTE: Open MPI's pml ucx packs on the host every type it does not
// itself see as contiguous (a struct without gaps, a resized type), device
// memory or not.
struct Native {
  int64_t base = 0;  // where the bytes start, from the buffer
  size_t bytes = 0;
};
bool native(int count, MPI_Datatype type, MPI_Comm comm, int peer, Native* out) {
  Runtime* rt = runtime();
  if (!rt || !rt->rv || count < 0 || !rt->rv->native_to(comm, peer)) return false;
  auto e = rt->types.lookup(type);
  if (!e) return false;
  transport::Message m;
  if (!fill_message(*e.value(), count, &m) || !transport::contiguous_at(m, &out->base))
    return false;
  out->bytes = static_cast<size_t>(m.bytes);
  return true;
}

// call(where, count, type) with the bytes of a native message.
template <class Call>
int as_bytes(const void* buf, const Native& n, Call call) {
  ByteArg a;
  int rc = a.make(n.bytes);
  if (rc != MPI_SUCCESS) return rc;
  rc = call(const_cast<char*>(static_cast<const char*>(buf)) + n.base, a.count, a.type);
  a.release();  // MPI allows freeing a type while an operation uses it
  return rc;
}

// A message of a derived type to a peer the MPI reaches with device memory:
// packed by one kernel into scratch, which the MPI is handed as bytes.
// False: host staging.
bool pack_native(const DevicePlan& p, const void* buf, MPI_Comm comm, int dest,
                 transport::Staged& out) {
  if (!native_scratch(p, comm, dest, out)) return false;
  Status s = p.mover->pack_to(p.msg, buf, out.dev);
  if (s.is_ok()) return true;
  LOOM_WARN(kTransport, "pack into device scratch: %s; staging this message instead",
            s.message().c_str());
  out = transport::Staged();
  return false;
}

// plan_device, timed (LOOM_STATS).
int plan(int count, MPI_Datatype type, MPI_Comm comm, DevicePlan& p, int dest) {
  stats::Scope phase(stats::kPlan);
  return plan_device(count, type, comm, p, dest);
}

int send_device(SendFn next, const void* buf, int count, MPI_Datatype type, int dest, int tag,
                MPI_Comm comm) {
  stats::Scope whole(stats::kSend);
  DevicePlan p;
  int rc = plan(count, type, comm, p, dest);
  if (rc != MPI_SUCCESS) return rc;
  Header hdr;
  if (MPI_Request ack; zero_copy_send(p, buf, comm, dest, &hdr, &ack)) {
    rc = next(&hdr, kHeaderBytes, MPI_BYTE, dest, tag, comm);
    if (rc != MPI_SUCCESS) {
      abandon_zero_copy(hdr, &ack);
      return rc;
    }
    runtime()->rv->flush_packs();  // the receiver may take earlier messages first
    for (int done = 0; rc == MPI_SUCCESS && !done;) {  // until the receiver has read the buffer
      rc = PMPI_Test(&ack, &done, MPI_STATUS_IGNORE);
      if (!done) runtime()->requests.finish_landed();  // it may wait for us too
    }
    runtime()->rv->acked(hdr.seq);
    return rc;
  }
  // The header goes while the GPU packs.
  if (device_method_send(p, buf, comm, dest, &hdr, /*defer=*/false)) {
    {
      stats::Scope phase(stats::kHeader);
      Header wire;
      const int n = runtime()->rv->seal(hdr, &wire);
      rc = next(&wire, n, MPI_BYTE, dest, tag, comm);
    }
    runtime()->rv->wait_packed(hdr.seq);
    return rc;
  }
  if (chunked_send(p, buf, comm, dest, &hdr))
    return next(&hdr, kHeaderBytes, MPI_BYTE, dest, tag, comm);
  transport::Staged staged;
  if (pack_native(p, buf, comm, dest, staged))
    return as_bytes(staged.dev, Native{0, staged.bytes}, [&](void* where, int c, MPI_Datatype t) {
      return next(where, c, t, dest, tag, comm);
    });
  if ((rc = stage_send(buf, comm, p, staged)) != MPI_SUCCESS) return rc;
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
  stats::Scope whole(stats::kSend);
  DevicePlan p;
  int rc = plan(count, type, comm, p, dest);
  if (rc != MPI_SUCCESS) return rc;
  PendingOp op;
  op.kind = PendingOp::Kind::kSend;
  // The header, and after it what goes on the wire (Rendezvous::seal).
  auto hdrs = std::make_shared<std::array<Header, 2>>();
  Header* hdr = &(*hdrs)[0];
  MPI_Request ack;
  bool zero_copy = false;
  {
    stats::Scope check(stats::kZeroCheck);
    zero_copy = zero_copy_send(p, buf, comm, dest, hdr, &ack);
  }
  if (zero_copy) {
    // The user's request is the ack's receive: the send completes when the
    // receiver has read the buffer. The header's own request is kept.
    {
      stats::Scope phase(stats::kHeader);
      rc = next(hdr, kHeaderBytes, MPI_BYTE, dest, tag, comm, &op.header);
    }
    if (rc != MPI_SUCCESS) {
      abandon_zero_copy(*hdr, &ack);
      return rc;
    }
    op.kind = PendingOp::Kind::kZeroSend;
    op.seq = hdr->seq;
    op.staged.hold = std::move(hdrs);
    *req = ack;
    runtime()->requests.add(*req, std::move(op));
    return MPI_SUCCESS;
  }
  if (device_method_send(p, buf, comm, dest, hdr, /*defer=*/true))
    op.packing = hdr->seq;  // done by completion
  if (op.packing || chunked_send(p, buf, comm, dest, hdr)) {
    {
      stats::Scope phase(stats::kHeader);
      Header* wire = &(*hdrs)[1];
      rc = next(wire, runtime()->rv->seal(*hdr, wire), MPI_BYTE, dest, tag, comm, req);
    }
    if (rc != MPI_SUCCESS && op.packing) runtime()->rv->wait_packed(op.packing);
    op.staged.hold = std::move(hdrs);  // the header lives until the send completes
  } else if (pack_native(p, buf, comm, dest, op.staged)) {
    rc = as_bytes(op.staged.dev, Native{0, op.staged.bytes},
                  [&](void* where, int c, MPI_Datatype t) {
                    return next(where, c, t, dest, tag, comm, req);
                  });
  } else {
    if ((rc = stage_send(buf, comm, p, op.staged)) != MPI_SUCCESS) return rc;
    if (p.span()) {
      rc = next(static_cast<char*>(op.staged.host) - p.span_lo, count, type, dest, tag, comm, req);
    } else {
      ByteArg a;
      if ((rc = a.make(op.staged.bytes)) != MPI_SUCCESS) return rc;
      rc = next(op.staged.host, a.count, a.type, dest, tag, comm, req);
      a.release();  // MPI allows freeing a type while an operation uses it
    }
  }
  if (rc == MPI_SUCCESS) runtime()->requests.add(*req, std::move(op));
  return rc;
}

// Receives into staging with `post(where, count, type)`, the MPI's receive
// call (blocking or not). A blocking receive's errors, such as truncation,
// are the MPI's own, raised on the communicator by its receive.
template <class Post>
int post_recv(void* buf, int count, MPI_Datatype type, MPI_Comm comm, PendingOp& op, bool blocking,
              Post post, int peer = MPI_ANY_SOURCE) {
  stats::Scope whole(stats::kRecvPost);
  DevicePlan p;
  int rc = stage_recv(buf, count, type, comm, p, op, peer);
  if (rc != MPI_SUCCESS) return rc;
  void* where = op.kind == PendingOp::Kind::kNativeRecv ? op.staged.dev : op.staged.host;
  ByteArg a;
  if (p.span()) {
    where = static_cast<char*>(op.staged.host) - p.span_lo;
    a.count = count;
    a.type = type;
  } else if ((rc = a.make(op.staged.bytes)) != MPI_SUCCESS) {
    return rc;
  }
  rc = post(where, a.count, a.type);
  if (!p.span()) a.release();
  if (blocking && rc != MPI_SUCCESS) ack_truncated_header(op, rc);  // a header cut short?
  return rc;
}

int post_recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              PendingOp& op, MPI_Request* req, MPI_Status* st) {
  return post_recv(
      buf, count, type, comm, op, !req,
      [&](void* where, int n, MPI_Datatype t) {
        return req ? LOOM_NEXT(MPI_Irecv)(where, n, t, source, tag, comm, req)
                   : LOOM_NEXT(MPI_Recv)(where, n, t, source, tag, comm, st);
      },
      source);
}

// Host receives need Loom only while the device method is on: they may
// match a device-method header.
bool watching_host_recvs() {
  Runtime* rt = runtime();
  return rt && rt->rv;
}

// A blocking host receive completed: pulls a device-method message it
// matched. Truncation is raised on comm, as the MPI would.
int after_host_recv(void* buf, int count, MPI_Datatype type, MPI_Comm comm, MPI_Status& st) {
  const int rc = check_typed_recv(buf, count, type, comm, st);
  if (rc != MPI_SUCCESS) return raise(comm, rc, "device-method message into a host buffer");
  return rc;
}

void put(MPI_Status* out, const MPI_Status& st) {
  if (out != MPI_STATUS_IGNORE) *out = st;
}

}  // namespace

int deliver(Probed& p, void* buf, int count, MPI_Datatype type, MPI_Comm comm, MPI_Status& st) {
  probed_status(p, st);
  int size = 0;
  if (count < 0) return st.MPI_ERROR = MPI_ERR_COUNT;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS || size < 0) return st.MPI_ERROR = MPI_ERR_TYPE;
  // The receive gets what the MPI delivered at the probe: p.bytes.
  const size_t n = p.bytes.size();
  const size_t capacity = static_cast<size_t>(count) * static_cast<size_t>(size);
  MPI_Status_set_elements_x(&st, MPI_BYTE, static_cast<MPI_Count>(std::min(n, capacity)));
  if (n > capacity) {
    if (p.header) runtime()->rv->discard(p.h);  // the sender's memory is free either way
    return st.MPI_ERROR = MPI_ERR_TRUNCATE;
  }
  int rc = MPI_SUCCESS;
  if (!on_device(buf, count, type)) {
    if (p.header)
      rc = pull_into_host(*runtime()->rv, p.h, buf, count, type, comm, st);
    else
      unpack_typed_host(p.bytes.data(), n, buf, count, type, comm);
    return st.MPI_ERROR = rc;
  }
  // Into the staging a device receive would have had, then finished as one.
  PendingOp op;
  DevicePlan dp;
  if ((rc = stage_recv(buf, count, type, comm, dp, op)) != MPI_SUCCESS) return st.MPI_ERROR = rc;
  if (dp.span())
    unpack_typed_host(p.bytes.data(), n, static_cast<char*>(op.staged.host) - dp.span_lo, count,
                      type, comm);
  else if (n > 0)
    std::memcpy(op.staged.host, p.bytes.data(), n);
  return st.MPI_ERROR = finish(op, st);
}

int mrecv_device(void* buf, int count, MPI_Datatype type, MPI_Message* msg, MPI_Status* status) {
  PendingOp op;
  MPI_Status st;
  const MPI_Comm comm = MPI_COMM_WORLD;  // the message's is not known here
  int rc = post_recv(buf, count, type, comm, op, true, [&](void* where, int n, MPI_Datatype t) {
    return LOOM_NEXT(MPI_Mrecv)(where, n, t, msg, &st);
  });
  if (rc == MPI_SUCCESS) {
    rc = finish(op, st);
    if (rc != MPI_SUCCESS) raise(comm, rc, "MPI_Mrecv into device memory");
  }
  put(status, st);
  return rc;
}

int imrecv_device(void* buf, int count, MPI_Datatype type, MPI_Message* msg, MPI_Request* req) {
  if (!req) return raise(MPI_COMM_WORLD, MPI_ERR_REQUEST, "null request");
  PendingOp op;
  int rc = post_recv(buf, count, type, MPI_COMM_WORLD, op, false,
                     [&](void* where, int n, MPI_Datatype t) {
                       return LOOM_NEXT(MPI_Imrecv)(where, n, t, msg, req);
                     });
  if (rc == MPI_SUCCESS) runtime()->requests.add(*req, std::move(op));
  return rc;
}

int irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
          MPI_Request* req) {
  if (source == MPI_PROC_NULL)
    return LOOM_NEXT(MPI_Irecv)(buf, count, type, source, tag, comm, req);
  Probed kept;
  if (take_probed(comm, source, tag, &kept)) {  // errors show at completion, as the MPI's do
    if (!req) return raise(comm, MPI_ERR_REQUEST, "null request");
    MPI_Status st;
    deliver(kept, buf, count, type, comm, st);
    return completed_request(st, req);
  }
  const bool device = on_device(buf, count, type);
  if (Native n; device && native(count, type, comm, source, &n))  // no header comes from it
    return as_bytes(buf, n, [&](void* where, int c, MPI_Datatype t) {
      return LOOM_NEXT(MPI_Irecv)(where, c, t, source, tag, comm, req);
    });
  if (!device) {
    size_t bytes = 0;
    if (watching_host_recvs() && req && host_recv_as_bytes(buf, count, type, &bytes)) {
      PendingOp op = host_recv_op(buf, count, type, comm, bytes);
      const int rc = LOOM_NEXT(MPI_Irecv)(op.bytes->data(), static_cast<int>(bytes), MPI_BYTE,
                                          source, tag, comm, req);
      if (rc == MPI_SUCCESS) runtime()->requests.add(*req, std::move(op));
      return rc;
    }
    int rc = LOOM_NEXT(MPI_Irecv)(buf, count, type, source, tag, comm, req);
    if (rc == MPI_SUCCESS && watching_host_recvs() && req)
      runtime()->requests.add(*req, host_recv_op(buf, count, type, comm));
    return rc;
  }
  if (!req) return raise(comm, MPI_ERR_REQUEST, "null request");
  PendingOp op;
  int rc = post_recv(buf, count, type, source, tag, comm, op, req, nullptr);
  if (rc == MPI_SUCCESS) runtime()->requests.add(*req, std::move(op));
  return rc;
}

// A send in any mode (next: the MPI's MPI_Send or MPI_Ssend; MPI_Isend or
// MPI_Issend): host buffers straight to it, device buffers through staging.
// A host send while zero-copy senders may wait on this rank goes as its
// nonblocking form (`inext`), tested in a loop (mpi/blocking.hpp).
int send_any(SendFn next, IsendFn inext, const void* buf, int count, MPI_Datatype type, int dest,
             int tag, MPI_Comm comm) {
  if (dest == MPI_PROC_NULL || !on_device(buf, count, type))
    return blocking_call(
        must_poll(), [&] { return next(buf, count, type, dest, tag, comm); },
        [&](MPI_Request* r) { return inext(buf, count, type, dest, tag, comm, r); });
  if (Native n; native(count, type, comm, dest, &n))
    return as_bytes(buf, n, [&](void* where, int c, MPI_Datatype t) {
      return next(where, c, t, dest, tag, comm);
    });
  return send_device(next, buf, count, type, dest, tag, comm);
}

int isend_any(IsendFn next, const void* buf, int count, MPI_Datatype type, int dest, int tag,
              MPI_Comm comm, MPI_Request* req) {
  if (dest == MPI_PROC_NULL || !on_device(buf, count, type))
    return next(buf, count, type, dest, tag, comm, req);
  if (Native n; native(count, type, comm, dest, &n))
    return as_bytes(buf, n, [&](void* where, int c, MPI_Datatype t) {
      return next(where, c, t, dest, tag, comm, req);
    });
  return isend_device(next, buf, count, type, dest, tag, comm, req);
}

int isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
          MPI_Request* req) {
  return isend_any(LOOM_NEXT(MPI_Isend), buf, count, type, dest, tag, comm, req);
}

int recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
         MPI_Status* status) {
  if (source == MPI_PROC_NULL)
    return LOOM_NEXT(MPI_Recv)(buf, count, type, source, tag, comm, status);
  Runtime* rt = runtime();
  if (rt && rt->zero_copy_on() && !rt->requests.empty()) {
    // Receives posted earlier may match zero-copy sends whose senders wait
    // for them: this one is waited for by polling (completion.cpp).
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = irecv(buf, count, type, source, tag, comm, &r);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Wait(&r, status);
    return rc == MPI_SUCCESS ? rc : raise(comm, rc, "receive");
  }
  Probed kept;
  if (take_probed(comm, source, tag, &kept)) {
    MPI_Status st;
    const int rc = deliver(kept, buf, count, type, comm, st);
    put(status, st);
    return rc == MPI_SUCCESS ? rc : raise(comm, rc, "receive of a probed message");
  }
  const bool device = on_device(buf, count, type);
  if (Native n; device && native(count, type, comm, source, &n))  // no header comes from it
    return as_bytes(buf, n, [&](void* where, int c, MPI_Datatype t) {
      return LOOM_NEXT(MPI_Recv)(where, c, t, source, tag, comm, status);
    });
  if (!device) {
    if (!watching_host_recvs())
      return LOOM_NEXT(MPI_Recv)(buf, count, type, source, tag, comm, status);
    MPI_Status st;
    int rc = MPI_SUCCESS;
    if (size_t bytes = 0; host_recv_as_bytes(buf, count, type, &bytes)) {
      std::vector<char> scratch(bytes);
      rc = LOOM_NEXT(MPI_Recv)(scratch.data(), static_cast<int>(bytes), MPI_BYTE, source, tag, comm,
                               &st);
      if (rc == MPI_SUCCESS &&
          (rc = finish_bytes_recv(scratch.data(), buf, count, type, comm, st)) != MPI_SUCCESS)
        raise(comm, rc, "receive into a host buffer");
    } else {
      rc = LOOM_NEXT(MPI_Recv)(buf, count, type, source, tag, comm, &st);
      if (rc == MPI_SUCCESS) rc = after_host_recv(buf, count, type, comm, st);
    }
    if (status != MPI_STATUS_IGNORE) *status = st;
    return rc;
  }
  PendingOp op;
  MPI_Status st;
  int rc = post_recv(buf, count, type, source, tag, comm, op, nullptr, &st);
  if (rc == MPI_SUCCESS) {
    rc = finish(op, st);
    if (rc == MPI_ERR_TRUNCATE) raise(comm, rc, "device-method message truncated");
  }
  if (status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

}  // namespace loom::mpi

using namespace loom::mpi;

extern "C" {

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send_any(LOOM_NEXT(MPI_Send), LOOM_NEXT(MPI_Isend), buf, count, type, dest, tag, comm);
}

int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send_any(LOOM_NEXT(MPI_Ssend), LOOM_NEXT(MPI_Issend), buf, count, type, dest, tag, comm);
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
  Probed kept;
  if (take_probed(comm, source, recvtag, &kept)) {  // the receive is met already
    MPI_Status st;
    int rc = deliver(kept, recvbuf, recvcount, recvtype, comm, st);
    put(status, st);
    if (rc != MPI_SUCCESS) return raise(comm, rc, "MPI_Sendrecv of a probed message");
    return send_any(LOOM_NEXT(MPI_Send), LOOM_NEXT(MPI_Isend), sendbuf, sendcount, sendtype, dest,
                    sendtag, comm);
  }
  // Host buffers go to the MPI's own, unless zero-copy senders may wait on
  // this rank (mpi/blocking.hpp): then as the device buffers below.
  size_t bytes = 0;
  if (!on_device(sendbuf, sendcount, sendtype) && !on_device(recvbuf, recvcount, recvtype) &&
      !must_poll() &&
      !(watching_host_recvs() && host_recv_as_bytes(recvbuf, recvcount, recvtype, &bytes))) {
    if (!watching_host_recvs())
      return LOOM_NEXT(MPI_Sendrecv)(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf,
                                     recvcount, recvtype, source, recvtag, comm, status);
    MPI_Status st;
    int rc = LOOM_NEXT(MPI_Sendrecv)(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf,
                                     recvcount, recvtype, source, recvtag, comm, &st);
    if (rc == MPI_SUCCESS) rc = after_host_recv(recvbuf, recvcount, recvtype, comm, st);
    if (status != MPI_STATUS_IGNORE) *status = st;
    return rc;
  }
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
