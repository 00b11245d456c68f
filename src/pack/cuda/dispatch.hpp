// The launching half of the dispatch layer: runs a Launch that plan() built.
// Plain C++ declarations; the kernels live in dispatch.cu.
#pragma once

#include <cuda_runtime_api.h>

#include "pack/cuda/policy.hpp"
#include "util/status.hpp"

namespace loom::pack::gpu {

// SM count of `device` and the occupancy of each kernel there.
Status read_device_shape(int device, DeviceShape* out);

// Enqueues the launch on `stream` and checks the launch itself.
Status launch(const Launch& l, cudaStream_t stream);

}  // namespace loom::pack::gpu
