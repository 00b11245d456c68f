// Loom's on-node path for matched MPIS pairs: once MPIS_Match has paired a
// send with a receive of another process of this node, every round moves on
// the two streams alone, with no host thread and no MPI call:
//
//   sender's stream (start k):       write mine = k
//   sender's stream (waitall):       wait theirs >= k          (read: the send is complete)
//   receiver's stream (waitall):     wait theirs >= k, read the sender's buffer, write mine = k
//
// The words are slots of the two processes' pair pages (shared memory the
// GPU reaches, transport/pair_words.hpp). The receiver reads the sender's
// own buffer through CUDA IPC: contiguous bytes by a copy, a derived type in
// the sender's layout by one transfer kernel (its layout goes ahead of the
// header). A send below LOOM_MPIS_ZCOPY_MIN bytes, memory that cannot be
// lent, and every send in the host test mode (shared memory in place of
// IPC) is packed first into a segment of the sender's, and completes at its
// start, as an eager send does: the next round's pack waits for the last
// to be read.
//
// MPIS_Match carries the offer (in the sender's header) and the answer (a
// message back on a communicator of Loom's own), so both ends agree. The
// sender learns the answer at its first start or free.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "stream/enqueue.hpp"
#include "transport/message_wire.hpp"
#include "transport/pair_words.hpp"
#include "transport/peer_memory.hpp"

namespace loom::stream {

struct PairOffer {
  enum Kind : int32_t { kNone = 0, kSegment = 1, kInPlace = 2 };
  int32_t kind = kNone;
  int32_t slot = -1;
  uint32_t base = 0;  // the slot's word when matched: rounds count from it
  // kInPlace of a derived type: the bytes of its layout (a message of their
  // own, transport/message_wire.hpp, sent ahead of the header); 0: contiguous.
  uint32_t layout_bytes = 0;
  uint64_t offset = 0;       // kInPlace: where the bytes start in the lent allocation
  uint64_t lender_base = 0;  // kInPlace: the allocation's address in the sender
  // In the sender: where the bytes start (contiguous), or the user pointer
  // (a layout); a send to itself reads there.
  uint64_t local = 0;
  transport::PeerHandle data;
};

struct PairAnswer {
  int32_t accept = 0;
  int32_t slot = -1;
  uint32_t base = 0;
  uint32_t reserved = 0;
};

// One end of a pair (held by its MPIS request).
struct PairEnd {
  bool send = false;
  int32_t kind = PairOffer::kNone;
  bool on = false;  // the rounds take the pair path
  int peer = -1;    // world rank
  int slot = -1;    // of this process's page
  uint32_t* mine = nullptr;
  uint32_t mine_base = 0;
  const uint32_t* theirs = nullptr;
  uint32_t theirs_base = 0;
  uint32_t rounds = 0;         // started
  transport::Segment seg;      // sender, kSegment
  const void* src = nullptr;   // receiver: the packed bytes (a layout: the sender's user pointer)
  transport::PeerHandle lent;  // receiver, kInPlace: the mapping to let go at the end
  bool lent_mapped = false;
  std::vector<unsigned char> wire;               // sender, a layout: what goes ahead
  std::shared_ptr<transport::PeerMessage> from;  // receiver, a layout: the sender's
  // Sender: the answer, pending until waited.
  MPI_Request answer_req = MPI_REQUEST_NULL;
  PairAnswer answer;
};

class Pairs {
 public:
  Pairs();
  ~Pairs();
  // The on-node path applies between this process and world rank `peer`.
  bool reaches(int peer);
  // Sender, at MPIS_Match: fills an offer for a send of b from buf (kNone
  // where the path does not apply) and the end's resources.
  PairOffer offer(const Buffer& b, const void* buf, int peer, PairEnd* end);
  // Receiver: takes the offer of a send of `sent` bytes for a receive of b
  // (or declines it).
  // `from`: the sender's layout, for a derived type read in place.
  PairAnswer answer(const PairOffer& o, int64_t sent, const Buffer& b, void* buf, int peer,
                    std::unique_ptr<transport::PeerMessage> from, PairEnd* end);
  // Sender: the answer is in (an error where the receiver's page cannot be
  // reached after it accepted: the pair cannot go back).
  Status settle(PairEnd* end);

  // Rounds on `lane`, each call for all ends of one MPIS_Enqueue_startall
  // or MPIS_Enqueue_waitall at once (a few launches, not a few each): the
  // senders' parts at the start (a new round each), the receivers' at the
  // waitall, and the senders' waits for the read (kInPlace) at the waitall.
  // Waits the host already sees satisfied are left out.
  struct Work {
    PairEnd* end;
    const Buffer* b;
    void* user;
  };
  Status start_sends(Lane& lane, const std::vector<Work>& w);
  Status finish_recvs(Lane& lane, const std::vector<Work>& w);
  Status finish_sends(Lane& lane, const std::vector<Work>& w);
  // No round of this end is still running on its stream (or, for a send
  // read in place, on the peer's).
  static bool idle(const PairEnd& end);
  // At MPIS_Request_free: the end's memory and slot go back once its peer is
  // done with them.
  void retire(PairEnd&& end);
  // Returns what retired ends held, where done (all of it: `force`, at the end).
  void sweep(bool force);

 private:
  transport::PairWords* words();
  void drop(PairEnd& end);  // gives back what the end holds
  std::mutex mu_;
  bool tried_ = false;
  std::unique_ptr<transport::PairWords> words_;
  std::vector<PairEnd> retired_;
};

}  // namespace loom::stream
