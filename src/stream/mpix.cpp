// MPICH's stream API on any MPI: MPIX_Stream objects, stream communicators
// (plain and multiplex), and the enqueue functions, on Loom's stream engine.
// With MPICH >= 4.1 these interpose MPICH's own functions (same names and
// types); otherwise include/loom/stream.h declares them.
#include <algorithm>
#include <climits>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>

#include "coll/reduce_map.hpp"
#include "loom/stream.h"
#include "mpi/buffer_calls.hpp"  // LOOM_MPI_HAS_<fn>
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "stream/enqueue.hpp"
#include "type/from_mpi.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom::stream {
namespace {

struct StreamObj {
  void* gpu = nullptr;               // the cudaStream_t (or emulated stream); null: none
  std::shared_ptr<Channel> channel;  // null without a GPU stream
  std::atomic<int> comms{0};         // communicators bound to it
  uintptr_t handle = 0;
};

// The attribute of a stream communicator (kept by the MPI; deleted with it).
struct Binding {
  std::vector<std::shared_ptr<StreamObj>> streams;  // one, or a multiplex's
  bool early_sends = false;                         // LOOM_STREAM_EARLY_SEND, every rank able
  int width = 0;                                    // multiplex: most streams of any rank
  std::vector<MPI_Comm> pairs;                      // multiplex: [src * width + dst]
};

int delete_binding(MPI_Comm, int, void* attr, void*) {
  auto* b = static_cast<Binding*>(attr);
  for (auto& s : b->streams)
    if (s) s->comms.fetch_sub(1);
  for (MPI_Comm& c : b->pairs) LOOM_NEXT(MPI_Comm_free)(&c);
  delete b;
  return MPI_SUCCESS;
}

template <class H>
uintptr_t key_of(H h) {
  uintptr_t k = 0;
  static_assert(sizeof(H) <= sizeof(k));
  std::memcpy(&k, &h, sizeof(H));
  return k;
}

// MPIX_Stream is a pointer in Loom's header and an int in MPICH's.
template <class S>
S handle_as(uintptr_t key) {
  if constexpr (std::is_pointer_v<S>)
    return reinterpret_cast<S>(key);
  else
    return static_cast<S>(key);
}

MPIX_Stream to_stream(uintptr_t key) {
  return handle_as<MPIX_Stream>(key);
}

std::shared_ptr<StreamObj> find_stream(Engine& e, MPIX_Stream s) {
  return std::static_pointer_cast<StreamObj>(e.get(Engine::Kind::kStream, key_of(s)));
}

Binding* binding_of(Engine& e, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return nullptr;
  void* attr = nullptr;
  int flag = 0;
  if (MPI_Comm_get_attr(comm, e.keyval(delete_binding), &attr, &flag) != MPI_SUCCESS || !flag)
    return nullptr;
  return static_cast<Binding*>(attr);
}

int info_get(MPI_Info info, const char* key, std::string* out) {
  char buf[MPI_MAX_INFO_VAL + 1] = {};
  int flag = 0;
#if MPI_VERSION >= 4
  int len = MPI_MAX_INFO_VAL + 1;
  MPI_Info_get_string(info, key, &len, buf, &flag);
#else
  MPI_Info_get(info, key, MPI_MAX_INFO_VAL, buf, &flag);
#endif
  if (!flag) return 0;
  *out = buf;
  return 1;
}

// Two hex digits a byte, in memory order (MPICH 4's encoding and Loom's).
// MPICH 5.0 writes a run of k zero bytes as "[k]" (and upper-case digits).
bool decode_hex(const std::string& s, void* out, size_t n) {
  auto val = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  auto* p = static_cast<unsigned char*>(out);
  size_t at = 0;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '[') {
      const size_t close = s.find(']', i);
      if (close == std::string::npos || close == i + 1) return false;
      size_t zeros = 0;
      for (size_t j = i + 1; j < close; ++j) {
        if (s[j] < '0' || s[j] > '9') return false;
        zeros = zeros * 10 + static_cast<size_t>(s[j] - '0');
        if (zeros > n) return false;
      }
      if (at + zeros > n) return false;
      std::memset(p + at, 0, zeros);
      at += zeros;
      i = close + 1;
      continue;
    }
    if (i + 1 >= s.size() || at >= n) return false;
    const int hi = val(s[i]), lo = val(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[at++] = static_cast<unsigned char>(hi * 16 + lo);
    i += 2;
  }
  return at == n;
}

// The channel of a stream communicator with a GPU stream, or an error.
std::shared_ptr<Channel> channel_of(Engine& e, MPI_Comm comm, int* rc) {
  *rc = MPI_SUCCESS;
  Binding* b = binding_of(e, comm);
  if (!b || b->streams.size() != 1 || !b->streams[0] || !b->streams[0]->channel) {
    *rc = mpi::raise(comm, MPI_ERR_COMM,
                     "enqueue needs a stream communicator whose stream has a GPU stream "
                     "(MPIX_Stream_comm_create with an MPIX_Stream made from a cudaStream_t)");
    return nullptr;
  }
  return b->streams[0]->channel;
}

