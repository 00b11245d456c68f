#include "transport/peer_memory.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "transport/shared_page.hpp"
#include "util/log.hpp"

namespace loom::transport {
namespace {

size_t segment_class(size_t bytes) {
  size_t c = PeerMemory::kMinSegment;
  while (c < bytes) c <<= 1;
  return c;
}

// A handle's bytes as its maps' key: looked up as a view (every pull opens
// its segment; a 72-byte std::string would be a heap allocation each time).
std::string_view key_of(const PeerHandle& h) {
  return std::string_view(reinterpret_cast<const char*>(&h), sizeof(h));
}

}  // namespace

Result<Segment> PeerMemory::acquire(size_t bytes) {
  const size_t cls = segment_class(bytes);
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto& list = free_[cls];
    if (!list.empty()) {
      Segment s = list.back();
      list.pop_back();
      in_use_ += s.size;
      return s;
    }
  }
  LOOM_DEBUG(kTransport, "allocating a segment of %zu bytes", cls);
  auto s = allocate(cls);  // outside the lock: may take milliseconds
  if (!s) return s;
  std::lock_guard<std::mutex> lk(mu_);
  all_.push_back(s.value());
  in_use_ += s->size;
  return s;
}

void PeerMemory::release(const Segment& s) {
  std::lock_guard<std::mutex> lk(mu_);
  free_[s.size].push_back(s);
  in_use_ -= s.size;
}

Result<Exported> PeerMemory::export_user(const void* p, size_t bytes, bool) {
  auto seg = acquire(bytes);
  if (!seg) return seg.status();
  if (bytes > 0) std::memcpy(seg->ptr, p, bytes);
  Exported e;
  e.handle = seg->handle;
  e.copy = seg.value();
  return e;
}

Result<const void*> PeerMemory::open(const PeerHandle& h, int lender, int* device) {
  const std::string_view key = key_of(h);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = opened_.find(key);
  if (it == opened_.end()) {
    void* q = nullptr;
    if (auto u = users_.find(key); u != users_.end()) {  // kept from now on
      q = u->second.ptr;
      users_.erase(u);
    } else {
      auto p = map(h);
      if (!p && p.status().code() == Err::kStale && lender >= 0 && drop_idle(lender, 0, 0) > 0)
        p = map(h);
      if (!p) return p.status();
      q = p.value();
    }
    it = opened_.emplace(std::string(key), Opened{q, device_of(q)}).first;
  }
  if (device) *device = it->second.device;
  return static_cast<const void*>(it->second.ptr);
}

Result<void*> PeerMemory::open_user(const PeerHandle& h, int lender, uint64_t base) {
  const std::string_view key = key_of(h);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = users_.find(key);
  if (it != users_.end()) {
    ++it->second.uses;
    return it->second.ptr;
  }
  if (auto k = opened_.find(key); k != opened_.end()) return k->second.ptr;  // kept for good
  // The lender's allocations never overlap while they live: a mapping of one
  // this range overlaps is of freed memory.
  if (base != 0) drop_idle(lender, base, h.size);
  auto p = map(h);
  if (!p && p.status().code() == Err::kStale && drop_idle(lender, 0, 0) > 0) p = map(h);
  if (!p) return p.status();
  users_.emplace(std::string(key), UserMap{p.value(), lender, base, h.size, 1, h});
  return p.value();
}

void PeerMemory::done_user(const PeerHandle& h) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = users_.find(key_of(h));
  if (it != users_.end() && it->second.uses > 0) --it->second.uses;
}

int PeerMemory::drop_idle(int lender, uint64_t base, uint64_t size) {
  int dropped = 0;
  for (auto it = users_.begin(); it != users_.end();) {
    const UserMap& u = it->second;
    const bool overlaps = size == 0 || (u.base < base + size && base < u.base + u.size);
    if (u.lender != lender || u.uses > 0 || !overlaps) {
      ++it;
      continue;
    }
    LOOM_DEBUG(kTransport, "peer memory: dropping rank %d's mapping [%#llx, +%llu)", lender,
               static_cast<unsigned long long>(u.base), static_cast<unsigned long long>(u.size));
    unmap(u.ptr, u.handle);
    it = users_.erase(it);
    ++dropped;
  }
  return dropped;
}

void PeerMemory::unmap_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [key, p] : opened_) {
    PeerHandle h;
    std::memcpy(&h, key.data(), sizeof(h));
    unmap(p.ptr, h);
  }
  opened_.clear();
  for (auto& [key, u] : users_) unmap(u.ptr, u.handle);
  users_.clear();
}

void PeerMemory::free_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (const Segment& s : all_) deallocate(s);
  all_.clear();
  free_.clear();
  in_use_ = 0;
}

size_t PeerMemory::bytes_in_use() const {
  std::lock_guard<std::mutex> lk(mu_);
  return in_use_;
}

namespace {

class ShmPeerMemory final : public PeerMemory {
 public:
  ShmPeerMemory(uint64_t nonce, int rank) : nonce_(nonce), rank_(rank) {}
  ~ShmPeerMemory() override {
    unmap_all();
    free_all();
  }
  const char* name() const override { return "shared memory"; }

 protected:
  Result<Segment> allocate(size_t bytes) override {
    Segment s;
    s.size = bytes;
    s.handle.size = bytes;
    char* name = reinterpret_cast<char*>(s.handle.bytes);
    std::snprintf(name, sizeof(s.handle.bytes), "/loom.%016llx.%d.%u",
                  static_cast<unsigned long long>(nonce_), rank_, next_.fetch_add(1));
    auto p = shared_page_create(name, bytes);
    if (!p) return p.status();
    s.ptr = p.value();
    return s;
  }
  void deallocate(const Segment& s) override {
    munmap(s.ptr, s.size);
    shared_page_unlink(reinterpret_cast<const char*>(s.handle.bytes));
  }
  Result<void*> map(const PeerHandle& h) override {
    return shared_page_map(reinterpret_cast<const char*>(h.bytes), h.size, false);
  }
  void unmap(void* p, const PeerHandle& h) override { munmap(p, h.size); }

 private:
  const uint64_t nonce_;
  const int rank_;
  std::atomic<unsigned> next_{0};  // allocate() runs outside the base's lock
};

}  // namespace

std::unique_ptr<PeerMemory> make_shm_peer_memory(uint64_t nonce, int rank) {
  return std::make_unique<ShmPeerMemory>(nonce, rank);
}

#ifndef LOOM_HAVE_CUDA
Result<std::unique_ptr<PeerMemory>> make_ipc_peer_memory() {
  return Status(Err::kUnsupported, "built without CUDA");
}
#endif

}  // namespace loom::transport
