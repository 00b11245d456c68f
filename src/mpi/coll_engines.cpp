#include "mpi/coll_engines.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "coll/nccl_engine.hpp"
#include "coll/node_engine.hpp"
#include "coll/reduce_map.hpp"
#include "mpi/blocking.hpp"
#include "mpi/coll_nccl_nb.hpp"
#include "mpi/coll_schedule.hpp"
#include "mpi/coll_staged.hpp"
#include "mpi/device_message.hpp"
#include "mpi/device_pull.hpp"
#include "mpi/errors.hpp"
#include "mpi/neighbor_order.hpp"
#include "mpi/runtime.hpp"
#include "util/log.hpp"

namespace loom::mpi::engines {
namespace {

using Mode = Runtime::CollMethod;

Mode mode() {
  return runtime()->coll_method.load(std::memory_order_relaxed);
}

// Whether the node engine is tried for a call in which each rank receives
// `bytes`: only on what every rank of the communicator sees alike (settings,
// the communicator, the message size), so all enter its exchange or none.
bool gate(const Call& c, int64_t bytes, coll::NodeEnv* env) {
  Runtime* rt = runtime();
  if (c.request() || !c.active() || c.inter_comm() || c.size() < 2 || !rt->rv || !rt->rv->lends())
    return false;
  const Mode m = mode();
  if (m == Mode::kMirror || m == Mode::kStaged) return false;
  if (m == Mode::kNccl && bytes < rt->coll_node_min) return false;
  if (!rt->rv->all_on_node(c.comm())) return false;
  if (m == Mode::kAuto && bytes < rt->coll_node_min_for(c.fn(), c.size())) return false;
  env->comm = c.comm();
  env->rank = c.rank();
  env->size = c.size();
  env->mem = rt->rv->memory();
  env->mover = rt->mover(transport::Method::kDevice);
  env->reducer = rt->reducer();
  env->lend_min = rt->coll_lend_min;
  env->world_rank = rt->rv->world_rank();
  env->wait = collective_wait();
  return true;
}

// NCCL, where every rank of the communicator has a GPU of its own
// (coll/nccl_engine.hpp): tried before the other engines, in auto from
// LOOM_COLL_NODE_MIN bytes (`bytes` each rank receives, alike on every
// rank; -1 where sizes differ by rank: the vote weighs them). Checks only
// what every rank sees alike.
bool nccl_pre(const Call& c, int64_t bytes) {
  Runtime* rt = runtime();
  const Mode m = mode();
  if (c.request() || !c.active() || c.inter_comm() || (m != Mode::kNccl && m != Mode::kAuto))
    return false;
  if (m == Mode::kAuto && bytes >= 0 && bytes < rt->coll_node_min) return false;
  return coll::nccl::usable(c.comm(), collective_wait());
}

// How NCCL takes a call, agreed by every rank with one allreduce: every
// rank's buffers one run of device memory each (`contiguous`: the plain
// NCCL call), or every block on the device in a type Loom packs
// (`packable`: packed into scratch, sent, unpacked; in auto only where the
// node engine cannot run, which is faster on a node). `mine`: this rank's
// bytes, for calls whose sizes differ by rank.
enum class NcclWay { kNone, kContiguous, kPacked };
NcclWay nccl_vote(const Call& c, bool contiguous, bool packable, int64_t mine = INT64_MAX) {
  Runtime* rt = runtime();
  const bool host = rt->host_as_device();  // test mode: host memory
  int flags[3] = {contiguous && !host ? 0 : 1, packable && !host ? 0 : 1,
                  mine >= rt->coll_node_min ? 1 : 0},
      all[3] = {1, 1, 0};
  blocking_call(
      collectives_poll(), [&] { return PMPI_Allreduce(flags, all, 3, MPI_INT, MPI_MAX, c.comm()); },
      [&](MPI_Request* r) {
        return PMPI_Iallreduce(flags, all, 3, MPI_INT, MPI_MAX, c.comm(), r);
      });
  const bool forced = mode() == Mode::kNccl;
  if (!forced && !all[2]) return NcclWay::kNone;
  if (!all[0]) return NcclWay::kContiguous;
  const bool node = rt->rv && rt->rv->lends() && rt->rv->all_on_node(c.comm());
  if (!all[1] && (forced || !node)) return NcclWay::kPacked;
  LOOM_DEBUG(kMpi, "%s: NCCL declined (some rank's buffers do not suit it)", c.fn());
  return NcclWay::kNone;
}

bool nccl_gate(const Call& c, int64_t bytes, bool can) {
  return nccl_pre(c, bytes) && nccl_vote(c, can, false) == NcclWay::kContiguous;
}

bool nccl_settle(const Call& c, const Status& s, int* rc) {
  if (s.is_ok()) {
    LOOM_DEBUG(kMpi, "%s: NCCL", c.fn());
    *rc = MPI_SUCCESS;
  } else {
    *rc = raise(c.comm(), s);
  }
  return true;
}

// `count` elements of t at buf lie on the device as one run of bytes, from
// *at; *bytes long. False for host memory, an empty run or a layout with gaps.
bool device_run(const void* buf, int64_t count, MPI_Datatype t, char** at, size_t* bytes) {
  if (!buf || buf == MPI_IN_PLACE || count <= 0 || count > INT32_MAX) return false;
  auto e = runtime()->types.lookup(t);
  transport::Message m;
  int64_t base = 0;
  if (!e || !fill_message(*e.value(), static_cast<int>(count), &m) || m.bytes <= 0 ||
      !transport::contiguous_at(m, &base) || !on_device(buf, static_cast<int>(count), t))
    return false;
  *at = const_cast<char*>(static_cast<const char*>(buf)) + base;
  *bytes = static_cast<size_t>(m.bytes);
  return true;
}

// A device buffer of `count` elements as the engine takes it; no message
// (this rank declines) for host memory, a null buffer or a type Loom does
// not read.
// `keep` holds the type's entry while the part is in use.
coll::Part part(const void* buf, int64_t count, MPI_Datatype t, TypeRegistry::Entry* keep,
                int64_t* extent = nullptr) {
  coll::Part p;
  p.in_place = buf == MPI_IN_PLACE;
  if (p.in_place) return p;
  p.user = const_cast<void*>(buf);
  if (count < 0 || count > INT32_MAX) return p;
  auto e = runtime()->types.lookup(t);
  if (!e) return p;
  *keep = e.value();
  if (extent) *extent = (*keep)->info.extent;
  if (!on_device(buf, static_cast<int>(count), t) && count > 0) return p;
  if (!fill_message(**keep, static_cast<int>(count), &p.msg)) p.msg.form = nullptr;
  return p;
}

int64_t type_size(MPI_Datatype t) {
  int size = 0;
  if (t == MPI_DATATYPE_NULL || PMPI_Type_size(t, &size) != MPI_SUCCESS) return -1;
  return size;
}

// A reduction as the GPU folds it: a predefined op on a predefined type
// (contiguous elements), the input (`in_count` elements; null in place) and
// the output (`out_count`, checked where `out_here`) on the device.
struct Fold {
  coll::ReduceOp op{};
  coll::Basic basic{};
  const void* in = nullptr;
  size_t count = 0;
  bool can = false;
  Fold(MPI_Op o, MPI_Datatype t, int in_count, const void* s, const void* r, int out_count,
       bool out_here) {
    in = s == MPI_IN_PLACE ? nullptr : s;
    can = in_count >= 0 && out_count >= 0 && coll::reduce_of(o, t, &op, &basic) &&
          coll::reduce_defined(op, basic) &&
          (s == MPI_IN_PLACE || (s && on_device(s, in_count, t))) &&
          (!out_here || on_device(r, out_count, t)) && (in || out_here);
    count = can ? static_cast<size_t>(out_count) : 0;
  }
};

// The outcome as the interposed call returns it; false: use the mirrors.
bool settle(const Call& c, coll::Outcome o, int* rc) {
  if (o == coll::Outcome::kDeclined) {
    LOOM_DEBUG(kMpi, "%s: the node engine declined (some rank cannot take part)", c.fn());
    return false;
  }
  LOOM_DEBUG(kMpi, "%s: node-local engine", c.fn());
  *rc = o == coll::Outcome::kDone ? MPI_SUCCESS
                                  : raise(c.comm(), MPI_ERR_OTHER, "node-local collective failed");
  return true;
}

// Whether a nonblocking call runs as a schedule of point-to-point messages
// (coll_schedule.hpp) rather than the MPI's own on host mirrors: on what
// every rank sees alike, as for the node engine (`bytes` each receives).
bool schedule_gate(const Call& c, int64_t bytes) {
  Runtime* rt = runtime();
  if (!c.request() || !c.active() || c.error() != MPI_SUCCESS || c.inter_comm() || c.size() < 2 ||
      !rt->rv || !rt->rv->lends())
    return false;
  const Mode m = mode();
  if (m == Mode::kMirror) return false;
  if (m != Mode::kNode && bytes < rt->coll_schedule_min) return false;
  return rt->rv->all_on_node(c.comm());
}

int start(Call& c, std::shared_ptr<Schedule> s) {
  return start_schedule(c.comm(), std::move(s), c.request());
}

// A copy of [lo, hi), in memory of the same kind (device or host), kept by s.
char* snapshot(Schedule& s, const char* lo, size_t bytes) {
  if (bytes == 0) return const_cast<char*>(lo);
  if (on_device(lo)) {
    transport::Mover* m = runtime()->mover(transport::Method::kDevice);
    auto sc = m ? m->scratch(bytes) : Result<transport::Staged>(Status(Err::kNoMemory, "no mover"));
    if (!sc || !m->copy(sc->dev, lo, bytes).is_ok()) return nullptr;
    char* at = static_cast<char*>(sc->dev);
    s.scratch.push_back(std::move(sc.value()));
    return at;
  }
  s.host_scratch.emplace_back(lo, lo + bytes);
  return s.host_scratch.back().data();
}

// The blocks of a v, w or neighbour all-to-all on this rank, as the
// node engine's exchange takes them.
struct Blocks {
  std::vector<coll::Block> out, in;
  std::vector<TypeRegistry::Entry> keep;  // the types' entries, while in use
  bool can = true;
  int64_t bytes = 0;  // sent and received here
  // How receive block i pairs with a repeated neighbour's sends: by key
  // pairing_key(pairing, i) (neighbor_order.hpp; set by neighbor_lists).
  Pairing pairing = Pairing::kPosting;
  // The same blocks as messages, whatever their memory (a nonblocking
  // call's schedule), with their places in the argument lists: the MPIs'
  // own nonblocking neighbour collectives pair repeated neighbours' blocks
  // in posting order (Open MPI's too, unlike its blocking ones).
  std::vector<std::pair<int, SchedMsg>> sends, recvs;
  bool neighbor = false;  // a neighbour collective
  // The sends read the receive buffer (MPI_IN_PLACE): a schedule sends a copy.
  bool from_recv = false;
  // This rank leaves a blocking call to the MPI (neighbor_lists, bad
  // arguments, types Loom does not know).
  bool declines = false;
  bool nccl_voted = false;  // NCCL was asked (and declined): not again
  // `count` elements of t at byte `at` from buf, to (send) or from `peer`.
  // Blocks of no data move nothing and are left out; MPI_PROC_NULL's too.
  void add(bool send, const void* buf, int peer, int count, int64_t at, MPI_Datatype t, int i) {
    if (peer == MPI_PROC_NULL || count == 0) return;
    if (count < 0 || type_size(t) < 0) declines = true;  // the MPI raises the error
    if (count > 0 && type_size(t) > 0) {
      SchedMsg m{const_cast<char*>(static_cast<const char*>(buf)) + at, count, t, peer};
      (send ? sends : recvs).emplace_back(send ? i : pairing_key(pairing, i), m);
    }
    if (!can) return;
    TypeRegistry::Entry k;
    coll::Block b;
    b.peer = peer;
    b.key = pairing_key(pairing, i);
    b.part = part(buf ? static_cast<const char*>(buf) + at : nullptr, count, t, &k);
    if (!b.part.ok() || b.part.msg.bytes == 0) {
      can = can && b.part.ok();
      return;
    }
    keep.push_back(k);
    bytes += b.part.msg.bytes;
    (send ? out : in).push_back(std::move(b));
  }
  // The v forms: displacements in extents of t.
  void add_v(bool send, const void* buf, const std::vector<int>& peers, const int* counts,
             const int* displs, MPI_Datatype t) {
    auto e = runtime()->types.lookup(t);
    if (!e || (!peers.empty() && (!counts || !displs))) {
      can = false;
      declines = true;
      return;
    }
    const int64_t ext = e.value()->info.extent;
    for (size_t i = 0; i < peers.size(); ++i)
      add(send, buf, peers[i], counts[i], displs[i] * ext, t, static_cast<int>(i));
  }
  template <class D>
  void add_w(bool send, const void* buf, const std::vector<int>& peers, const int* counts,
             const D* displs, const MPI_Datatype* types) {
    if (!peers.empty() && (!counts || !displs || !types)) {
      can = false;
      declines = true;
      return;
    }
    for (size_t i = 0; i < peers.size(); ++i)
      add(send, buf, peers[i], counts[i], static_cast<int64_t>(displs[i]), types[i],
          static_cast<int>(i));
  }
  // The same `count` elements at buf, to (or from) each of `peers`.
  void add_each(bool send, const void* buf, const std::vector<int>& peers, int count,
                MPI_Datatype t) {
    for (size_t i = 0; i < peers.size(); ++i)
      add(send, buf, peers[i], count, 0, t, static_cast<int>(i));
  }
  // One count and type for every block, one after the other.
  void add_even(bool send, const void* buf, const std::vector<int>& peers, int count,
                MPI_Datatype t) {
    auto e = runtime()->types.lookup(t);
    if (!e) {
      can = false;
      declines = true;
      return;
    }
    const int64_t ext = e.value()->info.extent;
    for (size_t i = 0; i < peers.size(); ++i)
      add(send, buf, peers[i], count, static_cast<int64_t>(i) * count * ext, t,
          static_cast<int>(i));
  }
};

// b's receives by sender, then key: the order in which each sender's
// blocks arrive.
std::vector<SchedMsg> arrival_order(Blocks& b) {
  std::stable_sort(b.recvs.begin(), b.recvs.end(), [](const auto& x, const auto& y) {
    return x.second.peer != y.second.peer ? x.second.peer < y.second.peer : x.first < y.first;
  });
  std::vector<SchedMsg> v;
  for (auto& [key, m] : b.recvs) v.push_back(m);
  return v;
}

// A blocking call's blocks through NCCL, where every rank has a GPU of its
// own (`bytes`: as nccl_pre): contiguous blocks go from and into the
// user's buffers as they lie, the others (and in place every send) are
// packed into device scratch first and unpacked after. In auto, on a node
// where the node engine runs, only with `on_node_too`. False: the other
// engines (every rank alike).
bool nccl_blocks(Call& c, Blocks& b, int64_t bytes, int* rc, bool on_node_too = false) {
  if (b.nccl_voted || b.pairing == Pairing::kUnknown) return false;
  b.nccl_voted = bytes >= 0;  // a known size that fails the gate is not asked again
  if (!nccl_pre(c, bytes)) return false;
  b.nccl_voted = true;
  // In auto, on a node where the node engine runs, only Alltoall (NCCL's
  // since before): the rest stays with the node engine there, with no
  // second vote.
  Runtime* rt = runtime();
  if (!on_node_too && mode() == Mode::kAuto && rt->rv && rt->rv->lends() &&
      rt->rv->all_on_node(c.comm()))
    return false;
  transport::Mover* mv = runtime()->mover(transport::Method::kDevice);
  std::vector<coll::Block> in(b.in.begin(), b.in.end());
  std::stable_sort(in.begin(), in.end(), [](const coll::Block& x, const coll::Block& y) {
    return x.peer != y.peer ? x.peer < y.peer : x.key < y.key;
  });
  // Where each block's bytes lie on the device: as it lies, or at an
  // offset of the scratch (from `scratch`, assigned below).
  auto direct = [](const coll::Block& k, char** at) {
    int64_t base = 0;
    if (!transport::contiguous_at(k.part.msg, &base)) return false;
    *at = static_cast<char*>(k.part.user) + base;
    return true;
  };
  bool contiguous = !b.from_recv;
  size_t scratch = 0;
  std::vector<char*> out_at(b.out.size()), in_at(in.size());
  std::vector<size_t> out_off(b.out.size(), SIZE_MAX), in_off(in.size(), SIZE_MAX);
  for (size_t i = 0; i < b.out.size(); ++i)
    if (b.from_recv || !direct(b.out[i], &out_at[i])) {  // in place: the receives overwrite it
      out_off[i] = scratch;
      scratch += static_cast<size_t>(b.out[i].part.msg.bytes);
      contiguous = false;
    }
  for (size_t i = 0; i < in.size(); ++i)
    if (!direct(in[i], &in_at[i])) {
      in_off[i] = scratch;
      scratch += static_cast<size_t>(in[i].part.msg.bytes);
      contiguous = false;
    }
  transport::Staged sc;
  bool packable = b.can && !b.declines && mv;
  if (packable && scratch > 0) {  // before the vote: a rank without it declines
    auto s = mv->scratch(scratch);
    packable = s.is_ok();
    if (packable) sc = std::move(s.value());
  }
  const NcclWay way = nccl_vote(c, contiguous && packable, packable, b.bytes);
  if (way == NcclWay::kNone) return false;
  char* base = static_cast<char*>(sc.dev);
  for (size_t i = 0; i < out_at.size(); ++i)
    if (out_off[i] != SIZE_MAX) out_at[i] = base + out_off[i];
  for (size_t i = 0; i < in_at.size(); ++i)
    if (in_off[i] != SIZE_MAX) in_at[i] = base + in_off[i];
  // Every rank now runs the exchange: a failed pack still sends (its
  // peers would wait otherwise) and raises after.
  Status st;
  std::vector<std::shared_ptr<void>> keep;
  for (size_t i = 0; i < b.out.size() && st.is_ok(); ++i)
    if (out_off[i] != SIZE_MAX)
      st = mv->pack_async(b.out[i].part.msg, b.out[i].part.user, out_at[i], keep);
  if (scratch > 0) {
    Status w = mv->wait_copies();
    if (st.is_ok()) st = w;
  }
  std::vector<coll::nccl::Xfer> sends, recvs;
  const int n = c.size(), me = c.rank();
  for (size_t i = 0; i < b.out.size(); ++i) {
    const int peer = b.out[i].peer;
    const auto len = static_cast<size_t>(b.out[i].part.msg.bytes);
    if (peer == coll::kEveryRank || peer == coll::kEveryOther) {
      for (int p = 0; p < n; ++p)
        if (p != me || peer == coll::kEveryRank) sends.push_back({p, out_at[i], len});
    } else {
      sends.push_back({peer, out_at[i], len});
    }
  }
  for (size_t i = 0; i < in.size(); ++i)
    recvs.push_back({in[i].peer, in_at[i], static_cast<size_t>(in[i].part.msg.bytes)});
  Status x = coll::nccl::exchange(c.comm(), sends, recvs);
  if (st.is_ok()) st = x;
  if (st.is_ok() && scratch > 0) {
    std::vector<transport::Mover::UnpackItem> items;
    for (size_t i = 0; i < in.size(); ++i)
      if (in_off[i] != SIZE_MAX)
        items.push_back({&in[i].part.msg, in_at[i], static_cast<size_t>(in[i].part.msg.bytes),
                         in[i].part.user, nullptr});
    std::vector<Status> each;
    mv->unpack_many_async(items, keep, each);
    Status w = mv->wait_copies();
    for (const Status& e : each)
      if (st.is_ok()) st = e;
    if (st.is_ok()) st = w;
  }
  return nccl_settle(c, st, rc);
}

// A nonblocking call's blocks as a schedule (the caller passed schedule_gate).
bool schedule_blocks(Call& c, Blocks& b, int* rc) {
  auto s = std::make_shared<Schedule>();
  const int n = c.size(), me = c.rank();
  for (auto& [key, m] : b.sends) {  // a block for every rank (or every other) goes to each
    if (m.peer == coll::kEveryRank || m.peer == coll::kEveryOther) {
      for (int p = 0; p < n; ++p)
        if (p != me || m.peer == coll::kEveryRank) s->sends.push_back({m.buf, m.count, m.type, p});
    } else {
      s->sends.push_back(m);
    }
  }
  if (b.from_recv && !s->sends.empty()) {  // the receives would overwrite what goes out
    const char *lo = nullptr, *hi = nullptr;
    for (const SchedMsg& m : s->sends) {
      int64_t from = 0, to = 0;
      if (!data_span(m.count, m.type, &from, &to)) return false;
      const char *l = static_cast<char*>(m.buf) + from, *h = static_cast<char*>(m.buf) + to;
      lo = lo ? std::min(lo, l) : l;
      hi = hi ? std::max(hi, h) : h;
    }
    char* copy = snapshot(*s, lo, static_cast<size_t>(hi - lo));
    if (!copy) {
      *rc = raise(c.comm(), MPI_ERR_NO_MEM, "no memory for an in-place collective's copy");
      return true;
    }
    for (SchedMsg& m : s->sends) m.buf = copy + (static_cast<char*>(m.buf) - lo);
  }
  s->recvs = arrival_order(b);
  *rc = start(c, std::move(s));
  return true;
}

// A nonblocking reduction as a schedule: each rank sends slices of its
// input to the ranks that fold them, receives the slices it folds, and
// folds them in rank order, so every rank gets the bits the blocking
// engines give.
struct FoldPlan {
  const void* in = nullptr;  // this rank's input (in place: the receive buffer)
  void* out = nullptr;       // the result (null: none here)
  size_t count = 0;          // elements folded into out
  size_t mine = 0;           // this rank's own slice: elements from here in its input
  struct Slice {
    int peer;
    size_t at, count;  // elements of the input
  };
  std::vector<Slice> to;   // what this rank sends
  std::vector<int> order;  // the ranks folded into out, ascending
};

bool schedule_fold(Call& c, MPI_Datatype t, MPI_Op op, int64_t bytes, const FoldPlan& f, int* rc) {
  coll::ReduceOp rop{};
  coll::Basic basic{};
  if (!schedule_gate(c, bytes) || !coll::reduce_of(op, t, &rop, &basic) ||
      !coll::reduce_defined(rop, basic) ||
      type_size(t) != static_cast<int64_t>(coll::basic_size(basic)))
    return false;  // user-defined ops and the rest: the MPI's own, on mirrors
  const size_t es = coll::basic_size(basic);
  auto s = std::make_shared<Schedule>();
  char* input = const_cast<char*>(static_cast<const char*>(f.in));
  for (const auto& sl : f.to)
    if (sl.count > 0)
      s->sends.push_back({input + sl.at * es, static_cast<int>(sl.count), t, sl.peer});
  if (f.out && f.count > 0 && !f.order.empty()) {
    Runtime* rt = runtime();
    transport::Mover* mv = rt->mover(transport::Method::kDevice);
    const bool out_dev = on_device(f.out, static_cast<int>(f.count), t);
    coll::Reducer* red = out_dev ? rt->reducer() : nullptr;  // else folded on the host
    const size_t slot = f.count * es, k = f.order.size();
    char* slots = nullptr;  // one per folded rank, this one's too
    if (red) {
      auto sc = mv ? mv->scratch(k * slot) : Result<transport::Staged>(Status(Err::kNoMemory, ""));
      if (!sc) {
        *rc = raise(c.comm(), MPI_ERR_NO_MEM, "no device scratch for a nonblocking reduction");
        return true;
      }
      slots = static_cast<char*>(sc->dev);
      s->scratch.push_back(std::move(sc.value()));
    } else {
      s->host_scratch.emplace_back(k * slot + (out_dev ? slot : 0));
      slots = s->host_scratch.back().data();
    }
    const int me = c.rank();
    for (size_t i = 0; i < k; ++i)
      if (f.order[i] != me)
        s->recvs.push_back({slots + i * slot, static_cast<int>(f.count), t, f.order[i]});
    const char* own = input + f.mine * es;
    const bool own_dev = on_device(own);
    const auto mine_at = std::find(f.order.begin(), f.order.end(), me) - f.order.begin();
    const bool folds_own = static_cast<size_t>(mine_at) < k;
    void* out = f.out;
    const size_t count = f.count;
    s->finish = [=, comm = c.comm()]() {
      // This rank's slice goes to its slot: in place, the fold overwrites it.
      char* own_slot = slots + static_cast<size_t>(mine_at) * slot;
      Status st;
      if (folds_own) {
        if (own_dev || red)
          st = mv ? mv->copy(own_slot, own, slot) : Status(Err::kInternal, "no mover");
        else
          std::memcpy(own_slot, own, slot);
      }
      std::vector<const void*> in(k);
      for (size_t i = 0; i < k; ++i) in[i] = slots + i * slot;
      if (st.is_ok() && red) {
        st = red->reduce(rop, basic, in.data(), static_cast<int>(k), out, count);
      } else if (st.is_ok()) {
        char* to = out_dev ? slots + k * slot : static_cast<char*>(out);
        st = coll::host_reduce(rop, basic, in.data(), static_cast<int>(k), to, count);
        if (st.is_ok() && out_dev) st = mv->copy(out, to, slot);
      }
      return st.is_ok() ? MPI_SUCCESS : raise(comm, st);
    };
  }
  *rc = start(c, std::move(s));
  return true;
}

// The node engine for the v, w and neighbour all-to-alls. Their sizes
// differ between ranks, so every rank enters the exchange whatever its own
// (its alltoall is the agreement), and in auto mode a rank whose blocks
// hold fewer than LOOM_COLL_NODE_MIN bytes declines there.
bool run_blocks(Call& c, Blocks& b, int* rc) {
  // A pairing the MPI was not seen to follow leaves the call to it, on
  // every rank alike (each asked the same MPI).
  if (b.pairing == Pairing::kUnknown) return false;
  if (c.request()) {
#if !(defined(OPEN_MPI) && OPEN_MPI)
    // ... which a schedule cannot decline alone (neighbor_lists): under
    // MPICH the neighbour collectives' request forms stay the MPI's own.
    if (b.neighbor) return false;
#endif
    return schedule_gate(c, INT64_MAX) && schedule_blocks(c, b, rc);  // sizes differ by rank
  }
  if (nccl_blocks(c, b, -1, rc)) return true;
  if (staged::gate(c, INT64_MAX)) {  // off the node, or no CUDA IPC
    std::vector<SchedMsg> sends;
    for (auto& [key, m] : b.sends) sends.push_back(m);
    if (staged::blocks(c, sends, arrival_order(b), !b.declines, rc)) return true;
  }
  coll::NodeEnv env;
  if (!gate(c, INT64_MAX, &env)) return false;
  if (mode() == Mode::kAuto && b.bytes < runtime()->coll_node_min_for(c.fn(), c.size()))
    b.can = false;
  return settle(c, coll::exchange(env, b.out, b.in, b.can && !b.declines), rc);
}

std::vector<int> every_rank(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// The ranks a topology communicator's neighbour collectives receive from
// and send to, in MPI's order (MPI_PROC_NULL at the edges of a
// non-periodic grid), and how the MPI's own `call` in this form pairs a
// repeated neighbour's blocks (no call: the allgathers, whose blocks to a
// neighbour are all alike); false without a topology (every rank alike).
bool topology_lists(const Call& c, std::optional<NeighborCall> call, std::vector<int>* sources,
                    std::vector<int>* dests, Pairing* pairing) {
  const MPI_Comm comm = c.comm();
  int topo = MPI_UNDEFINED;
  if (PMPI_Topo_test(comm, &topo) != MPI_SUCCESS) return false;
  const CallForm form = !c.request()          ? CallForm::kBlocking
                        : c.persistent_form() ? CallForm::kPersistent
                                              : CallForm::kNonblocking;
  *pairing = call ? neighbor_pairing(topo, *call, form) : Pairing::kPosting;
  if (topo == MPI_CART) {
    int nd = 0;
    if (PMPI_Cartdim_get(comm, &nd) != MPI_SUCCESS) return false;
    for (int d = 0; d < nd; ++d) {
      int lo = MPI_PROC_NULL, hi = MPI_PROC_NULL;
      if (PMPI_Cart_shift(comm, d, 1, &lo, &hi) != MPI_SUCCESS) return false;
      sources->push_back(lo);
      sources->push_back(hi);
    }
    *dests = *sources;
    return true;
  }
  if (topo == MPI_GRAPH) {
    int rank = 0, n = 0;
    PMPI_Comm_rank(comm, &rank);
    if (PMPI_Graph_neighbors_count(comm, rank, &n) != MPI_SUCCESS) return false;
    sources->resize(static_cast<size_t>(n));
    if (n > 0 && PMPI_Graph_neighbors(comm, rank, n, sources->data()) != MPI_SUCCESS) return false;
    *dests = *sources;
    return true;
  }
  if (topo == MPI_DIST_GRAPH) {
    int in = 0, out = 0, weighted = 0;
    if (PMPI_Dist_graph_neighbors_count(comm, &in, &out, &weighted) != MPI_SUCCESS) return false;
    sources->resize(static_cast<size_t>(in));
    dests->resize(static_cast<size_t>(out));
    std::vector<int> sw(static_cast<size_t>(in) + 1), dw(static_cast<size_t>(out) + 1);
    return PMPI_Dist_graph_neighbors(comm, in, sources->data(),
                                     weighted ? sw.data() : MPI_UNWEIGHTED, out, dests->data(),
                                     weighted ? dw.data() : MPI_UNWEIGHTED) == MPI_SUCCESS;
  }
  return false;
}

// topology_lists, and where this rank cannot take part in Loom's exchanges,
// *declines turns true (every rank then leaves the call to the MPI).
bool neighbor_lists(const Call& c, std::optional<NeighborCall> call, std::vector<int>* sources,
                    std::vector<int>* dests, Pairing* pairing, bool* declines) {
  if (!topology_lists(c, call, sources, dests, pairing)) return false;
#if !(defined(OPEN_MPI) && OPEN_MPI)
  // MPICH 4.0's Neighbor_alltoallw put other bytes than Loom's engines
  // where a rank is its own neighbour on a distributed graph, with mixed
  // block types (seen 2026-11-27, not understood): such a rank declines.
  for (const auto* list : {sources, dests})
    for (int p : *list) *declines = *declines || p == c.rank();
#else
  (void)declines;
#endif
  return true;
}

}  // namespace

bool alltoallv(Call& c, const void* s, const int* scs, const int* sd, MPI_Datatype st, void* r,
               const int* rcs, const int* rd, MPI_Datatype rt, int* rc) {
  Blocks b;
  const std::vector<int> all = every_rank(c.size());
  b.from_recv = s == MPI_IN_PLACE;
  if (b.from_recv)
    b.add_v(true, r, all, rcs, rd, rt);  // the data goes out from the receive buffer
  else
    b.add_v(true, s, all, scs, sd, st);
  b.add_v(false, r, all, rcs, rd, rt);
  return run_blocks(c, b, rc);
}

bool alltoallw(Call& c, const void* s, const int* scs, const int* sd, const MPI_Datatype* sts,
               void* r, const int* rcs, const int* rd, const MPI_Datatype* rts, int* rc) {
  Blocks b;
  const std::vector<int> all = every_rank(c.size());
  b.from_recv = s == MPI_IN_PLACE;
  if (b.from_recv)
    b.add_w(true, r, all, rcs, rd, rts);
  else
    b.add_w(true, s, all, scs, sd, sts);
  b.add_w(false, r, all, rcs, rd, rts);
  return run_blocks(c, b, rc);
}

namespace {

// Every rank, with MPI_PROC_NULL (no block) in place of `skip` (-1: none).
std::vector<int> ranks_but(int n, int skip) {
  std::vector<int> v = every_rank(n);
  if (skip >= 0) v[static_cast<size_t>(skip)] = MPI_PROC_NULL;
  return v;
}

}  // namespace

bool gather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
            int root, int* rc) {
  if (root < 0 || root >= c.size()) return false;  // the MPI raises MPI_ERR_ROOT
  Blocks b;
  const bool at_root = c.rank() == root, inpl = at_root && s == MPI_IN_PLACE;
  if (!inpl) b.add(true, s, root, sc, 0, st, 0);
  if (at_root) b.add_even(false, r, ranks_but(c.size(), inpl ? root : -1), rcount, rt);
  // The root's receive counts are the size every rank's send must match.
  int64_t each = int64_t{sc} * type_size(st);
  if (inpl) each = int64_t{rcount} * type_size(rt);
  if (nccl_blocks(c, b, each * c.size(), rc)) return true;
  if (staged::gather(c, s, sc, st, r, rcount, rt, root, rc)) return true;
  return run_blocks(c, b, rc);
}

bool gatherv(Call& c, const void* s, int sc, MPI_Datatype st, void* r, const int* rcs,
             const int* displs, MPI_Datatype rt, int root, int* rc) {
  if (root < 0 || root >= c.size()) return false;
  Blocks b;
  const bool at_root = c.rank() == root, inpl = at_root && s == MPI_IN_PLACE;
  if (!inpl) b.add(true, s, root, sc, 0, st, 0);
  if (at_root) b.add_v(false, r, ranks_but(c.size(), inpl ? root : -1), rcs, displs, rt);
  return run_blocks(c, b, rc);
}

bool scatter(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
             int root, int* rc) {
  if (root < 0 || root >= c.size()) return false;
  Blocks b;
  const bool at_root = c.rank() == root, inpl = at_root && r == MPI_IN_PLACE;
  if (at_root) b.add_even(true, s, ranks_but(c.size(), inpl ? root : -1), sc, st);
  if (!inpl) b.add(false, r, root, rcount, 0, rt, 0);
  int64_t each = int64_t{rcount} * type_size(rt);
  if (inpl) each = int64_t{sc} * type_size(st);
  if (nccl_blocks(c, b, each * c.size(), rc)) return true;
  if (staged::scatter(c, s, sc, st, r, rcount, rt, root, rc)) return true;
  return run_blocks(c, b, rc);
}

bool scatterv(Call& c, const void* s, const int* scs, const int* displs, MPI_Datatype st, void* r,
              int rcount, MPI_Datatype rt, int root, int* rc) {
  if (root < 0 || root >= c.size()) return false;
  Blocks b;
  const bool at_root = c.rank() == root, inpl = at_root && r == MPI_IN_PLACE;
  if (at_root) b.add_v(true, s, ranks_but(c.size(), inpl ? root : -1), scs, displs, st);
  if (!inpl) b.add(false, r, root, rcount, 0, rt, 0);
  return run_blocks(c, b, rc);
}

bool allgatherv(Call& c, const void* s, int sc, MPI_Datatype st, void* r, const int* rcs,
                const int* displs, MPI_Datatype rt, int* rc) {
  Blocks b;
  const bool inpl = s == MPI_IN_PLACE;
  const int me = c.rank();
  if (!inpl) {
    b.add(true, s, coll::kEveryRank, sc, 0, st, 0);
  } else if (rcs && displs) {  // this rank's block of the receive buffer, to every other
    auto e = runtime()->types.lookup(rt);
    if (e) b.add(true, r, coll::kEveryOther, rcs[me], displs[me] * e.value()->info.extent, rt, 0);
    b.can = b.can && e;
    b.declines = b.declines || !e;
  }
  b.add_v(false, r, ranks_but(c.size(), inpl ? me : -1), rcs, displs, rt);
  return run_blocks(c, b, rc);
}

bool neighbor_allgather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
                        MPI_Datatype rt, int* rc) {
  Blocks b;
  b.neighbor = true;
  std::vector<int> src, dst;
  if (!c.active() || !neighbor_lists(c, std::nullopt, &src, &dst, &b.pairing, &b.declines))
    return false;
  b.add_each(true, s, dst, sc, st);
  b.add_even(false, r, src, rcount, rt);
  return run_blocks(c, b, rc);
}