// Sends on comm may post their headers before their packs (Binding::early_sends).
bool early_sends_on(Engine& e, MPI_Comm comm) {
  Binding* b = binding_of(e, comm);
  return b && b->early_sends;
}

int check_peer(MPI_Comm comm, int peer, int tag, bool recv, int tag_ub) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  if (peer != MPI_PROC_NULL && !(recv && peer == MPI_ANY_SOURCE) && (peer < 0 || peer >= size))
    return mpi::raise(comm, MPI_ERR_RANK, "invalid rank");
  if (!(recv && tag == MPI_ANY_TAG) && (tag < 0 || tag > tag_ub))
    return mpi::raise(comm, MPI_ERR_TAG, "invalid tag");
  return MPI_SUCCESS;
}

int query_fn(void*, MPI_Status* st) {
  MPI_Status_set_elements(st, MPI_BYTE, 0);
  MPI_Status_set_cancelled(st, 0);
  st->MPI_SOURCE = MPI_UNDEFINED;
  st->MPI_TAG = MPI_UNDEFINED;
  return MPI_SUCCESS;
}
int free_fn(void*) {
  return MPI_SUCCESS;
}
int cancel_fn(void*, int) {
  return MPI_SUCCESS;
}

// What MPIX_I*_enqueue leaves for MPIX_Wait_enqueue.
struct Pending {
  std::shared_ptr<Op> op;
  Buffer buf;
  void* user = nullptr;
};

// Collective, in the making of every stream communicator: every rank, with a
// stream or not, so that the processes of a node map each other's stream
// arenas now (enqueue.hpp), never from a thread a stream waits for; and
// their ready words for early sends (*early: every rank of `made` can).
int share_arenas(MPI_Comm comm, MPI_Comm made, bool* early) {
  *early = false;
  Runtime* rt = runtime();
  if (!rt->rv || !rt->rv->lends() || !knob_true(knobs().stream_lend)) return MPI_SUCCESS;
  Status s = rt->rv->share_stream_arena(made);
  if (!s) return mpi::raise(comm, s);
  transport::Rendezvous::AttachPage attach;
  if (!rt->rv->host_mode()) attach = cuda_attach_ready_page;
  auto e = rt->rv->share_ready_words(made, knob_true(knobs().stream_early_send), attach);
  if (!e) return mpi::raise(comm, e.status());
  *early = e.value();
  return MPI_SUCCESS;
}

int fail(MPI_Comm comm, const Status& s) {
  return mpi::raise(comm, s);
}

// The common body of the four point-to-point enqueue calls.
int enqueue_p2p(bool send, const void* sbuf, void* rbuf, int count, MPI_Datatype type, int peer,
                int tag, MPI_Comm comm, MPI_Status* status, MPI_Request* request) {
  stats::Scope whole(stats::kEnqueue);
  std::optional<stats::Scope> phase(std::in_place, stats::kEnqueuePrepare);
  int rc = MPI_SUCCESS;
  Engine* e = engine(comm, &rc);
  if (!e) return rc;
  // A blocking call's stream waits here: every held send goes first.
  if (!request) e->flush_held();
  auto ch = channel_of(*e, comm, &rc);
  if (!ch) return rc;
  if ((rc = check_peer(comm, peer, tag, !send, e->tag_ub())) != MPI_SUCCESS) return rc;
  if (peer == MPI_PROC_NULL) {
    if (status != MPI_STATUS_IGNORE) {
      std::memset(status, 0, sizeof(*status));
      status->MPI_SOURCE = MPI_PROC_NULL;
      status->MPI_TAG = MPI_ANY_TAG;
    }
    if (request) *request = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
  }
  Buffer b;
  const void* buf = send ? sbuf : rbuf;
  if ((rc = resolve(ch->lane(), buf, count, type, comm, &b)) != MPI_SUCCESS) return rc;
  go_direct(ch->lane(), &b);
  const bool early_comm = early_sends_on(*e, comm);
  go_lent(ch->lane(), send, comm, peer, &b, send && early_comm);
  // A lent send whose header goes now: its pack and flag go now too (not held).
  const bool early_send = send && b.how == Buffer::How::kLent && early_comm;
  phase.emplace(stats::kEnqueueStaging);
  auto op = std::make_shared<Op>();
  // Until the engine has the operation, a failure gives back what it took.
  struct Undo {
    Buffer& b;
    MPI_Request& greq;
    bool armed = true;
    ~Undo() {
      if (!armed) return;
      if (b.scratch) runtime()->rv->arena_give(b.scratch, static_cast<size_t>(b.msg.bytes));
      if (greq != MPI_REQUEST_NULL) {
        MPI_Grequest_complete(greq);
        MPI_Request_free(&greq);
      }
    }
  } undo{b, op->greq};
  auto staging = staging_for(ch->lane(), b);
  if (!staging) return fail(comm, staging.status());
  op->ch = ch;
  op->peer = peer;
  op->tag = tag;
  op->comm = comm;
  phase.emplace(stats::kEnqueueRequest);
  if (request) {
    rc = MPI_Grequest_start(query_fn, free_fn, cancel_fn, nullptr, &op->greq);
    if (rc != MPI_SUCCESS) return mpi::raise(comm, rc, "MPI_Grequest_start failed");
  }
  phase.emplace(stats::kEnqueueStage);
  std::lock_guard<std::mutex> lk(ch->mu());
  // A send's trigger goes with its pack (stage_send marks it); an
  // MPIX_Isend_enqueue's pack waits for the packs of the sends after it.
  bool held = false, first = false;
  const bool may_hold = request && e->hold_on() && ch->lane().holds() && !early_send;
  op->early = early_send;
  Status s = send ? stage_send(*ch, b, sbuf, count, type, staging.value(), *op,
                               may_hold ? &held : nullptr, &first)
                  : stage_recv(*ch, b, rbuf, count, type, staging.value(), *op);
  if (!s) return fail(comm, s);
  if (held && first)
    e->holding(ch);
  else if (held)
    e->held_one();
  phase.emplace(stats::kEnqueueMark);
  if (!send) {
    op->early = early_recv(b);
    op->sender_flags = b.how == Buffer::How::kPulled && early_comm;
  }
  if (!send && !op->early) {
    auto start = ch->mark();
    if (!start) return fail(comm, start.status());
    op->start = start.value();
  }
  op->slot = ch->take();
  if (send) set_retire(*op, op->start);  // the stream never touches its staging again
  if (!request && status != MPI_STATUS_IGNORE) op->status_out = status;
  undo.armed = false;
  phase.emplace(stats::kEnqueueSubmit);
  e->submit(op);
  if (!request) {
    // Blocking in stream order: the stream waits here (an early send's
    // buffer is free once its pack, before, is done: nothing to wait for).
    if (!early_send && !(s = wait_batch(*ch, {Waited{op.get(), &b, rbuf}}))) return fail(comm, s);
    return MPI_SUCCESS;
  }
  auto p = std::make_shared<Pending>();
  p->op = op;
  p->buf = std::move(b);
  p->user = rbuf;
  e->put(Engine::Kind::kEnqueued, key_of(op->greq), p);
  *request = op->greq;
  return MPI_SUCCESS;
}

