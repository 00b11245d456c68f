#include "mpi/coll_staged.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <functional>
#include <initializer_list>
#include <vector>

#include "mpi/blocking.hpp"
#include "mpi/coll_schedule.hpp"
#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/rendezvous.hpp"
#include "mpi/runtime.hpp"
#include "util/log.hpp"

namespace loom::mpi::staged {
namespace {

using Mode = Runtime::CollMethod;

constexpr int kPieceTag = 1;  // on the twin; its schedules use tag 0
std::atomic<long long> g_calls{0};

// t's size; false for MPI_DATATYPE_NULL (the MPI's own call raises it).
bool size_of(MPI_Datatype t, int* size) {
  return t != MPI_DATATYPE_NULL && PMPI_Type_size(t, size) == MPI_SUCCESS;
}

// One rank's buffer as a stream of packed bytes. Device memory of a type
// Loom reads goes through the staged mover (pack once, then chunked copies);
// host memory through the MPI's own MPI_Pack and MPI_Unpack.
struct Side {
  void* user = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  size_t bytes = 0;
  bool device = false;
  TypeRegistry::Entry entry;  // device: the type, while in use
  transport::Message msg;
  transport::Mover* mover = nullptr;
  transport::Staged staged;  // device: host staging (the send's, or the receive's)
  std::vector<char> host;    // host: the packed bytes
  char* at() { return device ? static_cast<char*>(staged.host) : host.data(); }
};

// Fills s for `count` elements of t at buf; false when this rank cannot take
// part (a type Loom does not read on the device, sizes past int).
bool make_side(const void* buf, int64_t count, MPI_Datatype t, Side* s) {
  s->user = const_cast<void*>(buf);
  s->type = t;
  int size = 0;
  if (count < 0 || count > INT_MAX || !size_of(t, &size)) return false;
  s->count = static_cast<int>(count);
  const int64_t bytes = count * size;
  if (bytes > INT_MAX) return false;  // MPI_Pack's and the chunks' int counts
  s->bytes = static_cast<size_t>(bytes);
  if (bytes == 0) return true;
  if (!buf) return false;  // the MPI's own call raises MPI_ERR_BUFFER
  s->device = on_device(buf, s->count, t);
  if (!s->device) {  // the MPI's packed bytes must be the ones Loom's peers pack
    int packed = 0;
    return PMPI_Pack_size(s->count, t, MPI_COMM_SELF, &packed) == MPI_SUCCESS && packed == bytes;
  }
  auto e = runtime()->types.lookup(t);
  if (!e || !fill_message(*e.value(), s->count, &s->msg) || s->msg.bytes != bytes) return false;
  s->entry = e.value();
  s->mover = runtime()->mover(transport::Method::kStaged);
  return s->mover != nullptr;
}

// The bytes of `count` (> 0) elements of t: a block of a rooted call.
bool block_of(int count, MPI_Datatype t, int64_t* block) {
  int size = 0;
  if (count <= 0 || !size_of(t, &size)) return false;
  *block = int64_t{count} * size;
  return true;
}

using Ready = std::function<Status(size_t off, size_t len)>;

// Packs s and calls ready(off, len) for each chunk as it lies in host
// memory (s.at()), in order.
Status send_chunks(Side& s, size_t chunk, MPI_Comm comm, const Ready& ready,
                   const std::function<void()>& idle) {
  if (s.bytes == 0) return Status::ok();
  if (s.device) {
    // s.staged holds the staging from the first chunk on: on a failure the
    // chunks already sent still read it until finish() has waited for them.
    auto st = s.mover->pack_chunked(
        s.msg, s.user, chunk, [&](size_t off, size_t len, const void*) { return ready(off, len); },
        idle, &s.staged);
    return st ? Status::ok() : st.status();
  }
  s.host.resize(s.bytes);
  int pos = 0;
  if (PMPI_Pack(s.user, s.count, s.type, s.host.data(), static_cast<int>(s.bytes), &pos, comm) !=
          MPI_SUCCESS ||
      static_cast<size_t>(pos) != s.bytes)
    return Status(Err::kMpi, "MPI_Pack of a host buffer");
  for (size_t off = 0; off < s.bytes; off += chunk)
    LOOM_TRY(ready(off, std::min(chunk, s.bytes - off)));
  return Status::ok();
}

// Host memory for s's packed bytes to arrive in (s.at()).
Status recv_stage(Side& s) {
  if (s.bytes == 0) return Status::ok();
  if (!s.device) {
    s.host.resize(s.bytes);
    return Status::ok();
  }
  auto st = s.mover->stage(s.bytes);
  if (!st) return st.status();
  s.staged = std::move(st.value());
  return Status::ok();
}

// Lands the bytes of s: arrived(off, len) before each chunk is used.
Status land(Side& s, size_t chunk, MPI_Comm comm, const transport::Mover::ChunkArrived& arrived) {
  if (s.bytes == 0) return Status::ok();
  if (s.device) return s.mover->unpack_chunked(s.msg, s.staged, s.bytes, chunk, arrived, s.user);
  for (size_t off = 0; off < s.bytes; off += chunk)
    LOOM_TRY(arrived(off, std::min(chunk, s.bytes - off)));
  int pos = 0;
  if (PMPI_Unpack(s.host.data(), static_cast<int>(s.bytes), &pos, s.user, s.count, s.type, comm) !=
      MPI_SUCCESS)
    return Status(Err::kMpi, "MPI_Unpack into a host buffer");
  return Status::ok();
}

// The MPI requests of one call and its first error.
class Requests {
 public:
  MPI_Request* add() {
    reqs_.push_back(MPI_REQUEST_NULL);
    return &reqs_.back();
  }
  size_t size() const { return reqs_.size(); }
  int note(int rc) {
    if (rc != MPI_SUCCESS && rc_ == MPI_SUCCESS) rc_ = rc;
    return rc;
  }
  // Waits for requests [done_, upto), progressing Loom meanwhile.
  int wait_until(size_t upto) {
    for (; done_ < upto && done_ < reqs_.size(); ++done_) wait(done_);
    return rc_;
  }
  int wait_all() { return wait_until(reqs_.size()); }
  // Drives the MPI's progress on what is posted (while a chunk comes down):
  // its sends would otherwise wait for the next MPI call.
  void poke() {
    if (done_ >= reqs_.size()) return;
    const int n = static_cast<int>(reqs_.size() - done_);
    statuses_.resize(static_cast<size_t>(n));
    int flag = 0;
    if (PMPI_Testall(n, reqs_.data() + done_, &flag, statuses_.data()) == MPI_SUCCESS) return;
    for (const MPI_Status& st : statuses_)  // the failed request's own error
      if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) note(st.MPI_ERROR);
    note(MPI_ERR_OTHER);
  }
  // Waits for request i alone (a wait for it again later returns at once).
  int wait(size_t i) {
    const transport::WaitFn w = collective_wait();
    return note(w ? w(&reqs_[i]) : PMPI_Wait(&reqs_[i], MPI_STATUS_IGNORE));
  }
  int rc() const { return rc_; }

