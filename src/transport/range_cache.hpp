// Known device allocations, so that classifying a pointer into one costs a
// scan of a few cache lines instead of a driver query (the driver call is
// ~0.3-1 us; interposed calls classify every buffer). MPI-free, CUDA-free.
//
// Readers take no lock: a seqlock over a fixed table of atomics. Writers
// (misses, rare) serialise on a mutex. An allocation freed and made again
// at the same address gets a new driver buffer id; insert() replaces every
// entry its range overlaps, and a caller that checks ids (find() hands back
// the cached one) drops a stale entry with erase().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace loom::transport {

class RangeCache {
 public:
  static constexpr int kSlots = 64;
  struct Hit {
    uintptr_t base = 0;
    size_t size = 0;
    uint64_t id = 0;
  };

  // The cached allocation holding p, if any.
  bool find(const void* p, Hit* hit) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    for (;;) {
      const uint64_t s0 = seq_.load(std::memory_order_acquire);
      if (s0 & 1) continue;  // a writer is mid-update
      bool found = false;
      Hit h;
      const int n = used_.load(std::memory_order_relaxed);
      for (int i = 0; i < n && !found; ++i) {
        const uintptr_t b = slots_[i].base.load(std::memory_order_relaxed);
        const size_t z = slots_[i].size.load(std::memory_order_relaxed);
        if (a - b < z) {  // unsigned: also false for a < b
          h = {b, z, slots_[i].id.load(std::memory_order_relaxed)};
          found = true;
        }
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq_.load(std::memory_order_relaxed) != s0) continue;
      if (found && hit) *hit = h;
      return found;
    }
  }

  // Records [base, base + size) with its buffer id, replacing any entry it
  // overlaps (their memory was freed: its address is now this allocation's).
  void insert(uintptr_t base, size_t size, uint64_t id) {
    if (size == 0) return;
    std::lock_guard<std::mutex> lk(mu_);
    begin();
    drop_overlapping(base, size);
    int n = used_.load(std::memory_order_relaxed);
    int at = n;
    if (n == kSlots) {  // full: replace round robin
      at = next_;
      next_ = (next_ + 1) % kSlots;
    } else {
      used_.store(n + 1, std::memory_order_relaxed);
    }
    slots_[at].base.store(base, std::memory_order_relaxed);
    slots_[at].size.store(size, std::memory_order_relaxed);
    slots_[at].id.store(id, std::memory_order_relaxed);
    end();
  }

  // Forgets every entry overlapping [base, base + size).
  void erase(uintptr_t base, size_t size) {
    std::lock_guard<std::mutex> lk(mu_);
    begin();
    drop_overlapping(base, size);
    end();
  }

  void clear() {
    std::lock_guard<std::mutex> lk(mu_);
    begin();
    used_.store(0, std::memory_order_relaxed);
    next_ = 0;
    end();
  }

  int size() const { return used_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::atomic<uintptr_t> base{0};
    std::atomic<size_t> size{0};
    std::atomic<uint64_t> id{0};
  };
  void begin() {
    seq_.fetch_add(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  void end() { seq_.fetch_add(1, std::memory_order_release); }
  // Under mu_ and inside begin()/end(): moves the last entry into each hole.
  void drop_overlapping(uintptr_t base, size_t size) {
    int n = used_.load(std::memory_order_relaxed);
    for (int i = 0; i < n;) {
      const uintptr_t b = slots_[i].base.load(std::memory_order_relaxed);
      const size_t z = slots_[i].size.load(std::memory_order_relaxed);
      if (b < base + size && base < b + z) {
        --n;
        slots_[i].base.store(slots_[n].base.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
        slots_[i].size.store(slots_[n].size.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
        slots_[i].id.store(slots_[n].id.load(std::memory_order_relaxed), std::memory_order_relaxed);
      } else {
        ++i;
      }
    }
    used_.store(n, std::memory_order_relaxed);
    if (next_ >= n) next_ = 0;
  }

  std::atomic<uint64_t> seq_{0};
  std::atomic<int> used_{0};
  Slot slots_[kSlots];
  std::mutex mu_;
  int next_ = 0;  // under mu_
};

}  // namespace loom::transport
