#include "stream/pair.hpp"

#include <cstdlib>

#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"

namespace loom::stream {
namespace {

using transport::PairWords;

transport::PeerMemory* memory() {
  Runtime* rt = runtime();
  return rt && rt->rv ? rt->rv->memory() : nullptr;
}

int64_t in_place_min() {
  const std::string& v = knobs().mpis_zcopy_min;
  if (v == "off") return -1;
  return std::atoll(v.c_str());
}

bool landed(const uint32_t* word, uint32_t value) {
  return reached(PairWords::load(word), value);
}

}  // namespace

Pairs::Pairs() = default;
Pairs::~Pairs() {
  sweep(true);
}

PairWords* Pairs::words() {
  std::lock_guard<std::mutex> lk(mu_);
  if (tried_) return words_.get();
  tried_ = true;
  Runtime* rt = runtime();
  if (!rt || !rt->rv || !rt->rv->lends()) return nullptr;
  PairWords::Attach attach;
  if (!rt->rv->host_mode()) attach = cuda_attach_host_words;
  auto w = PairWords::create(rt->rv->nonce(), rt->rv->world_rank(), attach);
  if (!w) {
    LOOM_WARN(kTransport, "MPIS pairs go through the MPI: %s", w.status().message().c_str());
    return nullptr;
  }
  words_ = std::move(w.value());
  return words_.get();
}

bool Pairs::reaches(int peer) {
  Runtime* rt = runtime();
  if (!rt || !rt->rv || !rt->rv->lends() || !knob_true(knobs().mpis_pair)) return false;
  if (rt->rv->peer_on_node(MPI_COMM_WORLD, peer) < 0) return false;
  return words() != nullptr;
}

PairOffer Pairs::offer(const Buffer& b, const void* buf, int peer, PairEnd* end) {
  PairOffer o;
  end->send = true;
  end->peer = peer;
  if (b.how != Buffer::How::kPacked || b.msg.bytes <= 0 || !reaches(peer)) return o;
  transport::PeerMemory* mem = memory();
  const int slot = words_->take();
  if (slot < 0) return o;
  const auto bytes = static_cast<size_t>(b.msg.bytes);
  // Read in place: contiguous bytes, or a derived type whose span is dense
  // enough to lend (as the device method's zero-copy typed messages), whose
  // layout goes ahead of the header. Never in the host test mode, where a
  // process cannot lend its heap.
  int64_t base = 0;
  const int64_t zmin = in_place_min();
  Runtime* rt = runtime();
  if (!rt->rv->host_mode() && zmin >= 0 && b.msg.bytes >= zmin) {
    const bool contiguous = transport::contiguous_at(b.msg, &base);
    std::vector<unsigned char> wire;
    int64_t span = static_cast<int64_t>(bytes);
    if (!contiguous) {
      const transport::Span sp = transport::message_span(b.msg);
      base = sp.lo;
      span = sp.size();
      // As dense as the device method's lent typed messages, and a layout
      // short enough to go eagerly.
      if (!rt->lend_span_ok(b.msg) ||
          !transport::encode_message(b.msg, &wire, transport::Rendezvous::kMaxLayoutBytes))
        span = -1;
    }
    Result<transport::Exported> ex = Status(Err::kUnsupported, "not lent");
    if (span >= 0)
      ex = mem->export_user(static_cast<const char*>(buf) + base, static_cast<size_t>(span));
    if (ex && ex->base != 0) {
      o.kind = PairOffer::kInPlace;
      o.data = ex->handle;
      o.offset = ex->offset;
      o.lender_base = ex->base;
      o.local = reinterpret_cast<uintptr_t>(buf) + (contiguous ? static_cast<uint64_t>(base) : 0);
      o.layout_bytes = static_cast<uint32_t>(wire.size());
      end->wire = std::move(wire);
    } else if (ex && ex->copy.ptr) {
      mem->release(ex->copy);
    }
  }
  if (o.kind == PairOffer::kNone) {
    auto seg = mem->acquire(bytes);
    if (!seg) {
      words_->give(slot);
      return o;
    }
    end->seg = seg.value();
    o.kind = PairOffer::kSegment;
    o.data = seg->handle;
    o.local = reinterpret_cast<uintptr_t>(seg->ptr);
  }
  end->kind = o.kind;
  end->slot = slot;
  end->mine = words_->own(slot);
  end->mine_base = PairWords::load(end->mine);
  o.slot = slot;
  o.base = end->mine_base;
  return o;
}

PairAnswer Pairs::answer(const PairOffer& o, int64_t sent, const Buffer& b, void* buf, int peer,
                         std::unique_ptr<transport::PeerMessage> from, PairEnd* end) {
  PairAnswer a;
  end->send = false;
  end->peer = peer;
  if (o.kind == PairOffer::kNone || o.slot < 0 || o.slot >= PairWords::kSlots ||
      b.how != Buffer::How::kPacked || b.msg.bytes != sent || !reaches(peer) ||
      (o.layout_bytes > 0 && (!from || from->m.bytes != sent)))
    return a;
  transport::PeerMemory* mem = memory();
  auto theirs = words_->peer(peer, o.slot);
  if (!theirs) {
    LOOM_DEBUG(kTransport, "MPIS pair declined: %s", theirs.status().message().c_str());
    return a;
  }
  const int slot = words_->take();
  if (slot < 0) return a;
  // A layout's bytes are addressed from the sender's user pointer, `lo`
  // before the span it lent.
  const int64_t lo = from ? from->lo : 0;
  if (peer == runtime()->rv->world_rank()) {  // a send to itself: the bytes are here
    end->src = reinterpret_cast<const void*>(static_cast<uintptr_t>(o.local));
  } else if (o.kind == PairOffer::kSegment) {
    auto p = mem->open(o.data, peer);
    if (p) end->src = p.value();
  } else {
    auto p = mem->open_user(o.data, peer, o.lender_base);
    if (p) {
      end->src = static_cast<const char*>(p.value()) + o.offset - lo;
      end->lent = o.data;
      end->lent_mapped = true;
    }
  }
  // One kernel must be able to read the sender's layout and write ours.
  if (end->src && from && !cuda_transfer_possible(from->m, end->src, b.msg, buf)) {
    LOOM_DEBUG(kTransport, "MPIS pair declined: no transfer kernel for these layouts");
    end->src = nullptr;
  }
  if (!end->src) {
    if (end->lent_mapped) mem->done_user(end->lent);
    end->lent_mapped = false;
    words_->give(slot);
    return a;
  }
  end->from = std::move(from);
  LOOM_DEBUG(kTransport, "MPIS pair from rank %d: %s", peer,
             o.kind == PairOffer::kSegment ? "packed into a segment"
             : end->from                   ? "read in place, in the sender's layout"
                                           : "read in place");
  end->kind = o.kind;
  end->on = true;
  end->theirs = theirs.value();
  end->theirs_base = o.base;
  end->slot = slot;
  end->mine = words_->own(slot);
  end->mine_base = PairWords::load(end->mine);
  a.accept = 1;
  a.slot = slot;
  a.base = end->mine_base;
  return a;
}

Status Pairs::settle(PairEnd* end) {
  if (end->answer_req == MPI_REQUEST_NULL) return Status::ok();
  if (LOOM_NEXT(MPI_Wait)(&end->answer_req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    return Status(Err::kMpi, "MPIS pair: the receiver's answer did not arrive");
  if (!end->answer.accept || end->answer.slot < 0 || end->answer.slot >= PairWords::kSlots) {
    drop(*end);
    end->kind = PairOffer::kNone;
    return Status::ok();
  }
  auto theirs = words_->peer(end->peer, end->answer.slot);
  if (!theirs) return theirs.status();
  end->theirs = theirs.value();
  end->theirs_base = end->answer.base;
  end->on = true;
  return Status::ok();
}

namespace {

// Words a batch writes or waits on, and their values.
struct Words {
  std::vector<uint32_t*> word;
  std::vector<uint32_t> value;
  void add(const uint32_t* w, uint32_t v) {
    word.push_back(const_cast<uint32_t*>(w));
    value.push_back(v);
  }
  // A wait the host sees satisfied now needs no place on the stream.
  void add_wait(const uint32_t* w, uint32_t v) {
    if (!landed(w, v)) add(w, v);
  }
  Status wait_on(Lane& lane) const {
    return lane.wait_many(word.data(), value.data(), word.size(), Writer::kStream);
  }
  Status write_on(Lane& lane) const {
    return lane.write_many(word.data(), value.data(), word.size());
  }
};

}  // namespace

Status Pairs::start_sends(Lane& lane, const std::vector<Work>& w) {
  Words waits, writes;
  std::vector<LaneJob> jobs;
  for (const Work& x : w) {
    PairEnd& e = *x.end;
    const uint32_t k = ++e.rounds;
    if (e.kind == PairOffer::kSegment) {
      // The segment is free once the receiver has read the previous round.
      if (k > 1) waits.add_wait(e.theirs, e.theirs_base + k - 1);
      jobs.push_back(LaneJob{&x.b->msg, x.user, e.seg.ptr, true});
    }
    writes.add(e.mine, e.mine_base + k);
  }
  LOOM_TRY(waits.wait_on(lane));
  LOOM_TRY(lane.run_many(jobs.data(), jobs.size()));
  return writes.write_on(lane);
}

Status Pairs::finish_recvs(Lane& lane, const std::vector<Work>& w) {
  Words waits, writes;
  std::vector<LaneJob> jobs;
  for (const Work& x : w) {
    PairEnd& e = *x.end;
    waits.add_wait(e.theirs, e.theirs_base + e.rounds);
    jobs.push_back(LaneJob{&x.b->msg, e.src, x.user, false, e.from ? &e.from->m : nullptr});
    writes.add(e.mine, e.mine_base + e.rounds);
  }
  LOOM_TRY(waits.wait_on(lane));
  LOOM_TRY(lane.run_many(jobs.data(), jobs.size()));
  return writes.write_on(lane);
}

Status Pairs::finish_sends(Lane& lane, const std::vector<Work>& w) {
  Words waits;
  for (const Work& x : w)
    if (x.end->kind == PairOffer::kInPlace)
      waits.add_wait(x.end->theirs, x.end->theirs_base + x.end->rounds);
  return waits.wait_on(lane);
}

bool Pairs::idle(const PairEnd& end) {
  if (!end.on) return true;
  if (!landed(end.mine, end.mine_base + end.rounds)) return false;
  return !(end.send && end.kind == PairOffer::kInPlace) ||
         landed(end.theirs, end.theirs_base + end.rounds);
}

void Pairs::retire(PairEnd&& end) {
  if (!end.on) {
    drop(end);
  } else {
    std::lock_guard<std::mutex> lk(mu_);
    retired_.push_back(std::move(end));
  }
  sweep(false);
}

void Pairs::sweep(bool force) {
  std::vector<PairEnd> done;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (force) {  // at the end: the memory goes with the runtime's
      retired_.clear();
      return;
    }
    for (size_t i = 0; i < retired_.size();) {
      PairEnd& e = retired_[i];
      // A sender's segment is read by the peer until it says so.
      const bool read = !e.send || landed(e.theirs, e.theirs_base + e.rounds);
      if (read && landed(e.mine, e.mine_base + e.rounds)) {
        done.push_back(std::move(e));
        retired_[i] = std::move(retired_.back());
        retired_.pop_back();
      } else {
        ++i;
      }
    }
  }
  for (auto& e : done) drop(e);
}

void Pairs::drop(PairEnd& end) {
  transport::PeerMemory* mem = memory();
  if (mem && end.seg.ptr) mem->release(end.seg);
  if (mem && end.lent_mapped) mem->done_user(end.lent);
  end.lent_mapped = false;
  end.seg = transport::Segment{};
  if (end.slot >= 0 && words_) words_->give(end.slot);
  end.slot = -1;
  end.on = false;
}

}  // namespace loom::stream
