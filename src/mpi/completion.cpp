// MPI_Wait / MPI_Test families and MPI_Request_free. Loom's device
// operations are real MPI requests: the MPI completes them, then Loom
// finishes them (unpacks a receive, returns its staging). With no device
// operation in flight these calls cost one atomic load before the MPI's own.
//
// An op leaves the table before the MPI may complete its request: once the
// MPI completes a request it may hand the same handle to another thread's
// new operation at once, so an op still in the table then would shadow the
// new one. Ops whose requests did not complete go back afterwards.
#include <mpi.h>

#include <algorithm>
#include <vector>

#include "mpi/blocking.hpp"
#include "mpi/coll_schedule.hpp"
#include "mpi/next.hpp"
#include "mpi/requests.hpp"
#include "mpi/runtime.hpp"
#include "util/stats.hpp"

namespace loom::mpi {
namespace {

RequestTable* active_table() {
  Runtime* rt = runtime();
  if (!rt) return nullptr;
  // With zero-copy sends on, a sender waits until its receiver has read the
  // buffer: every completion call first finishes the receives that landed
  // (RequestTable::finish_landed), whichever requests it was given.
  progress_loom();
  if (rt->requests.empty()) return nullptr;
  return &rt->requests;
}

// ... and a rank must not block in the MPI while a receive it posted may
// have matched such a send: the blocking calls become their test in a loop.
template <class Test>
int poll_until(Test test) {
  for (;;) {
    int flag = 0;
    const int rc = test(&flag);
    if ((rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) || flag) return rc;
  }
}
// The same while a nonblocking collective's schedule is in flight: its
// request completes only when a completion call finds its messages done.
bool polling(RequestTable* t) {
  return (t && runtime()->zero_copy_on()) || schedules_live();
}

// Open MPI, initialised with MPI_THREAD_MULTIPLE: where its request code
// has the races that any_waits_unsafe and free_when_complete work around.
bool open_mpi_multithreaded() {
#if defined(OPEN_MPI) && OPEN_MPI
  static const bool multiple = [] {
    int level = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&level);
    return level == MPI_THREAD_MULTIPLE;
  }();
  return multiple;
#else
  return false;
#endif
}

// Open MPI 4.1 under MPI_THREAD_MULTIPLE: the soak (4 ranks x 8 threads,
// under load) died in 5 of 24 runs inside ompi_request_default_wait_any, or
// with a mutex of Loom's found corrupted right after an MPI_Waitany. That
// code hangs a synchronisation object of the caller's stack on every
// pending request, and races there are reported (open-mpi/ompi#6004,
// #11965); the mechanism was not traced further. The test forms attach
// nothing: MPI_Waitany and MPI_Waitsome poll them instead (30 of 30 runs),
// and so do MPI_Wait and MPI_Waitall, whose wait forms hang the same kind
// of object on the stack (no failure of theirs was seen).
bool any_waits_unsafe() {
  return open_mpi_multithreaded();
}

// The ops of an array of requests, taken out of the table for one call.
class Taken {
 public:
  Taken(RequestTable& t, const MPI_Request* reqs, int n)
      : t_(t), before_(reqs, reqs + n), ops_(n), have_(n, false) {
    for (int i = 0; i < n; ++i) have_[i] = t.take(before_[i], &ops_[i]);
  }
  // Finishes op i with its status; returns an MPI error code.
  int finish_one(int i, MPI_Status& st) {
    if (!have_[i]) return MPI_SUCCESS;
    have_[i] = false;
    return finish(ops_[i], st);
  }
  // Drops op i (its request failed: nothing to unpack).
  void drop(int i) { have_[i] = false; }
  PendingOp* op(int i) { return have_[i] ? &ops_[i] : nullptr; }
  // The ops the MPI would skip: persistent receives met at MPI_Start, whose
  // requests it never started, and requests a look of Loom's made inactive
  // (detect_peek_deactivates): an inactive request is no completion to it.
  std::vector<int> done() const {
    std::vector<int> out;
    for (size_t i = 0; i < ops_.size(); ++i)
      if (have_[i] && (ops_[i].kind == PendingOp::Kind::kDone || ops_[i].peeked))
        out.push_back(static_cast<int>(i));
    return out;
  }
  // Puts back every op not finished or dropped: their requests are pending.
  ~Taken() {
    for (size_t i = 0; i < ops_.size(); ++i)
      if (have_[i]) t_.add(before_[i], std::move(ops_[i]));
  }

