#include "mpi/coll_schedule.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "mpi/device_message.hpp"
#include "mpi/device_pull.hpp"
#include "mpi/errors.hpp"
#include "mpi/requests.hpp"
#include "mpi/runtime.hpp"
#include "mpi/type_registry.hpp"
#include "util/log.hpp"

namespace loom::mpi {
namespace {

// A schedule in flight: its messages' requests and the caller's request
// (a generalized request, or a persistent collective's round).
struct Live {
  std::shared_ptr<Schedule> s;
  std::vector<MPI_Request> reqs;
  // Receives taken as bytes (as_bytes()): unpacked from host_scratch[i]
  // into the receive once every message has completed; their types are
  // pinned (the caller may free its own once the call has returned).
  std::vector<std::pair<size_t, SchedMsg>> unpacks;
  std::vector<std::unique_ptr<TypePin>> pins;
  MPI_Request greq = MPI_REQUEST_NULL;
  std::shared_ptr<PersistentSchedule> round;
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_SUCCESS;
  std::atomic<bool> busy{false};  // a thread is testing it
};

thread_local bool g_posting = false;

// How start_schedule hands out what it starts: a generalized request (the
// MPI_I... forms), nothing at all (a persistent _init asking whether its
// engine would schedule), or a persistent collective's round.
enum class Posting { kRequest, kTry, kRound };
thread_local Posting g_how = Posting::kRequest;
thread_local bool g_reached = false;                   // start_schedule ran since g_how was set
thread_local std::vector<MPI_Datatype> g_tried_types;  // kTry: the types the schedule uses
thread_local std::shared_ptr<PersistentSchedule> g_round;
std::atomic<long long> g_started{0};

std::mutex g_mu;
std::vector<std::shared_ptr<Live>> g_live;
std::atomic<int> g_count{0};

// The generalized request's callbacks: extra_state is a Live kept until freed.
int query(void* extra, MPI_Status* st) {
  auto* l = static_cast<std::shared_ptr<Live>*>(extra);
  PMPI_Status_set_elements(st, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(st, 0);
  st->MPI_SOURCE = MPI_UNDEFINED;
  st->MPI_TAG = MPI_UNDEFINED;
  st->MPI_ERROR = (*l)->rc;
  return (*l)->rc;
}
int release(void* extra) {
  delete static_cast<std::shared_ptr<Live>*>(extra);
  return MPI_SUCCESS;
}
int no_cancel(void*, int) {
  return MPI_SUCCESS;  // a collective cannot be cancelled (erroneous in MPI)
}

// Whether a receive of a schedule must take its message as bytes
// (host_recv_as_bytes).
bool as_bytes(const SchedMsg& m, size_t* bytes) {
  return host_recv_as_bytes(m.buf, m.count, m.type, bytes);
}

// Tests l's messages; finishes it once all completed. True when done.
bool advance(Live& l) {
  if (l.s->done && !l.s->done()) return false;  // its GPU work first
  int flag = 0;
  int rc = l.reqs.empty() ? (flag = 1, MPI_SUCCESS)
                          : MPI_Testall(static_cast<int>(l.reqs.size()), l.reqs.data(), &flag,
                                        MPI_STATUSES_IGNORE);
  if (rc == MPI_SUCCESS && !flag) return false;
  if (rc != MPI_SUCCESS) {
    // One failed: the others still complete before the request does.
    LOOM_LOG(kError, kMpi, "nonblocking collective: a message failed (%d)", rc);
    MPI_Waitall(static_cast<int>(l.reqs.size()), l.reqs.data(), MPI_STATUSES_IGNORE);
  } else {
    for (auto& [i, m] : l.unpacks) {
      std::vector<char>& bytes = l.s->host_scratch[i];
      int pos = 0;
      if (rc == MPI_SUCCESS)
        rc = PMPI_Unpack(bytes.data(), static_cast<int>(bytes.size()), &pos, m.buf, m.count, m.type,
                         l.comm);
    }
    if (rc == MPI_SUCCESS && l.s->finish) rc = l.s->finish();
  }
  l.rc = rc;
  l.s.reset();  // scratch back now
  return true;
}

int g_keyval = MPI_KEYVAL_INVALID;  // the twin's attribute
int free_twin(MPI_Comm, int, void* attr, void*) {
  auto* twin = static_cast<MPI_Comm*>(attr);
  PMPI_Comm_free(twin);
  delete twin;
  return MPI_SUCCESS;
}

}  // namespace

int twin_comm(MPI_Comm comm, MPI_Comm* out) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  if (g_keyval == MPI_KEYVAL_INVALID &&
      PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_twin, &g_keyval, nullptr) != MPI_SUCCESS)
    return MPI_ERR_INTERN;
  void* attr = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, g_keyval, &attr, &found) == MPI_SUCCESS && found) {
    *out = *static_cast<MPI_Comm*>(attr);
    return MPI_SUCCESS;
  }
  auto* twin = new MPI_Comm(MPI_COMM_NULL);
  if (int rc = PMPI_Comm_dup(comm, twin); rc != MPI_SUCCESS) {
    delete twin;
    return rc;
  }
  // Loom's messages must not reach the caller's error handler as its own.
  PMPI_Comm_set_errhandler(*twin, MPI_ERRORS_RETURN);
  PMPI_Comm_set_attr(comm, g_keyval, twin);
  *out = *twin;
  return MPI_SUCCESS;
}

