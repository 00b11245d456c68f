// loom-bench stream (bench_stream.cpp): needs a CUDA build, 2 ranks and
// MPI_THREAD_MULTIPLE.
#pragma once

namespace loom::tools {
int bench_stream(bool quick, const char* csv = nullptr);
}  // namespace loom::tools
