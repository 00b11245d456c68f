#include "pack/pools.hpp"

#include <cstdlib>
#include <iterator>
#include <string>

#include "pack/cuda/check.hpp"
#include "pack/cuda/device_guard.hpp"
#include "pack/free_gate.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"

namespace loom::pack {
namespace {

const char* kind_name(Pool::Kind k) {
  return k == Pool::Kind::kDevice ? "device" : "mapped host";
}

// The cache cap: the caller's, or LOOM_POOL_CACHE_MAX (0: nothing kept;
// negative: the default).
PoolOptions with_cache_cap(PoolOptions opt) {
  if (opt.max_cached == PoolOptions::kFromKnob) {
    const long long v = std::atoll(knobs().pool_cache_max.c_str());
    opt.max_cached = v >= 0 ? static_cast<size_t>(v) : size_t{1} << 30;
  }
  return opt;
}

}  // namespace

size_t Pool::class_size(size_t bytes, size_t min_class) {
  size_t c = bytes < min_class ? min_class : bytes;
  int k = 0;
  while ((size_t{1} << (k + 1)) <= c && k < 62) ++k;  // 2^k <= c < 2^(k+1)
  if (k < 2) return c;
  const size_t step = size_t{1} << (k - 2);
  return (c + step - 1) / step * step;
}

Pool::Pool(Kind kind, PoolOptions opt) : kind_(kind), opt_(with_cache_cap(opt)) {
  if (cudaGetDevice(&device_) != cudaSuccess) (void)cudaGetLastError();
}

Pool::~Pool() {
  release_all();
}

Status Pool::allocate(size_t bytes, PoolBlock* out) {
  *out = PoolBlock{};
  LOOM_DEBUG(kPack, "pool: allocating %zu bytes of %s", bytes,
             kind_ == Kind::kDevice ? "device memory" : "pinned host memory");
  if (kind_ == Kind::kDevice) {
    gpu::DeviceGuard g(device_);
    void* p = nullptr;
    LOOM_CUDA_TRY(cudaMalloc(&p, bytes));
    *out = {p, p, bytes};
    return Status::ok();
  }
  void* h = nullptr;
  LOOM_CUDA_TRY(cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  void* d = nullptr;
  const cudaError_t e = cudaHostGetDevicePointer(&d, h, 0);
  if (e != cudaSuccess) {
    (void)cudaFreeHost(h);
    return gpu::cuda_status(e, "cudaHostGetDevicePointer", __FILE__, __LINE__);
  }
  *out = {h, d, bytes};
  return Status::ok();
}

void Pool::free_block(const PoolBlock& b) {
  FreeGate::get().release(kind_ == Kind::kDevice ? FreeGate::Kind::kDevice : FreeGate::Kind::kHost,
                          b.ptr, kind_ == Kind::kDevice ? device_ : -1);
}

Result<PoolBlock> Pool::acquire(size_t bytes) {
  const size_t cls = class_size(bytes == 0 ? 1 : bytes, opt_.min_class);
  {
    std::lock_guard<std::mutex> lk(mu_);
    poll_locked();
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      PoolBlock b = it->second.back();
      it->second.pop_back();
      cached_ -= b.size;
      in_use_ += b.size;
      used_[b.ptr] = b;
      return b;
    }
  }
  // Allocate outside the lock: cudaMalloc / cudaHostAlloc may take milliseconds.
  PoolBlock b;
  Status st = allocate(cls, &b);
  if (!st && FreeGate::get().open()) {  // shut, the cache would only move to the gate
    {
      std::lock_guard<std::mutex> lk(mu_);
      trim_locked();
    }
    st = allocate(cls, &b);
  }
  const size_t exact = (bytes + 255) / 256 * 256;
  if (!st && exact < cls) st = allocate(exact, &b);  // a smaller chunk: just the request
  if (!st) {
    LOOM_WARN(kPack, "%s pool: no %zu B buffer (%s); falling back to the host engine",
              kind_name(kind_), bytes, st.message().c_str());
    return Status(Err::kNoMemory, std::string(kind_name(kind_)) + " pool: " + st.message());
  }
  std::lock_guard<std::mutex> lk(mu_);
  in_use_ += b.size;
  used_[b.ptr] = b;
  return b;
}

void Pool::put_back_locked(const PoolBlock& b) {
  // Bigger than the whole cache: freed, unless the free gate is shut (then
  // kept for reuse: a free would only be held back, and each such message
  // would allocate anew). A chunk of no size class is never asked for again.
  if (b.size != class_size(b.size, opt_.min_class) ||
      (b.size > opt_.max_cached && FreeGate::get().open())) {
    free_block(b);
    return;
  }
  // Over the cap, idle blocks of the largest classes go first: freeing the
  // block just returned instead would make every later message of its size
  // allocate and pin again (milliseconds each), while big idle ones wait.
  // While the free gate is shut (streams may wait for host threads) the
  // cache stays over the cap, reusable, until a release after it opens.
  while (cached_ + b.size > opt_.max_cached && !free_.empty() && FreeGate::get().open()) {
    auto largest = std::prev(free_.end());
    const PoolBlock victim = largest->second.back();
    largest->second.pop_back();
    if (largest->second.empty()) free_.erase(largest);
    cached_ -= victim.size;
    free_block(victim);
  }
  free_[b.size].push_back(b);
  cached_ += b.size;
}

void Pool::release(const PoolBlock& b) {
  if (!b.ptr) return;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = used_.find(b.ptr);
  if (it == used_.end()) {
    LOOM_WARN(kPack, "%s pool: release of a block it does not hold (%p)", kind_name(kind_), b.ptr);
    return;
  }
  const PoolBlock held = it->second;
  used_.erase(it);
  in_use_ -= held.size;
  put_back_locked(held);
}

Status Pool::release_after(const PoolBlock& b, cudaStream_t stream) {
  if (!b.ptr) return Status::ok();
  std::lock_guard<std::mutex> lk(mu_);
  auto it = used_.find(b.ptr);
  if (it == used_.end())
    return Status(Err::kInvalidArg, "pool: release of a block it does not hold");
  cudaEvent_t ev = nullptr;
  if (!events_.empty()) {
    ev = events_.back();
    events_.pop_back();
  } else {
    LOOM_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  }
  const cudaError_t e = cudaEventRecord(ev, stream);
  if (e != cudaSuccess) {
    events_.push_back(ev);
    return gpu::cuda_status(e, "cudaEventRecord", __FILE__, __LINE__);
  }
  pending_.push_back({it->second, ev});
  used_.erase(it);  // still counted in in_use_ until the event completes
  return Status::ok();
}

void Pool::poll_locked() {
  for (size_t i = 0; i < pending_.size();) {
    const cudaError_t e = cudaEventQuery(pending_[i].done);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      ++i;
      continue;
    }
    // Completed, or the event broke: either way nothing more will wait on it.
    if (e != cudaSuccess) (void)cudaGetLastError();
    in_use_ -= pending_[i].block.size;
    put_back_locked(pending_[i].block);
    events_.push_back(pending_[i].done);
    pending_[i] = pending_.back();
    pending_.pop_back();
  }
}