// MPIX_Wait_enqueue and MPIX_Waitall_enqueue: a foreign request refuses the
// call with none taken; the waits of one stream go on it as one batch
// (wait_batch). statuses: null when ignored.
int wait_enqueue(Engine& e, int count, MPI_Request requests[], MPI_Status* statuses) {
  stats::Scope whole(stats::kEnqueueWait);
  e.flush_held();  // the stream is to wait for sends that may be held
  std::optional<stats::Scope> phase(std::in_place, stats::kEnqueueWaitTake);
  std::vector<std::shared_ptr<Pending>> ps(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    ps[i] = std::static_pointer_cast<Pending>(e.take(Engine::Kind::kEnqueued, key_of(requests[i])));
    if (!ps[i]) {
      // None is taken when one is not an enqueued request.
      for (int j = 0; j < i; ++j)
        if (ps[j]) e.put(Engine::Kind::kEnqueued, key_of(requests[j]), std::move(ps[j]));
      return mpi::raise(MPI_COMM_WORLD, MPI_ERR_REQUEST,
                        "MPIX_Wait_enqueue takes requests of MPIX_Isend/Irecv_enqueue");
    }
  }
  // Channels in the order of their first request.
  std::vector<Channel*> chans;
  for (auto& p : ps)
    if (p && std::find(chans.begin(), chans.end(), p->op->ch.get()) == chans.end())
      chans.push_back(p->op->ch.get());
  int rc = MPI_SUCCESS;
  phase.emplace(stats::kEnqueueWaitBatch);
  for (Channel* ch : chans) {
    std::vector<Waited> ws;
    MPI_Comm comm = MPI_COMM_WORLD;
    for (auto& p : ps)
      if (p && p->op->ch.get() == ch) {
        ws.push_back(Waited{p->op.get(), &p->buf, p->user});
        comm = p->op->comm;
      }
    std::lock_guard<std::mutex> lk(ch->mu());
    if (Status s = wait_batch(*ch, ws); !s && rc == MPI_SUCCESS) rc = mpi::raise(comm, s);
  }
  phase.emplace(stats::kEnqueueWaitDone);
  std::vector<MPI_Request> frees;
  for (int i = 0; i < count; ++i) {
    MPI_Status* status = statuses ? &statuses[i] : nullptr;
    if (!ps[i]) {
      if (status) {
        std::memset(status, 0, sizeof(*status));
        status->MPI_SOURCE = MPI_PROC_NULL;
        status->MPI_TAG = MPI_ANY_TAG;
      }
      continue;
    }
    Op& op = *ps[i]->op;
    bool free_now = false;
    {
      std::lock_guard<std::mutex> lk(op.mu);
      if (status) {
        if (op.kind == Op::Kind::kSend) {
          // A send's status says nothing more, and the stream may pass its
          // wait before the send completes: it is written now.
          std::memset(status, 0, sizeof(*status));
          status->MPI_ERROR = op.done ? op.st.MPI_ERROR : MPI_SUCCESS;
        } else if (op.done) {
          *status = op.st;
        } else {
          op.status_out = status;
        }
      }
      // Freed once complete: now (by the thread), or when the thread completes it.
      free_now = op.greq_complete;
      op.greq_free = !free_now;
    }
    if (free_now) frees.push_back(requests[i]);
    requests[i] = MPI_REQUEST_NULL;
  }
  phase.emplace(stats::kEnqueueWaitDrop);
  // The thread frees them and drops the last references it may not hold
  // itself: here, dropping a halo's 52 requests took ~50 us an iteration
  // (LOOM_STATS, one H200).
  std::vector<std::shared_ptr<void>> drops(std::make_move_iterator(ps.begin()),
                                           std::make_move_iterator(ps.end()));
  e.later(std::move(frees), std::move(drops));
  return rc;
}

}  // namespace
}  // namespace loom::stream

