#include "bench_devpack.hpp"

#include <mpi.h>

#include <cstdio>

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "timing.hpp"

namespace loom::tools {

#ifdef LOOM_HAVE_CUDA
namespace {

// Median seconds of op() over `iters` calls, after five warm-up calls.
template <class F>
double median_s(F&& op, int iters) {
  for (int i = 0; i < 4; ++i) op();
  return median_seconds(op, iters);  // its own warm-up call is the fifth
}

}  // namespace

int bench_devpack(bool quick) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return 0;
  const int iters = quick ? 50 : 200;
  const int stride = 512;
  std::printf("op,target,block,GB/s\n");
  for (int target : {1 << 20, 4 << 20}) {
    for (int block : {1, 2, 4, 8, 32, 64, 128, 256}) {
      const int n = target / block;
      MPI_Datatype t;
      MPI_Type_vector(n, block, stride, MPI_BYTE, &t);
      MPI_Type_commit(&t);
      void *user = nullptr, *packed = nullptr;
      if (cudaMalloc(&user, static_cast<size_t>(n) * stride) != cudaSuccess ||
          cudaMalloc(&packed, static_cast<size_t>(target)) != cudaSuccess) {
        std::fprintf(stderr, "loom-bench devpack: cudaMalloc failed\n");
        return 1;
      }
      cudaMemset(user, 1, static_cast<size_t>(n) * stride);
      cudaDeviceSynchronize();
      int rc = MPI_SUCCESS;
      const double tp = median_s(
          [&] {
            int pos = 0;
            rc |= MPI_Pack(user, 1, t, packed, target, &pos, MPI_COMM_WORLD);
          },
          iters);
      const double tu = median_s(
          [&] {
            int pos = 0;
            rc |= MPI_Unpack(packed, target, &pos, user, 1, t, MPI_COMM_WORLD);
          },
          iters);
      std::printf("pack,%d,%d,%.3f\nunpack,%d,%d,%.3f\n", target, block, target / tp / 1e9, target,
                  block, target / tu / 1e9);
      std::fflush(stdout);
      cudaFree(user);
      cudaFree(packed);
      MPI_Type_free(&t);
      if (rc != MPI_SUCCESS) {
        std::fprintf(stderr, "loom-bench devpack: MPI_Pack or MPI_Unpack failed\n");
        return 1;
      }
    }
  }
  return 0;
}

#else

int bench_devpack(bool) {
  std::fprintf(stderr, "loom-bench devpack: built without CUDA\n");
  return 1;
}

#endif

}  // namespace loom::tools
