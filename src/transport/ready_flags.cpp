#include "transport/ready_flags.hpp"

#include "transport/shared_page.hpp"

namespace loom::transport {
namespace {

uint32_t load(const uint32_t* w) {
  return reinterpret_cast<const std::atomic<uint32_t>*>(w)->load(std::memory_order_acquire);
}

}  // namespace

Result<std::unique_ptr<ReadyFlags>> ReadyFlags::create(uint64_t nonce, int world_rank) {
  auto p = shared_page_create(shared_page_name(nonce, world_rank, "ready"), page_bytes());
  if (!p) return p.status();
  std::unique_ptr<ReadyFlags> f(new ReadyFlags());
  f->nonce_ = nonce;
  f->rank_ = world_rank;
  f->words_ = static_cast<uint32_t*>(p.value());  // zero-filled: seq 0 is never used
  f->linked_ = true;
  return f;
}

ReadyFlags::~ReadyFlags() {
  unlink();
  // The page stays mapped: the GPU may have it registered until the process
  // ends, and peers' pages are tiny.
}

bool ReadyFlags::own_ready(uint64_t seq) const {
  return flag_reached(load(&words_[seq % kWords]), static_cast<uint32_t>(seq));
}

Result<bool> ReadyFlags::peer_ready(int peer, uint64_t seq) {
  if (peer == rank_) return own_ready(seq);
  auto w = peer_word(peer, seq);
  if (!w) return w.status();
  return flag_reached(load(w.value()), static_cast<uint32_t>(seq));
}

Result<const uint32_t*> ReadyFlags::peer_word(int peer, uint64_t seq) {
  if (peer == rank_) return static_cast<const uint32_t*>(own(seq));
  const bool fast = peer >= 0 && peer < kFastPeers;
  const uint32_t* page =
      fast ? fast_[static_cast<size_t>(peer)].load(std::memory_order_acquire) : nullptr;
  if (!page) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = peers_.find(peer);
    if (it != peers_.end()) {
      page = it->second;
    } else {
      auto p = shared_page_map(shared_page_name(nonce_, peer, "ready"), page_bytes(), false);
      if (!p) return p.status();
      page = static_cast<const uint32_t*>(p.value());
      peers_.emplace(peer, page);
    }
    if (fast) fast_[static_cast<size_t>(peer)].store(page, std::memory_order_release);
  }
  return &page[seq % kWords];
}

void ReadyFlags::unlink() {
  if (!linked_) return;
  linked_ = false;
  shared_page_unlink(shared_page_name(nonce_, rank_, "ready"));
}

}  // namespace loom::transport
