#include "mpi/coll_staged.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "coll/node_engine.hpp"
#include "mpi/blocking.hpp"
#include "mpi/coll_schedule.hpp"
#include "mpi/device_message.hpp"
#include "mpi/device_pull.hpp"
#include "mpi/errors.hpp"
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

// Auto mode, per communicator and call name: until an agreement finds
// device memory on some rank, each agreement that finds none skips the
// next calls of that name (the mirrors), 1, 2, 4 ... up to kQuietMost of
// them, so a program of host buffers pays the agreement once in that many
// calls. Once one finds device memory, every call agrees: a program that
// mixes host and device calls of one name keeps the right engine for each.
// Alike on every rank: it follows the agreements' results and the call
// sequence.
constexpr int kQuietMost = 64;
struct Quiet {
  int streak = 0, skip = 0;
  bool device = false;  // some agreement found device memory
};
using QuietMap = std::unordered_map<const char*, Quiet>;  // by c.fn()
int g_quiet_key = MPI_KEYVAL_INVALID;
int free_quiet(MPI_Comm, int, void* attr, void*) {
  delete static_cast<QuietMap*>(attr);
  return MPI_SUCCESS;
}
Quiet* quiet_of(const Call& c) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  if (g_quiet_key == MPI_KEYVAL_INVALID &&
      PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_quiet, &g_quiet_key, nullptr) !=
          MPI_SUCCESS)
    return nullptr;
  void* attr = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(c.comm(), g_quiet_key, &attr, &found) != MPI_SUCCESS) return nullptr;
  if (!found) {
    attr = new QuietMap;
    PMPI_Comm_set_attr(c.comm(), g_quiet_key, attr);
  }
  return &(*static_cast<QuietMap*>(attr))[c.fn()];
}

