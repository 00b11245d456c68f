// The persistent queue API (MPIS_*) of the MPI Advance stream-triggering
// library, on Loom's stream engine. A request is matched once: MPIS_Match
// exchanges a small header on the user's communicator and tag (so wildcards
// and MPI's ordering rules decide the pair, as for any message), which gives
// the pair a private channel: Loom's own duplicate of MPI_COMM_WORLD and a
// tag of the sender's choosing. Each started round is then pure data
// movement on that channel: the MPI itself, staged bytes, fixed peer and tag.
#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>
#include <vector>

#include "loom/stream.h"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "stream/enqueue.hpp"
#include "stream/pair.hpp"

struct MPIS_Request_struct {
  bool send = false;
  const void* sbuf = nullptr;
  void* rbuf = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int peer = 0, tag = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  int64_t bytes = 0;  // what a round carries (the sender's size)
  bool matched = false;
  int world_peer = -1, channel = 0;
  // Staging, made at the first start on a queue's lane.
  loom::stream::Lane* staged_on = nullptr;
  loom::stream::Buffer buf;
  loom::stream::Block staging;
  std::shared_ptr<std::atomic<int>> active = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<void> pin;  // the type, for rounds that pass it to the MPI (TypePin)
  // Loom's on-node path (stream/pair.hpp): the end, and its buffer as classified at the match.
  loom::stream::PairEnd pair;
  loom::stream::Buffer pair_buf;
};

