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
//         stream); all made at MPI_Init, on the GPU current then.
//   MPI:  the host test mode: the bytes are host memory and go by the MPI on
//         a communicator of their own.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "util/status.hpp"

namespace loom::transport {

class Channel {
 public:
  virtual ~Channel() = default;
  virtual const char* name() const = 0;
  // Collective over `world`: connects this process with each world rank of
  // `peers` both ways, on the GPU current now. Every process must pass the
  // peers that name it. Nothing of the channel may run meanwhile: making
  // NCCL communicators while NCCL kernels wait for other processes can
  // deadlock (NCCL's set-up synchronises with the device).
  virtual Status connect(MPI_Comm world, const std::vector<int>& peers) = 0;
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