// Every rank of c agrees: true when every rank can take part (`can`), some
// rank has device memory among its `sides`, and, unless LOOM_COLL_METHOD is
// `staged`, some rank's device data has gaps and some rank's stream holds
// LOOM_COLL_PIPELINE_MIN bytes. Contiguous data gained at most 1.04-1.23x
// over the mirrors on one H100 with ranks counted off the node, and lost up
// to 9 % in some shapes, where the MPI's own exchange is most of the time
// (docs/collectives.md); data with gaps gained 3.6-5.9x: the mirrors copy
// its whole span and the MPI packs it on the host, where here one kernel
// packs it on the device. *most: the largest stream of any rank (the
// chunks are cut from it alike everywhere).
bool agree(const Call& c, bool can, std::initializer_list<const Side*> sides, size_t* most) {
  Quiet* quiet = forced() ? nullptr : quiet_of(c);
  if (quiet && !quiet->device && quiet->skip > 0) {
    --quiet->skip;
    return false;
  }
  // The chunk setting too: every rank must cut the streams alike.
  const int knob = static_cast<int>(std::min<int64_t>(runtime()->coll_pipeline_chunk, INT_MAX));
  int mine[6] = {0, can ? 0 : 1, 0, knob, -knob, 0}, all[6] = {0, 1, 0, 0, 0, 0};
  for (const Side* s : sides) {
    int64_t base = 0;
    mine[0] |= s->device ? 1 : 0;
    mine[2] |= s->device && s->msg.form && !transport::contiguous_at(s->msg, &base) ? 1 : 0;
    mine[5] = std::max(mine[5], static_cast<int>(s->bytes));  // make_side: within int
  }
  blocking_call(
      collectives_poll(), [&] { return PMPI_Allreduce(mine, all, 6, MPI_INT, MPI_MAX, c.comm()); },
      [&](MPI_Request* r) { return PMPI_Iallreduce(mine, all, 6, MPI_INT, MPI_MAX, c.comm(), r); });
  if (quiet && !quiet->device) {
    quiet->device = all[0] != 0;
    quiet->streak = std::min(std::max(quiet->streak * 2, 1), kQuietMost);
    quiet->skip = quiet->device ? 0 : quiet->streak;
  }
  if (all[3] != -all[4]) {
    LOOM_WARN(kMpi, "%s: LOOM_COLL_PIPELINE_CHUNK differs between ranks: not staged", c.fn());
    return false;
  }
  if (all[1])
    LOOM_DEBUG(kMpi, "%s: pipelined staging declined (some rank cannot take part)", c.fn());
  *most = static_cast<size_t>(all[5]);
  return all[0] && !all[1] && (forced() || (all[2] && all[5] >= runtime()->coll_pipeline_min));
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
  size_t most = 0;
  if (!agree(c, can, {&in, &out}, &most)) return false;
  MPI_Comm twin = MPI_COMM_NULL;
  if (!twin_of(c, &twin, rc)) return true;
  const size_t chunk = chunk_bytes(static_cast<size_t>(size), most);
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

// A block of a packed stream: `len` bytes from `at`, to or from `peer`.
struct Piece {
  int peer = 0;
  size_t at = 0, len = 0;
};

// The messages a block travels in: cut every `chunk` bytes from its start.
// Sender and receiver cut alike (MPI's matching signatures give their
// blocks one length), whatever else either stream holds.
void cut(const Piece& b, size_t chunk, std::vector<Piece>* out) {
  for (size_t p = 0; p < b.len; p += chunk)
    out->push_back({b.peer, b.at + p, std::min(chunk, b.len - p)});
}

// Sends `sends` (blocks of in's stream; each peer's in the order it posts
// them) and receives `recvs` (blocks of out's stream; each sender's in its
// order), each as its pieces: every receive is posted first, then each
// piece goes as soon as the chunk holding its end is in host memory, and
// arrived bytes land while later ones travel. MPI's non-overtaking rule
// pairs the pieces (one tag on the twin).
bool exchange(Call& c, Side& in, Side& out, const std::vector<Piece>& sends,
              const std::vector<Piece>& recvs, bool can, int* rc) {
  for (const Piece& b : sends) can = can && b.at + b.len <= in.bytes;
  for (const Piece& b : recvs) can = can && b.at + b.len <= out.bytes;
  size_t most = 0;
  if (!agree(c, can, {&in, &out}, &most)) return false;
  MPI_Comm twin = MPI_COMM_NULL;
  if (!twin_of(c, &twin, rc)) return true;
  const size_t chunk = chunk_bytes(1, most);
  Requests q;
  Status st = recv_stage(out);
  std::vector<Piece> gets, puts;
  for (const Piece& b : recvs) cut(b, chunk, &gets);
  for (const Piece& b : sends) cut(b, chunk, &puts);
  std::vector<std::pair<size_t, size_t>> by_at;  // (at, request index): land()'s order
  for (size_t k = 0; st.is_ok() && k < gets.size(); ++k) {
    const Piece& p = gets[k];
    by_at.emplace_back(p.at, q.size());
    st = mpi_status(q.note(PMPI_Irecv(out.at() + p.at, static_cast<int>(p.len), MPI_BYTE, p.peer,
                                      kPieceTag, twin, q.add())),
                    "posting a piece's receive");
  }
  // By where they end (stable: a peer's pieces keep their order).
  std::stable_sort(puts.begin(), puts.end(),
                   [](const Piece& x, const Piece& y) { return x.at + x.len < y.at + y.len; });
  size_t sent = 0;  // puts[sent..] not yet sent
  if (st.is_ok())
    st = send_chunks(
        in, chunk, twin,
        [&](size_t off, size_t len) {
          for (; sent < puts.size() && puts[sent].at + puts[sent].len <= off + len; ++sent) {
            const Piece& p = puts[sent];
            LOOM_TRY(mpi_status(q.note(PMPI_Isend(in.at() + p.at, static_cast<int>(p.len), MPI_BYTE,
                                                  p.peer, kPieceTag, twin, q.add())),
                                "sending a piece"));
          }
          return Status::ok();
        },
        [&] { q.poke(); });
  if (st.is_ok() && sent != puts.size())
    st = Status(Err::kInternal, "a staged collective's pieces outrun its stream");
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

// `n` blocks of `block` bytes one after the other in a stream, block i
// to or from rank i (but `skip`, -1: none).
std::vector<Piece> even(int n, size_t block, int skip = -1) {
  std::vector<Piece> v;
  for (int i = 0; i < n; ++i)
    if (i != skip) v.push_back({i, block * static_cast<size_t>(i), block});
  return v;
}

// The same `len` bytes from `at` to each rank (but `skip`).
std::vector<Piece> same(int n, size_t at, size_t len, int skip = -1) {
  std::vector<Piece> v;
  for (int i = 0; i < n; ++i)
    if (i != skip) v.push_back({i, at, len});
  return v;
}

// The blocks of a v, w or neighbour form as one stream: a struct type of
// them from the first one's buffer, registered with Loom while the call
// runs (one message alone needs none).
class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (t_ == MPI_DATATYPE_NULL) return;
    runtime()->types.release(t_);
    PMPI_Type_free(&t_);
  }
  // Fills *side with the bytes of msgs one after the other, and (*at)[i]
  // with where msgs[i]'s lie; false when this rank cannot take part.
  bool make(const std::vector<SchedMsg>& msgs, Side* side, std::vector<size_t>* at) {
    at->clear();
    size_t sum = 0;
    for (const SchedMsg& m : msgs) {
      int size = 0;
      if (m.count < 0 || !size_of(m.type, &size)) return false;
      at->push_back(sum);
      sum += static_cast<size_t>(m.count) * static_cast<size_t>(size);
      if (sum > INT_MAX) return false;
    }
    if (msgs.empty()) return true;
    if (msgs.size() == 1) return make_side(msgs[0].buf, msgs[0].count, msgs[0].type, side);
    std::vector<int> counts;
    std::vector<MPI_Aint> displs;
    std::vector<MPI_Datatype> types;
    const auto base = reinterpret_cast<uintptr_t>(msgs[0].buf);
    for (const SchedMsg& m : msgs) {
      counts.push_back(m.count);
      displs.push_back(static_cast<MPI_Aint>(reinterpret_cast<uintptr_t>(m.buf) - base));
      types.push_back(m.type);
    }
    if (PMPI_Type_create_struct(static_cast<int>(msgs.size()), counts.data(), displs.data(),
                                types.data(), &t_) != MPI_SUCCESS) {
      t_ = MPI_DATATYPE_NULL;
      return false;
    }
    if (PMPI_Type_commit(&t_) != MPI_SUCCESS || !runtime()->types.commit(t_)) return false;
    return make_side(msgs[0].buf, 1, t_, side) && side->bytes == sum;
  }

 private:
  MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

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
  size_t most = 0;
  if (root < 0 || root >= c.size() || count <= 0 || !size_of(t, &size) ||
      !gate(c, int64_t{count} * size))
    return false;
  if (!agree(c, make_side(buf, count, t, &s), {&s}, &most)) return false;
  MPI_Comm twin = MPI_COMM_NULL;
  if (!twin_of(c, &twin, rc)) return true;
  const size_t chunk = chunk_bytes(1, most);
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
  const int n = c.size();
  if (rcount <= 0 || !size_of(rt, &size) || !gate(c, int64_t{rcount} * size * n)) return false;
  Side in, out;
  MPI_Aint lb = 0, extent = 0;
  bool can = PMPI_Type_get_extent(rt, &lb, &extent) == MPI_SUCCESS &&
             make_side(r, int64_t{rcount} * n, rt, &out);
  if (s == MPI_IN_PLACE)  // this rank's block already sits in r
    can = make_side(static_cast<char*>(r) + extent * rcount * c.rank(), rcount, rt, &in) && can;
  else
    can = make_side(s, sc, st, &in) && can;
  const size_t block = static_cast<size_t>(rcount) * static_cast<size_t>(size);
  return exchange(c, in, out, same(n, 0, block), even(n, block), can, rc);
}

