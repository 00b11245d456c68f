// The "small compute kernel" of loom-bench stream: one block that updates
// the first bytes of a buffer, as a solver step would before its exchange.
#pragma once

#include <cuda_runtime_api.h>

namespace loom::tools {
void launch_touch(void* buf, int value, cudaStream_t s);
}  // namespace loom::tools
