#include "coll/node_engine.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "util/log.hpp"

namespace loom::coll {
namespace {

// The engine's own exchanges: blocking, or nonblocking and e.wait (NodeEnv).
int allgather(const NodeEnv& e, const void* mine, void* all, int bytes) {
  return transport::call_or_wait(
      e.wait, [&] { return PMPI_Allgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, e.comm); },
      [&](MPI_Request* r) {
        return PMPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, e.comm, r);
      });
}
int alltoall(const NodeEnv& e, const void* mine, void* theirs, int bytes) {
  return transport::call_or_wait(
      e.wait, [&] { return PMPI_Alltoall(mine, bytes, MPI_BYTE, theirs, bytes, MPI_BYTE, e.comm); },
      [&](MPI_Request* r) {
        return PMPI_Ialltoall(mine, bytes, MPI_BYTE, theirs, bytes, MPI_BYTE, e.comm, r);
      });
}
// The worst of every rank's error flag.
int any_error(const NodeEnv& e, int err) {
  int any = 1;
  const int rc = transport::call_or_wait(
      e.wait, [&] { return PMPI_Allreduce(&err, &any, 1, MPI_INT, MPI_MAX, e.comm); },
      [&](MPI_Request* r) { return PMPI_Iallreduce(&err, &any, 1, MPI_INT, MPI_MAX, e.comm, r); });
  return rc == MPI_SUCCESS ? any : 1;
}
int barrier(const NodeEnv& e) {
  return transport::call_or_wait(
      e.wait, [&] { return PMPI_Barrier(e.comm); },
      [&](MPI_Request* r) { return PMPI_Ibarrier(e.comm, r); });
}

// What each rank tells the others in the allgather.
struct Desc {
  int32_t ok = 0;            // takes part
  int32_t handle_user = 0;   // `handle` names the caller's own allocation (open_user)
  int32_t output_lent = 0;   // `output` names this rank's receive buffer, lent as it lies
  int32_t lender = 0;        // world rank
  uint64_t handle_base = 0;  // the allocations' addresses in the lender
  uint64_t output_base = 0;
  uint64_t bytes = 0;   // of the contribution (0: none)
  uint64_t offset = 0;  // where it starts in the memory `handle` names
  uint64_t output_offset = 0;
  transport::PeerHandle handle;
  transport::PeerHandle result;  // a second segment (Allreduce's folded block); size 0: none
  transport::PeerHandle output;
};

