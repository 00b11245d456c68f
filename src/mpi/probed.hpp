// Messages Loom took off the MPI's queue at a probe. While the device method
// is on, a 128-byte message from a peer of this node may be a header standing
// for a larger message, and only its bytes tell: so MPI_Probe and friends
// receive such a message, keep it here and report the real message's size.
// The receive that matches it later is completed from here.
//
// Order: a probe with a specific tag may match a message while older ones
// from the same source (other tags) wait in the MPI's queue; a later
// MPI_ANY_TAG receive must get those first. So Loom takes every message of
// that source up to the probed one, in order: per (communicator, source),
// what is kept here is always the oldest undelivered messages, and a receive
// looks here first. Receives that nothing here matches go to the MPI.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mpi/device_pull.hpp"

namespace loom::mpi {

struct Probed {
  MPI_Comm comm = MPI_COMM_NULL;
  int source = 0;
  int tag = 0;
  std::vector<char> bytes;  // as the MPI delivered them
  bool header = false;      // a device-method header: the message is in h's segment
  Header h;
  uint64_t size() const { return header ? h.bytes : bytes.size(); }
};

class ProbedMessages {
 public:
  explicit ProbedMessages(Rendezvous& rv) : rv_(rv) {}
  bool empty() const { return n_.load(std::memory_order_acquire) == 0; }

  // The oldest kept message a receive (source, tag) on comm matches: copied,
  // or taken out with `remove`.
  bool find(MPI_Comm comm, int source, int tag, bool remove, Probed* out);
  // After the MPI's probe matched the message `st` on comm: if it may be a
  // header, takes it (with the older messages of its source) off the MPI's
  // queue and sets st as for the real message. Returns an MPI error code.
  int take(MPI_Comm comm, MPI_Status& st);
  // After the MPI's matched probe: the same for the message behind *msg,
  // which is received here at once; *msg becomes a handle of Loom's.
  int take_matched(MPI_Comm comm, MPI_Message* msg, MPI_Status& st);

  // Handles of Loom's for MPI_Mprobe/MPI_Improbe, redeemed by MPI_Mrecv/MPI_Imrecv.
  MPI_Message hold(Probed p);
  bool redeem(MPI_Message m, Probed* out);
  bool holding() const { return n_held_.load(std::memory_order_acquire) != 0; }

 private:
  bool maybe_header(MPI_Comm comm, const MPI_Status& st);
  Result<Probed> receive(MPI_Comm comm, MPI_Message* msg, const MPI_Status& st);

  Rendezvous& rv_;
  std::mutex mu_;
  std::unordered_map<MPI_Comm, std::deque<Probed>> kept_;
  std::atomic<size_t> n_{0};
  std::unordered_map<uint64_t, std::unique_ptr<Probed>> held_;
  std::atomic<size_t> n_held_{0};
  uint32_t next_id_ = 1;
};

// The status the MPI would give for p's message (its real size).
void probed_status(const Probed& p, MPI_Status& st);

// The kept message a receive (source, tag) on comm takes, if any (cheap when
// nothing is kept).
bool take_probed(MPI_Comm comm, int source, int tag, Probed* out);

// Completes a receive with a kept message, into host or device memory, as
// the MPI would have: fills st; truncation is raised on comm.
int deliver(Probed& p, void* buf, int count, MPI_Datatype type, MPI_Comm comm, MPI_Status& st);

// MPI_Sendrecv_replace whose receive a kept message meets.
int sendrecv_replace_probed(Probed& kept, void* buf, int count, MPI_Datatype t, int dest, int stag,
                            MPI_Comm comm, MPI_Status* status);

// MPI_Start of one persistent request (guards.cpp), kept messages first.
int start_one(MPI_Request* r);

// A request that is already complete with status st (a generalized request),
// for a non-blocking receive met by a kept message.
int completed_request(const MPI_Status& st, MPI_Request* req);

}  // namespace loom::mpi
