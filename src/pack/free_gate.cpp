#include "pack/free_gate.hpp"

#include <cuda_runtime_api.h>

#include "pack/cuda/device_guard.hpp"
#include "util/log.hpp"

namespace loom::pack {
namespace {

void cuda_free(FreeGate::Kind kind, void* p, int device) {
  cudaError_t e;
  if (kind == FreeGate::Kind::kDevice) {
    gpu::DeviceGuard g(device);
    e = cudaFree(p);
  } else {
    e = cudaFreeHost(p);
  }
  if (e != cudaSuccess) (void)cudaGetLastError();  // at exit the runtime may be gone
}

}  // namespace

FreeGate& FreeGate::get() {
  static FreeGate* gate = new FreeGate(cuda_free);  // never destroyed: frees may come at exit
  return *gate;
}

void FreeGate::channel_opened() {
  std::unique_lock<std::shared_mutex> lk(mu_);  // waits for frees running now
  channels_.fetch_add(1, std::memory_order_relaxed);
}

void FreeGate::channel_closed() {
  std::unique_lock<std::shared_mutex> lk(mu_);
  if (channels_.fetch_sub(1, std::memory_order_relaxed) == 1) free_all_locked();
}

void FreeGate::drain() {
  std::unique_lock<std::shared_mutex> lk(mu_);
  drained_ = true;
  free_all_locked();
}

void FreeGate::free_all_locked() {
  std::vector<Held> all;
  {
    std::lock_guard<std::mutex> hk(held_mu_);
    all.swap(held_);
  }
  if (!all.empty()) LOOM_DEBUG(kPack, "free gate: %zu frees held back go now", all.size());
  for (const Held& h : all) free_(h.kind, h.p, h.device);
}

void FreeGate::release(Kind kind, void* p, int device) {
  if (!p) return;
  std::shared_lock<std::shared_mutex> lk(mu_);
  if (channels_.load(std::memory_order_relaxed) == 0 || drained_) {
    free_(kind, p, device);
    return;
  }
  std::lock_guard<std::mutex> hk(held_mu_);
  held_.push_back({kind, p, device});
}

bool FreeGate::open() const {
  return channels_.load(std::memory_order_relaxed) == 0 || drained_.load();
}

size_t FreeGate::held() const {
  std::lock_guard<std::mutex> hk(held_mu_);
  return held_.size();
}

}  // namespace loom::pack
