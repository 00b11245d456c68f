// Driver functions the runtime does not wrap (stream memory operations),
// found once through the runtime, so libloom needs no libcuda at link time.
// CUDA builds only.
#pragma once

namespace loom::transport {

// The driver's `name` (CUDA 12 ABI), or null where the driver lacks it.
void* driver_entry(const char* name);

}  // namespace loom::transport