bool neighbor_allgatherv(Call& c, const void* s, int sc, MPI_Datatype st, void* r, const int* rcs,
                         const int* displs, MPI_Datatype rt, int* rc) {
  Blocks b;
  b.neighbor = true;
  std::vector<int> src, dst;
  if (!c.active() || !neighbor_lists(c, std::nullopt, &src, &dst, &b.pairing, &b.declines))
    return false;
  b.add_each(true, s, dst, sc, st);
  b.add_v(false, r, src, rcs, displs, rt);
  return run_blocks(c, b, rc);
}

bool neighbor_alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
                       MPI_Datatype rt, int* rc) {
  Blocks b;
  b.neighbor = true;
  std::vector<int> src, dst;
  if (!c.active() ||
      !neighbor_lists(c, NeighborCall::kAlltoall, &src, &dst, &b.pairing, &b.declines))
    return false;
  b.add_even(true, s, dst, sc, st);
  b.add_even(false, r, src, rcount, rt);
  return run_blocks(c, b, rc);
}

bool neighbor_alltoallv(Call& c, const void* s, const int* scs, const int* sd, MPI_Datatype st,
                        void* r, const int* rcs, const int* rd, MPI_Datatype rt, int* rc) {
  Blocks b;
  b.neighbor = true;
  std::vector<int> src, dst;
  if (!c.active() ||
      !neighbor_lists(c, NeighborCall::kAlltoallv, &src, &dst, &b.pairing, &b.declines))
    return false;
  b.add_v(true, s, dst, scs, sd, st);
  b.add_v(false, r, src, rcs, rd, rt);
  return run_blocks(c, b, rc);
}