using namespace loom;
using namespace loom::stream;

// With Loom off (LOOM_DISABLE=1) under an MPI that has the stream API
// itself, every call goes to the MPI's own; elsewhere the calls need Loom.
#ifndef LOOM_DECLARES_MPIX_STREAM
#define LOOM_STREAM_PASS(fn, ...) \
  if (!runtime()) return LOOM_NEXT(fn)(__VA_ARGS__)
#else
#define LOOM_STREAM_PASS(fn, ...) \
  do {                            \
  } while (0)
#endif

extern "C" {

// Defined for every MPI: the value is not message data, so it must not
// meet the refusal of device buffers (in the host test mode every pointer
// counts as one). Where the MPI has its own, its encoding is kept.
int MPIX_Info_set_hex(MPI_Info info, const char* key, const void* value, int value_size) {
#ifndef LOOM_DECLARES_MPIX_STREAM
  return LOOM_NEXT(MPIX_Info_set_hex)(info, key, value, value_size);
#else
  if (!key || (!value && value_size > 0) || value_size < 0 || value_size > MPI_MAX_INFO_VAL / 2)
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "MPIX_Info_set_hex: bad arguments");
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  const auto* p = static_cast<const unsigned char*>(value);
  for (int i = 0; i < value_size; ++i) {
    hex += digits[p[i] >> 4];
    hex += digits[p[i] & 15];
  }
  return MPI_Info_set(info, key, hex.c_str());
#endif
}

int MPIX_Stream_create(MPI_Info info, MPIX_Stream* stream) {
  LOOM_STREAM_PASS(MPIX_Stream_create, info, stream);
  Runtime* rt = runtime();
  if (!rt || !rt->streams)
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_OTHER, "Loom is not active: no stream engine");
  if (!stream) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "null stream pointer");
  Engine& e = *rt->streams;
  auto obj = std::make_shared<StreamObj>();
  std::string type, value;
  if (info != MPI_INFO_NULL && info_get(info, "type", &type)) {
    if (type != "cudaStream_t")
      return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG,
                        ("MPIX_Stream_create: stream type \"" + type +
                         "\" is not supported (Loom takes \"cudaStream_t\")")
                            .c_str());
    int rc = MPI_SUCCESS;
    if (!engine(MPI_COMM_WORLD, &rc)) return rc;  // MPI_THREAD_MULTIPLE
    void* s = nullptr;
    if (!info_get(info, "value", &value) || !decode_hex(value, &s, sizeof(s)))
      return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG,
                        "MPIX_Stream_create: info \"value\" must hold the cudaStream_t "
                        "(MPIX_Info_set_hex(info, \"value\", &stream, sizeof(stream)))");
    auto lane = e.lane_for(s);
    if (!lane) return mpi::raise(MPI_COMM_WORLD, lane.status());
    auto ch = Channel::create(std::move(lane.value()));
    if (!ch) return mpi::raise(MPI_COMM_WORLD, ch.status());
    obj->gpu = s;
    obj->channel = std::move(ch.value());
  }
  if constexpr (std::is_pointer_v<MPIX_Stream>)
    obj->handle = reinterpret_cast<uintptr_t>(obj.get());
  else
    obj->handle = 0x5c000000u + (e.next_handle() & 0xffffff);
  e.put(Engine::Kind::kStream, obj->handle, obj);
  *stream = to_stream(obj->handle);
  return MPI_SUCCESS;
}

int MPIX_Stream_free(MPIX_Stream* stream) {
  LOOM_STREAM_PASS(MPIX_Stream_free, stream);
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_OTHER, "Loom is not active");
  if (!stream) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "null stream pointer");
  Engine& e = *rt->streams;
  auto obj = find_stream(e, *stream);
  if (!obj) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "MPIX_Stream_free: not a live stream");
  e.flush_held();
  if (obj->comms.load() > 0)
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_OTHER,
                      "MPIX_Stream_free: communicators still use the stream (free them first)");
  if (obj->channel && obj->channel->busy())
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_OTHER,
                      "MPIX_Stream_free: the stream has enqueued operations it has not reached");
  e.take(Engine::Kind::kStream, obj->handle);
  *stream = MPIX_STREAM_NULL;
  return MPI_SUCCESS;
}

