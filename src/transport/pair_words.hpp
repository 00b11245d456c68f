// The words of matched pairs (MPIS requests of two processes of one node on
// Loom's on-node path). Each process owns a page of slots in shared memory;
// each end of a pair takes a slot of its own page and only ever writes that
// one (the sender: rounds ready to read; the receiver: rounds read), and
// its stream waits on the peer's slot, mapped from the peer's page.
//
// A slot's word only grows (mod 2^32): a pair starts from the value the word
// has when it is matched, so a stream still waiting on an earlier pair's
// value is never confused by a later pair's, and a slot may be taken again
// once the last value its owner enqueued has landed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "util/status.hpp"

namespace loom::transport {

class PairWords {
 public:
  static constexpr int kSlots = 1024;
  static constexpr size_t kStride = 16;  // words: each slot on a 64-byte line of its own
  static constexpr size_t page_bytes() { return kSlots * kStride * sizeof(uint32_t); }
  // Makes the GPU reach a page (CUDA: registers it mapped); null: no GPU.
  using Attach = std::function<Status(void* page, size_t bytes)>;

  static Result<std::unique_ptr<PairWords>> create(uint64_t nonce, int world_rank, Attach attach);
  ~PairWords();  // the name goes; the pages stay mapped (the GPU may still have them)
  PairWords(const PairWords&) = delete;
  PairWords& operator=(const PairWords&) = delete;

  // A free slot, or -1 when all are taken.
  int take();
  void give(int slot);
  uint32_t* own(int slot) { return words_ + static_cast<size_t>(slot) * kStride; }
  // The slot of world rank `peer`'s page (mapped and attached on first use).
  Result<uint32_t*> peer(int peer, int slot);

  static uint32_t load(const uint32_t* w);

 private:
  PairWords() = default;
  uint64_t nonce_ = 0;
  int rank_ = 0;
  uint32_t* words_ = nullptr;
  Attach attach_;
  std::mutex mu_;
  std::vector<int> free_;
  std::map<int, uint32_t*> peers_;
};

}  // namespace loom::transport
