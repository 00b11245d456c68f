// Buffer pools for the GPU paths: device scratch and mapped pinned host
// memory, handed out by size class and reused, so a message costs no
// cudaMalloc / cudaHostAlloc once the pool is warm. Thread-safe. Owned by
// the runtime object, which calls release_all() at finalize.
//
// A failed allocation is retried after freeing the cached buffers, then with
// a chunk of exactly the requested size; if that fails too, acquire() returns
// Err::kNoMemory and logs (LOOM_WARN, subsystem pack): the caller then falls
// back to the host engine. Frees go through the free gate (free_gate.hpp):
// while streams may wait for host threads, nothing is freed, the cache may
// exceed its cap, and a failed allocation is not retried after a trim.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "util/status.hpp"

namespace loom::pack {

struct PoolBlock {
  void* ptr = nullptr;  // device memory, or the host address of mapped pinned memory
  void* dev = nullptr;  // the address kernels use (== ptr for device memory)
  size_t size = 0;      // usable bytes, at least the request
  explicit operator bool() const { return ptr != nullptr; }
};

struct PoolOptions {
  static constexpr size_t kFromKnob = ~size_t{0};
  size_t min_class = 4096;  // smallest buffer handed out
  // Free bytes kept for reuse; beyond, releases free (while the free gate is
  // open). kFromKnob: LOOM_POOL_CACHE_MAX.
  size_t max_cached = kFromKnob;
};

class Pool {
 public:
  enum class Kind { kDevice, kMappedHost };

  // Device memory is allocated on the device current at construction.
  explicit Pool(Kind kind, PoolOptions opt = {});
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  Result<PoolBlock> acquire(size_t bytes);
  // The block's last use has completed (its stream was synchronized).
  void release(const PoolBlock& b);
  // The block may be reused once `stream` reaches this point.
  Status release_after(const PoolBlock& b, cudaStream_t stream);
  // Frees everything, waiting for blocks released with release_after; blocks
  // still in use are freed too (and reported), as at finalize nothing may use them.
  void release_all();

  size_t bytes_in_use() const;  // handed out, including release_after blocks not yet reached
  size_t bytes_cached() const;  // held for reuse
  Kind kind() const { return kind_; }

  // Size class of a request: four classes per power of two (<= 25% slack).
  static size_t class_size(size_t bytes, size_t min_class);

 private:
  struct Pending {
    PoolBlock block;
    cudaEvent_t done;
  };

  Status allocate(size_t bytes, PoolBlock* out);
  void free_block(const PoolBlock& b);
  void put_back_locked(const PoolBlock& b);  // into a free list, or freed past max_cached
  void poll_locked();                        // pending blocks whose event completed
  void trim_locked();                        // frees every cached block

  const Kind kind_;
  const PoolOptions opt_;
  int device_ = 0;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<PoolBlock>> free_;  // by class size
  std::unordered_map<void*, PoolBlock> used_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> events_;  // spare events for release_after
  size_t in_use_ = 0;
  size_t cached_ = 0;
};

class DevicePool : public Pool {
 public:
  explicit DevicePool(PoolOptions opt = {}) : Pool(Kind::kDevice, opt) {}
};

class PinnedPool : public Pool {
 public:
  explicit PinnedPool(PoolOptions opt = {}) : Pool(Kind::kMappedHost, opt) {}
};

// A block that goes back to its pool when the lease ends.
class PoolLease {
 public:
  PoolLease() = default;
  PoolLease(Pool* pool, PoolBlock b) : pool_(pool), b_(b) {}
  PoolLease(PoolLease&& o) noexcept : pool_(o.pool_), b_(o.b_) { o.pool_ = nullptr; }
  PoolLease& operator=(PoolLease&& o) noexcept;
  PoolLease(const PoolLease&) = delete;
  PoolLease& operator=(const PoolLease&) = delete;
  ~PoolLease() { reset(); }

  void* get() const { return b_.ptr; }
  void* dev() const { return b_.dev; }
  size_t size() const { return b_.size; }
  void reset();

 private:
  Pool* pool_ = nullptr;
  PoolBlock b_;
};

Result<PoolLease> lease(Pool& pool, size_t bytes);

}  // namespace loom::pack
