// The node-local collective engine: every rank of a communicator that lives
// on one node packs its contribution into a segment of memory it lends to
// the others (CUDA IPC on a GPU, shared memory in the host test mode), the
// ranks swap the segments' handles with one small host allgather, and each
// rank then pulls what it needs straight out of its peers' segments, GPU to
// GPU, unpacking into its own layout (derived types included) or reducing
// with GPU kernels. A last allreduce says that every rank has finished
// reading, and agrees on the outcome.
//
//   rank r:  pack -> segment r ─┐  allgather   ┌─> read segments 0..n-1
//                               └─ handles ────┘   (unpack / reduce) -> recvbuf
//            allreduce(err): everyone done reading; segments go back
//
// The allgather doubles as the agreement: a rank that cannot take part
// (host buffer, a type Loom cannot read, no memory) says so there, and then
// every rank declines alike and the caller falls back to the MPI's own
// collective on host mirrors. Callers must only enter on conditions every
// rank evaluates alike (message size, communicator, settings).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "coll/reduce_op.hpp"
#include "transport/mover.hpp"
#include "transport/mpi_wait.hpp"
#include "transport/peer_memory.hpp"
#include "util/status.hpp"

namespace loom::coll {

// Reduces n inputs into out in the fixed order in[0] op in[1] op ... (on the
// GPU, or on the host in the test mode); done when it returns.
inline constexpr int kMaxOutputs = 16;  // of one Reducer::reduce_to

class Reducer {
 public:
  virtual ~Reducer() = default;
  Status reduce(ReduceOp op, Basic b, const void* const* in, int n, void* out, size_t count) {
    return reduce_to(op, b, in, n, &out, 1, count);
  }
  // The same result written to each of outs[0..nout-1] (up to
  // kMaxOutputs), any of which may be an input.
  virtual Status reduce_to(ReduceOp op, Basic b, const void* const* in, int n, void* const* outs,
                           int nout, size_t count) = 0;
};
std::unique_ptr<Reducer> make_host_reducer();
// On the current device (needs a CUDA build and a GPU).
Result<std::unique_ptr<Reducer>> make_gpu_reducer();

struct NodeEnv {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 0;
  transport::PeerMemory* mem = nullptr;
  transport::Mover* mover = nullptr;
  Reducer* reducer = nullptr;
  // Contiguous device buffers of at least this many bytes are lent as they
  // lie (CUDA IPC of the user's allocation; -1: never) rather than copied
  // into segments (LOOM_COLL_LEND_MIN). Peers keep the mapping between calls
  // and drop it once the lender lends memory over a range it freed
  // (transport::PeerMemory::open_user).
  int64_t lend_min = -1;
  int world_rank = 0;  // this rank's, which names it as a lender
  // Set where zero-copy senders may wait on this rank (mpi/blocking.hpp):
  // the engine's own exchanges go as nonblocking calls, and this waits for
  // them while finishing the receives that land. Null: blocking calls.
  transport::WaitFn wait = nullptr;
};

// A buffer and Loom's view of what it holds; `msg.form` null: this rank
// cannot take part (the call declines on every rank).
struct Part {
  transport::Message msg;
  void* user = nullptr;
  bool in_place = false;  // MPI_IN_PLACE: the data is in the receive buffer
  bool ok() const { return msg.form != nullptr && user != nullptr; }
};

enum class Outcome { kDone, kDeclined, kFailed };

// Alltoall: `send` holds n blocks (the block for rank p is the p-th
// n-th of it), `recv` n blocks of `recv_block` (one element count), the
// p-th from rank p. In place (send.in_place), send is taken from recv.
Outcome alltoall(const NodeEnv& e, Part send, const Part& recv_block, int64_t recv_stride);
// Allgather: `send` is this rank's block (in place: recv's r-th); every
// rank's lands at recv + p * recv_stride.
Outcome allgather(const NodeEnv& e, Part send, const Part& recv_block, int64_t recv_stride);
// Bcast from root: root's `buf` goes to every other rank's.
Outcome bcast(const NodeEnv& e, const Part& buf, int root);
// Allreduce of `count` contiguous elements of basic type b, folded in rank
// order, so all get the same bits: every rank folds all ranks' inputs, or,
// with `split` (which every rank must pass alike: split_allreduce()), each
// rank folds 1/n of them and the others copy its piece (reduce-scatter,
// then allgather). `in` null: in place (the input is `out`).
Outcome allreduce(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op, Basic b,
                  bool can, bool split);
// Whether an Allreduce of `count` elements of `bytes` bytes in all on n ranks
// splits: from 4 MiB, where the reads it saves outweigh its barrier.
inline bool split_allreduce(int64_t count, int64_t bytes, int n) {
  return bytes >= (int64_t{4} << 20) && count >= n;
}
// Reduce to `root` (only its `out` is written), the same fold.
Outcome reduce(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op, Basic b,
               bool can, int root);
// Reduce_scatter_block: each rank's input holds n blocks of `count`; rank r
// gets the fold of every rank's r-th block in `out`. `in` null: in place (the
// input is `out`, the result its first block).
Outcome reduce_scatter_block(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op,
                             Basic b, bool can);
// Reduce_scatter: each rank's input holds sum(counts) elements; rank r gets
// the fold of every rank's counts[r] elements from sum(counts[0..r-1]) on.
// `in` null: in place (the input is `out`, the result at its start).
Outcome reduce_scatter(const NodeEnv& e, const void* in, void* out,
                       const std::vector<size_t>& counts, ReduceOp op, Basic b, bool can);
// Scan: rank r gets the fold of ranks 0..r's inputs in rank order; with
// `exclusive` (Exscan) of ranks 0..r-1, and rank 0's `out` is left alone.
// `in` null: in place.
Outcome scan(const NodeEnv& e, const void* in, void* out, size_t count, ReduceOp op, Basic b,
             bool can, bool exclusive);

// One block of the v, w and neighbour all-to-alls: `part` (its type and
// count, at its place in the caller's buffer) to or from rank `peer`.
// A sent block's peer: every rank (this one too), or every rank but this
// one; such a block must be the only one sent, and is packed once.
constexpr int kEveryRank = -1000001, kEveryOther = -1000002;  // apart from MPI_PROC_NULL
struct Block {
  int peer = 0;
  Part part;
  // Received blocks: the k-th block a sender sends this rank lands in the
  // block from that sender with the k-th smallest key (keys ascending with
  // the blocks: MPI's posting order, which repeated neighbours follow).
  int key = 0;
};
// Every rank packs its outgoing blocks into one segment it lends, grouped by
// destination in the order given, and one small PMPI_Alltoall of
// descriptors (which is also the agreement) tells each rank where its bytes
// start in each peer's segment; the block a rank receives from rank p with
// the k-th smallest key is then unpacked from the k-th block p sends it, a
// rank's blocks to itself included, all pulls issued before one wait. `can` false: this rank cannot
// take part (every rank declines). A block's received bytes that do not match what its sender sent
// fail the call.
Outcome exchange(const NodeEnv& e, const std::vector<Block>& out, const std::vector<Block>& in,
                 bool can);

}  // namespace loom::coll