namespace loom::stream {
namespace {

struct Queue {
  std::shared_ptr<Channel> ch;
  // Started and not yet waited (the requests are kept alive with them).
  std::vector<std::pair<std::shared_ptr<MPIS_Request_struct>, std::shared_ptr<Op>>> started;
  std::vector<std::shared_ptr<Op>> issued;  // since MPIS_Queue_wait
};

struct Header {
  uint64_t magic;
  int64_t bytes;
  int32_t channel;
  int32_t world_rank;
  PairOffer offer;  // Loom's on-node path, where the sender can take it
};
constexpr uint64_t kMagic = 0x4c4f4f4d4d504953ull;  // "LOOMMPIS"

Engine* live(int* rc) {
  Runtime* rt = runtime();
  if (!rt || !rt->streams) {
    *rc = mpi::raise(MPI_COMM_WORLD, MPI_ERR_OTHER, "Loom is not active: no stream engine");
    return nullptr;
  }
  // A queue's stream may share a CUDA stream with an MPIX stream, or wait
  // for a peer that waits for a held MPIX send: those go first.
  rt->streams->flush_held();
  return rt->streams.get();
}

std::shared_ptr<Queue> find_queue(Engine& e, MPIS_Queue q) {
  return std::static_pointer_cast<Queue>(e.get(Engine::Kind::kQueue, q));
}

bool known(Engine& e, MPIS_Request r) {
  return r && e.get(Engine::Kind::kRequest, reinterpret_cast<uintptr_t>(r)) != nullptr;
}

int world_rank_of(MPI_Comm comm, int rank) {
  MPI_Group g, w;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &w);
  int out = MPI_UNDEFINED;
  MPI_Group_translate_ranks(g, 1, &rank, w, &out);
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  return out;
}

int make_request(bool send, const void* sbuf, void* rbuf, MPI_Count count, MPI_Datatype type,
                 int peer, int tag, MPI_Comm comm, MPIS_Request* request) {
  int rc = MPI_SUCCESS;
  Engine* e = engine(comm, &rc);
  if (!e) return rc;
  if (!request) return mpi::raise(comm, MPI_ERR_REQUEST, "null request pointer");
  if (comm == MPI_COMM_NULL) return mpi::raise(comm, MPI_ERR_COMM, "null communicator");
  if (count < 0 || count > INT_MAX) return mpi::raise(comm, MPI_ERR_COUNT, "count out of range");
  if (type == MPI_DATATYPE_NULL) return mpi::raise(comm, MPI_ERR_TYPE, "MPI_DATATYPE_NULL");
  int size = 0;
  MPI_Comm_size(comm, &size);
  if (peer != MPI_PROC_NULL && !(!send && peer == MPI_ANY_SOURCE) && (peer < 0 || peer >= size))
    return mpi::raise(comm, MPI_ERR_RANK, "invalid rank");
  if (!(!send && tag == MPI_ANY_TAG) && (tag < 0 || tag > e->tag_ub()))
    return mpi::raise(comm, MPI_ERR_TAG, "invalid tag");
  auto r = std::make_shared<MPIS_Request_struct>();
  r->send = send;
  r->sbuf = sbuf;
  r->rbuf = rbuf;
  r->count = static_cast<int>(count);
  r->type = type;
  r->pin = std::make_shared<loom::stream::TypePin>(type);
  r->peer = peer;
  r->tag = tag;
  r->comm = comm;
  MPI_Count tsize = 0;
  MPI_Type_size_x(type, &tsize);
  r->bytes = static_cast<int64_t>(tsize) * r->count;
  if (peer == MPI_PROC_NULL) r->matched = true;  // rounds move nothing
  e->put(Engine::Kind::kRequest, reinterpret_cast<uintptr_t>(r.get()), r);
  *request = r.get();
  return MPI_SUCCESS;
}

// `pair_sends`: where a send of the on-node pair path goes, to be enqueued
// with the others of its MPIS_Enqueue_startall (Pairs::start_sends).
int start(Engine& e, Queue& q, MPIS_Request r, std::vector<Pairs::Work>* pair_sends) {
  auto keep = std::static_pointer_cast<MPIS_Request_struct>(
      r ? e.get(Engine::Kind::kRequest, reinterpret_cast<uintptr_t>(r)) : nullptr);
  if (!keep) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_REQUEST, "not a live MPIS request");
  if (!r->matched)
    return mpi::raise(r->comm, MPI_ERR_REQUEST, "MPIS request started before MPIS_Match");
  // The host may run rounds ahead of the stream; only a start that no
  // MPIS_Enqueue_waitall has closed yet is an error.
  if (std::any_of(q.started.begin(), q.started.end(), [r](auto& p) { return p.first.get() == r; }))
    return mpi::raise(r->comm, MPI_ERR_REQUEST,
                      "MPIS request started again before MPIS_Enqueue_waitall");
  if (r->peer == MPI_PROC_NULL) return MPI_SUCCESS;
  Channel& ch = *q.ch;
  int rc = MPI_SUCCESS;
  if (r->pair.on) {
    // The pair's memory is CUDA IPC on a GPU and shared host memory in the
    // host test mode: a stream of the other kind cannot reach it.
    if (ch.lane().emulated() != runtime()->rv->host_mode())
      return mpi::raise(r->comm, MPI_ERR_OTHER,
                        "this MPIS request was matched for Loom's on-node path, which runs on "
                        "CUDA streams only (LOOM_MPIS_PAIR=0 keeps it off)");
    if (r->send)
      pair_sends->push_back(Pairs::Work{&r->pair, &r->pair_buf, const_cast<void*>(r->sbuf)});
    else
      ++r->pair.rounds;
    r->active->fetch_add(1);
    e.pair_rounds.fetch_add(1, std::memory_order_relaxed);
    q.started.emplace_back(std::move(keep), nullptr);
    return MPI_SUCCESS;
  }
  if (r->staged_on != &ch.lane()) {
    void* user = r->send ? const_cast<void*>(r->sbuf) : r->rbuf;
    if ((rc = resolve(ch.lane(), user, r->count, r->type, r->comm, &r->buf)) != MPI_SUCCESS)
      return rc;
    go_direct(ch.lane(), &r->buf);
    auto s = staging_for(ch.lane(), r->buf);
    if (!s) return mpi::raise(r->comm, s.status());
    r->staging = s.value();
    r->staged_on = &ch.lane();
  }
  auto op = std::make_shared<Op>();
  op->ch = q.ch;
  // A private channel: the MPI itself, no matching of Loom's; Loom's own
  // calls where enqueued device messages go direct (their peers get headers).
  op->raw = !direct_on();
  op->peer = r->world_peer;
  op->tag = r->channel;
  op->comm = e.world();
  op->active = r->active;
  op->pin = r->pin;
  // A send's trigger goes with its pack (stage_send marks it).
  Status s = r->send ? stage_send(ch, r->buf, r->sbuf, r->count, r->type, r->staging, *op)
                     : stage_recv(ch, r->buf, r->rbuf, r->count, r->type, r->staging, *op);
  if (!s) return mpi::raise(r->comm, s);
  // The next round packs into the same staging: a send holds the stream at
  // MPIS_Enqueue_waitall until the MPI is done with it.
  op->release_on_post = false;
  if (!r->send) {
    auto pos = ch.mark();
    if (!pos) return mpi::raise(r->comm, pos.status());
    op->start = pos.value();
  }
  op->slot = ch.take();
  if (r->send) set_retire(*op, op->start);
  r->active->fetch_add(1);
  e.submit(op);
  q.started.emplace_back(std::move(keep), op);
  q.issued.push_back(op);
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace loom::stream

using namespace loom;
using namespace loom::stream;

extern "C" {

int MPIS_Queue_init(MPIS_Queue* queue, MPIS_Queue_type, void* extra_address) {
  int rc = MPI_SUCCESS;
  Engine* e = engine(MPI_COMM_WORLD, &rc);
  if (!e) return rc;
  if (!queue || !extra_address)
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG,
                      "MPIS_Queue_init: extra_address must point to the cudaStream_t");
  auto lane = e->lane_for(*static_cast<void**>(extra_address));
  if (!lane) return mpi::raise(MPI_COMM_WORLD, lane.status());
  auto ch = Channel::create(std::move(lane.value()));
  if (!ch) return mpi::raise(MPI_COMM_WORLD, ch.status());
  auto q = std::make_shared<Queue>();
  q->ch = std::move(ch.value());
  const auto h = reinterpret_cast<uintptr_t>(q.get());
  e->put(Engine::Kind::kQueue, h, q);
  *queue = h;
  return MPI_SUCCESS;
}

int MPIS_Queue_free(MPIS_Queue* queue) {
  int rc = MPI_SUCCESS;
  Engine* e = live(&rc);
  if (!e) return rc;
  std::shared_ptr<Queue> q;
  if (!queue || !(q = find_queue(*e, *queue)))
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "MPIS_Queue_free: not a live queue");
  bool busy = !q->started.empty() || q->ch->busy();
  for (auto& op : q->issued) {
    std::lock_guard<std::mutex> lk(op->mu);
    busy = busy || !op->done;
  }
  if (busy)
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_OTHER,
                      "MPIS_Queue_free: the queue has work in flight (MPIS_Enqueue_waitall and "
                      "MPIS_Queue_wait first)");
  e->take(Engine::Kind::kQueue, *queue);
  *queue = MPIS_QUEUE_NULL;
  return MPI_SUCCESS;
}