 private:
  RequestTable& t_;
  std::vector<MPI_Request> before_;
  std::vector<PendingOp> ops_;
  std::vector<bool> have_;
};

// Statuses to use when the caller ignores them (Loom needs the byte counts).
MPI_Status* statuses_or_local(MPI_Status* statuses, int n, std::vector<MPI_Status>& local) {
  if (statuses != MPI_STATUSES_IGNORE) return statuses;
  local.resize(n);
  return local.data();
}

// After a multiple-completion call: finishes the ops of the requests listed
// in `which` (null: all n), whose statuses are st[k].
int finish_listed(Taken& taken, const int* which, int n, MPI_Status* st, int rc) {
  std::vector<Landed> landed;  // device-method pulls first, with one wait for all
  for (int k = 0; k < n; ++k)
    if (PendingOp* op = taken.op(which ? which[k] : k);
        op && !(rc == MPI_ERR_IN_STATUS && st[k].MPI_ERROR != MPI_SUCCESS))
      landed.push_back({op, &st[k]});
  pull_together(landed);
  for (int k = 0; k < n; ++k) {
    const int i = which ? which[k] : k;
    if (rc == MPI_ERR_IN_STATUS && st[k].MPI_ERROR != MPI_SUCCESS) {
      if (st[k].MPI_ERROR != MPI_ERR_PENDING) {
        if (PendingOp* op = taken.op(i)) ack_truncated_header(*op, st[k].MPI_ERROR);
        taken.drop(i);
      }
      continue;  // pending ops go back to the table
    }
    int e = taken.finish_one(i, st[k]);
    if (e != MPI_SUCCESS) {
      st[k].MPI_ERROR = e;
      rc = MPI_ERR_IN_STATUS;
    }
  }
  return rc;
}

// Whether every request of reqs is complete, as MPI_Request_get_status
// (Loom's, which waits for Loom's own part of an op) says; stops at the
// first that is not, or that failed. Nothing completes, so no handle can
// be reused meanwhile.
enum class AllComplete { kNo, kYes, kFailed };
AllComplete all_complete(RequestTable& t, int n, const MPI_Request reqs[]) {
  for (int i = 0; i < n; ++i) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    int done = 0, rc = MPI_SUCCESS;
    if (!t.status_of(reqs[i], &done, MPI_STATUS_IGNORE, &rc))
      rc = t.peek(reqs[i], &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return AllComplete::kFailed;
    if (!done) return AllComplete::kNo;
  }
  return AllComplete::kYes;
}

// The MPI's MPI_Testall once all_complete has answered. Every request
// complete: MPI_Waitall, which then does not block (MPICH 4.0.2's
// MPI_Testall fails with MPI_ERR_IN_STATUS, and no error in any status, on
// the completed built-in request its nonblocking collectives may return;
// its MPI_Waitall completes it; polling completions hit it in every
// MPI_Waitall). One failed: the MPI's MPI_Testall reports it.
int test_all(AllComplete all, int n, MPI_Request reqs[], int* flag, MPI_Status st[]) {
#if defined(OPEN_MPI) && OPEN_MPI
  (void)all;
  return LOOM_NEXT(MPI_Testall)(n, reqs, flag, st);
#else
  if (all == AllComplete::kFailed) return LOOM_NEXT(MPI_Testall)(n, reqs, flag, st);
  *flag = 1;
  return LOOM_NEXT(MPI_Waitall)(n, reqs, st);
#endif
}

// Reports op i of `taken`, one the MPI would skip (Taken::done), with its
// request's completion at the MPI: nothing for an inactive persistent
// request, the request's release for one a look of Loom's found complete.
int finish_done(Taken& taken, MPI_Request reqs[], int i, MPI_Status& st) {
  int flag = 0;
  MPI_Status mpi_st;
  if (const int rc = LOOM_NEXT(MPI_Test)(&reqs[i], &flag, &mpi_st); rc != MPI_SUCCESS) {
    if (PendingOp* op = taken.op(i)) ack_truncated_header(*op, rc);  // a truncated receive, say
    taken.drop(i);
    st = mpi_st;
    st.MPI_ERROR = rc;
    return rc;
  }
  return taken.finish_one(i, st);
}

// MPI_Waitsome and MPI_Testsome (same arguments, `next` the MPI's own).
using SomeFn = int (*)(int, MPI_Request[], int*, int[], MPI_Status[]);
int some(SomeFn next, int n, MPI_Request reqs[], int* outcount, int indices[],
         MPI_Status statuses[]) {
  RequestTable* t = active_table();
  if (!t || n <= 0) return next(n, reqs, outcount, indices, statuses);
  Taken taken(*t, reqs, n);
  std::vector<MPI_Status> local;
  MPI_Status* st = statuses_or_local(statuses, n, local);
  if (std::vector<int> done = taken.done(); !done.empty()) {  // these completed already
    *outcount = static_cast<int>(done.size());
    std::copy(done.begin(), done.end(), indices);
    int rc = MPI_SUCCESS;
    for (int k = 0; k < *outcount; ++k) {
      if (int e = finish_done(taken, reqs, indices[k], st[k]); e != MPI_SUCCESS) {
        st[k].MPI_ERROR = e;
        rc = MPI_ERR_IN_STATUS;
      } else {
        st[k].MPI_ERROR = MPI_SUCCESS;
      }
    }
    return rc;
  }
  int rc = next(n, reqs, outcount, indices, st);
  if (*outcount == MPI_UNDEFINED || (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)) return rc;
  return finish_listed(taken, indices, *outcount, st, rc);
}

// MPI_Waitany and MPI_Testany: `next` is the MPI's own, which sets *flag
// (Waitany: always 1).
template <class Next>
int any(RequestTable& t, int n, MPI_Request reqs[], int* index, int* flag, MPI_Status* status,
        Next next) {
  Taken taken(t, reqs, n);
  MPI_Status st;
  int rc = MPI_SUCCESS;
  if (std::vector<int> done = taken.done(); !done.empty()) {  // the MPI would skip these
    *index = done[0];
    *flag = 1;
    rc = finish_done(taken, reqs, *index, st);
  } else {
    *index = MPI_UNDEFINED;  // left so if the MPI says nothing of which failed
    rc = next(&st);
    if (rc == MPI_SUCCESS && *flag && *index != MPI_UNDEFINED) {
      rc = taken.finish_one(*index, st);
    } else if (rc != MPI_SUCCESS && *index >= 0 && *index < n) {  // that request failed
      if (PendingOp* op = taken.op(*index)) ack_truncated_header(*op, rc);
      taken.drop(*index);  // its handle is the MPI's again
    }
  }
  if (status != MPI_STATUS_IGNORE && *flag) *status = st;
  return rc;
}

// Open MPI 4.1.6 under MPI_THREAD_MULTIPLE: a send freed while it is still
// active can leave its request object to two operations, and an
// MPI_Waitany elsewhere then returns without writing the index (or reports
// a request twice, and another never). The soak shows it with Loom off
// (loom_soak --plain), in about one run in 30, and never in 117 runs
// without the frees. So Loom frees such a request only once it is
// complete: RequestTable::progress tests it until then.
bool free_when_complete(MPI_Request r) {
  if (r == MPI_REQUEST_NULL || !open_mpi_multithreaded()) return false;
  int done = 0;
  return PMPI_Request_get_status(r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done;
}

}  // namespace
}  // namespace loom::mpi