bool neighbor_alltoallw(Call& c, const void* s, const int* scs, const MPI_Aint* sd,
                        const MPI_Datatype* sts, void* r, const int* rcs, const MPI_Aint* rd,
                        const MPI_Datatype* rts, int* rc) {
  Blocks b;
  b.neighbor = true;
  std::vector<int> src, dst;
  if (!c.active() ||
      !neighbor_lists(c, NeighborCall::kAlltoallw, &src, &dst, &b.pairing, &b.declines))
    return false;
  b.add_w(true, s, dst, scs, sd, sts);
  b.add_w(false, r, src, rcs, rd, rts);
  return run_blocks(c, b, rc);
}

bool bcast(Call& c, void* buf, int count, MPI_Datatype t, int root, int* rc) {
  coll::NodeEnv env;
  if (root < 0 || root >= c.size()) return false;  // the MPI raises MPI_ERR_ROOT
  if (c.request()) {                               // the root sends to each rank
    if (nccl_nb::bcast(c, buf, count, t, root, rc)) return true;
    if (!schedule_gate(c, int64_t{count} * type_size(t))) return false;
    Blocks b;
    if (c.rank() == root)
      b.add(true, buf, coll::kEveryOther, count, 0, t, 0);
    else
      b.add(false, buf, root, count, 0, t, 0);
    return schedule_blocks(c, b, rc);
  }
  char* at = nullptr;
  size_t n = 0;
  if (nccl_gate(c, int64_t{count} * type_size(t), device_run(buf, count, t, &at, &n)))
    return nccl_settle(c, coll::nccl::bcast(c.comm(), at, n, root), rc);
  if (staged::bcast(c, buf, count, t, root, rc)) return true;
  if (!gate(c, int64_t{count} * type_size(t), &env)) return false;
  TypeRegistry::Entry keep;
  return settle(c, coll::bcast(env, part(buf, count, t, &keep), root), rc);
}