// One collective's lent memory: this rank's contribution (a segment, or the
// caller's own buffer lent as it lies), lent until the end, and the peers',
// opened (mappings are cached by PeerMemory).
class Exchange {
 public:
  explicit Exchange(const NodeEnv& e)
      : e_(e), ok_(e.mem != nullptr && e.mover != nullptr), all_(static_cast<size_t>(e.size)) {}
  ~Exchange() {
    unmap_user();  // error paths only: finish() did it
    if (lent_) e_.mem->release(seg_);
    if (has_result_) e_.mem->release(result_);
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void decline() { ok_ = false; }
  bool ok() const { return ok_; }
  // This rank's segment for `bytes` (null when it has none: it declines).
  char* lend(size_t bytes) {
    if (!ok_) return nullptr;
    auto s = acquire(bytes);
    if (!s) return nullptr;
    seg_ = s.value();
    lent_ = true;
    bytes_ = bytes;
    own_ = static_cast<const char*>(seg_.ptr);
    handle_ = seg_.handle;
    return static_cast<char*>(seg_.ptr);
  }
  // This rank's contribution, `m` at `user`. Its packed bytes lie in order in
  // the caller's device memory and `as_is`: lent as they lie, no copy (the
  // caller leaves them alone until finish()); else packed into a segment.
  void give(const transport::Message& m, const void* user, bool as_is) {
    int64_t base = 0;
    if (as_is && m.bytes > 0 && transport::contiguous_at(m, &base) &&
        lend_as_is(static_cast<const char*>(user) + base, static_cast<size_t>(m.bytes)))
      return;
    if (char* seg = lend(static_cast<size_t>(m.bytes))) check(e_.mover->pack_to(m, user, seg));
  }
  // The same for `bytes` plain bytes at p.
  void give_bytes(const void* p, size_t bytes, bool as_is) {
    if (as_is && bytes > 0 && lend_as_is(static_cast<const char*>(p), bytes)) return;
    if (char* seg = lend(bytes)) check(e_.mover->copy(seg, p, bytes));
  }
  // A second segment, for results the peers read after a barrier.
  char* lend_result(size_t bytes) {
    if (!ok_) return nullptr;
    auto s = acquire(bytes);
    if (!s) return nullptr;
    result_ = s.value();
    has_result_ = true;
    return static_cast<char*>(result_.ptr);
  }
  // The caller's receive buffer, lent as it lies for peers to write into
  // (false where it cannot be: peers cannot reach it then).
  bool lend_output(void* p, size_t bytes) {
    auto ex = export_lent(p, bytes);
    if (!ex) return false;
    if (ex->copy.ptr) {  // a copy (the host test mode): writes would not reach p
      e_.mem->release(ex->copy);
      return false;
    }
    output_lent_ = true;
    output_offset_ = ex->offset;
    output_base_ = ex->base;
    output_ = ex->handle;
    output_ptr_ = static_cast<char*>(p);
    return true;
  }
  // Whether every rank lent its receive buffer.
  bool all_outputs_lent() const {
    for (const Desc& d : all_)
      if (!d.output_lent) return false;
    return true;
  }
  // Rank p's receive buffer, lent by lend_output().
  Result<char*> output(int p) {
    if (p == e_.rank) return output_ptr_;
    const Desc& d = all_[static_cast<size_t>(p)];
    auto base = map_user(d.output, d.lender, d.output_base);
    if (!base) return base.status();
    return base.value() + d.output_offset;
  }
  // A failed step before the swap: this rank declines.
  void check(const Status& s) {
    if (s.is_ok()) return;
    LOOM_WARN(kTransport, "node collective: %s; the MPI's own instead", s.message().c_str());
    ok_ = false;
  }
  // The allgather: true when every rank takes part.
  bool swap() {
    Desc mine;
    mine.ok = ok_ ? 1 : 0;
    mine.lender = e_.world_rank;
    if (own_) {
      mine.bytes = bytes_;
      mine.offset = offset_;
      mine.handle = handle_;
      mine.handle_user = handle_user_ ? 1 : 0;
      mine.handle_base = handle_base_;
    }
    if (has_result_) mine.result = result_.handle;
    if (output_lent_) {
      mine.output_lent = 1;
      mine.output_offset = output_offset_;
      mine.output_base = output_base_;
      mine.output = output_;
    }
    if (allgather(e_, &mine, all_.data(), sizeof(Desc)) != MPI_SUCCESS) return false;
    for (const Desc& d : all_)
      if (!d.ok) return false;
    return true;
  }
  // Rank p's contribution as this process addresses it.
  Result<const char*> segment(int p) {
    if (p == e_.rank) return own_;
    const Desc& d = all_[static_cast<size_t>(p)];
    if (d.handle_user) {
      auto base = map_user(d.handle, d.lender, d.handle_base);
      if (!base) return base.status();
      return static_cast<const char*>(base.value()) + d.offset;
    }
    auto base = e_.mem->open(d.handle, d.lender);
    if (!base) return base.status();
    return static_cast<const char*>(base.value()) + d.offset;
  }
  // Rank p's second segment.
  Result<const char*> result(int p) {
    if (p == e_.rank) return static_cast<const char*>(result_.ptr);
    const Desc& d = all_[static_cast<size_t>(p)];
    auto base = e_.mem->open(d.result, d.lender);
    if (!base) return base.status();
    return static_cast<const char*>(base.value());
  }
  // Unpacks `at` bytes into each rank's segment, as block p of recv (p * stride
  // bytes on) for every rank p but `skip`, in one batch.
  Status pull(const Part& recv, int skip, size_t at, int64_t stride) {
    std::vector<const void*> src;
    std::vector<void*> dst;
    for (int p = 0; p < e_.size; ++p) {
      if (p == skip) continue;
      auto seg = segment(p);
      if (!seg) return seg.status();
      src.push_back(seg.value() + at);
      dst.push_back(static_cast<char*>(recv.user) + static_cast<int64_t>(p) * stride);
    }
    return e_.mover->unpack_batch(recv.msg, src, dst, static_cast<size_t>(recv.msg.bytes));
  }
  // Every rank has finished reading every segment; the worst outcome wins.
  // Peers' own buffers are released first: a lender may free them once the
  // call returns, and the next that overlaps one drops its mapping.
  Outcome finish(const Status& s) {
    unmap_user();
    if (!s.is_ok()) LOOM_LOG(kError, kTransport, "node collective: %s", s.message().c_str());
    return any_error(e_, s.is_ok() ? 0 : 1) ? Outcome::kFailed : Outcome::kDone;
  }

 private:
  Result<transport::Segment> acquire(size_t bytes) {
    auto s = e_.mem->acquire(bytes == 0 ? 1 : bytes);
    if (!s) {
      LOOM_INFO(kTransport, "node collective: %s; the MPI's own instead",
                s.status().message().c_str());
      ok_ = false;
    }
    return s;
  }
  // The caller's bytes lent where they lie (CUDA IPC of their allocation;
  // in the host test mode a copy into shared memory); false: pack instead.
  bool lend_as_is(const char* p, size_t bytes) {
    auto ex = export_lent(p, bytes);
    if (!ex) return false;
    if (ex->copy.ptr) {
      seg_ = ex->copy;
      lent_ = true;
    }
    own_ = p;
    bytes_ = bytes;
    offset_ = ex->offset;
    handle_ = ex->handle;
    handle_user_ = ex->copy.ptr == nullptr;
    handle_base_ = ex->base;
    return true;
  }
  // `bytes` at p exported for peers to map (LOOM_COLL_LEND_MIN), once the
  // application's queued work on it is done; an error: copy instead.
  Result<transport::Exported> export_lent(const void* p, size_t bytes) {
    if (!ok_ || e_.lend_min < 0 || bytes == 0 || bytes < static_cast<uint64_t>(e_.lend_min))
      return Status(Err::kUnsupported, "not lent");
    auto ex = e_.mem->export_user(p, bytes, /*whole_pages=*/true);
    if (!ex) {
      LOOM_DEBUG(kTransport, "node collective: %s; copying into a segment",
                 ex.status().message().c_str());
      return ex;
    }
    check(e_.mover->settle_user());
    return ex;
  }
  // A peer's allocation lent for this call, in use until finish().
  Result<char*> map_user(const transport::PeerHandle& h, int lender, uint64_t base) {
    const std::string key(reinterpret_cast<const char*>(&h), sizeof h);
    for (const auto& [k, m] : user_maps_)
      if (k == key) return m.first;
    auto m = e_.mem->open_user(h, lender, base);
    if (!m) return m.status();
    user_maps_.push_back({key, {static_cast<char*>(m.value()), h}});
    return static_cast<char*>(m.value());
  }
  void unmap_user() {
    for (auto& [k, m] : user_maps_) e_.mem->done_user(m.second);
    user_maps_.clear();
  }

  const NodeEnv& e_;
  bool ok_;
  bool lent_ = false, has_result_ = false;
  size_t bytes_ = 0;
  uint64_t offset_ = 0;
  const char* own_ = nullptr;  // this rank's contribution (null: none)
  transport::PeerHandle handle_;
  bool handle_user_ = false;
  uint64_t handle_base_ = 0, output_base_ = 0;
  // Peers' buffers in use for this call, by handle bytes.
  std::vector<std::pair<std::string, std::pair<char*, transport::PeerHandle>>> user_maps_;
  bool output_lent_ = false;
  uint64_t output_offset_ = 0;
  transport::PeerHandle output_;
  char* output_ptr_ = nullptr;
  transport::Segment seg_, result_;
  std::vector<Desc> all_;
};

void* block(void* base, int p, int64_t stride) {
  return static_cast<char*>(base) + static_cast<int64_t>(p) * stride;
}

Part whole(const Part& blk, int n) {
  Part all = blk;
  all.msg.count *= n;
  all.msg.bytes *= n;
  return all;
}

}  // namespace

