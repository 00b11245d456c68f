// An MPI call of Loom's own made either blocking, or as its nonblocking
// form waited for by a hook. The interposer's hook keeps Loom's receives
// moving while it waits (mpi/blocking.hpp), so zero-copy senders are not
// held by a rank blocked in the MPI; the collective engines take it from
// their callers (coll::NodeEnv::wait, coll::nccl::usable).
#pragma once

#include <mpi.h>

namespace loom::transport {

// Waits for one of the MPI's own requests; null: make the call blocking.
using WaitFn = int (*)(MPI_Request*);

// `blocking()`, or with `wait` set, `nonblocking(&r)` then wait(&r).
template <class Blocking, class Nonblocking>
int call_or_wait(WaitFn wait, Blocking blocking, Nonblocking nonblocking) {
  if (!wait) return blocking();
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = nonblocking(&r);
  return rc != MPI_SUCCESS ? rc : wait(&r);
}

}  // namespace loom::transport
