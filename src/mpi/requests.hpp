// Device messages in flight. A non-blocking operation on a device buffer is
// a real MPI request on a host staging buffer; the table remembers what to
// do when it completes (unpack into the user's buffer, return the staging),
// keyed by that request, so Loom hands out no requests of its own and
// plain requests in the same Waitall arrays need no translation.
#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mpi/type_registry.hpp"
#include "transport/mover.hpp"

namespace loom::mpi {

class MirrorSet;
struct PersistentSchedule;

struct PendingOp {
  // kHostRecv: a receive into host memory, watched only while the device
  // method is on, as it may match a device-method header. kDone: a started
  // persistent receive that a message a probe kept met at MPI_Start (the
  // MPI's request stays inactive), or a request of the user's that a look of
  // Loom's found complete (RequestTable::peek); completion reports `done`. kColl: a
  // collective on host mirrors of device buffers; completion copies the
  // outputs back up (coll_call.hpp).
  // kZeroSend: a zero-copy device-method send, whose MPI request is the
  // receive of its ack (rendezvous.hpp); `header` is the header's send.
  // kNativeRecv: a receive the MPI fills in the mover's scratch (staged.dev)
  // from a peer it reaches with device memory (p2p.cpp); then unpacked as kRecv.
  enum class Kind { kSend, kRecv, kSpanRecv, kHostRecv, kDone, kColl, kZeroSend, kNativeRecv };
  Kind kind = Kind::kSend;
  transport::Staged staged;
  transport::Mover* mover = nullptr;
  // kRecv: unpack into `user` with this type and message.
  TypeRegistry::Entry type;
  transport::Message msg;
  void* user = nullptr;
  // kSpanRecv (types Loom cannot read): copy staged bytes back to user + lo.
  int64_t span_lo = 0;
  // kSpanRecv and kHostRecv: the receive as the user posted it.
  int count = 0;
  MPI_Datatype mpi_type = MPI_DATATYPE_NULL;
  // kHostRecv, kSpanRecv: a copy of a derived mpi_type that completion
  // reads (MPI lets the user free the type once the receive is posted).
  std::shared_ptr<MPI_Datatype> type_copy;
  MPI_Datatype completion_type() const { return type_copy ? *type_copy : mpi_type; }
  MPI_Comm comm = MPI_COMM_NULL;
  // kHostRecv taken as bytes (host_recv_as_bytes): where the MPI puts them.
  std::shared_ptr<std::vector<char>> bytes;
  // Persistent receive templates: what MPI_Start matches kept messages by.
  int source = MPI_ANY_SOURCE, tag = MPI_ANY_TAG;
  // kDone: the status (and error) the completion reports.
  MPI_Status done{};
  // kColl: the call's mirrors (shared with a persistent request's template),
  // or, for a persistent collective run as schedules, that (mirrors null).
  std::shared_ptr<MirrorSet> mirrors;
  std::shared_ptr<PersistentSchedule> sched;
  // kSend by the device method: the sequence number of the message whose
  // pack may still read the user's buffer; completion waits for it.
  uint64_t packing = 0;
  // kZeroSend: the header's send request and the message's sequence number.
  MPI_Request header = MPI_REQUEST_NULL;
  uint64_t seq = 0;
  // A receive finished before its completion call (finish_early): what
  // that call reports. A zero-copy sender waits for the receiver to read,
  // so a receive that matched one must be finished as soon as it lands.
  bool finished = false;
  int finished_rc = MPI_SUCCESS;
  MPI_Status finished_st{};
  // Loom's own look at the request (RequestTable::peek) found it complete
  // where that look deactivates persistent requests (detect_peek_deactivates): the
  // MPI's next completion call gives an empty status, or skips the request,
  // so completion reports peeked_st (its MPI_ERROR the look's return code).
  bool peeked = false;
  MPI_Status peeked_st{};
};

// MPICH 5.0.2's MPI_Request_get_status makes a complete persistent request
// inactive (a second call, or the MPI_Test that should complete it, then
// gives an empty status, and MPI_Waitany skips it); MPICH 4.0 and Open MPI
// 4.1 leave it complete. Found once at MPI_Init (a persistent receive on
// MPI_COMM_SELF, looked at twice): detect_peek_deactivates.
void detect_peek_deactivates();

// A receive whose request failed with err: where the MPI truncated a
// device-method header (a receive under 128 bytes), the sender's block or
// segment is acked; it would stay lent until finalize. Every call that
// reports a receive's failure, blocking or not, calls this.
void ack_truncated_header(PendingOp& op, int err);

// Receives whose requests completed with status *st, before finish(): the
// device-method messages among them are pulled together (every copy and
// unpack issued, one wait, then the acks) and marked finished.
struct Landed {
  PendingOp* op;
  MPI_Status* st;
};
void pull_together(const std::vector<Landed>& landed);

// The op that watches a receive into host memory (kHostRecv); with
// `bytes` > 0, one whose message the MPI puts in op.bytes (host_recv_as_bytes).
PendingOp host_recv_op(void* buf, int count, MPI_Datatype type, MPI_Comm comm, size_t bytes = 0);
// Sets op.mpi_type to `type`, and op.type_copy to a copy of it where the
// user may free it before completion reads it (a derived type).
void keep_type(PendingOp& op, MPI_Datatype type);

class RequestTable {
 public:
  // The op of r, a request just posted (or one a completion call put back).
  // Where the MPI gives r to several operations it completed at once (a
  // shared handle, such as Open MPI's for small sends), the table holds one
  // op for r and finishes the others now.
  void add(MPI_Request r, PendingOp op);
  // Removes and returns the op of r, if r is one of Loom's.
  bool take(MPI_Request r, PendingOp* out);
  // MPI_Request_get_status on r: true when r is one of Loom's and *flag,
  // *st and *rc are set (complete only once Loom has finished it: a send's
  // pack done, a receive's bytes in the user's buffer); false: ask the MPI.
  bool status_of(MPI_Request r, int* flag, MPI_Status* st, int* rc);
  // r is one of Loom's, of kind k.
  bool holds(MPI_Request r, PendingOp::Kind k);
  // The MPI's MPI_Request_get_status on r, for Loom's own look at a request
  // of the user's: where that look deactivates a complete persistent
  // request (detect_peek_deactivates), the status is kept in the table (on r's op,
  // or a kDone op for r) and reported by r's completion call.
  int peek(MPI_Request r, int* flag, MPI_Status* st);
  // Zero-copy sends may be waiting for this rank to read: finishes every
  // receive in the table whose request completed (finish_early). A scan
  // asks the MPI about each receive, and MPI_Request_get_status runs the
  // MPI's progress once for each that is not complete: `throttled` (a
  // polling loop's call) skips the scan within kScanGapNs of the last one
  // that found no receive landed.
  void finish_landed(bool throttled = false);
  static constexpr int64_t kScanGapNs = 10000;
  bool empty() const { return n_.load(std::memory_order_acquire) == 0; }