int MPIS_Queue_wait(MPIS_Queue queue) {
  int rc = MPI_SUCCESS;
  Engine* e = live(&rc);
  if (!e) return rc;
  auto q = find_queue(*e, queue);
  if (!q) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "MPIS_Queue_wait: not a live queue");
  Status s = q->ch->lane().synchronize();
  if (!s) return mpi::raise(MPI_COMM_WORLD, s);
  for (auto& op : q->issued) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(op->mu);
        if (op->done) break;
      }
      std::this_thread::yield();
    }
  }
  q->issued.clear();
  return MPI_SUCCESS;
}

int MPIS_Send_init(const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Info, MPIS_Request* request) {
  return make_request(true, buf, nullptr, count, datatype, dest, tag, comm, request);
}

int MPIS_Recv_init(void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                   MPI_Comm comm, MPI_Info, MPIS_Request* request) {
  return make_request(false, nullptr, buf, count, datatype, source, tag, comm, request);
}

int MPIS_Matchall(int count, MPIS_Request requests[], MPI_Status statuses[]) {
  int rc = MPI_SUCCESS;
  Engine* e = live(&rc);
  if (!e) return rc;
  if (count < 0 || (count > 0 && !requests))
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "MPIS_Matchall: bad arguments");
  for (int i = 0; i < count; ++i)
    if (!known(*e, requests[i]))
      return mpi::raise(MPI_COMM_WORLD, MPI_ERR_REQUEST, "not a live MPIS request");
  // Every header goes out and every header receive is posted before any
  // wait, so pairs matched in any order on the two sides cannot deadlock.
  std::vector<Header> hdr(count);
  std::vector<MPI_Request> reqs;
  std::vector<int> which;
  Pairs& pairs = e->pairs();
  std::vector<MPI_Request> layouts;  // layouts sent ahead of offers
  for (int i = 0; i < count; ++i) {
    MPIS_Request r = requests[i];
    if (r->matched) continue;
    MPI_Request q = MPI_REQUEST_NULL;
    if (r->send) {
      r->world_peer = world_rank_of(r->comm, r->peer);
      r->channel = static_cast<int>(e->next_handle() % (static_cast<uintptr_t>(e->tag_ub()) + 1));
      int me = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
      hdr[i] = Header{kMagic, r->bytes, r->channel, me, PairOffer{}};
      if ((rc = classify(r->sbuf, r->count, r->type, r->comm, &r->pair_buf)) != MPI_SUCCESS)
        return rc;
      hdr[i].offer = pairs.offer(r->pair_buf, r->sbuf, r->world_peer, &r->pair);
      // The receiver answers an offer within its MPIS_Match; the sender
      // waits for the answer at its first start. A layout goes first, on
      // the pair's own channel (answers from this rank's receivers use the
      // other communicator: their tags are other senders' channels).
      if (hdr[i].offer.kind != PairOffer::kNone) {
        rc = LOOM_NEXT(MPI_Irecv)(&r->pair.answer, sizeof(PairAnswer), MPI_BYTE, r->world_peer,
                                  r->channel, e->answers(), &r->pair.answer_req);
        MPI_Request w = MPI_REQUEST_NULL;
        if (rc == MPI_SUCCESS && !r->pair.wire.empty())
          rc = LOOM_NEXT(MPI_Isend)(r->pair.wire.data(), static_cast<int>(r->pair.wire.size()),
                                    MPI_BYTE, r->world_peer, r->channel, e->world(), &w);
        if (rc != MPI_SUCCESS) return mpi::raise(r->comm, rc, "MPIS_Match: the MPI refused");
        if (w != MPI_REQUEST_NULL) layouts.push_back(w);
      }
      rc = LOOM_NEXT(MPI_Isend)(&hdr[i], sizeof(Header), MPI_BYTE, r->peer, r->tag, r->comm, &q);
    } else {
      rc = LOOM_NEXT(MPI_Irecv)(&hdr[i], sizeof(Header), MPI_BYTE, r->peer, r->tag, r->comm, &q);
    }
    if (rc != MPI_SUCCESS) return mpi::raise(r->comm, rc, "MPIS_Match: the MPI refused");
    reqs.push_back(q);
    which.push_back(i);
  }
  std::vector<MPI_Status> st(reqs.size());
  rc = LOOM_NEXT(MPI_Waitall)(static_cast<int>(reqs.size()), reqs.data(), st.data());
  if (rc != MPI_SUCCESS) return mpi::raise(MPI_COMM_WORLD, rc, "MPIS_Match: the MPI failed");
  int err = MPI_SUCCESS;
  std::vector<PairAnswer> answers(count);
  std::vector<MPI_Request> answered;
  for (size_t k = 0; k < which.size(); ++k) {
    const int i = which[k];
    MPIS_Request r = requests[i];
    MPI_Status out = st[k];
    out.MPI_ERROR = MPI_SUCCESS;
    if (!r->send) {
      int got = 0;
      MPI_Get_count(&st[k], MPI_BYTE, &got);
      if (got != sizeof(Header) || hdr[i].magic != kMagic) {
        err = mpi::raise(r->comm, MPI_ERR_OTHER,
                         "MPIS_Match: the matching message is not an MPIS_Send_init's");
        continue;
      }
      if (hdr[i].bytes > r->bytes) {
        err = mpi::raise(r->comm, MPI_ERR_TRUNCATE,
                         "MPIS_Match: the matched send is longer than the receive");
        continue;
      }
      r->world_peer = hdr[i].world_rank;
      r->channel = hdr[i].channel;
      MPI_Status_set_elements_x(&out, MPI_BYTE, hdr[i].bytes);
      if (hdr[i].offer.kind != PairOffer::kNone) {
        std::unique_ptr<transport::PeerMessage> from;
        if (hdr[i].offer.layout_bytes > 0) {  // sent ahead of the header: it is here
          std::vector<unsigned char> wire(hdr[i].offer.layout_bytes);
          const int wrc =
              LOOM_NEXT(MPI_Recv)(wire.data(), static_cast<int>(wire.size()), MPI_BYTE,
                                  r->world_peer, r->channel, e->world(), MPI_STATUS_IGNORE);
          auto pm = transport::decode_message(wire.data(), wire.size());
          if (wrc == MPI_SUCCESS && pm) from = std::move(pm.value());
        }
        if (classify(r->rbuf, r->count, r->type, r->comm, &r->pair_buf) == MPI_SUCCESS)
          answers[i] = pairs.answer(hdr[i].offer, hdr[i].bytes, r->pair_buf, r->rbuf, r->world_peer,
                                    std::move(from), &r->pair);
        MPI_Request a = MPI_REQUEST_NULL;
        if (LOOM_NEXT(MPI_Isend)(&answers[i], sizeof(PairAnswer), MPI_BYTE, r->world_peer,
                                 r->channel, e->answers(), &a) != MPI_SUCCESS) {
          err = mpi::raise(r->comm, MPI_ERR_OTHER, "MPIS_Match: the MPI refused the answer");
          continue;
        }
        answered.push_back(a);
      }
    }
    r->matched = true;
    if (statuses != MPI_STATUSES_IGNORE) statuses[i] = out;
  }
  // The sender posted the answer's receive before its header went: these complete.
  answered.insert(answered.end(), layouts.begin(), layouts.end());
  if (!answered.empty() &&
      LOOM_NEXT(MPI_Waitall)(static_cast<int>(answered.size()), answered.data(),
                             MPI_STATUSES_IGNORE) != MPI_SUCCESS)
    err = mpi::raise(MPI_COMM_WORLD, MPI_ERR_OTHER, "MPIS_Match: the answers failed");
  return err;
}