Outcome alltoall(const NodeEnv& e, Part send, const Part& recv_block, int64_t recv_stride) {
  Exchange x(e);
  const auto blk = static_cast<size_t>(recv_block.msg.bytes);
  const size_t total = blk * static_cast<size_t>(e.size);
  const Part src = send.in_place ? whole(recv_block, e.size) : send;
  if (!recv_block.ok() || !src.ok() || static_cast<size_t>(src.msg.bytes) != total) x.decline();
  // In place, the data is the receive buffer this rank's pulls overwrite: a copy.
  if (x.ok()) x.give(src.msg, src.user, !send.in_place);
  if (!x.swap()) return Outcome::kDeclined;
  return x.finish(x.pull(recv_block, -1, static_cast<size_t>(e.rank) * blk, recv_stride));
}

Outcome allgather(const NodeEnv& e, Part send, const Part& recv_block, int64_t recv_stride) {
  Exchange x(e);
  const auto blk = static_cast<size_t>(recv_block.msg.bytes);
  Part src = send;
  if (send.in_place) {  // this rank's block of recv
    src = recv_block;
    src.user = block(recv_block.user, e.rank, recv_stride);
  }
  if (!recv_block.ok() || !src.ok() || static_cast<size_t>(src.msg.bytes) != blk) x.decline();
  // In place too: this rank's pulls leave its own block alone.
  if (x.ok()) x.give(src.msg, src.user, true);
  if (!x.swap()) return Outcome::kDeclined;
  return x.finish(x.pull(recv_block, send.in_place ? e.rank : -1, 0, recv_stride));
}