// The ranks first..last-1 (as FoldPlan::order).
std::vector<int> ranks_from(int first, int last) {
  std::vector<int> v;
  for (int p = first; p < last; ++p) v.push_back(p);
  return v;
}

// FoldPlan::to: the same `count` elements from `at` to each rank of [first, last) but `skip`.
std::vector<FoldPlan::Slice> slices_to(int first, int last, int skip, size_t at, size_t count) {
  std::vector<FoldPlan::Slice> v;
  for (int p = first; p < last; ++p)
    if (p != skip) v.push_back({p, at, count});
  return v;
}

// The input of a reduction: in place, the receive buffer.
const void* input_of(const void* s, const void* r) {
  return s == MPI_IN_PLACE ? r : s;
}

bool allreduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int* rc) {
  coll::NodeEnv env;
  if (c.request()) {  // every rank folds every input
    if (nccl_nb::reduction(c, s, r, count, t, op, -1, rc)) return true;
    if (count < 0) return false;
    FoldPlan f;
    f.in = input_of(s, r);
    f.out = r;
    f.count = static_cast<size_t>(count);
    f.to = slices_to(0, c.size(), c.rank(), 0, f.count);
    f.order = ranks_from(0, c.size());
    return schedule_fold(c, t, op, int64_t{count} * type_size(t), f, rc);
  }
  {
    char *in = nullptr, *out = nullptr;
    size_t n = 0;
    bool can = coll::nccl::reducible(t, op) && device_run(r, count, t, &out, &n);
    if (can && s == MPI_IN_PLACE)
      in = out;
    else
      can = can && device_run(s, count, t, &in, &n);
    if (nccl_gate(c, int64_t{count} * type_size(t), can))
      return nccl_settle(c, coll::nccl::allreduce(c.comm(), in, out, count, t, op), rc);
  }
  if (staged::allreduce(c, s, r, count, t, op, rc)) return true;
  if (!gate(c, int64_t{count} * type_size(t), &env)) return false;
  Fold f(op, t, count, s, r, count, true);
  const bool split = coll::split_allreduce(count, int64_t{count} * type_size(t), c.size());
  return settle(c, coll::allreduce(env, f.in, r, f.count, f.op, f.basic, f.can, split), rc);
}

