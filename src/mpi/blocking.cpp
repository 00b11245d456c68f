// Blocking MPI calls made while zero-copy senders may wait on this rank
// (blocking.hpp), and MPI_Barrier, the one such call that takes no buffer.
#include "mpi/blocking.hpp"

#include "mpi/coll_schedule.hpp"
#include "mpi/next.hpp"
#include "mpi/requests.hpp"
#include "mpi/runtime.hpp"
#include "stream/engine.hpp"

namespace loom::mpi {

bool must_poll() {
  Runtime* rt = runtime();
  return rt && rt->zero_copy_on() && !rt->requests.empty();
}

bool collectives_poll() {
  Runtime* rt = runtime();
  return rt && rt->zero_copy_on();
}

void progress_loom() {
  Runtime* rt = runtime();
  if (!rt) return;
  // Sends a stream holds back (MPIX_Isend_enqueue): the thread that
  // enqueues them is woken to send them now (not this one, which may be a
  // CUDA host function), as a blocking call here may wait for their peers.
  if (rt->streams && !Runtime::in_stream_thread()) rt->streams->flush_soon();
  if (rt->rv) rt->rv->progress();  // returns lent segments whose acks came
  progress_schedules();            // nonblocking collectives' messages
  if (rt->requests.empty()) return;
  rt->requests.progress();
  if (rt->zero_copy_on()) rt->requests.finish_landed(/*throttled=*/true);
}

int wait_polling(MPI_Request* r) {
  for (;;) {
    int flag = 0;
    const int rc = PMPI_Test(r, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || flag) return rc;
    progress_loom();
  }
}

transport::WaitFn collective_wait() {
  return collectives_poll() ? wait_polling : nullptr;
}

}  // namespace loom::mpi

extern "C" int MPI_Barrier(MPI_Comm comm) {
  return loom::mpi::blocking_call(
      loom::mpi::collectives_poll(), [&] { return LOOM_NEXT(MPI_Barrier)(comm); },
      [&](MPI_Request* r) { return LOOM_NEXT(MPI_Ibarrier)(comm, r); });
}
