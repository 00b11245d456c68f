// A host mirror of the bytes a device buffer's data spans (gaps included),
// for the point-to-point calls that hand the MPI the caller's own count and
// type on host memory: persistent requests, the buffered mode, and the
// send-receive forms. Works for every datatype, those Loom cannot read too.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>

#include "mpi/coll_call.hpp"
#include "mpi/requests.hpp"

namespace loom::mpi {

struct SpanMirror {
  void* user = nullptr;  // the caller's pointer
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int64_t lo = 0;                  // the data's bytes: [user + lo, user + lo + staged.bytes)
  std::shared_ptr<MirrorSet> set;  // one entry, the staging; null: nothing to mirror
  // What the MPI is given in place of `user` (user itself when empty).
  void* host() const;
  bool empty() const { return !set; }
};

// Mirrors count elements of type at user (device memory); `down`: copies
// the span to the host now. `in`/`out`: what MirrorSet::down/up copy.
// Errors are raised on comm (returns the MPI error code).
int mirror_span(void* user, int count, MPI_Datatype type, MPI_Comm comm, bool in, bool out,
                bool down, SpanMirror* m);

// The op that finishes a receive into the mirror: a header the MPI
// delivered is pulled, then the whole span goes back up (kSpanRecv).
PendingOp span_recv_op(const SpanMirror& m, MPI_Comm comm);

}  // namespace loom::mpi