Outcome bcast(const NodeEnv& e, const Part& buf, int root) {
  Exchange x(e);
  const auto bytes = static_cast<size_t>(buf.msg.bytes);
  if (!buf.ok()) x.decline();
  if (e.rank == root && x.ok()) x.give(buf.msg, buf.user, true);
  if (!x.swap()) return Outcome::kDeclined;
  Status s;
  if (e.rank != root) {
    auto seg = x.segment(root);
    s = seg ? e.mover->unpack_from_peer(buf.msg, seg.value(), bytes, buf.user) : seg.status();
  }
  return x.finish(s);
}

namespace {

// The reductions: each rank lends its whole input (`lent` elements); rank r
// folds `count` elements from element `at` of the inputs of ranks 0..nin-1,
// in rank order, into its `out` (nothing where nin or count is 0).
Outcome fold_range(const NodeEnv& e, const void* in, void* out, size_t lent, size_t at,
                   size_t count, int nin, ReduceOp op, Basic b, bool can) {
  Exchange x(e);
  const size_t es = basic_size(b);
  const bool folds = nin > 0 && count > 0;
  if (!can || (folds && (!out || !e.reducer)) || (!in && !out)) x.decline();
  // In place, the input is the output this rank overwrites while peers read it: a copy.
  if (x.ok()) x.give_bytes(in ? in : out, lent * es, in != nullptr);
  if (!x.swap()) return Outcome::kDeclined;
  Status s;
  if (folds) {
    std::vector<const void*> inputs(static_cast<size_t>(nin));
    for (int p = 0; p < nin && s.is_ok(); ++p) {
      auto seg = x.segment(p);
      if (seg)
        inputs[static_cast<size_t>(p)] = seg.value() + at * es;
      else
        s = seg.status();
    }
    if (s.is_ok()) s = e.reducer->reduce(op, b, inputs.data(), nin, out, count);
  }
  return x.finish(s);
}

Outcome fold(const NodeEnv& e, const void* in, void* out, size_t count, size_t blocks, ReduceOp op,
             Basic b, bool can, int root, bool scatter) {
  const bool folds = root < 0 || root == e.rank;
  const size_t at = scatter ? static_cast<size_t>(e.rank) * count : 0;
  return fold_range(e, in, out, count * blocks, at, count, folds ? e.size : 0, op, b, can);
}

}  // namespace

