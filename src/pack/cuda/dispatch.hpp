// The launching half of the dispatch layer: runs a Launch that plan() built.
// Plain C++ declarations; the kernels live in dispatch.cu.
#pragma once

#include <cuda_runtime_api.h>

#include "pack/cuda/policy.hpp"
#include "util/status.hpp"

namespace loom::pack::gpu {

// SM count of `device` and the occupancy of each kernel there.
Status read_device_shape(int device, DeviceShape* out);

// Runs every kernel once, with nothing to move, and waits: with CUDA's lazy
// loading a kernel's first launch loads it, which may synchronise the whole
// context, and so wait for any stream that waits on a thread of Loom's own.
Status preload(cudaStream_t stream);

// Enqueues the launch on `stream` and checks the launch itself.
Status launch(const Launch& l, cudaStream_t stream);

}  // namespace loom::pack::gpu
