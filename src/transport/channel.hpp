// A channel of the device method: the packed bytes of a message go from the
// sender's lent segment to the receiver by a transport of their own, for
// peers that cannot map the segment (another node), while the MPI still
// carries the header, and so matching, wildcards and order.
//
// Transfers of a pair (sender, receiver) go in the order the receiver asks
// for them: on matching a header it sends a ready message naming the
// message, then receives; the sender's progress thread starts a transfer
// for each ready in the order they arrive (MPI's non-overtaking rule keeps
// them in the receiver's order). Both ends issue the pair's transfers in
// one order, which is what NCCL's point-to-point needs.
//
//   NCCL: one 2-rank NCCL communicator per ordered pair, so a transfer never
//         waits behind one in the other direction (each pair has its own
//         stream); made when the receiver first asks, from an id it sends
//         with that ready.
//   MPI:  the host test mode: the bytes are host memory and go by the MPI on
//         a communicator of their own.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "util/status.hpp"

namespace loom::transport {

class Channel {
 public:
  // What a sender needs to join a pair (an NCCL unique id), sent with the
  // receiver's first ready.
  struct Offer {
    unsigned char bytes[128] = {};
  };
  virtual ~Channel() = default;
  virtual const char* name() const = 0;
  // The calling thread's GPU is the one the channel moves from and to (the
  // sender's thread then works on it too). Called where messages are lent.
  virtual void note_device() {}

  // Receiver: true when the pair from world rank `from` must be joined
  // first; *offer then goes with the ready.
  virtual Result<bool> offer(int from, Offer* offer) = 0;
  // Receiver, once that ready is sent: joins the pair (until the sender has).
  virtual Status join_receiver(int from, const Offer& offer) = 0;
  // Sender, on a ready with an offer.
  virtual Status join_sender(int to, const Offer& offer) = 0;
  // Sender: starts moving `bytes` at src to world rank `to`; the ticket is
  // for done().
  virtual Result<uint64_t> start_send(int to, const void* src, size_t bytes) = 0;
  // Sender: the transfer of `ticket` has read its source.
  virtual Result<bool> done(uint64_t ticket) = 0;
  // Receiver: the next transfer from `from`, `bytes` into dst; returns once
  // they are there.
  virtual Status recv(int from, void* dst, size_t bytes) = 0;
  // After the last transfer: frees what the pairs hold.
  virtual void shutdown() = 0;
};

// NCCL between GPUs (device memory), for the process of `world_rank`;
// kUnsupported where libnccl is missing.
Result<std::unique_ptr<Channel>> make_nccl_channel(int world_rank);
// The MPI on a duplicate of `world` (host memory; the host test mode).
std::unique_ptr<Channel> make_mpi_channel(MPI_Comm world);

}  // namespace loom::transport