namespace {

// Allreduce of large inputs as a reduce-scatter and an allgather: rank r
// folds only its r-th of the elements (in rank order 0..n-1, so each element
// has the same bits wherever it lands). Where every rank lent its receive
// buffer as it lies, rank r writes its folded piece straight into every
// rank's buffer in the same kernel: each input byte is read once and each
// output byte written once, the least any allreduce moves, with no barrier
// (a thread reads its element of every input before it writes any output,
// and no two ranks touch the same elements: in place holds too). Otherwise
// rank r folds into a segment it lends, and after a barrier every rank
// copies each rank's piece into its output.
Outcome allreduce_split(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op,
                        Basic b, bool can) {
  Exchange x(e);
  const size_t es = basic_size(b), n = static_cast<size_t>(e.size);
  auto first = [&](size_t r) { return r * count / n; };  // rank r folds [first(r), first(r + 1))
  const size_t me = static_cast<size_t>(e.rank);
  const size_t lo = first(me), mine = first(me + 1) - lo;
  if (!can || !out || !e.reducer) x.decline();
  // In place too: no rank writes elements another reads before the barrier
  // (or, pushing, before that rank's own fold has read them).
  if (x.ok()) x.give_bytes(in ? in : out, count * es, true);
  if (n <= static_cast<size_t>(kMaxOutputs)) x.lend_output(out, count * es);
  char* res = x.lend_result((count / n + 1) * es);
  if (!x.swap()) return Outcome::kDeclined;
  std::vector<const void*> inputs(n);
  Status s;
  for (int p = 0; p < e.size && s.is_ok(); ++p) {
    auto seg = x.segment(p);
    if (seg)
      inputs[static_cast<size_t>(p)] = seg.value() + lo * es;
    else
      s = seg.status();
  }
  if (x.all_outputs_lent()) {
    std::vector<void*> outs(n);
    for (int p = 0; p < e.size && s.is_ok(); ++p) {
      auto o = x.output(p);
      if (o)
        outs[static_cast<size_t>(p)] = o.value() + lo * es;
      else
        s = o.status();
    }
    if (s.is_ok())
      s = e.reducer->reduce_to(op, b, inputs.data(), e.size, outs.data(), e.size, mine);
    return x.finish(s);
  }
  if (s.is_ok()) s = e.reducer->reduce(op, b, inputs.data(), e.size, res, mine);
  if (barrier(e) != MPI_SUCCESS && s.is_ok()) s = Status(Err::kMpi, "the barrier after the folds");
  for (size_t p = 0; p < n && s.is_ok(); ++p) {
    auto piece = x.result(static_cast<int>(p));
    s = piece ? e.mover->copy_async(static_cast<char*>(out) + first(p) * es, piece.value(),
                                    (first(p + 1) - first(p)) * es)
              : piece.status();
  }
  if (Status w = e.mover->wait_copies(); s.is_ok()) s = w;
  return x.finish(s);
}

}  // namespace

Outcome allreduce(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op, Basic b,
                  bool can, bool split) {
  if (split) return allreduce_split(e, in, out, count, op, b, can);
  return fold(e, in, out, count, 1, op, b, can, -1, false);
}