using namespace loom::mpi;

extern "C" {

int MPI_Wait(MPI_Request* req, MPI_Status* status) {
  loom::stats::Scope whole(loom::stats::kCompletion);
  RequestTable* t = active_table();
  if (polling(t) || any_waits_unsafe())
    return poll_until([&](int* flag) { return MPI_Test(req, flag, status); });
  PendingOp op;
  if (!t || !req || !t->take(*req, &op)) return LOOM_NEXT(MPI_Wait)(req, status);
  MPI_Status st;
  int rc = LOOM_NEXT(MPI_Wait)(req, &st);
  if (rc == MPI_SUCCESS)
    rc = finish(op, st);
  else
    ack_truncated_header(op, rc);
  if (status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

int MPI_Test(MPI_Request* req, int* flag, MPI_Status* status) {
  loom::stats::Scope whole(loom::stats::kCompletion);
  RequestTable* t = active_table();
  PendingOp op;
  if (!t || !req || !t->take(*req, &op)) return LOOM_NEXT(MPI_Test)(req, flag, status);
  const MPI_Request before = *req;
  MPI_Status st;
  int rc = LOOM_NEXT(MPI_Test)(req, flag, &st);
  if (rc == MPI_SUCCESS && !*flag) {
    t->add(before, std::move(op));  // still pending: its handle cannot have been reused
    return rc;
  }
  if (rc == MPI_SUCCESS)
    rc = finish(op, st);
  else
    ack_truncated_header(op, rc);
  if (status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[]) {
  loom::stats::Scope whole(loom::stats::kCompletion);
  RequestTable* t = active_table();
  if (polling(t) || any_waits_unsafe())
    return poll_until([&](int* flag) { return MPI_Testall(n, reqs, flag, statuses); });
  if (!t || n <= 0) return LOOM_NEXT(MPI_Waitall)(n, reqs, statuses);
  Taken taken(*t, reqs, n);
  std::vector<MPI_Status> local;
  MPI_Status* st = statuses_or_local(statuses, n, local);
  int rc = LOOM_NEXT(MPI_Waitall)(n, reqs, st);
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return rc;
  return finish_listed(taken, nullptr, n, st, rc);
}

int MPI_Testall(int n, MPI_Request reqs[], int* flag, MPI_Status statuses[]) {
  loom::stats::Scope whole(loom::stats::kCompletion);
  RequestTable* t = active_table();
  if (!t || n <= 0) return LOOM_NEXT(MPI_Testall)(n, reqs, flag, statuses);
  // Not all complete yet (the usual answer in a polling MPI_Waitall): said
  // without taking every op out of the table and putting it back.
  const AllComplete all = all_complete(*t, n, reqs);
  if (all == AllComplete::kNo) {
    *flag = 0;
    return MPI_SUCCESS;
  }
  Taken taken(*t, reqs, n);
  std::vector<MPI_Status> local;
  MPI_Status* st = statuses_or_local(statuses, n, local);
  int rc = test_all(all, n, reqs, flag, st);
  if (rc == MPI_SUCCESS && !*flag) return rc;  // none completed: all go back
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return rc;
  return finish_listed(taken, nullptr, n, st, rc);
}

int MPI_Waitany(int n, MPI_Request reqs[], int* index, MPI_Status* status) {
  RequestTable* t = active_table();
  if (polling(t) || any_waits_unsafe())
    return poll_until([&](int* flag) { return MPI_Testany(n, reqs, index, flag, status); });
  if (!t || n <= 0) return LOOM_NEXT(MPI_Waitany)(n, reqs, index, status);
  int flag = 1;
  return any(*t, n, reqs, index, &flag, status,
             [&](MPI_Status* st) { return LOOM_NEXT(MPI_Waitany)(n, reqs, index, st); });
}

int MPI_Testany(int n, MPI_Request reqs[], int* index, int* flag, MPI_Status* status) {
  RequestTable* t = active_table();
  if (!t || n <= 0) return LOOM_NEXT(MPI_Testany)(n, reqs, index, flag, status);
  return any(*t, n, reqs, index, flag, status,
             [&](MPI_Status* st) { return LOOM_NEXT(MPI_Testany)(n, reqs, index, flag, st); });
}

int MPI_Waitsome(int n, MPI_Request reqs[], int* outcount, int indices[], MPI_Status statuses[]) {
  if (RequestTable* t = active_table(); polling(t) || any_waits_unsafe())
    return poll_until([&](int* flag) {
      const int rc = MPI_Testsome(n, reqs, outcount, indices, statuses);
      *flag = *outcount != 0;
      return rc;
    });
  return some(LOOM_NEXT(MPI_Waitsome), n, reqs, outcount, indices, statuses);
}

int MPI_Testsome(int n, MPI_Request reqs[], int* outcount, int indices[], MPI_Status statuses[]) {
  return some(LOOM_NEXT(MPI_Testsome), n, reqs, outcount, indices, statuses);
}

// A zero-copy send's request is the receive of its ack: cancelling that
// would report the send cancelled while the receiver still reads the
// buffer. Such a cancel fails instead (MPI allows it): the send completes
// when the message is received.
int MPI_Cancel(MPI_Request* req) {
  loom::Runtime* rt = loom::runtime();
  if (rt && req && rt->rv && rt->requests.holds(*req, PendingOp::Kind::kZeroSend))
    return MPI_SUCCESS;
  return LOOM_NEXT(MPI_Cancel)(req);
}

// A request's status says complete only once Loom has finished it: a
// device receive's bytes are in the user's buffer, a device send's pack has
// read the user's.
int MPI_Request_get_status(MPI_Request req, int* flag, MPI_Status* status) {
  RequestTable* t = active_table();
  int rc = MPI_SUCCESS;
  if (t && flag && t->status_of(req, flag, status, &rc)) return rc;
  return LOOM_NEXT(MPI_Request_get_status)(req, flag, status);
}

int MPI_Request_free(MPI_Request* req) {
  loom::Runtime* rt = loom::runtime();
  if (rt && req && (rt->rv || rt->requests.has_persistent_colls()))
    rt->requests.forget_persistent(*req);
  RequestTable* t = active_table();
  PendingOp op;
  if (!t || !req || !t->take(*req, &op)) {
    if (rt && req && free_when_complete(*req)) {
      rt->requests.detach(*req, PendingOp{});  // the MPI's own operation: nothing to finish
      *req = MPI_REQUEST_NULL;
      return MPI_SUCCESS;
    }
    return LOOM_NEXT(MPI_Request_free)(req);
  }
  if (op.kind == PendingOp::Kind::kDone) return LOOM_NEXT(MPI_Request_free)(req);  // inactive
  // The operation still completes; Loom tests it later and finishes it then.
  t->detach(*req, std::move(op));
  *req = MPI_REQUEST_NULL;
  return MPI_SUCCESS;
}

}  // extern "C"