// A persistent collective of Loom's: the caller's request is `recv`'s
// persistent receive of `result` from this process, on a private duplicate
// of MPI_COMM_SELF with a tag of the request's own.
struct PersistentSchedule {
  ScheduleRun run;
  MPI_Comm comm = MPI_COMM_NULL;  // the caller's (its error handler)
  int tag = 0;
  int result = MPI_SUCCESS;  // the last round's error code, as received
  // The types the starts pass to the MPI: the user may free them after _init.
  std::vector<std::unique_ptr<TypePin>> pins;
  PersistentSchedule() = default;
  PersistentSchedule(const PersistentSchedule&) = delete;
  PersistentSchedule& operator=(const PersistentSchedule&) = delete;
  ~PersistentSchedule();
};

namespace {

std::mutex g_self_mu;
MPI_Comm g_self = MPI_COMM_NULL;
std::vector<int> g_free_tags;  // tags of freed persistent collectives
int g_next_tag = 0;

// The private self communicator and a tag no live persistent collective has.
int take_tag(MPI_Comm* self, int* tag) {
  std::lock_guard<std::mutex> lk(g_self_mu);
  if (g_self == MPI_COMM_NULL) {
    if (int rc = PMPI_Comm_dup(MPI_COMM_SELF, &g_self); rc != MPI_SUCCESS) return rc;
    PMPI_Comm_set_errhandler(g_self, MPI_ERRORS_RETURN);
  }
  *self = g_self;
  if (!g_free_tags.empty()) {
    *tag = g_free_tags.back();
    g_free_tags.pop_back();
  } else if (g_next_tag < 32767) {  // MPI_TAG_UB is at least this
    *tag = g_next_tag++;
  } else {
    return MPI_ERR_TAG;
  }
  return MPI_SUCCESS;
}

// Completes p's started receive with the round's error code: a message to
// self of one int, which MPIs deliver at once (eagerly).
void end_round(PersistentSchedule& p, int rc) {
  MPI_Comm self;
  {
    std::lock_guard<std::mutex> lk(g_self_mu);
    self = g_self;
  }
  LOOM_DEBUG(kMpi, "persistent collective (tag %d): round over (%d)", p.tag, rc);
  if (PMPI_Send(&rc, 1, MPI_INT, 0, p.tag, self) != MPI_SUCCESS)
    LOOM_LOG(kError, kMpi, "a persistent collective's round could not complete its request");
}

}  // namespace

PersistentSchedule::~PersistentSchedule() {
  if (tag < 0) return;
  std::lock_guard<std::mutex> lk(g_self_mu);
  g_free_tags.push_back(tag);
}

bool persistent_schedule(MPI_Comm comm, ScheduleRun run, MPI_Request* req, int* rc) {
  if (!req) return false;  // the mirrors' path reports it
  g_how = Posting::kTry;
  g_reached = false;
  g_tried_types.clear();
  MPI_Request ignored = MPI_REQUEST_NULL;
  (void)run(&ignored);
  g_how = Posting::kRequest;
  if (!g_reached) return false;
  auto p = std::make_shared<PersistentSchedule>();
  for (MPI_Datatype t : g_tried_types) p->pins.push_back(std::make_unique<TypePin>(t));
  p->run = std::move(run);
  p->comm = comm;
  MPI_Comm self = MPI_COMM_NULL;
  if ((*rc = take_tag(&self, &p->tag)) != MPI_SUCCESS) {
    p->tag = -1;
    *rc = raise(comm, *rc, "no tag left for another persistent collective");
    return true;
  }
  if ((*rc = PMPI_Recv_init(&p->result, 1, MPI_INT, 0, p->tag, self, req)) != MPI_SUCCESS) {
    *rc = raise(comm, *rc, "a persistent collective's request could not be made");
    return true;
  }
  LOOM_DEBUG(kMpi, "persistent collective (tag %d): made", p->tag);
  PendingOp tmpl;
  tmpl.kind = PendingOp::Kind::kColl;
  tmpl.comm = comm;
  tmpl.sched = std::move(p);
  runtime()->requests.add_persistent(*req, std::move(tmpl));
  return true;
}

int start_persistent(const std::shared_ptr<PersistentSchedule>& p, MPI_Request* r) {
  if (int rc = PMPI_Start(r); rc != MPI_SUCCESS) return raise(p->comm, rc, "MPI_Start failed");
  runtime()->requests.started(*r);
  g_how = Posting::kRound;
  g_round = p;
  g_reached = false;
  MPI_Request ignored = MPI_REQUEST_NULL;
  int rc = p->run(&ignored);
  const bool posted = g_reached && rc == MPI_SUCCESS;
  g_how = Posting::kRequest;
  g_round.reset();
  if (rc == kNoSchedule)  // the engine took this call at _init: it must now
    rc = raise(p->comm, MPI_ERR_INTERN, "a persistent collective's schedule did not start");
  if (!posted) end_round(*p, rc);  // nothing in flight: the round is over
  return rc;
}