void Pool::trim_locked() {
  for (auto& [cls, list] : free_)
    for (const PoolBlock& b : list) free_block(b);
  free_.clear();
  cached_ = 0;
}

void Pool::release_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (const Pending& p : pending_) {
    if (cudaEventSynchronize(p.done) != cudaSuccess) (void)cudaGetLastError();
    free_block(p.block);
    events_.push_back(p.done);
  }
  pending_.clear();
  if (!used_.empty())
    LOOM_WARN(kPack, "%s pool: %zu buffers (%zu B) still in use at release_all; freed",
              kind_name(kind_), used_.size(), in_use_);
  for (const auto& [ptr, b] : used_) free_block(b);
  used_.clear();
  in_use_ = 0;
  trim_locked();
  for (cudaEvent_t ev : events_)
    if (cudaEventDestroy(ev) != cudaSuccess) (void)cudaGetLastError();
  events_.clear();
}

size_t Pool::bytes_in_use() const {
  std::lock_guard<std::mutex> lk(mu_);
  const_cast<Pool*>(this)->poll_locked();
  return in_use_;
}

size_t Pool::bytes_cached() const {
  std::lock_guard<std::mutex> lk(mu_);
  const_cast<Pool*>(this)->poll_locked();
  return cached_;
}

PoolLease& PoolLease::operator=(PoolLease&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = o.pool_;
    b_ = o.b_;
    o.pool_ = nullptr;
  }
  return *this;
}

void PoolLease::reset() {
  if (pool_) pool_->release(b_);
  pool_ = nullptr;
  b_ = PoolBlock{};
}

Result<PoolLease> lease(Pool& pool, size_t bytes) {
  auto b = pool.acquire(bytes);
  if (!b) return b.status();
  return PoolLease(&pool, b.value());
}

}  // namespace loom::pack