#ifdef LOOM_MPI_HAS_MPIX_Stream_progress
// MPICH's: progress on a stream's context. Loom's streams are its own
// objects (MPICH's function would not know them): Loom's progress (its
// device messages' handshakes), then the MPI's general progress. The
// stream engine's thread progresses enqueued operations by itself.
int MPIX_Stream_progress(MPIX_Stream stream) {
  LOOM_STREAM_PASS(MPIX_Stream_progress, stream);
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_OTHER, "Loom is not active");
  if (stream != MPIX_STREAM_NULL && !find_stream(*rt->streams, stream))
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "MPIX_Stream_progress: not a live stream");
  rt->streams->flush_held();
  if (rt->rv) rt->rv->progress();
  return LOOM_NEXT(MPIX_Stream_progress)(MPIX_STREAM_NULL);
}
#endif

int MPIX_Stream_comm_create(MPI_Comm comm, MPIX_Stream stream, MPI_Comm* newcomm) {
  LOOM_STREAM_PASS(MPIX_Stream_comm_create, comm, stream, newcomm);
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return mpi::raise(comm, MPI_ERR_OTHER, "Loom is not active");
  if (!newcomm) return mpi::raise(comm, MPI_ERR_ARG, "null communicator pointer");
  Engine& e = *rt->streams;
  std::shared_ptr<StreamObj> obj;
  if (stream != MPIX_STREAM_NULL && !(obj = find_stream(e, stream)))
    return mpi::raise(comm, MPI_ERR_ARG, "MPIX_Stream_comm_create: not a live stream");
  int rc = LOOM_NEXT(MPI_Comm_dup)(comm, newcomm);
  if (rc != MPI_SUCCESS) return rc;
  bool early = false;
  if ((rc = share_arenas(comm, *newcomm, &early)) != MPI_SUCCESS) return rc;
  if (!obj) return MPI_SUCCESS;
  auto* b = new Binding();
  b->early_sends = early;
  b->streams.push_back(obj);
  obj->comms.fetch_add(1);
  return MPI_Comm_set_attr(*newcomm, e.keyval(delete_binding), b);
}

int MPIX_Stream_comm_create_multiplex(MPI_Comm comm, int count, MPIX_Stream array_of_streams[],
                                      MPI_Comm* newcomm) {
  LOOM_STREAM_PASS(MPIX_Stream_comm_create_multiplex, comm, count, array_of_streams, newcomm);
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return mpi::raise(comm, MPI_ERR_OTHER, "Loom is not active");
  if (!newcomm || count < 0 || (count > 0 && !array_of_streams))
    return mpi::raise(comm, MPI_ERR_ARG, "MPIX_Stream_comm_create_multiplex: bad arguments");
  Engine& e = *rt->streams;
  auto* b = new Binding();
  bool bad = false;
  for (int i = 0; i < count; ++i) {
    std::shared_ptr<StreamObj> obj;
    if (array_of_streams[i] != MPIX_STREAM_NULL && !(obj = find_stream(e, array_of_streams[i])))
      bad = true;
    b->streams.push_back(obj);
  }
  if (count == 0) b->streams.push_back(nullptr);  // one default stream, as MPICH does
  // Every rank learns the widest rank (and whether any rank was given a bad
  // stream, so that all fail alike instead of hanging in the dups).
  int mine[2] = {static_cast<int>(b->streams.size()), bad ? 1 : 0}, most[2] = {0, 0};
  int rc = LOOM_NEXT(MPI_Allreduce)(mine, most, 2, MPI_INT, MPI_MAX, comm);
  if (rc != MPI_SUCCESS || most[1] || most[0] > 16) {
    delete b;
    if (rc != MPI_SUCCESS) return rc;
    return mpi::raise(comm, MPI_ERR_ARG,
                      most[1] ? "MPIX_Stream_comm_create_multiplex: not a live stream"
                              : "MPIX_Stream_comm_create_multiplex: at most 16 streams a rank");
  }
  b->width = most[0];
  // One communicator per (source stream, destination stream): matching is
  // the MPI's own, per pair of streams.
  b->pairs.assign(static_cast<size_t>(b->width) * b->width, MPI_COMM_NULL);
  for (MPI_Comm& c : b->pairs) LOOM_NEXT(MPI_Comm_dup)(comm, &c);
  rc = LOOM_NEXT(MPI_Comm_dup)(comm, newcomm);
  if (rc != MPI_SUCCESS) {
    delete_binding(MPI_COMM_NULL, 0, b, nullptr);
    return rc;
  }
  bool early = false;  // multiplex communicators have no enqueue calls
  if ((rc = share_arenas(comm, *newcomm, &early)) != MPI_SUCCESS) {
    delete_binding(MPI_COMM_NULL, 0, b, nullptr);
    return rc;
  }
  for (auto& s : b->streams)
    if (s) s->comms.fetch_add(1);
  return MPI_Comm_set_attr(*newcomm, e.keyval(delete_binding), b);
}

