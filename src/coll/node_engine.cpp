#include "coll/node_engine.hpp"

#include <vector>

#include "util/log.hpp"

namespace loom::coll {
namespace {

// What each rank tells the others in the allgather.
struct Desc {
  int32_t ok = 0;  // takes part
  int32_t pad = 0;
  uint64_t bytes = 0;  // of the segment's contents (0: no segment)
  transport::PeerHandle handle;
};

// One collective's segments: this rank's, lent until the end, and the
// peers', opened (mappings are cached by PeerMemory).
class Exchange {
 public:
  explicit Exchange(const NodeEnv& e)
      : e_(e), ok_(e.mem != nullptr && e.mover != nullptr), all_(static_cast<size_t>(e.size)) {}
  ~Exchange() {
    if (lent_) e_.mem->release(seg_);
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void decline() { ok_ = false; }
  // This rank's segment for `bytes` (null when it has none: it declines).
  char* lend(size_t bytes) {
    if (!ok_) return nullptr;
    auto s = e_.mem->acquire(bytes == 0 ? 1 : bytes);
    if (!s) {
      LOOM_INFO(kTransport, "node collective: %s; the MPI's own instead",
                s.status().message().c_str());
      ok_ = false;
      return nullptr;
    }
    seg_ = s.value();
    lent_ = true;
    bytes_ = bytes;
    return static_cast<char*>(seg_.ptr);
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
    if (lent_) {
      mine.bytes = bytes_;
      mine.handle = seg_.handle;
    }
    if (PMPI_Allgather(&mine, sizeof(Desc), MPI_BYTE, all_.data(), sizeof(Desc), MPI_BYTE,
                       e_.comm) != MPI_SUCCESS)
      return false;
    for (const Desc& d : all_)
      if (!d.ok) return false;
    return true;
  }
  // Rank p's segment as this process addresses it.
  Result<const char*> segment(int p) {
    if (p == e_.rank) return static_cast<const char*>(seg_.ptr);
    auto base = e_.mem->open(all_[static_cast<size_t>(p)].handle);
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
  Outcome finish(const Status& s) {
    int err = s.is_ok() ? 0 : 1, any = 0;
    if (!s.is_ok()) LOOM_LOG(kError, kTransport, "node collective: %s", s.message().c_str());
    if (PMPI_Allreduce(&err, &any, 1, MPI_INT, MPI_MAX, e_.comm) != MPI_SUCCESS) any = 1;
    return any ? Outcome::kFailed : Outcome::kDone;
  }

 private:
  const NodeEnv& e_;
  bool ok_;
  bool lent_ = false;
  size_t bytes_ = 0;
  transport::Segment seg_;
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
  if (char* seg = x.lend(total)) x.check(e.mover->pack_to(src.msg, src.user, seg));
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
  if (char* seg = x.lend(blk)) x.check(e.mover->pack_to(src.msg, src.user, seg));
  if (!x.swap()) return Outcome::kDeclined;
  return x.finish(x.pull(recv_block, send.in_place ? e.rank : -1, 0, recv_stride));
}

Outcome bcast(const NodeEnv& e, const Part& buf, int root) {
  Exchange x(e);
  const auto bytes = static_cast<size_t>(buf.msg.bytes);
  if (!buf.ok()) x.decline();
  if (e.rank == root) {
    if (char* seg = x.lend(bytes)) x.check(e.mover->pack_to(buf.msg, buf.user, seg));
  }
  if (!x.swap()) return Outcome::kDeclined;
  Status s;
  if (e.rank != root) {
    auto seg = x.segment(root);
    s = seg ? e.mover->unpack_from_peer(buf.msg, seg.value(), bytes, buf.user) : seg.status();
  }
  return x.finish(s);
}

namespace {

// The reductions: each rank lends its whole input; rank r folds block
// `block_of(r)` of every rank's segment, in rank order, into its `out`
// (only `root`'s when root >= 0).
Outcome fold(const NodeEnv& e, const void* in, void* out, size_t count, size_t blocks, ReduceOp op,
             Basic b, bool can, int root, bool scatter) {
  Exchange x(e);
  const size_t blk = count * basic_size(b), bytes = blk * blocks;
  const bool folds = root < 0 || root == e.rank;
  if (!can || (folds && (!out || !e.reducer)) || (!in && !out)) x.decline();
  if (char* seg = x.lend(bytes)) x.check(e.mover->copy(seg, in ? in : out, bytes));
  if (!x.swap()) return Outcome::kDeclined;
  Status s;
  if (folds) {
    std::vector<const void*> inputs(static_cast<size_t>(e.size));
    const size_t at = scatter ? static_cast<size_t>(e.rank) * blk : 0;
    for (int p = 0; p < e.size && s.is_ok(); ++p) {
      auto seg = x.segment(p);
      if (seg)
        inputs[static_cast<size_t>(p)] = seg.value() + at;
      else
        s = seg.status();
    }
    if (s.is_ok()) s = e.reducer->reduce(op, b, inputs.data(), e.size, out, count);
  }
  return x.finish(s);
}

}  // namespace

Outcome allreduce(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op, Basic b,
                  bool can) {
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

namespace {

class HostReducer final : public Reducer {
 public:
  Status reduce(ReduceOp op, Basic b, const void* const* in, int n, void* out,
                size_t count) override {
    return host_reduce(op, b, in, n, out, count);
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
