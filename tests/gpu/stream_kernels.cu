#include "stream_kernels.hpp"

namespace loom::test {
namespace {

__global__ void fill_kernel(unsigned char* p, size_t n, unsigned seed, long long spin) {
  if (spin > 0 && threadIdx.x == 0) {
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
  }
  __syncthreads();
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = static_cast<unsigned char>((i * 37 + seed * 101) >> 2);
}

__global__ void compare_kernel(const unsigned char* a, const unsigned char* b, size_t n, int* bad) {
  __shared__ int differs;
  if (threadIdx.x == 0) differs = 0;
  __syncthreads();
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (a[i] != b[i]) differs = 1;
  __syncthreads();
  if (threadIdx.x == 0 && differs) atomicAdd(bad, 1);
}

}  // namespace

void launch_fill(unsigned char* p, size_t n, unsigned seed, int spin_us, cudaStream_t s) {
  // About 2 GHz: cycles for the busy wait.
  fill_kernel<<<1, 256, 0, s>>>(p, n, seed, static_cast<long long>(spin_us) * 2000);
}

void launch_compare(const unsigned char* a, const unsigned char* b, size_t n, int* bad,
                    cudaStream_t s) {
  compare_kernel<<<1, 256, 0, s>>>(a, b, n, bad);
}

}  // namespace loom::test