bool reduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root,
            int* rc) {
  coll::NodeEnv env;
  if (root < 0 || root >= c.size()) return false;
  if (c.request()) {  // the root folds every input
    if (nccl_nb::reduction(c, s, r, count, t, op, root, rc)) return true;
    if (count < 0) return false;
    FoldPlan f;
    f.in = c.rank() == root ? input_of(s, r) : s;
    f.count = static_cast<size_t>(count);
    if (c.rank() == root) {
      f.out = r;
      f.order = ranks_from(0, c.size());
    } else {
      f.to = {{root, 0, f.count}};
    }
    return schedule_fold(c, t, op, int64_t{count} * type_size(t), f, rc);
  }
  {
    const bool at_root = c.rank() == root;
    char *in = nullptr, *out = nullptr;
    size_t n = 0;
    bool can = coll::nccl::reducible(t, op) && (!at_root || device_run(r, count, t, &out, &n));
    if (can && at_root && s == MPI_IN_PLACE)
      in = out;
    else
      can = can && device_run(s, count, t, &in, &n);
    if (nccl_gate(c, int64_t{count} * type_size(t), can))
      return nccl_settle(c, coll::nccl::reduce(c.comm(), in, out, count, t, op, root), rc);
  }
  if (staged::reduce(c, s, r, count, t, op, root, rc)) return true;
  if (!gate(c, int64_t{count} * type_size(t), &env)) return false;
  Fold f(op, t, count, s, r, count, c.rank() == root);
  return settle(c, coll::reduce(env, f.in, r, f.count, f.op, f.basic, f.can, root), rc);
}

