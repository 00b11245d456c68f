#include "transport/memtype.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "util/knobs.hpp"

#ifdef LOOM_HAVE_CUDA
#include <cuda.h>  // attribute names only: the driver is reached through driver_entry
#include <cuda_runtime_api.h>

#include "transport/driver_entry.hpp"
#include "transport/range_cache.hpp"
#endif

namespace loom::transport {
namespace {

enum Mode : int { kAllHost = 0, kQueryCuda = 1, kAllDevice = 2 };
std::atomic<int> g_mode{kAllHost};
std::atomic<uintptr_t> g_brk_start{0};

// The start of the brk heap: start_brk, field 47 of /proc/self/stat (the
// kernel's own record, read once); 0, which turns the fast path off, where
// it cannot be read.
uintptr_t heap_start() {
  std::FILE* f = std::fopen("/proc/self/stat", "r");
  if (!f) return 0;
  char buf[4096];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* at = std::strrchr(buf, ')');  // the command name may hold spaces
  if (!at) return 0;
  unsigned long long value = 0;
  int field = 2;
  for (const char* c = at + 1; *c && field < 47; ++c) {
    if (*c != ' ') continue;
    if (++field == 47) value = std::strtoull(c + 1, nullptr, 10);
  }
  return field == 47 ? static_cast<uintptr_t>(value) : 0;
}

}  // namespace

bool in_brk_heap(const void* p) {
  const uintptr_t start = g_brk_start.load(std::memory_order_relaxed);
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  // sbrk(0) reads glibc's cached break: no system call.
  return start != 0 && at >= start && at < reinterpret_cast<uintptr_t>(sbrk(0));
}

bool on_own_stack(const void* p) {
  // This thread's stack bounds, read once per thread.
  thread_local uintptr_t lo = 0, hi = 0;
  thread_local bool known = false;
  if (!known) {
    known = true;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        lo = reinterpret_cast<uintptr_t>(addr);
        hi = lo + size;
      }
      pthread_attr_destroy(&attr);
    }
  }
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  return at >= lo && at < hi;
}

#ifdef LOOM_HAVE_CUDA
namespace {
// Device allocations seen, so a buffer classified once costs a lookup after.
// A hit is trusted (kCacheOn): cudaMalloc hands out addresses from ranges
// the driver keeps reserved for the context's life, so an address freed and
// used again is device memory again (a new allocation over it replaces the
// entry on its first miss). kCacheVerify also asks the driver for the
// buffer id on every hit and drops the entry when it changed: for programs
// that release device address ranges themselves (cuMemAddressFree).
enum CacheMode : int { kCacheOff = 0, kCacheOn = 1, kCacheVerify = 2 };
std::atomic<int> g_cache_mode{kCacheOn};
RangeCache g_devices;

using PointerAttrsFn = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);
PointerAttrsFn pointer_attrs() {
  static const auto fn = reinterpret_cast<PointerAttrsFn>(driver_entry("cuPointerGetAttributes"));
  return fn;
}

// The allocation holding p: false where the driver does not know it.
bool allocation_of(const void* p, RangeCache::Hit* h) {
  PointerAttrsFn attrs = pointer_attrs();
  if (!attrs) return false;
  CUdeviceptr base = 0;
  size_t size = 0;
  unsigned long long id = 0;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* out[] = {&base, &size, &id};
  if (attrs(3, which, out, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS || base == 0 ||
      size == 0)
    return false;
  *h = {static_cast<uintptr_t>(base), size, id};
  return true;
}

bool buffer_id(const void* p, uint64_t* id) {
  PointerAttrsFn attrs = pointer_attrs();
  unsigned long long v = 0;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* out[] = {&v};
  if (!attrs || attrs(1, which, out, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return false;
  *id = v;
  return v != 0;
}

MemKind query_cuda(const void* p) {
  const int cache = g_cache_mode.load(std::memory_order_relaxed);
  RangeCache::Hit h;
  if (cache != kCacheOff && g_devices.find(p, &h)) {
    uint64_t id = 0;
    if (cache == kCacheOn || (buffer_id(p, &id) && id == h.id)) return MemKind::kDevice;
    g_devices.erase(h.base, h.size);
  }
  if (gpu_of(p) < 0) return MemKind::kHost;
  if (cache != kCacheOff && allocation_of(p, &h)) g_devices.insert(h.base, h.size, h.id);
  return MemKind::kDevice;
}
}  // namespace

int gpu_of(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

int device_ranges_cached() {
  return g_devices.size();
}
#else
int gpu_of(const void*) {
  return -1;
}

int device_ranges_cached() {
  return 0;
}
#endif

void memtype_init() {
  if (g_brk_start.load() == 0) g_brk_start.store(heap_start());
#ifdef LOOM_HAVE_CUDA
  const std::string c = knobs().memtype_cache;
  g_cache_mode.store(c == "off" || c == "0" ? kCacheOff : c == "verify" ? kCacheVerify : kCacheOn);
  g_devices.clear();
#endif
  int mode = kAllHost;
  if (knob_true(knobs().test_host_as_device)) {
    mode = kAllDevice;
  } else {
#ifdef LOOM_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) mode = kQueryCuda;
    cudaGetLastError();  // clear a "no device" error
#endif
  }
  g_mode.store(mode, std::memory_order_release);
}

namespace {
// Test mode: ranges a test marked as host memory (few, set before use).
std::mutex g_host_mu;
std::vector<std::pair<const char*, size_t>> g_host_ranges;
std::atomic<bool> g_have_host_ranges{false};

bool in_test_host_range(const void* p) {
  if (!g_have_host_ranges.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lk(g_host_mu);
  const char* c = static_cast<const char*>(p);
  for (auto [lo, n] : g_host_ranges)
    if (c >= lo && c < lo + n) return true;
  return false;
}
}  // namespace

void test_mark_host(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(g_host_mu);
  if (bytes == 0) {
    std::erase_if(g_host_ranges, [p](const auto& r) { return r.first == p; });
  } else {
    g_host_ranges.emplace_back(static_cast<const char*>(p), bytes);
  }
  g_have_host_ranges.store(!g_host_ranges.empty(), std::memory_order_release);
}

MemKind memkind(const void* p) {
  if (!p) return MemKind::kHost;
  switch (g_mode.load(std::memory_order_acquire)) {
    case kAllDevice:
      return in_test_host_range(p) ? MemKind::kHost : MemKind::kDevice;
#ifdef LOOM_HAVE_CUDA
    case kQueryCuda: {
      if (in_brk_heap(p) || on_own_stack(p)) return MemKind::kHost;
      return query_cuda(p);
    }
#endif
    default:
      return MemKind::kHost;
  }
}

}  // namespace loom::transport
