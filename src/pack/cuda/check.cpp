#include "pack/cuda/check.hpp"

#include <cstdio>
#include <cstring>

namespace loom::pack::gpu {

Status cuda_status(cudaError_t e, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  const char* base = std::strrchr(file, '/');
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s failed: %s (%s) at %s:%d", call, cudaGetErrorString(e),
                cudaGetErrorName(e), base ? base + 1 : file, line);
  return Status(Err::kCuda, buf);
}

}  // namespace loom::pack::gpu
