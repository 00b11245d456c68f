// MPI_Wait / MPI_Test families and MPI_Request_free. Loom's device
// operations are real MPI requests: the MPI completes them, then Loom
// finishes them (unpacks a receive, returns its staging). With no device
// operation in flight these calls cost one atomic load before the MPI's own.
#include <mpi.h>

#include <vector>

#include "mpi/next.hpp"
#include "mpi/requests.hpp"
#include "mpi/runtime.hpp"

namespace loom::mpi {
namespace {

RequestTable* active_table() {
  Runtime* rt = runtime();
  if (!rt || rt->requests.empty()) return nullptr;
  rt->requests.progress();
  return &rt->requests;
}

// Finishes the ops of requests completed by a multiple-completion call:
// `which` lists the indices into `before` (the request values before the call).
int finish_some(RequestTable& t, const std::vector<MPI_Request>& before, const int* which, int n,
                MPI_Status* st, bool all_ok, int rc) {
  for (int k = 0; k < n; ++k) {
    const int i = which ? which[k] : k;
    PendingOp op;
    if (!t.take(before[i], &op)) continue;
    if (!all_ok && st[k].MPI_ERROR == MPI_ERR_PENDING) {  // not completed: still Loom's
      t.add(before[i], std::move(op));
      continue;
    }
    if (!all_ok && st[k].MPI_ERROR != MPI_SUCCESS) continue;
    int e = finish(op, st[k]);
    if (e != MPI_SUCCESS) {
      st[k].MPI_ERROR = e;
      rc = MPI_ERR_IN_STATUS;
    }
  }
  return rc;
}

}  // namespace
}  // namespace loom::mpi

using namespace loom::mpi;

extern "C" {

int MPI_Wait(MPI_Request* req, MPI_Status* status) {
  RequestTable* t = active_table();
  PendingOp op;
  if (!t || !req || !t->take(*req, &op)) return LOOM_NEXT(MPI_Wait)(req, status);
  MPI_Status st;
  int rc = LOOM_NEXT(MPI_Wait)(req, &st);
  if (rc == MPI_SUCCESS) rc = finish(op, st);
  if (status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

int MPI_Test(MPI_Request* req, int* flag, MPI_Status* status) {
  RequestTable* t = active_table();
  PendingOp op;
  if (!t || !req || !t->take(*req, &op)) return LOOM_NEXT(MPI_Test)(req, flag, status);
  const MPI_Request before = *req;
  MPI_Status st;
  int rc = LOOM_NEXT(MPI_Test)(req, flag, &st);
  if (rc != MPI_SUCCESS || !*flag) {
    if (rc == MPI_SUCCESS) t->add(before, std::move(op));
    return rc;
  }
  rc = finish(op, st);
  if (status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[]) {
  RequestTable* t = active_table();
  if (!t || n <= 0) return LOOM_NEXT(MPI_Waitall)(n, reqs, statuses);
  std::vector<MPI_Request> before(reqs, reqs + n);
  std::vector<MPI_Status> local;
  MPI_Status* st = statuses;
  if (statuses == MPI_STATUSES_IGNORE) {
    local.resize(n);
    st = local.data();
  }
  int rc = LOOM_NEXT(MPI_Waitall)(n, reqs, st);
  return finish_some(*t, before, nullptr, n, st, rc == MPI_SUCCESS, rc);
}

int MPI_Testall(int n, MPI_Request reqs[], int* flag, MPI_Status statuses[]) {
  RequestTable* t = active_table();
  if (!t || n <= 0) return LOOM_NEXT(MPI_Testall)(n, reqs, flag, statuses);
  std::vector<MPI_Request> before(reqs, reqs + n);
  std::vector<MPI_Status> local;
  MPI_Status* st = statuses;
  if (statuses == MPI_STATUSES_IGNORE) {
    local.resize(n);
    st = local.data();
  }
  int rc = LOOM_NEXT(MPI_Testall)(n, reqs, flag, st);
  if (rc == MPI_SUCCESS && !*flag) return rc;  // nothing completed: all stay Loom's
  return finish_some(*t, before, nullptr, n, st, rc == MPI_SUCCESS, rc);
}

int MPI_Waitany(int n, MPI_Request reqs[], int* index, MPI_Status* status) {
  RequestTable* t = active_table();
  if (!t || n <= 0) return LOOM_NEXT(MPI_Waitany)(n, reqs, index, status);
  std::vector<MPI_Request> before(reqs, reqs + n);
  MPI_Status st;
  int rc = LOOM_NEXT(MPI_Waitany)(n, reqs, index, &st);
  PendingOp op;
  if (rc == MPI_SUCCESS && *index != MPI_UNDEFINED && t->take(before[*index], &op))
    rc = finish(op, st);
  if (status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

int MPI_Testany(int n, MPI_Request reqs[], int* index, int* flag, MPI_Status* status) {
  RequestTable* t = active_table();
  if (!t || n <= 0) return LOOM_NEXT(MPI_Testany)(n, reqs, index, flag, status);
  std::vector<MPI_Request> before(reqs, reqs + n);
  MPI_Status st;
  int rc = LOOM_NEXT(MPI_Testany)(n, reqs, index, flag, &st);
  PendingOp op;
  if (rc == MPI_SUCCESS && *flag && *index != MPI_UNDEFINED && t->take(before[*index], &op))
    rc = finish(op, st);
  if (status != MPI_STATUS_IGNORE && *flag) *status = st;
  return rc;
}

int MPI_Waitsome(int n, MPI_Request reqs[], int* outcount, int indices[], MPI_Status statuses[]) {
  RequestTable* t = active_table();
  if (!t || n <= 0) return LOOM_NEXT(MPI_Waitsome)(n, reqs, outcount, indices, statuses);
  std::vector<MPI_Request> before(reqs, reqs + n);
  std::vector<MPI_Status> local;
  MPI_Status* st = statuses;
  if (statuses == MPI_STATUSES_IGNORE) {
    local.resize(n);
    st = local.data();
  }
  int rc = LOOM_NEXT(MPI_Waitsome)(n, reqs, outcount, indices, st);
  if (*outcount == MPI_UNDEFINED) return rc;
  return finish_some(*t, before, indices, *outcount, st, rc == MPI_SUCCESS, rc);
}

int MPI_Testsome(int n, MPI_Request reqs[], int* outcount, int indices[], MPI_Status statuses[]) {
  RequestTable* t = active_table();
  if (!t || n <= 0) return LOOM_NEXT(MPI_Testsome)(n, reqs, outcount, indices, statuses);
  std::vector<MPI_Request> before(reqs, reqs + n);
  std::vector<MPI_Status> local;
  MPI_Status* st = statuses;
  if (statuses == MPI_STATUSES_IGNORE) {
    local.resize(n);
    st = local.data();
  }
  int rc = LOOM_NEXT(MPI_Testsome)(n, reqs, outcount, indices, st);
  if (*outcount == MPI_UNDEFINED) return rc;
  return finish_some(*t, before, indices, *outcount, st, rc == MPI_SUCCESS, rc);
}

int MPI_Request_free(MPI_Request* req) {
  RequestTable* t = active_table();
  PendingOp op;
  if (!t || !req || !t->take(*req, &op)) return LOOM_NEXT(MPI_Request_free)(req);
  // The operation still completes; Loom tests it later and finishes it then.
  t->detach(*req, std::move(op));
  *req = MPI_REQUEST_NULL;
  return MPI_SUCCESS;
}

}  // extern "C"