bool reduce_scatter_block(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op,
                          int* rc) {
  coll::NodeEnv env;
  if (c.request()) {  // rank p folds every rank's p-th block
    if (count < 0) return false;
    FoldPlan f;
    const auto n = static_cast<size_t>(count);
    f.in = input_of(s, r);
    f.out = r;
    f.count = n;
    f.mine = n * static_cast<size_t>(c.rank());
    for (int p = 0; p < c.size(); ++p)
      if (p != c.rank()) f.to.push_back({p, n * static_cast<size_t>(p), n});
    f.order = ranks_from(0, c.size());
    return schedule_fold(c, t, op, int64_t{count} * type_size(t), f, rc);
  }
  {
    // MPI's in-place form keeps the result at the start of the buffer,
    // NCCL's at this rank's block: in place stays with the other engines.
    char *in = nullptr, *out = nullptr;
    size_t n = 0;
    const bool can = s != MPI_IN_PLACE && coll::nccl::reducible(t, op) &&
                     device_run(r, count, t, &out, &n) &&
                     device_run(s, int64_t{count} * c.size(), t, &in, &n);
    if (nccl_gate(c, int64_t{count} * type_size(t), can))
      return nccl_settle(c, coll::nccl::reduce_scatter_block(c.comm(), in, out, count, t, op), rc);
  }
  if (!gate(c, int64_t{count} * type_size(t), &env)) return false;
  // In place, the input is the whole receive buffer, and the result its first block.
  Fold f(op, t, count * c.size(), s, r, s == MPI_IN_PLACE ? count * c.size() : count, true);
  return settle(c,
                coll::reduce_scatter_block(env, f.in, r, f.can ? static_cast<size_t>(count) : 0,
                                           f.op, f.basic, f.can),
                rc);
}