int MPIS_Match(MPIS_Request* request, MPI_Status* status) {
  if (!request) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_REQUEST, "null request pointer");
  MPI_Status st;
  const int rc = MPIS_Matchall(1, request, &st);
  if (rc == MPI_SUCCESS && status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

int MPIS_Enqueue_start(MPIS_Queue queue, MPIS_Request* request) {
  if (!request) return mpi::raise(MPI_COMM_WORLD, MPI_ERR_REQUEST, "null request pointer");
  return MPIS_Enqueue_startall(queue, 1, request);
}

int MPIS_Enqueue_startall(MPIS_Queue queue, int count, MPIS_Request requests[]) {
  int rc = MPI_SUCCESS;
  Engine* e = live(&rc);
  if (!e) return rc;
  auto q = find_queue(*e, queue);
  if (!q)
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG,
                      "MPIS_Enqueue_start: not a live queue (freed, or never made)");
  if (count < 0 || (count > 0 && !requests))
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "MPIS_Enqueue_startall: bad arguments");
  // Senders learn their receivers' answers (outside the lock: this may wait).
  for (int i = 0; i < count; ++i)
    if (known(*e, requests[i]) && requests[i]->pair.answer_req != MPI_REQUEST_NULL)
      if (Status s = e->pairs().settle(&requests[i]->pair); !s)
        return mpi::raise(requests[i]->comm, s);
  std::lock_guard<std::mutex> lk(q->ch->mu());
  std::vector<Pairs::Work> pair_sends;
  for (int i = 0; i < count && rc == MPI_SUCCESS; ++i) rc = start(*e, *q, requests[i], &pair_sends);
  // What was started goes on the stream, whatever came after it.
  Status s = e->pairs().start_sends(q->ch->lane(), pair_sends);
  // MPIS_Queue_free sees the stream busy until it gets here.
  if (s) s = q->ch->mark().status();
  if (!s && rc == MPI_SUCCESS) rc = mpi::raise(MPI_COMM_WORLD, s);
  return rc;
}