Outcome reduce(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op, Basic b,
               bool can, int root) {
  return fold(e, in, out, count, 1, op, b, can, root, false);
}

Outcome reduce_scatter_block(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op,
                             Basic b, bool can) {
  return fold(e, in, out, count, static_cast<size_t>(e.size), op, b, can, -1, true);
}

Outcome reduce_scatter(const NodeEnv& e, const void* in, void* out,
                       const std::vector<size_t>& counts, ReduceOp op, Basic b, bool can) {
  size_t all = 0, at = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    if (p == static_cast<size_t>(e.rank)) at = all;
    all += counts[p];
  }
  const size_t mine = static_cast<size_t>(e.rank) < counts.size() ? counts[e.rank] : 0;
  if (counts.size() != static_cast<size_t>(e.size)) can = false;
  return fold_range(e, in, out, all, at, mine, e.size, op, b, can);
}

Outcome scan(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op, Basic b,
             bool can, bool exclusive) {
  return fold_range(e, in, out, count, 0, count, exclusive ? e.rank : e.rank + 1, op, b, can);
}

namespace {

// What rank p tells rank q in the exchange's alltoall.
struct Rec {
  int32_t ok = 0;       // p takes part
  int32_t lender = 0;   // p's world rank
  uint64_t offset = 0;  // where p's blocks for q start in p's segment
  uint64_t bytes = 0;   // and their bytes in all
  transport::PeerHandle handle;
};

// A segment lent for the length of one exchange.
struct Lent {
  transport::PeerMemory* mem = nullptr;
  transport::Segment seg;
  ~Lent() {
    if (mem) mem->release(seg);
  }
};

Status pull_blocks(const NodeEnv& e, const std::vector<Block>& in, const std::vector<Rec>& from,
                   const char* own) {
  const auto n = static_cast<size_t>(e.size);
  std::vector<uint64_t> got(n, 0);
  std::vector<std::shared_ptr<void>> keep;
  Status s;
  // By sender, then key: the order of each sender's blocks in its segment.
  std::vector<const Block*> order;
  for (const Block& b : in) order.push_back(&b);
  std::stable_sort(order.begin(), order.end(), [](const Block* a, const Block* b) {
    return a->peer != b->peer ? a->peer < b->peer : a->key < b->key;
  });
  for (const Block* blk : order) {
    const Block& b = *blk;
    const auto p = static_cast<size_t>(b.peer);
    const auto bytes = static_cast<uint64_t>(b.part.msg.bytes);
    if (got[p] + bytes > from[p].bytes) {
      s = Status(Err::kInvalidArg, "a receive larger than what its sender sent");
      break;
    }
    if (bytes > 0) {
      const char* base = own;
      if (b.peer != e.rank) {
        auto m = e.mem->open(from[p].handle, from[p].lender);
        if (!m) {
          s = m.status();
          break;
        }
        base = static_cast<const char*>(m.value());
      }
      s = e.mover->unpack_async(b.part.msg, base + from[p].offset + got[p], bytes, b.part.user,
                                keep);
      if (!s) break;
    }
    got[p] += bytes;
  }
  if (Status w = e.mover->wait_copies(); s.is_ok()) s = w;
  for (size_t p = 0; p < n && s.is_ok(); ++p)
    if (got[p] != from[p].bytes) s = Status(Err::kInvalidArg, "a send larger than its receive");
  return s;
}

}  // namespace

