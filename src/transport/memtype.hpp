// Where a user buffer lives. MPI-free.
#pragma once

#include <cstddef>

namespace loom::transport {

enum class MemKind { kHost, kDevice };

// Reads the settings and probes for a GPU; called at loom_init.
void memtype_init();
// Host for null (MPI_BOTTOM), pageable and pinned host memory, and managed
// memory (the CPU can read it, so the host MPI may too); device for memory of
// a GPU. Without a CUDA build or a GPU, always host. In the test mode
// LOOM_TEST_HOST_AS_DEVICE every non-null buffer counts as device.
MemKind memkind(const void* p);

// The GPU whose device memory p points into, asked of the driver each call;
// -1 for any other memory (and without a CUDA build).
int gpu_of(const void* p);

// Device allocations in the classification cache (LOOM_MEMTYPE_CACHE); for
// tests and benchmarks.
int device_ranges_cached();

// Test mode only: [p, p + bytes) counts as host memory (bytes 0: unmark),
// so CI can test host receives of device messages.
void test_mark_host(const void* p, size_t bytes);

// True when p lies in the process's brk heap, between its start (read at
// memtype_init) and the current program break: host memory for certain, as
// CUDA maps device and managed memory with mmap, never there. The main
// thread's small malloc blocks live there, and the check costs no CUDA
// query. Exposed for tests.
bool in_brk_heap(const void* p);
// True when p lies on the calling thread's stack (bounds read once per
// thread): host memory for certain. Exposed for tests.
bool on_own_stack(const void* p);

}  // namespace loom::transport
