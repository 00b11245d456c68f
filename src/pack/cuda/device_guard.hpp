// Makes a device current for the lifetime of the guard, and the caller's
// own current device again after it (a device below 0: leaves it as it is).
#pragma once

#include <cuda_runtime_api.h>

namespace loom::pack::gpu {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (device >= 0 && cudaGetDevice(&prev_) == cudaSuccess && prev_ != device &&
        cudaSetDevice(device) == cudaSuccess) {
      switched_ = true;
    }
    (void)cudaGetLastError();
  }
  ~DeviceGuard() {
    if (switched_ && cudaSetDevice(prev_) != cudaSuccess) (void)cudaGetLastError();
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool switched_ = false;
};

}  // namespace loom::pack::gpu