 private:
  std::vector<MPI_Request> reqs_;  // the MPI keeps no pointer to them
  std::vector<MPI_Status> statuses_;
  size_t done_ = 0;
  int rc_ = MPI_SUCCESS;
};

Status mpi_status(int rc, const char* what) {
  return rc == MPI_SUCCESS ? Status::ok() : Status(Err::kMpi, what);
}

bool forced() {
  return runtime()->coll_method.load(std::memory_order_relaxed) == Mode::kStaged;
}

// Every rank of c agrees: true when every rank can take part (`can`), some
// rank has device memory among its `sides`, and, unless LOOM_COLL_METHOD is
// `staged`, some rank's device data has gaps. Contiguous data gained at most
// 1.04-1.23x over the mirrors on one H100 with ranks counted off the node,
// and lost up to 9 % in some shapes, where the MPI's own exchange is most of
// the time (docs/collectives.md); data with gaps gained 3.6-5.9x: the
// mirrors copy its whole span and the MPI packs it on the host, where here
// one kernel packs it on the device.
bool agree(const Call& c, bool can, std::initializer_list<const Side*> sides) {
  // The chunk setting too: every rank must cut the streams alike.
  const int knob = static_cast<int>(std::min<int64_t>(runtime()->coll_pipeline_chunk, INT_MAX));
  int mine[5] = {0, can ? 0 : 1, 0, knob, -knob}, all[5] = {0, 1, 0, 0, 0};
  for (const Side* s : sides) {
    int64_t base = 0;
    mine[0] |= s->device ? 1 : 0;
    mine[2] |= s->device && s->msg.form && !transport::contiguous_at(s->msg, &base) ? 1 : 0;
  }
  blocking_call(
      collectives_poll(), [&] { return PMPI_Allreduce(mine, all, 5, MPI_INT, MPI_MAX, c.comm()); },
      [&](MPI_Request* r) { return PMPI_Iallreduce(mine, all, 5, MPI_INT, MPI_MAX, c.comm(), r); });
  if (all[3] != -all[4]) {
    LOOM_WARN(kMpi, "%s: LOOM_COLL_PIPELINE_CHUNK differs between ranks: not staged", c.fn());
    return false;
  }
  if (all[1])
    LOOM_DEBUG(kMpi, "%s: pipelined staging declined (some rank cannot take part)", c.fn());
  return all[0] && !all[1] && (all[2] || forced());
}

// c's private twin, which the exchanges run on; false (the error raised
// into *rc) when it cannot be made.
bool twin_of(const Call& c, MPI_Comm* twin, int* rc) {
  const int e = twin_comm(c.comm(), twin);
  if (e != MPI_SUCCESS) *rc = raise(c.comm(), e, "the twin communicator of a staged collective");
  return e == MPI_SUCCESS;
}

// The chunk for a call moving `total` bytes (alike on every rank), a
// multiple of `unit`: LOOM_COLL_PIPELINE_CHUNK, or larger where a call
// would have more than kMaxChunks of them in flight.
constexpr size_t kMaxChunks = 256;
size_t chunk_bytes(size_t unit, size_t total) {
  const size_t c = std::max(static_cast<size_t>(runtime()->coll_pipeline_chunk),
                            (total + kMaxChunks - 1) / kMaxChunks);
  return (c + unit - 1) / unit * unit;
}

int finish(const Call& c, const Status& s, Requests& q, int* rc) {
  q.wait_all();  // nothing of the call stays in flight
  g_calls.fetch_add(1, std::memory_order_relaxed);
  if (!s.is_ok()) {
    *rc = raise(c.comm(), s);
  } else if (q.rc() != MPI_SUCCESS) {
    int cls = MPI_ERR_OTHER;
    PMPI_Error_class(q.rc(), &cls);
    *rc = raise(c.comm(), cls, "a pipelined staged exchange failed");
  } else {
    LOOM_DEBUG(kMpi, "%s: pipelined staging", c.fn());
    *rc = MPI_SUCCESS;
  }
  return *rc;
}

// A reduction's type as the chunks take it: predefined, its bytes one run
// (size == extent), so a chunk of packed bytes is whole elements the MPI's
// op reads as they lie. Alike on every rank (a reduction's type is).
bool reducible(MPI_Datatype t, int* size) {
  int ni = 0, na = 0, nd = 0, comb = 0;
  MPI_Aint lb = 0, extent = 0;
  if (!size_of(t, size) || PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS ||
      comb != MPI_COMBINER_NAMED || *size <= 0 ||
      PMPI_Type_get_extent(t, &lb, &extent) != MPI_SUCCESS)
    return false;
  return lb == 0 && extent == *size;
}

// Allreduce (root < 0) and Reduce.
bool reduction(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root,
               int* rc) {
  int size = 0;
  // Contiguous: in auto the mirrors do as well (agree()).
  if (!forced() || count <= 0 || op == MPI_OP_NULL || !reducible(t, &size) ||
      !gate(c, int64_t{count} * size))
    return false;
  const bool out_here = root < 0 || c.rank() == root;
  Side in, out;
  bool can = make_side(s == MPI_IN_PLACE ? r : s, count, t, &in);
  if (out_here) can = make_side(r, count, t, &out) && can;
  if (!agree(c, can, {&in, &out})) return false;
  MPI_Comm twin = MPI_COMM_NULL;
  if (!twin_of(c, &twin, rc)) return true;
  const size_t chunk = chunk_bytes(static_cast<size_t>(size), in.bytes);
  Requests q;
  Status st = out_here ? recv_stage(out) : Status::ok();
  if (st.is_ok())
    st = send_chunks(
        in, chunk, twin,
        [&](size_t off, size_t len) {
          char* o = out_here ? out.at() + off : nullptr;
          const int n = static_cast<int>(len / static_cast<size_t>(size));
          return mpi_status(
              q.note(root < 0 ? PMPI_Iallreduce(in.at() + off, o, n, t, op, twin, q.add())
                              : PMPI_Ireduce(in.at() + off, o, n, t, op, root, twin, q.add())),
              "a chunk's reduction");
        },
        [&] { q.poke(); });
  if (st.is_ok() && out_here)
    st = land(out, chunk, twin, [&](size_t off, size_t) {
      return mpi_status(q.wait_until(off / chunk + 1), "a chunk's reduction");
    });
  finish(c, st, q, rc);
  return true;
}

// A piece of a block exchange: `len` bytes at `at` in the receive stream,
// from `peer`.
struct Piece {
  int peer = 0;
  size_t at = 0, len = 0;
};

// Rank `peer` sends this rank the `block` bytes at [from, from + block) of
// its send stream, cut at the multiples of `chunk` there (its chunks); they
// land at `at` in this rank's receive stream.
void pieces_from(int peer, size_t from, size_t block, size_t chunk, size_t at,
                 std::vector<Piece>* out) {
  for (size_t p = from; p < from + block;) {
    const size_t end = std::min(from + block, (p / chunk + 1) * chunk);
    out->push_back({peer, at + (p - from), end - p});
    p = end;
  }
}

// Who sends which block of its send stream to whom. Alltoall: block j to
// rank j. Allgather: the one block to every rank. Gather: the one block to
// the root. Scatter: the root's block j to rank j. Blocks are `block` bytes
// on every rank (MPI's matching signatures).
enum class Route { kAlltoall, kAllgather, kGather, kScatter };

bool exchange(Call& c, Side& in, Side& out, size_t block, Route route, int root, bool can,
              int* rc) {
  const int n = c.size(), me = c.rank();
  const auto at = [&](int i) { return block * static_cast<size_t>(i); };
  const bool sends = route != Route::kScatter || me == root;
  const bool gets = route != Route::kGather || me == root;
  // The root of an in-place Scatter keeps its block where it is.
  const bool to_self = !(route == Route::kScatter && me == root && out.bytes == 0);
  const size_t want_in = !sends                                                    ? 0
                         : (route == Route::kAlltoall || route == Route::kScatter) ? at(n)
                                                                                   : block;
  const size_t want_out = !gets ? 0 : route == Route::kScatter ? (to_self ? block : 0) : at(n);
  can = can && block > 0 && in.bytes == want_in && out.bytes == want_out;
  if (!agree(c, can, {&in, &out})) return false;
  MPI_Comm twin = MPI_COMM_NULL;
  if (!twin_of(c, &twin, rc)) return true;
  const size_t chunk = chunk_bytes(1, at(n));  // alike on every rank
  Requests q;
  Status st = recv_stage(out);
  // Every receive first, in each sender's order (the sender's chunks cut
  // its stream at multiples of `chunk`), then sorted by where they land
  // (the order land() uses them in).
  std::vector<Piece> pieces;
  if (route == Route::kScatter) {
    if (to_self) pieces_from(root, at(me), block, chunk, 0, &pieces);
  } else if (gets) {
    for (int i = 0; i < n; ++i)
      pieces_from(i, route == Route::kAlltoall ? at(me) : 0, block, chunk, at(i), &pieces);
  }
  std::vector<std::pair<size_t, size_t>> by_at;  // (at, request index)
  for (size_t k = 0; st.is_ok() && k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    by_at.emplace_back(p.at, q.size());
    st = mpi_status(q.note(PMPI_Irecv(out.at() + p.at, static_cast<int>(p.len), MPI_BYTE, p.peer,
                                      kPieceTag, twin, q.add())),
                    "posting a piece's receive");
  }
  auto send = [&](size_t lo, size_t hi, int to) {
    return mpi_status(q.note(PMPI_Isend(in.at() + lo, static_cast<int>(hi - lo), MPI_BYTE, to,
                                        kPieceTag, twin, q.add())),
                      "sending a piece");
  };
  if (st.is_ok())
    st = send_chunks(
        in, chunk, twin,
        [&](size_t off, size_t len) {
          const size_t end = off + len;
          if (route == Route::kGather) return send(off, end, root);
          for (int j = 0; j < n; ++j) {
            if (route == Route::kAllgather) {
              LOOM_TRY(send(off, end, j));
              continue;
            }
            // The part of this chunk in block j.
            const size_t lo = std::max(off, at(j)), hi = std::min(end, at(j + 1));
            if (lo < hi && (j != me || to_self)) LOOM_TRY(send(lo, hi, j));
          }
          return Status::ok();
        },
        [&] { q.poke(); });
  std::sort(by_at.begin(), by_at.end());
  size_t next = 0;  // by_at[next..] not yet waited for
  if (st.is_ok())
    st = land(out, chunk, twin, [&](size_t off, size_t len) {
      for (; next < by_at.size() && by_at[next].first < off + len; ++next)
        q.wait(by_at[next].second);
      return mpi_status(q.rc(), "a piece's receive");
    });
  finish(c, st, q, rc);
  return true;
}

}  // namespace