bool reduce_scatter(Call& c, const void* s, void* r, const int* rcs, MPI_Datatype t, MPI_Op op,
                    int* rc) {
  coll::NodeEnv env;
  if (!rcs) return false;  // the MPI's own check
  std::vector<size_t> counts(static_cast<size_t>(c.size()));
  int64_t all = 0;
  for (int p = 0; p < c.size(); ++p) {
    if (rcs[p] < 0) return false;  // the MPI's own check
    counts[static_cast<size_t>(p)] = static_cast<size_t>(rcs[p]);
    all += rcs[p];
  }
  // Every rank sees the same counts: the gate's size is the mean block.
  if (c.request()) {  // rank p folds every rank's counts[p] elements from sum(counts[0..p-1])
    if (all > INT32_MAX) return false;
    FoldPlan f;
    f.in = input_of(s, r);
    f.out = r;
    f.count = counts[static_cast<size_t>(c.rank())];
    size_t at = 0;
    for (int p = 0; p < c.size(); ++p) {
      if (p == c.rank())
        f.mine = at;
      else
        f.to.push_back({p, at, counts[static_cast<size_t>(p)]});
      at += counts[static_cast<size_t>(p)];
    }
    f.order = ranks_from(0, c.size());
    return schedule_fold(c, t, op, all * type_size(t) / c.size(), f, rc);
  }
  if (all > INT32_MAX || !gate(c, all * type_size(t) / c.size(), &env)) return false;
  const int mine = rcs[c.rank()];
  // In place, the input is the whole receive buffer, and the result its start.
  Fold f(op, t, static_cast<int>(all), s, r, s == MPI_IN_PLACE ? static_cast<int>(all) : mine,
         true);
  return settle(c, coll::reduce_scatter(env, f.in, r, counts, f.op, f.basic, f.can), rc);
}