  // MPI_Request_free on a device operation: it still completes, and its
  // staging must live until then; progress() tests such requests, and frees
  // them (a persistent one stays after its test). Also the MPI's own active
  // requests where freeing them at once is unsafe (completion.cpp).
  void detach(MPI_Request r, PendingOp op);
  // Persistent receives (MPI_Recv_init): the op each MPI_Start puts back in
  // the table, until the request is freed.
  void add_persistent(MPI_Request r, PendingOp op);
  void started(MPI_Request r);  // after MPI_Start on r
  bool persistent_template(MPI_Request r, PendingOp* out);
  void forget_persistent(MPI_Request r);
  // Some persistent collective on device buffers is alive (MPI_Start must
  // copy its inputs down).
  bool has_persistent_colls() const { return n_colls_.load(std::memory_order_acquire) != 0; }
  void progress();
  void drain();  // at finalize: waits for every detached request

 private:
  int peek_locked(MPI_Request r, PendingOp* op, int* flag, MPI_Status* st);  // mu_ held
  std::mutex mu_;
  std::unordered_map<MPI_Request, PendingOp> ops_;
  std::vector<std::pair<MPI_Request, PendingOp>> detached_;
  // Handles the MPI gave to operations it completed at once, and the last
  // device-method pack such a send left running (0: none; counted in n_).
  std::vector<MPI_Request> shared_;
  uint64_t shared_packing_ = 0;
  std::unordered_map<MPI_Request, PendingOp> persistent_;
  std::atomic<size_t> n_{0};
  std::atomic<size_t> n_colls_{0};
  std::atomic<int64_t> scanned_ns_{0};  // the last finish_landed scan (steady clock)
};

// Finishes an op whose request completed without error: for receives,
// unpacks the received bytes into the user's buffer (nothing when it was
// cancelled), or pulls a device-method message the receive matched, which
// also sets st's count. Returns MPI_SUCCESS or an MPI error code.
int finish(PendingOp& op, MPI_Status& st);

}  // namespace loom::mpi
