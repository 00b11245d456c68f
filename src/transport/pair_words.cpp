#include "transport/pair_words.hpp"

#include <atomic>

#include "transport/shared_page.hpp"

namespace loom::transport {

Result<std::unique_ptr<PairWords>> PairWords::create(uint64_t nonce, int world_rank,
                                                     Attach attach) {
  auto p = shared_page_create(shared_page_name(nonce, world_rank, "pairs"), page_bytes());
  if (!p) return p.status();
  std::unique_ptr<PairWords> w(new PairWords());
  w->nonce_ = nonce;
  w->rank_ = world_rank;
  w->words_ = static_cast<uint32_t*>(p.value());
  w->attach_ = std::move(attach);
  if (w->attach_) LOOM_TRY(w->attach_(w->words_, page_bytes()));
  for (int i = kSlots - 1; i >= 0; --i) w->free_.push_back(i);
  return w;
}

PairWords::~PairWords() {
  shared_page_unlink(shared_page_name(nonce_, rank_, "pairs"));
}

int PairWords::take() {
  std::lock_guard<std::mutex> lk(mu_);
  if (free_.empty()) return -1;
  const int s = free_.back();
  free_.pop_back();
  return s;
}

void PairWords::give(int slot) {
  std::lock_guard<std::mutex> lk(mu_);
  free_.push_back(slot);
}

Result<uint32_t*> PairWords::peer(int peer, int slot) {
  if (peer == rank_) return own(slot);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    auto p = shared_page_map(shared_page_name(nonce_, peer, "pairs"), page_bytes(), true);
    if (!p) return p.status();
    if (attach_) LOOM_TRY(attach_(p.value(), page_bytes()));
    it = peers_.emplace(peer, static_cast<uint32_t*>(p.value())).first;
  }
  return it->second + static_cast<size_t>(slot) * kStride;
}

uint32_t PairWords::load(const uint32_t* w) {
  return reinterpret_cast<const std::atomic<uint32_t>*>(w)->load(std::memory_order_acquire);
}

}  // namespace loom::transport