bool scan(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, bool exclusive,
          int* rc) {
  coll::NodeEnv env;
  if (c.request()) {  // rank r folds ranks 0..r (Exscan: 0..r-1)
    if (count < 0) return false;
    FoldPlan f;
    f.in = input_of(s, r);
    f.count = static_cast<size_t>(count);
    f.to = slices_to(c.rank() + 1, c.size(), -1, 0, f.count);
    f.order = ranks_from(0, exclusive ? c.rank() : c.rank() + 1);
    if (!f.order.empty()) f.out = r;
    return schedule_fold(c, t, op, int64_t{count} * type_size(t), f, rc);
  }
  if (!gate(c, int64_t{count} * type_size(t), &env)) return false;
  // Exscan leaves rank 0's output undefined (it may be any buffer), unless
  // it holds the input (in place).
  const bool out_here = !exclusive || c.rank() != 0 || s == MPI_IN_PLACE;
  Fold f(op, t, count, s, r, count, out_here);
  return settle(c, coll::scan(env, f.in, r, f.count, f.op, f.basic, f.can, exclusive), rc);
}

bool allgather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
               MPI_Datatype rt, int* rc) {
  coll::NodeEnv env;
  {
    char *in = nullptr, *out = nullptr;
    size_t all = 0, each = 0;
    bool can = device_run(r, int64_t{rcount} * c.size(), rt, &out, &all);
    each = all / static_cast<size_t>(c.size());
    if (can && s == MPI_IN_PLACE) {
      in = out + each * static_cast<size_t>(c.rank());
    } else {
      size_t n = 0;
      can = can && device_run(s, sc, st, &in, &n) && n == each;
    }
    if (nccl_gate(c, int64_t{rcount} * type_size(rt) * c.size(), can))
      return nccl_settle(c, coll::nccl::allgather(c.comm(), in, out, each), rc);
  }
  if (staged::allgather(c, s, sc, st, r, rcount, rt, rc)) return true;
  if (c.request()) {
    if (nccl_nb::allgather(c, s, sc, st, r, rcount, rt, rc)) return true;
    if (!schedule_gate(c, int64_t{rcount} * type_size(rt) * c.size())) return false;
    Blocks b;
    const bool inpl = s == MPI_IN_PLACE;
    const int me = c.rank();
    auto e = runtime()->types.lookup(rt);
    if (!e) return false;
    const int64_t blk = e.value()->info.extent * rcount;
    if (inpl)
      b.add(true, r, coll::kEveryOther, rcount, me * blk, rt, 0);
    else
      b.add(true, s, coll::kEveryRank, sc, 0, st, 0);
    b.add_even(false, r, ranks_but(c.size(), inpl ? me : -1), rcount, rt);
    return schedule_blocks(c, b, rc);
  }
  if (!gate(c, int64_t{rcount} * type_size(rt) * c.size(), &env)) return false;
  TypeRegistry::Entry ks, kr;
  int64_t stride = 0;
  const coll::Part recv = part(r, rcount, rt, &kr, &stride);
  const coll::Part send = part(s, sc, st, &ks);
  return settle(c, coll::allgather(env, send, recv, stride * rcount), rc);
}

bool alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
              int* rc) {
  coll::NodeEnv env;
  // NCCL: grouped sends and receives, derived types packed (nccl_blocks).
  if (const int64_t all = int64_t{rcount} * type_size(rt) * c.size(); nccl_pre(c, all)) {
    Blocks b;
    const std::vector<int> every = every_rank(c.size());
    b.from_recv = s == MPI_IN_PLACE;
    b.add_even(true, b.from_recv ? r : s, every, b.from_recv ? rcount : sc, b.from_recv ? rt : st);
    b.add_even(false, r, every, rcount, rt);
    if (nccl_blocks(c, b, all, rc, true)) return true;
  }
  if (staged::alltoall(c, s, sc, st, r, rcount, rt, rc)) return true;
  if (c.request()) {
    if (nccl_nb::alltoall(c, s, sc, st, r, rcount, rt, rc)) return true;
    if (!schedule_gate(c, int64_t{rcount} * type_size(rt) * c.size())) return false;
    Blocks b;
    const std::vector<int> all = every_rank(c.size());
    b.from_recv = s == MPI_IN_PLACE;
    if (b.from_recv)
      b.add_even(true, r, all, rcount, rt);
    else
      b.add_even(true, s, all, sc, st);
    b.add_even(false, r, all, rcount, rt);
    return schedule_blocks(c, b, rc);
  }
  if (!gate(c, int64_t{rcount} * type_size(rt) * c.size(), &env)) return false;
  TypeRegistry::Entry ks, kr;
  int64_t stride = 0;
  const coll::Part recv = part(r, rcount, rt, &kr, &stride);
  const coll::Part send = part(s, int64_t{sc} * c.size(), st, &ks);
  return settle(c, coll::alltoall(env, send, recv, stride * rcount), rc);
}

bool reduce_local(Call& c, const void* in, void* inout, int count, MPI_Datatype t, MPI_Op op,
                  int* rc) {
  Runtime* rt = runtime();
  coll::ReduceOp rop{};
  coll::Basic b{};
  if (!c.active() || count <= 0 || mode() == Mode::kMirror || !coll::reduce_of(op, t, &rop, &b) ||
      !coll::reduce_defined(rop, b) || !on_device(in, count, t) || !on_device(inout, count, t))
    return false;
  coll::Reducer* red = rt->reducer();
  if (!red) return false;
  // MPI_Reduce_local: inout = in op inout.
  const void* inputs[2] = {in, inout};
  Status s = red->reduce(rop, b, inputs, 2, inout, static_cast<size_t>(count));
  *rc = s.is_ok() ? MPI_SUCCESS : raise(MPI_COMM_WORLD, s);
  return true;
}

}  // namespace loom::mpi::engines

extern "C" int loom_set_coll_method(const char* name) {
  loom::Runtime* rt = loom::runtime();
  loom::Runtime::CollMethod m;
  if (!rt || !name || !loom::Runtime::parse_coll(name, &m)) return MPI_ERR_ARG;
  rt->coll_method.store(m, std::memory_order_relaxed);
  return MPI_SUCCESS;
}

extern "C" int loom_coll_schedules(long long* count) {
  if (!count) return MPI_ERR_ARG;
  *count = loom::mpi::schedules_started();
  return MPI_SUCCESS;
}

extern "C" int loom_coll_staged(long long* count) {
  if (!count) return MPI_ERR_ARG;
  *count = loom::mpi::staged::calls();
  return MPI_SUCCESS;
}
