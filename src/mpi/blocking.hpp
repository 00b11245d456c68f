// Blocking MPI calls made while zero-copy senders may wait on this rank.
//
// A zero-copy send completes only once its receiver has read the buffer, as
// an MPI's rendezvous send does, and MPI's progress rule requires such a
// send to complete whatever blocking call its receiver makes next. An MPI
// progresses its own rendezvous inside any of its calls; Loom's pulls run
// only in Loom's code. So a blocking call Loom hands to the MPI becomes its
// nonblocking form and a loop that tests it and finishes the receives that
// land meanwhile: a send on host buffers while this rank has operations of
// Loom's in flight; a collective (on host buffers or mirrors, MPI_Barrier,
// the collective engines' own exchanges) whenever zero-copy is on.
// Otherwise the blocking call itself, at no cost.
#pragma once

#include <mpi.h>

#include "transport/mpi_wait.hpp"

namespace loom::mpi {

// A point-to-point call: zero-copy is on and this rank has operations in
// flight (sends and receives match their nonblocking forms, so each rank
// may choose alone).
bool must_poll();
// A collective call: zero-copy is on in this job. MPI does not match a
// blocking collective with a nonblocking one, so every rank of the job
// must choose alike.
bool collectives_poll();
// One round of Loom's progress: lent segments returned, nonblocking
// collectives' schedules advanced, landed receives finished.
void progress_loom();
// Waits for one of the MPI's own requests, progressing Loom meanwhile.
int wait_polling(MPI_Request* r);

// For the collective engines' own exchanges (coll::NodeEnv::wait):
// wait_polling where collectives_poll(), else null (blocking calls).
transport::WaitFn collective_wait();

// A blocking collective (its name without MPI_, and its first argument) the
// MPI's nonblocking form would not do alike, so it stays blocking: the
// neighbour collectives (Open MPI pairs a repeated neighbour's blocks
// differently in them) and Alltoallw in place (MPICH 4.0's Ialltoallw
// fails on it). Alike on every rank: MPI_IN_PLACE is given by all or none.
constexpr bool starts_with(const char* s, const char* prefix) {
  for (; *prefix; ++prefix, ++s)
    if (*prefix != *s) return false;
  return true;
}
inline bool stays_blocking(const char* name, const void* first) {
  if (starts_with(name, "Neighbor_")) return true;
  return first == MPI_IN_PLACE && starts_with(name, "Alltoallw");
}

// `blocking()`, or where `poll`, `nonblocking(&r)` and wait_polling(&r).
template <class Blocking, class Nonblocking>
int blocking_call(bool poll, Blocking blocking, Nonblocking nonblocking) {
  return transport::call_or_wait(poll ? wait_polling : nullptr, blocking, nonblocking);
}

}  // namespace loom::mpi
