// Nonblocking collectives on device buffers as schedules of Loom's own
// point-to-point messages (the libNBC design): MPI_Ialltoall and its kin
// post every message of the call at once, on a private twin of the
// communicator, and the request the caller gets completes once they all
// have, after a last local step (a reduction's fold in rank order).
//
//   MPI_Ialltoall(dev...) --> Irecv x n, Isend x n on the twin (Loom's own:
//                             the device method, any datatype, any placement)
//   MPI_Wait(req)         --> Testall of those; then fold; Grequest_complete
//
// Everything a rank sends is posted by the call itself, so a rank's
// collective completes with its peers' calls made and their MPI progressing,
// whatever they do next (a blocking receive of a message sent after the
// peer's wait included): no rank waits for a peer's completion call.
// Because every rank posts all of its messages, buffers on the host and on
// the device mix freely between ranks and no agreement is needed.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <vector>

#include "transport/mover.hpp"

namespace loom::mpi {

// One message of a schedule: `count` elements of `type` at `buf`, to or
// from `peer` (a rank of the caller's communicator).
struct SchedMsg {
  void* buf = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int peer = 0;
};

struct Schedule {
  // Receives post first, in order: the k-th receive from a peer matches the
  // k-th message it sends (one tag, MPI's non-overtaking order).
  std::vector<SchedMsg> recvs, sends;
  // After every message has completed (a reduction's fold): an MPI error code.
  std::function<int()> finish;
  // GPU work the schedule runs too (NCCL's, on a communicator where every
  // rank has a GPU of its own): `launch` queues it when the schedule starts
  // (not when a persistent _init only asks), an MPI error code; `done`
  // says when it has run. Its peers' work is queued by their own calls, so
  // it completes with no completion call of theirs.
  std::function<int()> launch;
  std::function<bool()> done;
  // The datatypes `launch` and `finish` use (a persistent collective keeps
  // them from its _init on, as it does its messages' types).
  std::vector<MPI_Datatype> types;
  // Memory that must live until then (copies of in-place inputs, received
  // inputs of a fold).
  std::vector<transport::Staged> scratch;
  std::vector<std::vector<char>> host_scratch;
};

// Posts s's messages on comm's twin and hands the caller its request in
// *req. Errors go through comm's handler.
int start_schedule(MPI_Comm comm, std::shared_ptr<Schedule> s, MPI_Request* req);

// The persistent forms (MPI-4 MPI_..._init, Open MPI 4.1's MPIX_..._init).
// `run` makes the call's engine start a schedule into the request it is
// given, as the MPI_I... form does, and returns its result, or kNoSchedule
// where the engine leaves the call to the host mirrors.
//
//   MPIX_Allreduce_init(...) --> run once, posting nothing: would it schedule?
//                                yes: *req = a persistent receive of Loom's
//   MPI_Start(req)           --> start that receive, run (posts the messages)
//   (schedule done)          --> a message to self with the round's error
//                                code completes the receive: MPI_Wait, Test
//                                and their kin work on it unchanged
//
// The receive is on a private duplicate of MPI_COMM_SELF, with a tag of its
// own. Returns false where the call takes the mirrors (nothing was made);
// true with the call's result in *rc otherwise.
constexpr int kNoSchedule = -1;
using ScheduleRun = std::function<int(MPI_Request*)>;
bool persistent_schedule(MPI_Comm comm, ScheduleRun run, MPI_Request* req, int* rc);

// A persistent collective of Loom's (a request persistent_schedule made).
struct PersistentSchedule;
// MPI_Start of such a request r (guards.cpp): r is active once it returns,
// also when the round failed to start (its completion reports the error).
int start_persistent(const std::shared_ptr<PersistentSchedule>& p, MPI_Request* r);
// The error code of r's last round, once r completed (requests.cpp's finish).
int persistent_result(const PersistentSchedule& p);

// Tests the messages of every schedule in flight and completes the requests
// of those done (each completion call runs it first).
void progress_schedules();
// This thread is posting a schedule's messages. Its sends are then never
// zero-copy ones, which complete only once the receiver has read them:
// the collective would then wait for a peer's completion call.
bool posting_schedule();

// comm's private twin (MPI_ERRORS_RETURN), made at the first call that asks
// for it (one every rank of comm makes at the same point: a nonblocking
// collective's schedule, a pipelined staged collective) and freed with comm.
int twin_comm(MPI_Comm comm, MPI_Comm* out);

// Schedules started so far in this process (loom_coll_schedules()).
long long schedules_started();

// Some schedule is in flight: a blocking completion call must poll, since
// the MPI alone would never complete its request.
bool schedules_live();

}  // namespace loom::mpi