int MPIX_Comm_get_stream(MPI_Comm comm, int idx, MPIX_Stream* stream) {
  LOOM_STREAM_PASS(MPIX_Comm_get_stream, comm, idx, stream);
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return mpi::raise(comm, MPI_ERR_OTHER, "Loom is not active");
  if (!stream) return mpi::raise(comm, MPI_ERR_ARG, "null stream pointer");
  if (comm == MPI_COMM_NULL) return mpi::raise(comm, MPI_ERR_COMM, "null communicator");
  *stream = MPIX_STREAM_NULL;
  Binding* b = binding_of(*rt->streams, comm);
  if (!b) return idx == 0 ? MPI_SUCCESS : mpi::raise(comm, MPI_ERR_ARG, "stream index");
  if (idx < 0 || idx >= static_cast<int>(b->streams.size()))
    return mpi::raise(comm, MPI_ERR_ARG, "MPIX_Comm_get_stream: stream index out of range");
  if (b->streams[idx]) *stream = to_stream(b->streams[idx]->handle);
  return MPI_SUCCESS;
}

int MPIX_Stream_send(const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                     MPI_Comm comm, int source_stream_index, int dest_stream_index) {
  LOOM_STREAM_PASS(MPIX_Stream_send, buf, count, datatype, dest, tag, comm, source_stream_index,
                   dest_stream_index);
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return mpi::raise(comm, MPI_ERR_OTHER, "Loom is not active");
  Binding* b = binding_of(*rt->streams, comm);
  if (!b || b->pairs.empty())
    return mpi::raise(comm, MPI_ERR_COMM, "MPIX_Stream_send needs a multiplex stream communicator");
  if (source_stream_index < 0 || source_stream_index >= static_cast<int>(b->streams.size()) ||
      dest_stream_index < 0 || dest_stream_index >= b->width)
    return mpi::raise(comm, MPI_ERR_ARG, "MPIX_Stream_send: stream index out of range");
  return MPI_Send(buf, count, datatype, dest, tag,
                  b->pairs[source_stream_index * b->width + dest_stream_index]);
}

int MPIX_Stream_recv(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                     MPI_Comm comm, int source_stream_index, int dest_stream_index,
                     MPI_Status* status) {
  LOOM_STREAM_PASS(MPIX_Stream_recv, buf, count, datatype, source, tag, comm, source_stream_index,
                   dest_stream_index, status);
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return mpi::raise(comm, MPI_ERR_OTHER, "Loom is not active");
  Binding* b = binding_of(*rt->streams, comm);
  if (!b || b->pairs.empty())
    return mpi::raise(comm, MPI_ERR_COMM, "MPIX_Stream_recv needs a multiplex stream communicator");
  if (dest_stream_index < 0 || dest_stream_index >= static_cast<int>(b->streams.size()) ||
      source_stream_index < 0 || source_stream_index >= b->width)
    return mpi::raise(comm, MPI_ERR_ARG, "MPIX_Stream_recv: stream index out of range");
  return MPI_Recv(buf, count, datatype, source, tag,
                  b->pairs[source_stream_index * b->width + dest_stream_index], status);
}

#ifndef LOOM_DECLARES_MPIX_STREAM
// MPICH's nonblocking forms of the multiplex calls (Loom's header has only
// the blocking ones, as the issue lists them).
int MPIX_Stream_isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                      MPI_Comm comm, int source_stream_index, int dest_stream_index,
                      MPI_Request* request) {
  LOOM_STREAM_PASS(MPIX_Stream_isend, buf, count, datatype, dest, tag, comm, source_stream_index,
                   dest_stream_index, request);
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return mpi::raise(comm, MPI_ERR_OTHER, "Loom is not active");
  Binding* b = binding_of(*rt->streams, comm);
  if (!b || b->pairs.empty())
    return mpi::raise(comm, MPI_ERR_COMM,
                      "MPIX_Stream_isend needs a multiplex stream communicator");
  if (source_stream_index < 0 || source_stream_index >= static_cast<int>(b->streams.size()) ||
      dest_stream_index < 0 || dest_stream_index >= b->width)
    return mpi::raise(comm, MPI_ERR_ARG, "MPIX_Stream_isend: stream index out of range");
  return MPI_Isend(buf, count, datatype, dest, tag,
                   b->pairs[source_stream_index * b->width + dest_stream_index], request);
}

int MPIX_Stream_irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                      MPI_Comm comm, int source_stream_index, int dest_stream_index,
                      MPI_Request* request) {
  LOOM_STREAM_PASS(MPIX_Stream_irecv, buf, count, datatype, source, tag, comm, source_stream_index,
                   dest_stream_index, request);
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return mpi::raise(comm, MPI_ERR_OTHER, "Loom is not active");
  Binding* b = binding_of(*rt->streams, comm);
  if (!b || b->pairs.empty())
    return mpi::raise(comm, MPI_ERR_COMM,
                      "MPIX_Stream_irecv needs a multiplex stream communicator");
  if (dest_stream_index < 0 || dest_stream_index >= static_cast<int>(b->streams.size()) ||
      source_stream_index < 0 || source_stream_index >= b->width)
    return mpi::raise(comm, MPI_ERR_ARG, "MPIX_Stream_irecv: stream index out of range");
  return MPI_Irecv(buf, count, datatype, source, tag,
                   b->pairs[source_stream_index * b->width + dest_stream_index], request);
}
#endif

