// loom-bench memtype: what classifying a buffer as host or device memory
// costs Loom (every interposed call with a buffer does it), per kind of
// memory: the brk heap and the stack (fast paths), mmap'd and other
// threads' host memory and pinned host memory (the driver is asked), device
// memory (the cache of device allocations, LOOM_MEMTYPE_CACHE).
#pragma once

namespace loom::tools {
int bench_memtype(bool quick);
}  // namespace loom::tools