bool gate(const Call& c, int64_t bytes) {
  Runtime* rt = runtime();
  if (c.request() || !c.active() || c.error() != MPI_SUCCESS || c.inter_comm() || c.size() < 2 ||
      bytes <= 0)
    return false;
  const Mode m = rt->coll_method.load(std::memory_order_relaxed);
  if (m == Mode::kStaged) return true;
  if (m != Mode::kAuto || bytes < rt->coll_pipeline_min) return false;
  // Where the node-local engine runs, it is faster.
  return !rt->rv || !rt->rv->lends() || !rt->rv->all_on_node(c.comm());
}

bool bcast(Call& c, void* buf, int count, MPI_Datatype t, int root, int* rc) {
  Side s;
  int size = 0;
  if (root < 0 || root >= c.size() || count <= 0 || !size_of(t, &size) ||
      !gate(c, int64_t{count} * size))
    return false;
  if (!agree(c, make_side(buf, count, t, &s), {&s})) return false;
  MPI_Comm twin = MPI_COMM_NULL;
  if (!twin_of(c, &twin, rc)) return true;
  const size_t chunk = chunk_bytes(1, s.bytes);
  Requests q;
  auto post = [&](size_t off, size_t len) {
    return mpi_status(
        q.note(PMPI_Ibcast(s.at() + off, static_cast<int>(len), MPI_BYTE, root, twin, q.add())),
        "a chunk's broadcast");
  };
  Status st;
  if (c.rank() == root) {
    st = send_chunks(s, chunk, twin, post, [&] { q.poke(); });
  } else {
    st = recv_stage(s);
    for (size_t off = 0; st.is_ok() && off < s.bytes; off += chunk)
      st = post(off, std::min(chunk, s.bytes - off));
    if (st.is_ok())
      st = land(s, chunk, twin, [&](size_t off, size_t) {
        return mpi_status(q.wait_until(off / chunk + 1), "a chunk's broadcast");
      });
  }
  finish(c, st, q, rc);
  return true;
}

