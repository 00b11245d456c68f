#include "stream/enqueue.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "mpi/device_message.hpp"
#include "mpi/device_pull.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "type/from_mpi.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

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

bool early_recv(const Buffer& b) {
  return (b.how == Buffer::How::kPacked || b.how == Buffer::How::kPulled) &&
         knob_true(knobs().stream_early_recv);
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

void go_lent(const Lane& lane, bool send, MPI_Comm comm, int peer, Buffer* b, bool early) {
  Runtime* rt = runtime();
  // Every receive a lent send may meet pulls: a sender lends at least
  // LOOM_STREAM_LEND_MIN bytes, which fit only receives that big.
  const int64_t least = std::max<int64_t>(std::atoll(knobs().stream_lend_min.c_str()), 0);
  if (b->how != Buffer::How::kPacked || !rt->rv || !rt->rv->lends() ||
      lane.emulated() != rt->rv->host_mode() || !knob_true(knobs().stream_lend) ||
      b->msg.bytes < least)
    return;
  if (send) {
    // A receive of Loom's takes a header where it would take the bytes:
    // smaller messages go as themselves, as the device method's do.
    const int to = rt->rv->world_rank(comm, peer);
    if (b->msg.bytes < transport::kHeaderBytes || rt->rv->peer_on_node(comm, peer) < 0 ||
        rt->rv->channel_to(to))
      return;
    transport::Header h;
    auto seg = rt->rv->lend_stream(b->msg, &h, early);
    if (!seg) {
      LOOM_DEBUG(kMpi, "enqueued send: %s; staged this once", seg.status().message().c_str());
      return;
    }
    static_assert(sizeof(b->wire) == sizeof(h));
    std::memcpy(b->wire, &h, sizeof(h));
    b->lent_at = seg.value();
    b->how = Buffer::How::kLent;
    return;
  }
  // A named peer on another node never lends (its sends ask the same
  // question): its bytes come raw, into staging as any packed receive's.
  if (peer != MPI_ANY_SOURCE && rt->rv->peer_on_node(comm, peer) < 0) return;
  if (int64_t base = 0; !transport::contiguous_at(b->msg, &base)) {
    // The copy lands in scratch, unpacked from there.
    b->scratch = rt->rv->arena_take(static_cast<size_t>(b->msg.bytes));
    if (!b->scratch) {
      LOOM_DEBUG(kMpi, "enqueued receive: no room in the stream arena; staged this once");
      return;
    }
  }
  b->how = Buffer::How::kPulled;
}

namespace {

// A pulled receive's staging: what the MPI may deliver (a header, or the
// bytes themselves), then the Landed record the thread fills.
size_t pulled_bytes(const Buffer& b) {
  const size_t n = std::max<size_t>(static_cast<size_t>(b.msg.bytes), transport::kHeaderBytes);
  return (n + 15) / 16 * 16;
}

// Most pulled receives get a 128-byte header (the sender lent its bytes);
// the MPI needs room for the whole message only when it comes raw. Above
// LOOM_STREAM_PINNED_MAX that room is reserved address space, which costs
// nothing where the MPI does not write, instead of pinned staging: leasing
// a block of tens of MiB that the pool had no free copy of allocated and
// pinned it, 10-50 ms in the middle of a 16-64 MiB ping-pong
// (docs/results/stream-h200-landing.md).
bool lands_in_reserve(const Buffer& b) {
  const std::string& v = knobs().stream_pinned_max;
  if (v == "off") return false;
  return pulled_bytes(b) > static_cast<size_t>(std::max(0LL, std::atoll(v.c_str())));
}

Result<Block> reserve(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Status(Err::kNoMemory, "no address space for an enqueued receive");
  Block b;
  b.host = p;
  b.bytes = bytes;
  b.hold = std::shared_ptr<void>(p, [bytes](void* q) { munmap(q, bytes); });
  return b;
}

// Pinned memory of the receive's lane holding `bytes` of what landed in
// reserve (copied from `from`, or filled by the caller when null).
Result<void*> raw_block(Op& op, size_t bytes, const void* from) {
  auto blk = op.ch->lane().alloc(bytes ? bytes : 1);
  if (!blk) return blk.status();
  op.raw_copy = std::move(blk.value());
  if (from) std::memcpy(op.raw_copy.host, from, bytes);
  return op.raw_copy.dev ? op.raw_copy.dev : op.raw_copy.host;
}

}  // namespace

Result<Block> staging_for(Lane& lane, const Buffer& b) {
  if (b.how == Buffer::How::kHost || b.how == Buffer::How::kDirect || b.how == Buffer::How::kLent)
    return Block{};
  if (b.how == Buffer::How::kPulled)
    return lane.alloc((lands_in_reserve(b) ? transport::kHeaderBytes : pulled_bytes(b)) +
                      sizeof(Landed));
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

namespace {

// A send's pack into dst, then its trigger (op.start), which the pack's
// kernel writes itself where the lane can; *marked set. Held back where
// `held` is given (stage_send).
Status pack_send(Channel& ch, const Buffer& b, const void* buf, void* dst, Op& op, bool* marked,
                 bool* held, bool* first) {
  Result<uint32_t> at = 0u;
  if (held) {
    at = ch.hold_pack(b.msg, buf, dst, b.keep, first);
    *held = true;
  } else {
    const LaneJob job{&b.msg, buf, dst, true, nullptr};
    at = ch.run_mark(&job, 1);
  }
  if (!at) return at.status();
  op.start = at.value();
  *marked = true;
  return Status::ok();
}

Status stage_send_work(Channel& ch, const Buffer& b, const void* buf, int count, MPI_Datatype type,
                       const Block& staging, Op& op, bool* marked, bool* held, bool* first) {
  op.kind = Op::Kind::kSend;
  op.bytes = b.msg.bytes;
  switch (b.how) {
    case Buffer::How::kDirect:  // Loom's MPI_Isend from the stream thread moves it
    case Buffer::How::kHost:
      op.sbuf = buf;
      op.count = count;
      op.type = type;
      op.release_on_post = false;  // the buffer is the user's until the send completes
      if (!op.pin) op.pin = std::make_shared<TypePin>(type);
      return Status::ok();
    case Buffer::How::kLent: {
      transport::Header h;
      std::memcpy(&h, b.wire, sizeof(h));
      op.keep = b.keep;
      LOOM_TRY(pack_send(ch, b, buf, b.lent_at, op, marked, held, first));
      if (op.early) {
        // The header goes before the stream gets here: the stream flags the
        // pack in its ready word, which the receiver's stream waits for.
        uint32_t* word = runtime()->rv->own_ready_word(h.seq);
        if (!word) return Status(Err::kInternal, "an early send without ready words");
        LOOM_TRY(ch.lane().write(word, static_cast<uint32_t>(h.seq)));
      }
      static_assert(sizeof(op.wire) == sizeof(h));
      std::memcpy(op.wire, &h, sizeof(h));
      op.lent_seq = h.seq;
      runtime()->streams->lent_messages.fetch_add(1, std::memory_order_relaxed);
      op.sbuf = op.wire;
      op.count = transport::kHeaderBytes;
      op.type = MPI_BYTE;
      op.raw = true;  // the header goes as it is: Loom's receives know it
      op.release_on_post = true;
      return Status::ok();
    }
    case Buffer::How::kPulled:
      return Status(Err::kInternal, "a pulled buffer sent");
    case Buffer::How::kPacked:
      op.keep = b.keep;  // the layout an emulated stream packs with, later
      LOOM_TRY(pack_send(ch, b, buf, staging.host, op, marked, held, first));
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

}  // namespace

Status stage_send(Channel& ch, const Buffer& b, const void* buf, int count, MPI_Datatype type,
                  const Block& staging, Op& op, bool* held, bool* first) {
  bool marked = false;
  if (held) *held = false;
  LOOM_TRY(stage_send_work(ch, b, buf, count, type, staging, op, &marked, held, first));
  if (!marked) {
    auto at = ch.mark();
    if (!at) return at.status();
    op.start = at.value();
  }
  return Status::ok();
}

Status stage_recv(Channel& ch, const Buffer& b, void* buf, int count, MPI_Datatype type,
                  const Block& staging, Op& op) {
  op.kind = Op::Kind::kRecv;
  op.bytes = b.msg.bytes;
  op.release_on_post = false;
  switch (b.how) {
    case Buffer::How::kDirect:  // the data is in place when Loom's receive completes
    case Buffer::How::kHost:
      op.rbuf = buf;
      op.count = count;
      op.type = type;
      if (!op.pin) op.pin = std::make_shared<TypePin>(type);
      return Status::ok();
    case Buffer::How::kLent:
      return Status(Err::kInternal, "a lent buffer received into");
    case Buffer::How::kPulled: {
      const size_t post = pulled_bytes(b);
      if (lands_in_reserve(b)) {
        auto r = reserve(post);
        if (!r) return r.status();
        op.landing = std::move(r.value());
        op.rbuf = op.landing.host;
        op.landed =
            reinterpret_cast<Landed*>(static_cast<char*>(staging.host) + transport::kHeaderBytes);
      } else {
        op.rbuf = staging.host;
        op.landed = reinterpret_cast<Landed*>(static_cast<char*>(staging.host) + post);
      }
      byte_args(post, op);
      op.raw = true;  // a header is Loom's to read, here
      op.pulled = true;
      op.msg = b.msg;
      op.keep = b.keep;
      op.user = buf;
      op.expect = static_cast<size_t>(b.msg.bytes);
      if (b.scratch) {
        // A short message leaves the rest as the user's bytes (packed into
        // the scratch first).
        op.scratch = b.scratch;
        LOOM_TRY(ch.lane().pack(b.msg, buf, op.scratch));
      }
      op.staging = staging;
      return Status::ok();
    }
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

namespace {

// A receive's stream work after its wait: copies now, unpacks into `jobs`
// (run together by the caller). False: none (its retire is its start).
Result<bool> unstage_into(Channel& ch, const Buffer& b, void* buf, Op& op,
                          std::vector<LaneJob>* jobs, const PullWaits& first) {
  switch (b.how) {
    case Buffer::How::kPulled:
      if (op.scratch) {
        LOOM_TRY(ch.lane().copy_from(op.landed, op.scratch, op.expect, first));
        jobs->push_back(LaneJob{&b.msg, op.scratch, buf, false, nullptr});
      } else {
        int64_t base = 0;
        transport::contiguous_at(b.msg, &base);
        LOOM_TRY(ch.lane().copy_from(op.landed, static_cast<char*>(buf) + base, op.expect, first));
      }
      return true;
    case Buffer::How::kPacked:
      jobs->push_back(LaneJob{&b.msg, op.staging.host, buf, false, nullptr});
      return true;
    case Buffer::How::kSpan:
      LOOM_TRY(ch.lane().copy_out(static_cast<char*>(buf) + b.span_lo, op.staging.host,
                                  op.staging.bytes));
      return true;
    default:
      return false;
  }
}

Status issue_waits(Channel& ch, const std::vector<Waited>& ws) {
  // The waits may be for held sends of this channel: those go first.
  (void)ch.flush();  // a failure is said there
  // Early receives have no trigger: this position tells the thread that the
  // stream waits for them (a short message's tail fix, Engine::tail_ready).
  auto is_early_recv = [](const Waited& w) { return w.op->early && w.op->kind == Op::Kind::kRecv; };
  if (std::any_of(ws.begin(), ws.end(), is_early_recv)) {
    auto at = ch.mark();
    if (!at) return at.status();
    for (const Waited& w : ws)
      if (is_early_recv(w))
        w.op->at_wait.store((uint64_t{1} << 32) | at.value(), std::memory_order_release);
  }
  std::optional<stats::Scope> phase(std::in_place, stats::kEnqueueWaitWords);
  std::vector<uint32_t*> words;
  std::vector<uint32_t> values;
  // A receive that may take an early send waits in its copy (PullWaits).
  for (const Waited& w : ws)
    if (!early_send(*w.op) && !w.op->sender_flags && !ch.released(w.op->slot)) {
      words.push_back(ch.word_of(w.op->slot));
      values.push_back(w.op->slot.value);
    }
  if (!words.empty())
    LOOM_TRY(ch.lane().wait_many(words.data(), values.data(), words.size(), Writer::kThread));
  phase.emplace(stats::kEnqueueUnpacks);
  std::vector<LaneJob> jobs;
  std::vector<Op*> moved;
  for (const Waited& w : ws) {
    if (w.op->kind != Op::Kind::kRecv) continue;
    PullWaits first;
    if (w.op->sender_flags) {
      first.sender = true;
      if (!ch.released(w.op->slot)) {
        first.release = ch.word_of(w.op->slot);
        first.value = w.op->slot.value;
      }
    }
    auto m = unstage_into(ch, *w.buf, w.user, *w.op, &jobs, first);
    if (!m) return m.status();
    if (m.value())
      moved.push_back(w.op);
    else
      set_retire(*w.op, w.op->start);
  }
  if (moved.empty())
    return jobs.empty() ? Status::ok() : ch.lane().run_many(jobs.data(), jobs.size());
  // The position after them, written by the unpacks' last kernel where it can.
  auto pos = jobs.empty() ? ch.mark() : ch.run_mark(jobs.data(), jobs.size());
  if (!pos) return pos.status();
  for (Op* op : moved) set_retire(*op, pos.value());
  return Status::ok();
}

}  // namespace

Status wait_batch(Channel& ch, const std::vector<Waited>& ws) {
  Status s = issue_waits(ch, ws);
  if (!s) {
    // What the stream was given runs or not; the staging, scratch and acks
    // of the receives go once it is past the last position written.
    for (const Waited& w : ws)
      if (w.op->kind == Op::Kind::kRecv && !(w.op->retire.load() >> 32))
        set_retire(*w.op, ch.last());
  }
  return s;
}

void land(Op& op) {
  Runtime* rt = runtime();
  Landed out;
  out.address = reinterpret_cast<uintptr_t>(op.staging.dev ? op.staging.dev : op.staging.host);
  // Where the MPI put what came (reserve above LOOM_STREAM_PINNED_MAX).
  const bool reserved = op.landing.host != nullptr;
  void* arrived = reserved ? op.landing.host : op.staging.host;
  MPI_Count got = 0;
  MPI_Get_elements_x(&op.st, MPI_BYTE, &got);
  transport::Header h;
  if (op.st.MPI_ERROR != MPI_SUCCESS) {
    // nothing landed that the stream may copy
  } else if (got > 0 && rt->rv->is_header(arrived, static_cast<size_t>(got), &h)) {
    op.st.MPI_ERROR = mpi::settle(h, op.expect, op.st);
    if (op.st.MPI_ERROR != MPI_SUCCESS) {
      rt->rv->discard(h);  // the sender's memory is free either way
    } else if (h.kind == transport::kSegment || (h.kind == transport::kZeroCopy && !h.layout)) {
      // An enqueued send's arena is mapped since its communicator was
      // made; a host call's segment or buffer may be mapped here first.
      // Never waited for here (an early send's pack may wait for this
      // thread): the stream waits for the sender's flag itself.
      auto src = rt->rv->open(h, /*wait=*/false);  // where the bytes lie, mapped (kept mapped)
      if (src && src->ready_word) {
        const uint32_t* w =
            op.sender_flags ? rt->rv->ready_word_for_streams(h.sender, h.seq) : nullptr;
        if (w) {
          out.wait_word = reinterpret_cast<uintptr_t>(w);
          out.wait_value = src->ready_value;
        } else if (Status r = rt->rv->wait_ready(h); !r) {  // a host call's pack: it ends by itself
          src = r;
        }
      }
      if (src) {
        out.address = reinterpret_cast<uintptr_t>(src->ptr);
        out.bytes = h.bytes;
        LOOM_DEBUG(kMpi, "enqueued receive: %llu bytes of rank %d read where they lie (%s)",
                   static_cast<unsigned long long>(h.bytes), h.sender,
                   h.kind == transport::kSegment ? "its segment" : "its buffer");
        std::memcpy(op.wire, &h, sizeof(h));
        op.ack_at_retire = true;
        rt->streams->lent_messages.fetch_add(1, std::memory_order_relaxed);
      } else {
        LOOM_LOG(kError, kMpi, "enqueued receive: the sender's memory cannot be read: %s",
                 src.status().message().c_str());
        rt->rv->discard(h);
        op.st.MPI_ERROR = MPI_ERR_OTHER;
      }
    } else {
      // Chunks, a channel, or a sender's own layout: into staging here, as
      // a receive into host memory takes them.
      void* into = op.staging.host;
      if (reserved) {
        auto at = raw_block(op, op.landing.bytes, nullptr);
        if (!at) {
          LOOM_LOG(kError, kMpi, "enqueued receive: %s", at.status().message().c_str());
          rt->rv->discard(h);
          op.st.MPI_ERROR = MPI_ERR_NO_MEM;
          into = nullptr;
        } else {
          LOOM_DEBUG(kMpi, "enqueued receive: a header's bytes pulled into pinned memory");
          into = op.raw_copy.host;
          out.address = reinterpret_cast<uintptr_t>(at.value());
        }
      }
      if (into) {
        op.st.MPI_ERROR = mpi::pull_into_host(*rt->rv, h, into, op.count, op.type, op.comm, op.st);
        if (op.st.MPI_ERROR == MPI_SUCCESS) out.bytes = h.bytes;
      }
    }
  } else if (static_cast<size_t>(got) > op.expect) {
    // Staging holds a header's worth: more than the receive takes.
    MPI_Status_set_elements_x(&op.st, MPI_BYTE, static_cast<MPI_Count>(op.expect));
    op.st.MPI_ERROR = MPI_ERR_TRUNCATE;
  } else if (reserved && got > 0) {
    // Raw bytes in reserve: into pinned memory the stream's copy reaches.
    auto at = raw_block(op, static_cast<size_t>(got), op.landing.host);
    if (at) {
      out.address = reinterpret_cast<uintptr_t>(at.value());
      out.bytes = static_cast<uint64_t>(got);
      LOOM_DEBUG(kMpi, "enqueued receive: %lld raw bytes copied out of reserve",
                 static_cast<long long>(got));
    } else {
      LOOM_LOG(kError, kMpi, "enqueued receive: %s", at.status().message().c_str());
      op.st.MPI_ERROR = MPI_ERR_NO_MEM;
    }
  } else {
    out.bytes = static_cast<uint64_t>(got);
  }
  auto* l = reinterpret_cast<volatile Landed*>(op.landed);
  l->address = out.address;
  l->bytes = out.bytes;
  l->wait_word = out.wait_word;
  l->wait_value = out.wait_value;
}

void retired(Op& op) {
  Runtime* rt = runtime();
  if (op.ack_at_retire) {
    op.ack_at_retire = false;
    transport::Header h;
    std::memcpy(&h, op.wire, sizeof(h));
    rt->rv->ack(h);
  }
  if (op.scratch) {
    rt->rv->arena_give(op.scratch, op.expect);
    op.scratch = nullptr;
  }
}

void set_retire(Op& op, uint32_t pos) {
  op.retire.store((uint64_t{1} << 32) | pos, std::memory_order_release);
}

}  // namespace loom::stream
