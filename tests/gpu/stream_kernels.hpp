// Small "compute" kernels for the stream tests: they write a send buffer
// just before an enqueued send and read a receive buffer just after an
// enqueued wait, on the same stream, so an engine that moved data out of
// stream order fails the test.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace loom::test {

// p[i] = (i * 37 + seed * 101) >> 2, after a busy wait of about `spin_us`
// microseconds (the kernel still runs when the host enqueues what follows).
void launch_fill(unsigned char* p, size_t n, unsigned seed, int spin_us, cudaStream_t s);
// *bad += the number of blocks that found a[i] != b[i].
void launch_compare(const unsigned char* a, const unsigned char* b, size_t n, int* bad,
                    cudaStream_t s);

}  // namespace loom::test