bool allreduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int* rc) {
  return reduction(c, s, r, count, t, op, -1, rc);
}

bool reduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root,
            int* rc) {
  if (root < 0 || root >= c.size()) return false;  // the MPI raises MPI_ERR_ROOT
  return reduction(c, s, r, count, t, op, root, rc);
}

bool allgather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
               MPI_Datatype rt, int* rc) {
  int size = 0;
  if (rcount <= 0 || !size_of(rt, &size) || !gate(c, int64_t{rcount} * size * c.size()))
    return false;
  Side in, out;
  MPI_Aint lb = 0, extent = 0;
  bool can = PMPI_Type_get_extent(rt, &lb, &extent) == MPI_SUCCESS &&
             make_side(r, int64_t{rcount} * c.size(), rt, &out);
  if (s == MPI_IN_PLACE)  // this rank's block already sits in r
    can = make_side(static_cast<char*>(r) + extent * rcount * c.rank(), rcount, rt, &in) && can;
  else
    can = make_side(s, sc, st, &in) && can;
  return exchange(c, in, out, static_cast<size_t>(rcount) * static_cast<size_t>(size),
                  Route::kAllgather, 0, can, rc);
}

bool alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
              int* rc) {
  int size = 0;
  if (rcount <= 0 || !size_of(rt, &size) || !gate(c, int64_t{rcount} * size * c.size()))
    return false;
  Side in, out;
  bool can = make_side(r, int64_t{rcount} * c.size(), rt, &out);
  // In place the send stream is packed from the receive buffer before
  // anything lands in it (send_chunks ends before land begins).
  if (s == MPI_IN_PLACE)
    can = make_side(r, int64_t{rcount} * c.size(), rt, &in) && can;
  else
    can = make_side(s, int64_t{sc} * c.size(), st, &in) && can;
  return exchange(c, in, out, static_cast<size_t>(rcount) * static_cast<size_t>(size),
                  Route::kAlltoall, 0, can, rc);
}