int MPIS_Enqueue_waitall(MPIS_Queue queue) {
  int rc = MPI_SUCCESS;
  Engine* e = live(&rc);
  if (!e) return rc;
  auto q = find_queue(*e, queue);
  if (!q)
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG,
                      "MPIS_Enqueue_waitall: not a live queue (freed, or never made)");
  Channel& ch = *q->ch;
  std::lock_guard<std::mutex> lk(ch.mu());
  // Pairs' receives first: a peer's stream may wait for them before it
  // writes what this stream's other waits need.
  std::vector<Pairs::Work> recvs, sends;
  for (auto& [r, op] : q->started)
    if (!op) (r->send ? sends : recvs).push_back(Pairs::Work{&r->pair, &r->pair_buf, r->rbuf});
  if (Status s = e->pairs().finish_recvs(ch.lane(), recvs); !s)
    return mpi::raise(MPI_COMM_WORLD, s);
  std::vector<Waited> through_mpi;
  for (auto& [r, op] : q->started)
    if (op) through_mpi.push_back(Waited{op.get(), &r->buf, r->rbuf});
  if (Status s = wait_batch(ch, through_mpi); !s) return mpi::raise(MPI_COMM_WORLD, s);
  if (Status s = e->pairs().finish_sends(ch.lane(), sends); !s)
    return mpi::raise(MPI_COMM_WORLD, s);
  if (!recvs.empty() || !sends.empty())
    if (Status s = ch.mark().status(); !s) return mpi::raise(MPI_COMM_WORLD, s);
  for (auto& [r, op] : q->started)
    if (!op) r->active->fetch_sub(1);
  q->started.clear();
  return MPI_SUCCESS;
}

