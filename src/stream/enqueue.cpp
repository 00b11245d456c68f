#include "stream/enqueue.hpp"

#include <algorithm>

#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "type/from_mpi.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"

namespace loom::stream {

int resolve(Lane& lane, const void* buf, int count, MPI_Datatype type, MPI_Comm comm, Buffer* b) {
  if (lane.emulated() && !runtime()->host_as_device() && count > 0 && type != MPI_DATATYPE_NULL &&
      mpi::on_device(buf, count, type))
    return mpi::raise(comm, MPI_ERR_BUFFER, "an emulated stream takes host memory, not GPU memory");
  return classify(buf, count, type, comm, b);
}

int classify(const void* buf, int count, MPI_Datatype type, MPI_Comm comm, Buffer* b) {
  if (count < 0) return mpi::raise(comm, MPI_ERR_COUNT, "negative count");
  if (type == MPI_DATATYPE_NULL) return mpi::raise(comm, MPI_ERR_TYPE, "MPI_DATATYPE_NULL");
  Runtime* rt = runtime();
  b->how = Buffer::How::kHost;
  if (count == 0 || !mpi::on_device(buf, count, type)) return MPI_SUCCESS;
  auto e = rt->types.lookup(type);
  if (e) {
    b->keep = std::move(e.value());
    if (!mpi::fill_message(*b->keep, count, &b->msg))
      return mpi::raise(comm, MPI_ERR_COUNT, "message size overflows");
    b->how = Buffer::How::kPacked;
    return MPI_SUCCESS;
  }
  MPI_Count tlb = 0, text = 0, lb = 0, ext = 0, size = 0;
  if (MPI_Type_get_true_extent_x(type, &tlb, &text) != MPI_SUCCESS)
    return mpi::raise(comm, MPI_ERR_TYPE, "a type the MPI does not know");
  MPI_Type_get_extent_x(type, &lb, &ext);
  MPI_Type_size_x(type, &size);
  b->how = Buffer::How::kSpan;
  if (size > 0) {
    const int64_t shift = static_cast<int64_t>(count - 1) * ext;
    b->span_lo = tlb + std::min<int64_t>(0, shift);
    b->span_bytes = tlb + text + std::max<int64_t>(0, shift) - b->span_lo;
  }
  return MPI_SUCCESS;
}

TypePin::TypePin(MPI_Datatype t) {
  Runtime* rt = runtime();
  if (!rt || t == MPI_DATATYPE_NULL || type::is_predefined(t)) return;
  rt->types.pin(t);
  t_ = t;
}

TypePin::~TypePin() {
  Runtime* rt = runtime();
  if (t_ == MPI_DATATYPE_NULL || !rt || !rt->types.unpin(t_)) return;
  rt->types.release(t_);
  LOOM_NEXT(MPI_Type_free)(&t_);
}

bool direct_on() {
  Runtime* rt = runtime();
  return rt && rt->rv && rt->rv->lends() && knob_true(knobs().test_stream_direct);
}

void go_direct(const Lane& lane, Buffer* b) {
  if (b->how != Buffer::How::kPacked || !direct_on() ||
      (lane.emulated() && !runtime()->host_as_device()))
    return;
  b->how = Buffer::How::kDirect;
  LOOM_DEBUG(kMpi, "enqueued: %lld bytes direct, by Loom's point-to-point from the stream thread",
             static_cast<long long>(b->msg.bytes));
}

Result<Block> staging_for(Lane& lane, const Buffer& b) {
  if (b.how == Buffer::How::kHost || b.how == Buffer::How::kDirect) return Block{};
  return lane.alloc(b.staged_bytes());
}

namespace {

// Packed bytes as the MPI takes them (a type of their own past 2 GiB).
void byte_args(size_t bytes, Op& op) {
  mpi::ByteArg a;
  a.make(bytes);
  op.count = a.count;
  op.type = a.type;
  op.own_type = a.type != MPI_BYTE;
}

}  // namespace

Status stage_send(Channel& ch, const Buffer& b, const void* buf, int count, MPI_Datatype type,
                  const Block& staging, Op& op) {
  op.kind = Op::Kind::kSend;
  switch (b.how) {
    case Buffer::How::kDirect:  // Loom's MPI_Isend from the stream thread moves it
    case Buffer::How::kHost:
      op.sbuf = buf;
      op.count = count;
      op.type = type;
      op.release_on_post = false;  // the buffer is the user's until the send completes
      if (!op.pin) op.pin = std::make_shared<TypePin>(type);
      return Status::ok();
    case Buffer::How::kPacked:
      op.keep = b.keep;  // the layout an emulated stream packs with, later
      LOOM_TRY(ch.lane().pack(b.msg, buf, staging.host));
      op.sbuf = staging.host;
      byte_args(staging.bytes, op);
      break;
    case Buffer::How::kSpan:
      LOOM_TRY(ch.lane().copy_in(staging.host, static_cast<const char*>(buf) + b.span_lo,
                                 staging.bytes));
      op.sbuf = static_cast<const char*>(staging.host) - b.span_lo;
      op.count = count;
      op.type = type;
      break;
  }
  // Its bytes are staged: the stream may go on once the MPI has the send.
  op.release_on_post = true;
  op.staging = staging;
  return Status::ok();
}

Status stage_recv(Channel& ch, const Buffer& b, void* buf, int count, MPI_Datatype type,
                  const Block& staging, Op& op) {
  op.kind = Op::Kind::kRecv;
  op.release_on_post = false;
  switch (b.how) {
    case Buffer::How::kDirect:  // the data is in place when Loom's receive completes
    case Buffer::How::kHost:
      op.rbuf = buf;
      op.count = count;
      op.type = type;
      if (!op.pin) op.pin = std::make_shared<TypePin>(type);
      return Status::ok();
    case Buffer::How::kPacked:
      op.rbuf = staging.host;
      byte_args(staging.bytes, op);
      op.tail_fix = true;
      op.msg = b.msg;
      op.keep = b.keep;
      op.user = buf;
      op.expect = staging.bytes;
      break;
    case Buffer::How::kSpan:
      LOOM_TRY(ch.lane().copy_in(staging.host, static_cast<const char*>(buf) + b.span_lo,
                                 staging.bytes));
      op.rbuf = static_cast<char*>(staging.host) - b.span_lo;
      op.count = count;
      op.type = type;
      break;
  }
  op.staging = staging;
  return Status::ok();
}

Status unstage_recv(Channel& ch, const Buffer& b, void* buf, Op& op) {
  if (b.how == Buffer::How::kPacked)
    LOOM_TRY(ch.lane().unpack(b.msg, op.staging.host, buf));
  else if (b.how == Buffer::How::kSpan)
    LOOM_TRY(
        ch.lane().copy_out(static_cast<char*>(buf) + b.span_lo, op.staging.host, op.staging.bytes));
  else {
    set_retire(op, op.start);
    return Status::ok();
  }
  auto pos = ch.mark();
  if (!pos) return pos.status();
  set_retire(op, pos.value());
  return Status::ok();
}

void set_retire(Op& op, uint32_t pos) {
  op.retire.store((uint64_t{1} << 32) | pos, std::memory_order_release);
}

}  // namespace loom::stream
