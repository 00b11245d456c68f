// The parts every enqueued transfer shares (MPIX_*_enqueue and MPIS rounds):
// what the user's buffer is, and the lane work that stages it.
//   host:   host memory: the MPI reads or writes it directly when the stream
//           gets there (the stream waits for completion);
//   packed: device memory, a type Loom reads: a pack kernel writes the
//           packed bytes into mapped staging on the stream, and an unpack
//           kernel takes them out after the receive's release;
//   span:   device memory, a type Loom cannot read: the data's whole span is
//           copied to staging, and the MPI takes it with the user's type.
//   lent:   (MPIX sends) device memory, a type Loom reads, to a process of
//           this node with the device method on: packed on the stream into
//           a segment lent to the receiver; the thread sends the method's
//           header, which any receive of Loom's takes;
//   pulled: (MPIX receives) the same kind of buffer: the thread receives
//           into staging; a header's bytes are read where they lie (the
//           sender's segment or buffer, mapped), others where they landed,
//           by a copy the stream enqueued before the thread knew where.
#pragma once

#include <mpi.h>

#include <vector>

#include "mpi/type_registry.hpp"
#include "stream/engine.hpp"

namespace loom::stream {

using mpi::TypePin;  // mpi/type_registry.hpp

struct Buffer {
  // kDirect: a device buffer the stream thread hands to Loom's own
  // MPI_Isend/MPI_Irecv as it lies (go_direct), with no staging on the stream.
  enum class How { kHost, kPacked, kSpan, kDirect, kLent, kPulled };
  How how = How::kHost;
  mpi::TypeRegistry::Entry keep;
  transport::Message msg;
  int64_t span_lo = 0, span_bytes = 0;
  // kLent: the arena's room taken (its header in `wire`); kPulled: arena
  // room for a derived type's bytes (none for a contiguous one).
  void* lent_at = nullptr;
  alignas(8) unsigned char wire[128] = {};
  void* scratch = nullptr;
  size_t staged_bytes() const {
    return static_cast<size_t>(how == How::kPacked ? msg.bytes : span_bytes);
  }
};

// Checks count and type (errors raised on comm) and classifies buf.
int classify(const void* buf, int count, MPI_Datatype type, MPI_Comm comm, Buffer* b);
// The same for work on `lane` (an emulated stream takes no GPU memory).
int resolve(Lane& lane, const void* buf, int count, MPI_Datatype type, MPI_Comm comm, Buffer* b);

// Point-to-point only: a device buffer Loom reads goes direct (kDirect)
// where the device method is on and LOOM_TEST_STREAM_DIRECT is set. Test
// only: on a GPU the stream thread's own GPU work (a pack into a segment)
// can queue behind the very stream that waits for it, once an allocation
// (cudaMalloc, cudaHostAlloc) is issued between them, and deadlock
// (docs/stream.md). direct_on() is the same on every rank: where it holds,
// every enqueued point-to-point operation goes through Loom's own calls,
// since a direct send's peer gets Loom's header, whatever its buffer.
bool direct_on();
void go_direct(const Lane& lane, Buffer* b);

// Point-to-point only: a packed buffer goes by the device method's protocol
// (kLent for a send to `peer` of comm, kPulled for a receive) where the
// method is on, the lane suits its memory (CUDA IPC: a CUDA stream; the host
// test mode: an emulated one), LOOM_STREAM_LEND is on, and the process's
// stream arena has room (else the message is staged this once). `early`:
// a send whose header goes before its pack (LOOM_STREAM_EARLY_SEND).
void go_lent(const Lane& lane, bool send, MPI_Comm comm, int peer, Buffer* b, bool early);

// A receive into b may be posted when it is enqueued: the MPI writes only
// Loom's staging, and the stream's work reads it after its wait
// (LOOM_STREAM_EARLY_RECV). Host buffers and spans (whose staging the
// stream first fills with the user's bytes) wait for their trigger.
bool early_recv(const Buffer& b);

// Staging for b on the lane (none for host buffers).
Result<Block> staging_for(Lane& lane, const Buffer& b);

// Enqueue the lane work before a send's trigger, then the trigger
// (op.start), and set op's MPI arguments (sbuf, count, type) and release
// rule. `staging` from staging_for. A pack kernel writes the trigger itself
// where the lane can (Lane::run_many_write), a stream operation saved.
// `held` (MPIX_Isend_enqueue): a pack is held back to go with the packs of
// the sends after it (Channel::hold_pack); *held then says whether it was,
// and *first whether it was the channel's first since its last flush.
Status stage_send(Channel& ch, const Buffer& b, const void* buf, int count, MPI_Datatype type,
                  const Block& staging, Op& op, bool* held = nullptr, bool* first = nullptr);
// The same for a receive (rbuf, count, type; spans copy the user's bytes in
// first so that gaps stay as they are).
Status stage_recv(Channel& ch, const Buffer& b, void* buf, int count, MPI_Datatype type,
                  const Block& staging, Op& op);
// An operation the stream is to wait for, with the buffer it was enqueued
// with (a receive's unpack follows the wait).
struct Waited {
  Op* op = nullptr;
  const Buffer* buf = nullptr;
  void* user = nullptr;
};
// The stream's waits for operations of one channel as one batch: the waits
// the thread has not yet released in one launch, then the receives' copies,
// their unpacks in one launch, and one position after them all (op.retire).
// A halo's 52 waits had cost the stream three operations each.
Status wait_batch(Channel& ch, const std::vector<Waited>& ws);
// op.retire = position `pos` (known now).
void set_retire(Op& op, uint32_t pos);

}  // namespace loom::stream