int MPIS_Request_free(MPIS_Request* request) {
  int rc = MPI_SUCCESS;
  Engine* e = live(&rc);
  if (!e) return rc;
  if (!request || !known(*e, *request))
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_REQUEST, "MPIS_Request_free: not a live request");
  MPIS_Request r = *request;
  if (r->active->load() > 0 || !Pairs::idle(r->pair))
    return mpi::raise(r->comm, MPI_ERR_REQUEST,
                      "MPIS_Request_free: a round of the request is in flight");
  if (r->pair.answer_req != MPI_REQUEST_NULL)
    if (Status s = e->pairs().settle(&r->pair); !s) return mpi::raise(r->comm, s);
  e->pairs().retire(std::move(r->pair));
  e->take(Engine::Kind::kRequest, reinterpret_cast<uintptr_t>(*request));
  *request = MPIS_REQUEST_NULL;
  return MPI_SUCCESS;
}

int MPIS_Request_freeall(int count, MPIS_Request requests[]) {
  if (count < 0 || (count > 0 && !requests))
    return mpi::raise(MPI_COMM_WORLD, MPI_ERR_ARG, "MPIS_Request_freeall: bad arguments");
  for (int i = 0; i < count; ++i) {
    const int rc = MPIS_Request_free(&requests[i]);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

}  // extern "C"
