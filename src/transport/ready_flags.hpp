// Readiness words of the device method: a sender enqueues the pack of a
// message into a lent segment and sends the header at once, without waiting
// for the GPU; the pack is followed on the same stream by a write of the
// message's sequence number into a word of a small page of shared host
// memory, which the receiver reads before it touches the segment.
//
//   sender:   pack kernel -> write seq into word[seq % n]   (stream order)
//             MPI send: header (at once)
//   receiver: header lands; word[seq % n] reached seq?  -> unpack, ack
//
// Each process owns one page (POSIX shared memory, named by the job's nonce
// and the owner's world rank); peers map it read-only on first use. Words
// only grow (mod 2^32) because a process writes them in sequence order, so
// a word that has passed seq says that seq's pack is done. The sender reads
// its own words to know when the user's buffer is free again. A receiver
// waits on the host, or (a batch of pulls) has its stream wait, after its
// own deferred packs are enqueued (Rendezvous::flushed_then), so two
// ranks' streams never wait for each other.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "util/status.hpp"

namespace loom::transport {

// (int32_t)(word - value) >= 0: word has reached value, modulo 2^32.
inline bool flag_reached(uint32_t word, uint32_t value) {
  return static_cast<int32_t>(word - value) >= 0;
}

class ReadyFlags {
 public:
  static constexpr size_t kWords = 4096;
  // Creates this process's page; collective in spirit (every rank of the
  // job makes one before any message is lent).
  static Result<std::unique_ptr<ReadyFlags>> create(uint64_t nonce, int world_rank);
  ~ReadyFlags();

  // This process's word for message seq, where its pack writes (uint32) seq.
  uint32_t* own(uint64_t seq) { return &words_[seq % kWords]; }
  uint32_t* page() { return words_; }
  static constexpr size_t page_bytes() { return kWords * sizeof(uint32_t); }
  // Message seq of this process is packed.
  bool own_ready(uint64_t seq) const;
  // Message seq of world rank `peer` is packed (peer's page mapped on
  // first use; a page that cannot be mapped is an error).
  Result<bool> peer_ready(int peer, uint64_t seq);
  // The word of peer's message seq (host address in its mapped page).
  Result<const uint32_t*> peer_word(int peer, uint64_t seq);
  // At shutdown, once no peer maps the page any more: removes its name.
  void unlink();

 private:
  ReadyFlags() = default;
  uint64_t nonce_ = 0;
  int rank_ = 0;
  uint32_t* words_ = nullptr;
  bool linked_ = false;
  std::mutex mu_;
  std::map<int, const uint32_t*> peers_;  // under mu_
  // Mapped pages of the first kFastPeers ranks, read without the lock (a
  // receiver checks a word several times a message).
  static constexpr int kFastPeers = 1024;
  std::array<std::atomic<const uint32_t*>, kFastPeers> fast_{};
};

}  // namespace loom::transport