bool alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
              int* rc) {
  int size = 0;
  const int n = c.size();
  if (rcount <= 0 || !size_of(rt, &size) || !gate(c, int64_t{rcount} * size * n)) return false;
  Side in, out;
  bool can = make_side(r, int64_t{rcount} * n, rt, &out);
  // In place the send stream is packed from the receive buffer before
  // anything lands in it (send_chunks ends before land begins).
  if (s == MPI_IN_PLACE)
    can = make_side(r, int64_t{rcount} * n, rt, &in) && can;
  else
    can = make_side(s, int64_t{sc} * n, st, &in) && can;
  const size_t block = static_cast<size_t>(rcount) * static_cast<size_t>(size);
  return exchange(c, in, out, even(n, block), even(n, block), can, rc);
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
    // In place the root sends its own block to itself: the receive stream
    // lands whole.
    if (in_place)
      can = make_side(static_cast<char*>(r) + extent * rcount * root, rcount, rt, &in) && can;
  }
  if (!in_place) can = make_side(s, sc, st, &in) && can;
  const auto b = static_cast<size_t>(block);
  return exchange(c, in, out, {{root, 0, b}}, at_root ? even(c.size(), b) : std::vector<Piece>{},
                  can, rc);
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
  const auto b = static_cast<size_t>(block);
  std::vector<Piece> sends, recvs;
  if (at_root) sends = even(c.size(), b, in_place ? root : -1);
  if (!in_place) recvs.push_back({root, 0, b});
  return exchange(c, in, out, sends, recvs, can, rc);
}

bool blocks(Call& c, const std::vector<SchedMsg>& sends, const std::vector<SchedMsg>& recvs,
            bool can, int* rc) {
  // Sizes differ by rank: the agreement weighs them (any rank's stream
  // from LOOM_COLL_PIPELINE_MIN).
  if (!gate(c, INT64_MAX)) return false;
  Stream ss, rs;
  Side in, out;
  std::vector<size_t> sat, rat;
  can = ss.make(sends, &in, &sat) && can;
  can = rs.make(recvs, &out, &rat) && can;
  std::vector<Piece> to, from;
  const int n = c.size(), me = c.rank();
  for (size_t i = 0; can && i < sends.size(); ++i) {
    const size_t len = i + 1 < sends.size() ? sat[i + 1] - sat[i] : in.bytes - sat[i];
    const int peer = sends[i].peer;
    if (peer == coll::kEveryRank || peer == coll::kEveryOther) {
      for (const Piece& p : same(n, sat[i], len, peer == coll::kEveryOther ? me : -1))
        to.push_back(p);
    } else {
      to.push_back({peer, sat[i], len});
    }
  }
  for (size_t i = 0; can && i < recvs.size(); ++i)
    from.push_back(
        {recvs[i].peer, rat[i], i + 1 < recvs.size() ? rat[i + 1] - rat[i] : out.bytes - rat[i]});
  return exchange(c, in, out, to, from, can, rc);
}

long long calls() {
  return g_calls.load(std::memory_order_relaxed);
}

}  // namespace loom::mpi::staged
