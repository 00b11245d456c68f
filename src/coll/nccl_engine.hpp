// The NCCL engine: collectives on contiguous device buffers run by NCCL,
// for communicators where every rank has a GPU of its own (NCCL refuses two
// ranks on one GPU; the node-local engine serves those). libnccl is opened
// at first use, not linked: Loom loads and runs where NCCL is absent, and
// the engine is then simply not there (LOOM_LOG=info says why).
//
// The NCCL communicator is made lazily, from an id rank 0 broadcasts over
// the MPI communicator, kept on it as an attribute and destroyed with it
// (or at MPI_Finalize). Each call runs on the communicator's stream, which
// follows the application's work on the legacy default stream, and is
// synchronised before it returns, as a blocking MPI call must be.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/mpi_wait.hpp"
#include "util/status.hpp"

namespace loom::coll::nccl {

// libnccl is there and its entry points were found.
bool available(std::string* why);

// Collective over comm on its first call (the verdict is kept on comm):
// every rank of comm has NCCL and a GPU no other rank of comm uses.
// `wait`: that first exchange goes nonblocking, waited for by it
// (transport/mpi_wait.hpp).
bool usable(MPI_Comm comm, transport::WaitFn wait = nullptr);

// Makes comm's NCCL communicator now, if it is not made yet (collective
// over comm on that first call; usable(comm) must be true): a nonblocking
// call makes it where its first-use set-up already synchronises the ranks.
Status prepare(MPI_Comm comm);

// The NCCL element type and op for a reduction of t with op; false when
// NCCL has none (MINLOC, logical and bitwise ops, user ops, short ints...).
bool reducible(MPI_Datatype t, MPI_Op op);

// A call's NCCL work left running (nonblocking calls): finished() is true
// once the GPU has run it, with *err set where it failed.
class Pending {
 public:
  Pending() = default;
  explicit Pending(std::shared_ptr<void> event) : event_(std::move(event)) {}
  bool finished(Status* err) const;

 private:
  std::shared_ptr<void> event_;  // a cudaEvent_t recorded after the work
};

// The operations, on device memory (counts in elements of t for the
// reductions, in bytes for the rest). in == out is in place. With `later`
// the call returns once its work is queued on the communicator's stream
// (*later tells when it is done); without, once it is done.
Status allreduce(MPI_Comm comm, const void* in, void* out, size_t count, MPI_Datatype t, MPI_Op op,
                 Pending* later = nullptr);
Status reduce(MPI_Comm comm, const void* in, void* out, size_t count, MPI_Datatype t, MPI_Op op,
              int root, Pending* later = nullptr);
Status reduce_scatter_block(MPI_Comm comm, const void* in, void* out, size_t count_each,
                            MPI_Datatype t, MPI_Op op);
Status bcast(MPI_Comm comm, void* buf, size_t bytes, int root, Pending* later = nullptr);
Status allgather(MPI_Comm comm, const void* in, void* out, size_t bytes_each,
                 Pending* later = nullptr);
// One block of a point-to-point exchange: `bytes` of device memory at
// `buf`, to or from `peer` (a rank of comm, this one included).
struct Xfer {
  int peer = 0;
  const void* buf = nullptr;
  size_t bytes = 0;
};
// Every send and receive in one NCCL group (the all-to-alls, gathers and
// scatters): blocks between two ranks pair in the order each lists them
// (NCCL keeps a pair's order).
Status exchange(MPI_Comm comm, const std::vector<Xfer>& sends, const std::vector<Xfer>& recvs,
                Pending* later = nullptr);

// Calls NCCL ran in this process (tests and LOOM_STATS-like checks).
uint64_t calls();

// Destroys every NCCL communicator still open (at MPI_Finalize).
void shutdown();

}  // namespace loom::coll::nccl
