// The one error path for CUDA runtime calls: a failed call returns a
// Status(Err::kCuda) naming the call, the CUDA error and where it happened.
#pragma once

#include <cuda_runtime_api.h>

#include "util/status.hpp"

namespace loom::pack::gpu {

// Builds the Status for a failed call and clears CUDA's last-error slot, so a
// handled failure does not surface again at the next launch check.
Status cuda_status(cudaError_t e, const char* call, const char* file, int line);

}  // namespace loom::pack::gpu

#define LOOM_CUDA_TRY(call)                                                           \
  do {                                                                                \
    const cudaError_t loom_cuda_e_ = (call);                                          \
    if (loom_cuda_e_ != cudaSuccess)                                                  \
      return ::loom::pack::gpu::cuda_status(loom_cuda_e_, #call, __FILE__, __LINE__); \
  } while (0)
