#include "transport/driver_entry.hpp"

#include <cuda_runtime_api.h>

namespace loom::transport {

void* driver_entry(const char* name) {
  cudaDriverEntryPointQueryResult q;
  void* fn = nullptr;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    fn = nullptr;
  cudaGetLastError();
  return fn;
}

}  // namespace loom::transport