int persistent_result(const PersistentSchedule& p) {
  return p.result;
}

long long schedules_started() {
  return g_started.load(std::memory_order_relaxed);
}

int start_schedule(MPI_Comm comm, std::shared_ptr<Schedule> s, MPI_Request* req) {
  if (!req) return raise(comm, MPI_ERR_REQUEST, "null request");
  MPI_Comm twin = MPI_COMM_NULL;
  if (int rc = twin_comm(comm, &twin); rc != MPI_SUCCESS)
    return raise(comm, rc, "no private communicator for a nonblocking collective");
  g_reached = true;
  if (g_how == Posting::kTry) {  // the twin is made; nothing posted
    std::vector<MPI_Datatype> types = s->types;
    for (const auto* list : {&s->recvs, &s->sends})
      for (const SchedMsg& m : *list) types.push_back(m.type);
    for (MPI_Datatype t : types)
      if (std::find(g_tried_types.begin(), g_tried_types.end(), t) == g_tried_types.end())
        g_tried_types.push_back(t);
    return MPI_SUCCESS;
  }
  LOOM_DEBUG(kMpi, "a collective's schedule: %zu receives and %zu sends%s", s->recvs.size(),
             s->sends.size(), g_how == Posting::kRound ? " (a persistent request's round)" : "");
  auto l = std::make_shared<Live>();
  l->comm = comm;
  l->s = std::move(s);
  int rc = MPI_SUCCESS;
  g_posting = true;
  for (const SchedMsg& m : l->s->recvs) {
    MPI_Request r;
    SchedMsg post = m;
    if (size_t bytes = 0; as_bytes(m, &bytes)) {
      l->pins.push_back(std::make_unique<TypePin>(m.type));
      l->s->host_scratch.emplace_back(bytes);
      l->unpacks.emplace_back(l->s->host_scratch.size() - 1, m);
      post = {l->s->host_scratch.back().data(), static_cast<int>(bytes), MPI_BYTE, m.peer};
    }
    if ((rc = MPI_Irecv(post.buf, post.count, post.type, m.peer, 0, twin, &r)) != MPI_SUCCESS)
      break;
    l->reqs.push_back(r);
  }
  for (size_t i = 0; rc == MPI_SUCCESS && i < l->s->sends.size(); ++i) {
    const SchedMsg& m = l->s->sends[i];
    MPI_Request r;
    if ((rc = MPI_Isend(m.buf, m.count, m.type, m.peer, 0, twin, &r)) != MPI_SUCCESS) break;
    l->reqs.push_back(r);
  }
  g_posting = false;
  if (rc == MPI_SUCCESS && l->s->launch) rc = l->s->launch();
  if (rc != MPI_SUCCESS) {
    // The call fails; the messages posted still complete (peers take part).
    MPI_Waitall(static_cast<int>(l->reqs.size()), l->reqs.data(), MPI_STATUSES_IGNORE);
    return raise(comm, rc, "posting a nonblocking collective's messages failed");
  }
  if (g_how == Posting::kRound) {
    l->round = g_round;
  } else {
    auto* extra = new std::shared_ptr<Live>(l);
    if ((rc = PMPI_Grequest_start(query, release, no_cancel, extra, req)) != MPI_SUCCESS) {
      delete extra;
      MPI_Waitall(static_cast<int>(l->reqs.size()), l->reqs.data(), MPI_STATUSES_IGNORE);
      return raise(comm, rc, "MPI_Grequest_start failed");
    }
    l->greq = *req;
  }
  g_started.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_live.push_back(l);
    g_count.fetch_add(1, std::memory_order_release);
  }
  return MPI_SUCCESS;
}

bool posting_schedule() {
  return g_posting;
}

bool schedules_live() {
  return g_count.load(std::memory_order_acquire) > 0;
}

void progress_schedules() {
  // Testing a schedule's messages runs Loom's own completion calls, which
  // would come back here.
  if (!schedules_live()) return;  // first: the thread_local costs a TLS lookup a call
  thread_local bool inside = false;
  if (inside) return;
  inside = true;
  std::vector<std::shared_ptr<Live>> now;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    now = g_live;
  }
  for (auto& l : now) {
    if (l->busy.exchange(true, std::memory_order_acquire)) continue;  // another thread has it
    const bool done = (l->greq != MPI_REQUEST_NULL || l->round) && advance(*l);
    if (done) {
      {
        std::lock_guard<std::mutex> lk(g_mu);
        g_live.erase(std::remove(g_live.begin(), g_live.end(), l), g_live.end());
        g_count.fetch_sub(1, std::memory_order_release);
      }
      if (l->round)
        end_round(*l->round, l->rc);
      else
        PMPI_Grequest_complete(l->greq);
    }
    l->busy.store(false, std::memory_order_release);
  }
  inside = false;
}

}  // namespace loom::mpi
