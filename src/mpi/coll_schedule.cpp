#include "mpi/coll_schedule.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "mpi/errors.hpp"
#include "util/log.hpp"

namespace loom::mpi {
namespace {

// A schedule in flight: its messages' requests and the caller's request.
struct Live {
  std::shared_ptr<Schedule> s;
  std::vector<MPI_Request> reqs;
  MPI_Request greq = MPI_REQUEST_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_SUCCESS;
  std::atomic<bool> busy{false};  // a thread is testing it
};

thread_local bool g_posting = false;

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

// comm's private twin, made at its first schedule (a collective call every
// rank makes at the same point: their first nonblocking collective with a
// schedule on comm) and freed with comm.
int g_keyval = MPI_KEYVAL_INVALID;
int free_twin(MPI_Comm, int, void* attr, void*) {
  auto* twin = static_cast<MPI_Comm*>(attr);
  PMPI_Comm_free(twin);
  delete twin;
  return MPI_SUCCESS;
}
int twin_of(MPI_Comm comm, MPI_Comm* out) {
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

// Tests l's messages; finishes it once all completed. True when done.
bool advance(Live& l) {
  int flag = 0;
  int rc = l.reqs.empty() ? (flag = 1, MPI_SUCCESS)
                          : MPI_Testall(static_cast<int>(l.reqs.size()), l.reqs.data(), &flag,
                                        MPI_STATUSES_IGNORE);
  if (rc == MPI_SUCCESS && !flag) return false;
  if (rc != MPI_SUCCESS) {
    // One failed: the others still complete before the request does.
    LOOM_LOG(kError, kMpi, "nonblocking collective: a message failed (%d)", rc);
    MPI_Waitall(static_cast<int>(l.reqs.size()), l.reqs.data(), MPI_STATUSES_IGNORE);
  } else if (l.s->finish) {
    rc = l.s->finish();
  }
  l.rc = rc;
  l.s.reset();  // scratch back now
  return true;
}

}  // namespace

int start_schedule(MPI_Comm comm, std::shared_ptr<Schedule> s, MPI_Request* req) {
  if (!req) return raise(comm, MPI_ERR_REQUEST, "null request");
  MPI_Comm twin = MPI_COMM_NULL;
  if (int rc = twin_of(comm, &twin); rc != MPI_SUCCESS)
    return raise(comm, rc, "no private communicator for a nonblocking collective");
  auto l = std::make_shared<Live>();
  l->comm = comm;
  l->s = std::move(s);
  int rc = MPI_SUCCESS;
  g_posting = true;
  for (const SchedMsg& m : l->s->recvs) {
    MPI_Request r;
    if ((rc = MPI_Irecv(m.buf, m.count, m.type, m.peer, 0, twin, &r)) != MPI_SUCCESS) break;
    l->reqs.push_back(r);
  }
  for (size_t i = 0; rc == MPI_SUCCESS && i < l->s->sends.size(); ++i) {
    const SchedMsg& m = l->s->sends[i];
    MPI_Request r;
    if ((rc = MPI_Isend(m.buf, m.count, m.type, m.peer, 0, twin, &r)) != MPI_SUCCESS) break;
    l->reqs.push_back(r);
  }
  g_posting = false;
  if (rc != MPI_SUCCESS) {
    // The call fails; the messages posted still complete (peers take part).
    MPI_Waitall(static_cast<int>(l->reqs.size()), l->reqs.data(), MPI_STATUSES_IGNORE);
    return raise(comm, rc, "posting a nonblocking collective's messages failed");
  }
  auto* extra = new std::shared_ptr<Live>(l);
  if ((rc = PMPI_Grequest_start(query, release, no_cancel, extra, req)) != MPI_SUCCESS) {
    delete extra;
    MPI_Waitall(static_cast<int>(l->reqs.size()), l->reqs.data(), MPI_STATUSES_IGNORE);
    return raise(comm, rc, "MPI_Grequest_start failed");
  }
  l->greq = *req;
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
  thread_local bool inside = false;
  if (inside || !schedules_live()) return;
  inside = true;
  std::vector<std::shared_ptr<Live>> now;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    now = g_live;
  }
  for (auto& l : now) {
    if (l->busy.exchange(true, std::memory_order_acquire)) continue;  // another thread has it
    const bool done = l->greq != MPI_REQUEST_NULL && advance(*l);
    if (done) {
      {
        std::lock_guard<std::mutex> lk(g_mu);
        g_live.erase(std::remove(g_live.begin(), g_live.end(), l), g_live.end());
        g_count.fetch_sub(1, std::memory_order_release);
      }
      PMPI_Grequest_complete(l->greq);
    }
    l->busy.store(false, std::memory_order_release);
  }
  inside = false;
}

}  // namespace loom::mpi