int MPIX_Send_enqueue(const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                      MPI_Comm comm) {
  LOOM_STREAM_PASS(MPIX_Send_enqueue, buf, count, datatype, dest, tag, comm);
  return enqueue_p2p(true, buf, nullptr, count, datatype, dest, tag, comm, MPI_STATUS_IGNORE,
                     nullptr);
}

int MPIX_Recv_enqueue(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                      MPI_Comm comm, MPI_Status* status) {
  LOOM_STREAM_PASS(MPIX_Recv_enqueue, buf, count, datatype, source, tag, comm, status);
  return enqueue_p2p(false, nullptr, buf, count, datatype, source, tag, comm, status, nullptr);
}

int MPIX_Isend_enqueue(const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                       MPI_Comm comm, MPI_Request* request) {
  LOOM_STREAM_PASS(MPIX_Isend_enqueue, buf, count, datatype, dest, tag, comm, request);
  if (!request) return mpi::raise(comm, MPI_ERR_REQUEST, "null request pointer");
  return enqueue_p2p(true, buf, nullptr, count, datatype, dest, tag, comm, MPI_STATUS_IGNORE,
                     request);
}

int MPIX_Irecv_enqueue(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                       MPI_Comm comm, MPI_Request* request) {
  LOOM_STREAM_PASS(MPIX_Irecv_enqueue, buf, count, datatype, source, tag, comm, request);
  if (!request) return mpi::raise(comm, MPI_ERR_REQUEST, "null request pointer");
  return enqueue_p2p(false, nullptr, buf, count, datatype, source, tag, comm, MPI_STATUS_IGNORE,
                     request);
}

int MPIX_Wait_enqueue(MPI_Request* request, MPI_Status* status) {
  LOOM_STREAM_PASS(MPIX_Wait_enqueue, request, status);
  int rc = MPI_SUCCESS;
  Engine* e = engine(MPI_COMM_WORLD, &rc);
  if (!e) return rc;
  if (!request) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_REQUEST, "null request pointer");
  return wait_enqueue(*e, 1, request, status == MPI_STATUS_IGNORE ? nullptr : status);
}

int MPIX_Waitall_enqueue(int count, MPI_Request array_of_requests[],
                         MPI_Status* array_of_statuses) {
  LOOM_STREAM_PASS(MPIX_Waitall_enqueue, count, array_of_requests, array_of_statuses);
  int rc = MPI_SUCCESS;
  Engine* e = engine(MPI_COMM_WORLD, &rc);
  if (!e) return rc;
  if (count < 0 || (count > 0 && !array_of_requests))
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "MPIX_Waitall_enqueue: bad arguments");
  return wait_enqueue(*e, count, array_of_requests,
                      array_of_statuses == MPI_STATUSES_IGNORE ? nullptr : array_of_statuses);
}