Outcome exchange(const NodeEnv& e, const std::vector<Block>& out, const std::vector<Block>& in,
                 bool can) {
  const auto n = static_cast<size_t>(e.size);
  bool ok = can && e.mem && e.mover;
  // One block for every rank (or every other): packed once, read by all.
  const bool shared = out.size() == 1 && (out[0].peer == kEveryRank || out[0].peer == kEveryOther);
  for (const Block& b : out) ok = ok && (shared || (b.peer >= 0 && b.peer < e.size)) && b.part.ok();
  for (const Block& b : in) ok = ok && b.peer >= 0 && b.peer < e.size && b.part.ok();
  std::vector<uint64_t> start(n + 1, 0), len(n, 0);  // rank p's bytes: [start[p], + len[p])
  uint64_t total = 0;
  if (ok && shared) {
    total = static_cast<uint64_t>(out[0].part.msg.bytes);
    for (size_t p = 0; p < n; ++p)
      len[p] = out[0].peer == kEveryOther && p == static_cast<size_t>(e.rank) ? 0 : total;
  } else if (ok) {
    for (const Block& b : out) len[static_cast<size_t>(b.peer)] += b.part.msg.bytes;
    for (size_t p = 0; p < n; ++p) start[p + 1] = start[p] + len[p];
    total = start[n];
  }
  Lent lent;
  std::vector<Rec> mine(n), from(n);
  if (ok) {
    auto seg = e.mem->acquire(total == 0 ? 1 : total);
    if (seg) {
      lent.mem = e.mem;
      lent.seg = seg.value();
    } else {
      LOOM_INFO(kTransport, "node collective: %s; the MPI's own instead",
                seg.status().message().c_str());
      ok = false;
    }
  }
  if (ok) {
    std::vector<uint64_t> at(start.begin(), start.end() - 1);
    std::vector<std::shared_ptr<void>> keep;
    Status s;
    for (const Block& b : out) {
      const size_t p = shared ? 0 : static_cast<size_t>(b.peer);
      if (b.part.msg.bytes > 0 && s.is_ok())
        s = e.mover->pack_async(b.part.msg, b.part.user, static_cast<char*>(lent.seg.ptr) + at[p],
                                keep);
      at[p] += b.part.msg.bytes;
    }
    if (Status w = e.mover->wait_copies(); s.is_ok()) s = w;
    if (!s) {
      LOOM_WARN(kTransport, "node collective: %s; the MPI's own instead", s.message().c_str());
      ok = false;
    }
  }
  for (size_t p = 0; p < n; ++p) {
    mine[p].ok = ok ? 1 : 0;
    mine[p].lender = e.world_rank;
    if (!ok) continue;
    mine[p].offset = start[p];
    mine[p].bytes = len[p];
    mine[p].handle = lent.seg.handle;
  }
  if (alltoall(e, mine.data(), from.data(), sizeof(Rec)) != MPI_SUCCESS) return Outcome::kDeclined;
  for (const Rec& r : from)
    if (!r.ok) return Outcome::kDeclined;
  if (!ok) return Outcome::kDeclined;  // (every rank saw this one's no)
  Status s = pull_blocks(e, in, from, static_cast<const char*>(lent.seg.ptr));
  if (!s.is_ok()) LOOM_LOG(kError, kTransport, "node collective: %s", s.message().c_str());
  return any_error(e, s.is_ok() ? 0 : 1) ? Outcome::kFailed : Outcome::kDone;
}

namespace {

class HostReducer final : public Reducer {
 public:
  Status reduce_to(ReduceOp op, Basic b, const void* const* in, int n, void* const* outs, int nout,
                   size_t count) override {
    LOOM_TRY(host_reduce(op, b, in, n, outs[0], count));  // reads every input first
    for (int o = 1; o < nout; ++o)
      if (outs[o] != outs[0]) std::memcpy(outs[o], outs[0], count * basic_size(b));
    return Status::ok();
  }
};

}  // namespace

std::unique_ptr<Reducer> make_host_reducer() {
  return std::make_unique<HostReducer>();
}

#ifndef LOOM_HAVE_CUDA
Result<std::unique_ptr<Reducer>> make_gpu_reducer() {
  return Status(Err::kUnsupported, "a build without CUDA");
}
#endif

}  // namespace loom::coll