bool gather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
            int root, int* rc) {
  if (root < 0 || root >= c.size()) return false;  // the MPI raises MPI_ERR_ROOT
  const bool at_root = c.rank() == root, in_place = at_root && s == MPI_IN_PLACE;
  int64_t block = 0;  // in place, the root's receive counts say it
  if (!block_of(in_place ? rcount : sc, in_place ? rt : st, &block) || !gate(c, block * c.size()))
    return false;
  Side in, out;
  bool can = true;
  if (at_root) {
    MPI_Aint lb = 0, extent = 0;
    can = PMPI_Type_get_extent(rt, &lb, &extent) == MPI_SUCCESS &&
          make_side(r, int64_t{rcount} * c.size(), rt, &out);
    if (in_place)
      can = make_side(static_cast<char*>(r) + extent * rcount * root, rcount, rt, &in) && can;
  }
  if (!in_place) can = make_side(s, sc, st, &in) && can;
  return exchange(c, in, out, static_cast<size_t>(block), Route::kGather, root, can, rc);
}

bool scatter(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
             int root, int* rc) {
  if (root < 0 || root >= c.size()) return false;
  const bool at_root = c.rank() == root, in_place = at_root && r == MPI_IN_PLACE;
  int64_t block = 0;  // in place, the root's send counts say it
  if (!block_of(in_place ? sc : rcount, in_place ? st : rt, &block) || !gate(c, block * c.size()))
    return false;
  Side in, out;
  bool can = true;
  if (at_root) can = make_side(s, int64_t{sc} * c.size(), st, &in);
  if (!in_place) can = make_side(r, rcount, rt, &out) && can;
  return exchange(c, in, out, static_cast<size_t>(block), Route::kScatter, root, can, rc);
}

long long calls() {
  return g_calls.load(std::memory_order_relaxed);
}

}  // namespace loom::mpi::staged
