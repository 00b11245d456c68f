#include "transport/memtype.hpp"

#include <atomic>

#include "util/knobs.hpp"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loom::transport {
namespace {

enum Mode : int { kAllHost = 0, kQueryCuda = 1, kAllDevice = 2 };
std::atomic<int> g_mode{kAllHost};

}  // namespace

void memtype_init() {
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

MemKind memkind(const void* p) {
  if (!p) return MemKind::kHost;
  switch (g_mode.load(std::memory_order_acquire)) {
    case kAllDevice:
      return MemKind::kDevice;
#ifdef LOOM_HAVE_CUDA
    case kQueryCuda: {
      cudaPointerAttributes a;
      if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return MemKind::kHost;
      }
      return a.type == cudaMemoryTypeDevice ? MemKind::kDevice : MemKind::kHost;
    }
#endif
    default:
      return MemKind::kHost;
  }
}

}  // namespace loom::transport