int MPIX_Allreduce_enqueue(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                           MPI_Op op, MPI_Comm comm) {
  LOOM_STREAM_PASS(MPIX_Allreduce_enqueue, sendbuf, recvbuf, count, datatype, op, comm);
  int rc = MPI_SUCCESS;
  Engine* e = engine(comm, &rc);
  if (!e) return rc;
  e->flush_held();  // the stream waits here: every held send goes first
  auto ch = channel_of(*e, comm, &rc);
  if (!ch) return rc;
  if (count < 0) return mpi::raise(comm, MPI_ERR_COUNT, "negative count");
  if (datatype == MPI_DATATYPE_NULL) return mpi::raise(comm, MPI_ERR_TYPE, "MPI_DATATYPE_NULL");
  // What the MPI would refuse when the stream reaches the operation is
  // refused now, while the caller can still be told.
  if (op == MPI_OP_NULL) return mpi::raise(comm, MPI_ERR_OP, "MPI_OP_NULL");
  if (coll::predefined_op(op) && !type::is_named(datatype))
    return mpi::raise(comm, MPI_ERR_OP,
                      "MPIX_Allreduce_enqueue: a predefined operation on a derived datatype "
                      "(MPI defines them on predefined datatypes only)");
  const bool in_place = sendbuf == MPI_IN_PLACE;
  // Device buffers go through host mirrors of their spans (the receive
  // mirror starts as a copy, so the gaps of the type stay as they are).
  Buffer rb, sb;
  if ((rc = resolve(ch->lane(), recvbuf, count, datatype, comm, &rb)) != MPI_SUCCESS) return rc;
  if (!in_place && (rc = resolve(ch->lane(), sendbuf, count, datatype, comm, &sb)) != MPI_SUCCESS)
    return rc;
  const bool mirror = rb.how != Buffer::How::kHost || sb.how != Buffer::How::kHost;
  Buffer span;
  if (mirror) {
    MPI_Count tlb = 0, text = 0, lb = 0, ext = 0;
    MPI_Type_get_true_extent_x(datatype, &tlb, &text);
    MPI_Type_get_extent_x(datatype, &lb, &ext);
    span.how = Buffer::How::kSpan;
    if (count > 0) {
      const int64_t shift = static_cast<int64_t>(count - 1) * ext;
      span.span_lo = tlb + std::min<int64_t>(0, shift);
      span.span_bytes = tlb + text + std::max<int64_t>(0, shift) - span.span_lo;
    }
  }
  auto o = std::make_shared<Op>();
  o->ch = ch;
  o->kind = Op::Kind::kAllreduce;
  o->raw = true;
  o->count = count;
  o->type = datatype;
  o->op = op;
  o->comm = comm;
  std::lock_guard<std::mutex> lk(ch->mu());
  Status s;
  if (mirror) {
    auto r = ch->lane().alloc(span.staged_bytes());
    if (!r) return fail(comm, r.status());
    o->staging = r.value();
    if (!(s = ch->lane().copy_in(o->staging.host, static_cast<char*>(recvbuf) + span.span_lo,
                                 o->staging.bytes)))
      return fail(comm, s);
    o->rbuf = static_cast<char*>(o->staging.host) - span.span_lo;
    o->sbuf = MPI_IN_PLACE;
    if (!in_place) {
      auto m = ch->lane().alloc(span.staged_bytes());
      if (!m) return fail(comm, m.status());
      o->staging2 = m.value();
      if (!(s = ch->lane().copy_in(o->staging2.host,
                                   static_cast<const char*>(sendbuf) + span.span_lo,
                                   o->staging2.bytes)))
        return fail(comm, s);
      o->sbuf = static_cast<char*>(o->staging2.host) - span.span_lo;
    }
  } else {
    o->sbuf = sendbuf;
    o->rbuf = recvbuf;
  }
  auto start = ch->mark();
  if (!start) return fail(comm, start.status());
  o->start = start.value();
  o->slot = ch->take();
  e->submit(o);
  if (!(s = ch->wait(o->slot))) return fail(comm, s);
  if (mirror) {
    if (!(s = ch->lane().copy_out(static_cast<char*>(recvbuf) + span.span_lo, o->staging.host,
                                  o->staging.bytes)))
      return fail(comm, s);
    auto end = ch->mark();
    if (!end) return fail(comm, end.status());
    set_retire(*o, end.value());
  } else {
    set_retire(*o, o->start);
  }
  return MPI_SUCCESS;
}

// ---- Emulated streams and the helpers tests and benchmarks use ----

int loom_host_stream_create(void** stream) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams || !stream) return MPI_ERR_ARG;
  *stream = rt->streams->host_stream_create();
  return MPI_SUCCESS;
}

int loom_host_stream_free(void* stream) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams || !rt->streams->host_stream_free(stream)) return MPI_ERR_ARG;
  return MPI_SUCCESS;
}

int loom_stream_launch_host(void* stream, void (*fn)(void*), void* arg) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams || !fn) return MPI_ERR_ARG;
  if (HostStream* h = rt->streams->host_stream(stream)) {
    h->push([fn, arg] { fn(arg); });
    return MPI_SUCCESS;
  }
  return cuda_launch_host(stream, fn, arg) ? MPI_SUCCESS : MPI_ERR_ARG;
}

int loom_stream_synchronize(void* stream) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams) return MPI_ERR_ARG;
  rt->streams->flush_held();
  if (HostStream* h = rt->streams->host_stream(stream)) {
    h->synchronize();
    return MPI_SUCCESS;
  }
  return cuda_synchronize(stream) ? MPI_SUCCESS : MPI_ERR_ARG;
}

int loom_stream_host_actions(long long* count) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams || !count) return MPI_ERR_ARG;
  *count = rt->streams->host_actions.load();
  return MPI_SUCCESS;
}

int loom_stream_pair_rounds(long long* count) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams || !count) return MPI_ERR_ARG;
  *count = rt->streams->pair_rounds.load();
  return MPI_SUCCESS;
}

int loom_stream_lent_messages(long long* count) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams || !count) return MPI_ERR_ARG;
  *count = rt->streams->lent_messages.load();
  return MPI_SUCCESS;
}

int loom_stream_early_receives(long long* count) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams || !count) return MPI_ERR_ARG;
  *count = rt->streams->early_receives.load();
  return MPI_SUCCESS;
}

int loom_stream_early_sends(long long* count) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams || !count) return MPI_ERR_ARG;
  *count = rt->streams->early_sends.load();
  return MPI_SUCCESS;
}

int loom_stream_held_sends(long long* count) {
  if (!count) return MPI_ERR_ARG;
  *count = Channel::held_packs_.load();
  return MPI_SUCCESS;
}

}  // extern "C"
